package admission

import (
	"context"
	"sort"
	"sync"
	"time"

	"github.com/go-logr/logr"
	admissionregv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
)

var (
	mutatingConfigs   = schema.GroupVersionResource{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "mutatingwebhookconfigurations"}
	validatingConfigs = schema.GroupVersionResource{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "validatingwebhookconfigurations"}
)

// configWatch keeps the webhook configurations labelled LabelViaHub (few,
// small) and calls changed with all of them after each change.
type configWatch struct {
	dyn     dynamic.Interface
	log     logr.Logger
	changed func([]config, []*unstructured.Unstructured)

	// synced is closed once both kinds were listed.
	synced chan struct{}

	mu   sync.Mutex
	objs map[schema.GroupVersionResource]map[string]*unstructured.Unstructured
}

func (w *configWatch) run(ctx context.Context) {
	var wg sync.WaitGroup
	for _, gvr := range []schema.GroupVersionResource{mutatingConfigs, validatingConfigs} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.loop(ctx, gvr)
		}()
	}
	wg.Wait()
}

// loop lists and watches one kind until ctx ends, listing again after
// any failure (1 s, doubling to 30 s).
func (w *configWatch) loop(ctx context.Context, gvr schema.GroupVersionResource) {
	delay := time.Second
	for ctx.Err() == nil {
		err := w.listWatch(ctx, gvr)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			w.log.Info("watching webhook configurations failed; listing again", "resource", gvr.Resource, "error", err.Error(), "in", delay.String())
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(delay):
		}
		delay = min(2*delay, 30*time.Second)
	}
}

func (w *configWatch) listWatch(ctx context.Context, gvr schema.GroupVersionResource) error {
	ri := w.dyn.Resource(gvr)
	sel := metav1.ListOptions{LabelSelector: LabelViaHub + "=true"}
	list, err := ri.List(ctx, sel)
	if err != nil {
		return err
	}
	objs := map[string]*unstructured.Unstructured{}
	for i := range list.Items {
		objs[list.Items[i].GetName()] = &list.Items[i]
	}
	w.set(gvr, objs)
	sel.ResourceVersion = list.GetResourceVersion()
	sel.AllowWatchBookmarks = true
	wi, err := ri.Watch(ctx, sel)
	if err != nil {
		return err
	}
	defer wi.Stop()
	for ev := range wi.ResultChan() {
		switch ev.Type {
		case watch.Error:
			return apierrors.FromObject(ev.Object)
		case watch.Bookmark:
			continue
		}
		u, ok := ev.Object.(*unstructured.Unstructured)
		if !ok {
			continue
		}
		w.mu.Lock()
		next := map[string]*unstructured.Unstructured{}
		for k, v := range w.objs[gvr] {
			next[k] = v
		}
		w.mu.Unlock()
		if ev.Type == watch.Deleted {
			delete(next, u.GetName())
		} else {
			next[u.GetName()] = u
		}
		w.set(gvr, next)
	}
	return nil // the watch ended (its timeout): list again
}

// set replaces the objects of one kind and calls changed, under w.mu so
// that the two kinds' loops publish in order (changed must be quick).
func (w *configWatch) set(gvr schema.GroupVersionResource, objs map[string]*unstructured.Unstructured) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.objs == nil {
		w.objs = map[schema.GroupVersionResource]map[string]*unstructured.Unstructured{}
	}
	w.objs[gvr] = objs
	if len(w.objs) == 2 && w.synced != nil {
		select {
		case <-w.synced:
		default:
			defer close(w.synced) // after changed: the routes are in place
		}
	}
	var all []*unstructured.Unstructured
	for _, g := range []schema.GroupVersionResource{mutatingConfigs, validatingConfigs} {
		names := make([]string, 0, len(w.objs[g]))
		for n := range w.objs[g] {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			all = append(all, w.objs[g][n])
		}
	}
	var cfgs []config
	for _, u := range all {
		c, err := toConfig(u)
		if err != nil {
			w.log.Info("a webhook configuration could not be read; its webhooks are not served", "kind", u.GetKind(), "name", u.GetName(), "error", err.Error())
			continue
		}
		cfgs = append(cfgs, c)
	}
	w.changed(cfgs, all)
}

func toConfig(u *unstructured.Unstructured) (config, error) {
	if u.GetKind() == "MutatingWebhookConfiguration" {
		var c admissionregv1.MutatingWebhookConfiguration
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &c); err != nil {
			return config{}, err
		}
		return fromMutating(&c), nil
	}
	var c admissionregv1.ValidatingWebhookConfiguration
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &c); err != nil {
		return config{}, err
	}
	return fromValidating(&c), nil
}
