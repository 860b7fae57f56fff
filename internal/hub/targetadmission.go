package hub

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/opzero/opzero/api/v1alpha1"
)

// podPoll is how often an admission call waiting for a woken Deployment
// looks for a ready pod.
const podPoll = 200 * time.Millisecond

// ServingPods is the hub's side of an admission call for an unchanged
// operator (package admission, a webhook configuration naming a
// Deployment sink's Subscription): the Deployment is woken if it is at
// zero, and the call waits until one of its pods may serve (servingPods),
// or ctx ends.
// done ends the call: until then the replica serving the Subscription
// does not stop the Deployment, and the call counts as activity.
//
// Any replica answers: one that does not serve the Subscription (its
// bucket is another's) scales the Deployment to 1 itself when it is at
// 0, through the same conditional write, and the serving replica finds
// it up and counts its idle period from then.
func (h *Hub) ServingPods(ctx context.Context, key types.NamespacedName, reason string) ([]corev1.Pod, func(), error) {
	h.mu.Lock()
	obj, s := h.all[key], h.subs[key]
	h.mu.Unlock()
	if obj == nil && h.standing.Load() {
		// A light standby knows no Subscription (it watches none): read
		// this one, and wake its Deployment as a replica that does not
		// serve it does.
		u, err := h.dyn.Resource(subscriptionsGVR).Namespace(key.Namespace).Get(ctx, key.Name, metav1.GetOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return nil, nil, fmt.Errorf("reading Subscription %s: %w", key, err)
		}
		if err == nil {
			if obj, err = toSubscription(u); err != nil {
				return nil, nil, err
			}
		}
	}
	if obj == nil || !isDeploymentSink(obj.Spec.Sink) {
		return nil, nil, fmt.Errorf("Subscription %s does not exist or has no Deployment sink (spec.sink.ref)", key)
	}
	name := obj.Spec.Sink.Ref.Name
	done := func() {}
	var d *unstructured.Unstructured // as the wake read it: its selector finds the pods
	var err error
	if t := s.scalerOrNil(); t != nil {
		t.callBegin()
		done = t.callEnd
		d, err = t.wakeRead(ctx, reason)
	} else if s != nil || !meta.IsStatusConditionTrue(obj.Status.Conditions, v1alpha1.SubscriptionReady) {
		// Served here but not Ready, or not Ready where it is served: the
		// Deployment is left as it is (a condition says why).
		err = fmt.Errorf("Subscription %s is not Ready (kubectl describe subscription -n %s %s): Deployment %s is not woken", key, key.Namespace, key.Name, name)
	} else {
		d, err = h.wakeElsewhere(ctx, key.Namespace, name, reason)
	}
	if err != nil {
		done()
		return nil, nil, err
	}
	for {
		pods, err := h.servingPods(ctx, d)
		if err != nil && ctx.Err() == nil {
			done()
			return nil, nil, err
		}
		if len(pods) > 0 {
			return pods, done, nil
		}
		select {
		case <-ctx.Done():
			done()
			return nil, nil, fmt.Errorf("Deployment %s/%s has no running pod yet: %w", key.Namespace, name, ctx.Err())
		case <-time.After(podPoll):
		}
	}
}

// scalerOrNil is s's scaler, nil for no s.
func (s *sub) scalerOrNil() *scaler {
	if s == nil {
		return nil
	}
	return s.scalerOf()
}

// callBegin and callEnd bracket an admission call: activity at both ends,
// no stop in between.
func (t *scaler) callBegin() {
	t.mu.Lock()
	t.calls++
	t.activity = time.Now()
	t.mu.Unlock()
}

func (t *scaler) callEnd() {
	t.mu.Lock()
	t.calls--
	t.activity = time.Now()
	t.mu.Unlock()
	t.poke()
}

// wakeElsewhere scales Deployment ns/name from 0 to 1 for a Subscription
// another replica serves.
func (h *Hub) wakeElsewhere(ctx context.Context, ns, name, reason string) (*unstructured.Unstructured, error) {
	d, woke, err := h.wakeFromZero(ctx, ns, name, nil)
	if woke {
		h.opts.Log.Info("woke an operator's Deployment served by another replica", "deployment", ns+"/"+name, "reason", reason)
	}
	return d, err
}

// servingPods are the pods of Deployment d an admission call may go to:
// its ready pods with an address, not being deleted, else its running
// ones. A webhook server answers long before a readiness probe says so:
// kubebuilder's scaffold probes first after 5 s, then every 10 s, so a
// woken operator whose first probe came too early is Ready only after
// 15 s, past the API server's 10 s webhook timeout. The caller dials the
// pod directly and tries again while it refuses the connection.
func (h *Hub) servingPods(ctx context.Context, d *unstructured.Unstructured) ([]corev1.Pod, error) {
	items, err := h.deploymentPods(ctx, d)
	if err != nil {
		return nil, fmt.Errorf("listing Deployment %s/%s's pods: %w", d.GetNamespace(), d.GetName(), err)
	}
	var ready, running []corev1.Pod
	for i := range items {
		p := &items[i]
		if p.GetDeletionTimestamp() != nil {
			continue
		}
		var pod corev1.Pod
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(p.Object, &pod); err != nil || pod.Status.PodIP == "" {
			continue
		}
		switch {
		case podReady(p):
			ready = append(ready, pod)
		case pod.Status.Phase == corev1.PodRunning:
			running = append(running, pod)
		}
	}
	if len(ready) > 0 {
		return ready, nil
	}
	return running, nil
}
