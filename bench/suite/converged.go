package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/opzero/opzero/examples/configwatcher/api/v1"
)

// convergence follows the ConfigWatchers of one namespace through a watch
// and counts those with status.observedGeneration == metadata.generation.
// The throughput and scale-out parts wait on it for the end of a run: it
// costs the API server one event per change, where listing every object
// each few milliseconds (what they did before) cost it an encoding of the
// whole namespace each time, CPU taken from the operators being measured.
type convergence struct {
	stop context.CancelFunc

	mu        sync.Mutex
	converged map[string]bool
	changed   chan struct{} // closed and replaced on every change of the count
}

// watchConvergence starts following ns; it returns once the informer has
// listed what is already there.
func (e *env) watchConvergence(ctx context.Context, ns string) (*convergence, error) {
	w, err := client.NewWithWatch(e.cfg, client.Options{Scheme: e.scheme})
	if err != nil {
		return nil, err
	}
	ctx, stop := context.WithCancel(ctx)
	c := &convergence{stop: stop, converged: map[string]bool{}, changed: make(chan struct{})}
	lw := &toolscache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (k8sruntime.Object, error) {
			l := &v1.ConfigWatcherList{}
			return l, w.List(ctx, l, client.InNamespace(ns), &client.ListOptions{Raw: &o})
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return w.Watch(ctx, &v1.ConfigWatcherList{}, client.InNamespace(ns), &client.ListOptions{Raw: &o})
		},
	}
	set := func(obj any) {
		cw, ok := obj.(*v1.ConfigWatcher)
		if !ok {
			return
		}
		c.note(cw.Name, cw.Status.ObservedGeneration == cw.Generation)
	}
	_, inf := toolscache.NewInformerWithOptions(toolscache.InformerOptions{
		ListerWatcher: lw, ObjectType: &v1.ConfigWatcher{},
		Handler: toolscache.ResourceEventHandlerFuncs{
			AddFunc:    set,
			UpdateFunc: func(_, obj any) { set(obj) },
			DeleteFunc: func(obj any) {
				if cw, ok := obj.(*v1.ConfigWatcher); ok {
					c.note(cw.Name, false)
				}
			},
		},
	})
	go inf.RunWithContext(ctx)
	if !toolscache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		stop()
		return nil, fmt.Errorf("watching the ConfigWatchers of %s: %w", ns, context.Cause(ctx))
	}
	return c, nil
}

func (c *convergence) note(name string, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.converged[name] == ok {
		return
	}
	if ok {
		c.converged[name] = true
	} else {
		delete(c.converged, name)
	}
	close(c.changed)
	c.changed = make(chan struct{})
}

// wait returns when n objects have converged, or an error once timeout has
// passed since t0 or exited is closed (the operator died), whichever first.
func (c *convergence) wait(ctx context.Context, n int, t0 time.Time, timeout time.Duration, exited <-chan struct{}) error {
	deadline := time.NewTimer(time.Until(t0.Add(timeout)))
	defer deadline.Stop()
	for {
		c.mu.Lock()
		done, changed := len(c.converged), c.changed
		c.mu.Unlock()
		if done >= n {
			return nil
		}
		select {
		case <-changed:
		case <-deadline.C:
			return fmt.Errorf("%d of %d converged after %s", done, n, timeout)
		case <-exited:
			return fmt.Errorf("the operator exited with %d of %d converged", done, n)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// close stops the watch.
func (c *convergence) close() { c.stop() }
