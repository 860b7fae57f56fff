package testenv

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ReadyPod plays the kubelet for one pod: it waits (up to 30 s) for a pod
// in ns with the labels (kube-controller-manager makes a Deployment's
// pods here, and no kubelet runs them) and writes its status as Running
// and Ready at 127.0.0.1, so that the Deployment counts a ready replica.
// It returns the pod's name. What the pod's containers would serve, a
// test serves itself on 127.0.0.1.
func (e *Env) ReadyPod(t testing.TB, ns string, podLabels map[string]string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		var l corev1.PodList
		err := e.Client.List(ctx, &l, client.InNamespace(ns), client.MatchingLabels(podLabels))
		for _, p := range l.Items {
			if err != nil || p.DeletionTimestamp != nil {
				continue
			}
			now := metav1.Now()
			p.Status.Phase, p.Status.PodIP, p.Status.PodIPs = corev1.PodRunning, "127.0.0.1", []corev1.PodIP{{IP: "127.0.0.1"}}
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
				{Type: corev1.ContainersReady, Status: corev1.ConditionTrue, LastTransitionTime: now}}
			if e.Client.Status().Update(ctx, &p) == nil {
				return p.Name
			}
		}
		select {
		case <-ctx.Done():
			t.Fatal(fmt.Sprintf("no pod labelled %s in %s to mark ready within 30s (last list: %v)", labels.SelectorFromSet(podLabels), ns, err))
		case <-time.After(100 * time.Millisecond):
		}
	}
}
