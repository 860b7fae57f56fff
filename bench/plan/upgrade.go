package main

import (
	"context"
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/opzero/opzero/builder"
	v1 "github.com/opzero/opzero/examples/configwatcher/api/v1"
	"github.com/opzero/opzero/internal/plan"
	"github.com/opzero/opzero/operator"
)

const podAnnotation = "configwatcher.opzero.dev/configmap"

// annotator is a ConfigWatcher of one version: it annotates the pods a
// ConfigWatcher selects with its ConfigMap (version 1: the name;
// version 2: namespace/name) and records observedGeneration.
type annotator struct {
	client.Client
	v2 bool
}

func (r *annotator) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	cw := &v1.ConfigWatcher{}
	if err := r.Get(ctx, req.NamespacedName, cw); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	want := cw.Spec.ConfigMap
	if r.v2 {
		want = cw.Namespace + "/" + want
	}
	pods := &corev1.PodList{}
	if err := r.List(ctx, pods, client.InNamespace(cw.Namespace), client.MatchingLabels(cw.Spec.PodSelector)); err != nil {
		return reconcile.Result{}, err
	}
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.Annotations[podAnnotation] == want {
			continue
		}
		base := client.MergeFrom(p.DeepCopy())
		if p.Annotations == nil {
			p.Annotations = map[string]string{}
		}
		p.Annotations[podAnnotation] = want
		if err := r.Patch(ctx, p, base); err != nil {
			return reconcile.Result{}, err
		}
	}
	if cw.Status.ObservedGeneration == cw.Generation {
		return reconcile.Result{}, nil
	}
	cw.Status.ObservedGeneration = cw.Generation
	return reconcile.Result{}, r.Status().Update(ctx, cw)
}

// upgrade converges m ConfigWatchers (one pod each) with version 1,
// plans version 2, runs version 2 for real, and counts the objects whose
// planned changes are not what the real run changed.
func (b *bench) upgrade(ctx context.Context, ns string, m int) (differ, total int, err error) {
	if err := b.watchers(ctx, ns, m); err != nil {
		return 0, 0, err
	}
	if err := b.c.Create(ctx, &corev1.ServiceAccount{ObjectMeta: objectMeta(ns, "default")}); err != nil {
		return 0, 0, err
	}
	if err := parallel(m, func(i int) error {
		name := fmt.Sprintf("cw-%04d", i)
		pod := &corev1.Pod{ObjectMeta: objectMeta(ns, name+"-pod"), Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.invalid/app:1"}}}}
		pod.Labels = map[string]string{"app": name}
		return b.c.Create(ctx, pod)
	}); err != nil {
		return 0, 0, err
	}
	reconcileAll := func(r reconcile.Reconciler) error {
		return parallel(m, func(i int) error {
			_, err := r.Reconcile(ctx, reconcile.Request{NamespacedName: client.ObjectKey{Namespace: ns, Name: fmt.Sprintf("cw-%04d", i)}})
			return err
		})
	}
	if err := reconcileAll(&annotator{Client: b.c}); err != nil {
		return 0, 0, err
	}
	before, err := b.objects(ctx, ns)
	if err != nil {
		return 0, 0, err
	}
	rep, _, err := b.plan(ctx, plan.Request{Namespace: ns, Rounds: 1}, func(rt *operator.Runtime) error {
		return builder.ControllerManagedBy(rt).Named("annotator").For(&v1.ConfigWatcher{}).Complete(&annotator{Client: rt.GetClient(), v2: true})
	}, nil)
	if err != nil {
		return 0, 0, err
	}
	planned := map[string]map[string]string{}
	for _, o := range rep.Objects {
		if o.Error != "" {
			return 0, 0, fmt.Errorf("%s: %s", o.Ref, o.Error)
		}
		for _, w := range o.Writes {
			k := w.Kind + " " + w.Namespace + "/" + w.Name
			if planned[k] == nil {
				planned[k] = map[string]string{}
			}
			for _, c := range w.Changes {
				planned[k][c.Path] = string(c.After)
			}
		}
	}
	if err := reconcileAll(&annotator{Client: b.c, v2: true}); err != nil {
		return 0, 0, err
	}
	after, err := b.objects(ctx, ns)
	if err != nil {
		return 0, 0, err
	}
	for k, a := range after {
		total++
		real := map[string]string{}
		for _, c := range plan.Diff(before[k], a) {
			real[c.Path] = string(c.After)
		}
		if !sameChanges(planned[k], real) {
			differ++
			fmt.Printf("  %s: planned %v, written %v\n", k, planned[k], real)
		}
	}
	return differ, total, nil
}

func sameChanges(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// objects are ns's ConfigWatchers and Pods as JSON objects, by "Kind ns/name".
func (b *bench) objects(ctx context.Context, ns string) (map[string]map[string]any, error) {
	out := map[string]map[string]any{}
	cws := &v1.ConfigWatcherList{}
	pods := &corev1.PodList{}
	if err := b.c.List(ctx, cws, client.InNamespace(ns)); err != nil {
		return nil, err
	}
	if err := b.c.List(ctx, pods, client.InNamespace(ns)); err != nil {
		return nil, err
	}
	add := func(kind string, o client.Object) {
		raw, _ := json.Marshal(o)
		var m map[string]any
		_ = json.Unmarshal(raw, &m)
		delete(m, "apiVersion")
		delete(m, "kind")
		out[kind+" "+ns+"/"+o.GetName()] = m
	}
	for i := range cws.Items {
		add("ConfigWatcher", &cws.Items[i])
	}
	for i := range pods.Items {
		add("Pod", &pods.Items[i])
	}
	return out, nil
}
