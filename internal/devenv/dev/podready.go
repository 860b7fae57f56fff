package dev

import (
	"context"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
)

// podsReady marks the pods of an always-on Deployment dev runs as their
// kubelet would: Running and Ready at 127.0.0.1 while its process runs
// (and answers its liveness probe, if it has one), not Ready while the
// process is restarted. kube-controller-manager counts them as it counts
// any pod: the Deployment's status.availableReplicas and its Available
// condition follow, and `kubectl rollout status` completes (a script
// written for a cluster waits on it: Metacontroller's update-strategy
// example). One process stands for every pod of the Deployment, so a
// rollout's new pod is marked too, and the old ReplicaSet is scaled down
// as on a cluster.
//
// Only pods whose Ready condition differs are written; an API server away
// is tried again at the next tick.
func (p *Platform) podsReady(u *unstructured.Unstructured) func(ctx context.Context, ready bool) {
	ns := u.GetNamespace()
	sel, _, _ := unstructured.NestedMap(u.Object, "spec", "selector")
	var ls metav1.LabelSelector
	_ = runtime.DefaultUnstructuredConverter.FromUnstructured(sel, &ls)
	selector, err := metav1.LabelSelectorAsSelector(&ls)
	return func(ctx context.Context, ready bool) {
		if err != nil || selector.Empty() {
			return // the API server refuses such a Deployment
		}
		pods := p.apply.dyn.Resource(podsGVR).Namespace(ns)
		l, err := pods.List(ctx, metav1.ListOptions{LabelSelector: selector.String()})
		if err != nil {
			return
		}
		for i := range l.Items {
			pod := &l.Items[i]
			if pod.GetDeletionTimestamp() != nil || podReady(pod) == ready {
				continue
			}
			pod.Object["status"] = podStatus(ready)
			_, _ = pods.UpdateStatus(ctx, pod, metav1.UpdateOptions{})
		}
	}
}

// podReady is whether pod has the condition Ready=True.
func podReady(pod *unstructured.Unstructured) bool {
	conds, _, _ := unstructured.NestedSlice(pod.Object, "status", "conditions")
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["type"] == "Ready" {
			return m["status"] == "True"
		}
	}
	return false
}

// podStatus is a local pod's status: Running at 127.0.0.1, its
// containers ready or not.
func podStatus(ready bool) map[string]any {
	now := time.Now().UTC().Format(time.RFC3339)
	st := "False"
	if ready {
		st = "True"
	}
	cond := func(typ, status string) any {
		return map[string]any{"type": typ, "status": status, "lastTransitionTime": now}
	}
	return map[string]any{"phase": "Running", "podIP": "127.0.0.1", "podIPs": []any{map[string]any{"ip": "127.0.0.1"}},
		"hostIP": "127.0.0.1", "startTime": now,
		"conditions": []any{cond("PodScheduled", "True"), cond("Initialized", "True"), cond("ContainersReady", st), cond("Ready", st)}}
}
