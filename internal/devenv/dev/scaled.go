package dev

import (
	"context"
	"fmt"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// A Deployment applied at 0 replicas (an unchanged operator the opzero
// hub serves at zero: a Subscription whose sink is the Deployment) runs
// as a kubelet would run its one pod: its process runs while the
// Deployment's spec.replicas is above 0 (read every scalePoll), is
// stopped (SIGTERM, SIGKILL after 10 s) when it goes to 0, and once its
// liveness probe answers (else once started) one of the pods
// kube-controller-manager made for it is marked Running and Ready at
// 127.0.0.1, so that the Deployment counts a ready replica and the hub
// reads its metrics where the process serves them.
const scalePoll = 300 * time.Millisecond

var (
	deploymentsGVR = schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}
	podsGVR        = schema.GroupVersionResource{Version: "v1", Resource: "pods"}
)

// replicasOf is a Deployment's spec.replicas (1 when unset, the API
// server's default).
func replicasOf(u *unstructured.Unstructured) int64 {
	n, found, _ := unstructured.NestedInt64(u.Object, "spec", "replicas")
	if !found {
		return 1
	}
	return n
}

// scaledProc is a running (for the supervisor) that follows the
// Deployment's replicas: it ends only when stopped.
type scaledProc struct {
	p      *Platform
	u      *unstructured.Unstructured
	start  func(context.Context) (running, error)
	cancel context.CancelFunc
	done   chan struct{}

	mu  sync.Mutex
	cur running
}

func (p *Platform) followReplicas(u *unstructured.Unstructured, start func(context.Context) (running, error)) *scaledProc {
	ctx, cancel := context.WithCancel(context.Background())
	s := &scaledProc{p: p, u: u, start: start, cancel: cancel, done: make(chan struct{})}
	go func() { defer close(s.done); s.loop(ctx) }()
	return s
}

func (s *scaledProc) Done() <-chan struct{} { return s.done }

func (s *scaledProc) PID() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cur == nil {
		return 0
	}
	return s.cur.PID()
}

func (s *scaledProc) Stop() {
	s.cancel()
	<-s.done
}

func (s *scaledProc) set(r running) {
	s.mu.Lock()
	s.cur = r
	s.mu.Unlock()
}

func (s *scaledProc) loop(ctx context.Context) {
	p, what := s.p, "Deployment "+key(s.u)
	var cur running
	var started, retryAt, checked time.Time
	ready, pod := false, "" // pod: the one marked Ready for cur
	failed := ""            // the last start's error, said once
	defer func() {
		if cur != nil {
			cur.Stop()
			s.set(nil)
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(scalePoll):
		}
		d, err := p.apply.dyn.Resource(deploymentsGVR).Namespace(s.u.GetNamespace()).Get(ctx, s.u.GetName(), metav1.GetOptions{})
		if apierrors.IsNotFound(err) && cur != nil {
			// Deleted: its pods go, and a kubelet would stop their
			// processes (a hook's Deployment removed during the session).
			pid := cur.PID()
			cur.Stop()
			cur, ready = nil, false
			s.set(nil)
			p.say("%s: deleted: pid %d stopped after %s", what, pid, since(started))
			p.opts.Events.Write(Event{Event: EventProcessStopped, Deployment: key(s.u), PID: pid, Reason: "Deployment deleted"})
			continue
		}
		if err != nil {
			continue // deleted with nothing running, or the API server away: as it was
		}
		want := replicasOf(d) > 0
		if cur != nil {
			select {
			case <-cur.Done():
				p.say("%s: pid %d exited%s; started again in 1s while it has replicas", what, cur.PID(), exitNote(cur))
				p.opts.Events.Write(Event{Event: EventProcessStopped, Deployment: key(s.u), PID: cur.PID(), Reason: "exited"})
				cur, ready, retryAt = nil, false, time.Now().Add(time.Second)
				s.set(nil)
			default:
			}
		}
		switch {
		case want && cur == nil && time.Now().After(retryAt):
			r, err := s.start(ctx)
			if err != nil {
				if err.Error() != failed { // a Secret it waits for: said once
					p.say("%s: starting it: %v; again every 1s", what, err)
					failed = err.Error()
				}
				retryAt = time.Now().Add(time.Second)
				continue
			}
			failed = ""
			cur, started, ready = r, time.Now(), false
			s.set(r)
			p.say("%s: scaled to %d: running as pid %d", what, replicasOf(d), r.PID())
			p.opts.Events.Write(Event{Event: EventProcessStarted, Deployment: key(s.u), PID: r.PID()})
		case !want && cur != nil:
			pid := cur.PID()
			cur.Stop()
			cur = nil
			s.set(nil)
			p.say("%s: scaled to 0: pid %d stopped after %s", what, pid, since(started))
			p.opts.Events.Write(Event{Event: EventProcessStopped, Deployment: key(s.u), PID: pid, Reason: "scaled to 0"})
		case want && cur != nil && ready && time.Since(checked) > time.Second:
			// Its pod deleted (scaled to 0 and up again between two reads,
			// or deleted by hand): a kubelet would have stopped this
			// process; the new pod's gets a new one.
			checked = time.Now()
			got, err := p.apply.dyn.Resource(podsGVR).Namespace(s.u.GetNamespace()).Get(ctx, pod, metav1.GetOptions{})
			if apierrors.IsNotFound(err) || (err == nil && got.GetDeletionTimestamp() != nil) {
				pid := cur.PID()
				cur.Stop()
				cur, ready = nil, false
				s.set(nil)
				p.say("%s: its pod %s is gone: pid %d stopped after %s", what, pod, pid, since(started))
				p.opts.Events.Write(Event{Event: EventProcessStopped, Deployment: key(s.u), PID: pid, Reason: "pod deleted"})
			}
		case want && cur != nil && !ready:
			if pr, ok := cur.(probed); ok && pr.Probe(ctx, probeTimeout) != nil {
				continue
			}
			if name, err := s.markReady(ctx, d); err == nil {
				ready, pod, checked = true, name, time.Now()
				p.say("%s: pid %d ready after %s (pod %s marked Ready)", what, cur.PID(), since(started), name)
				p.opts.Events.Write(Event{Event: EventProcessReady, Deployment: key(s.u), PID: cur.PID()})
			}
		}
	}
}

// markReady writes one pod of the Deployment as Running and Ready at
// 127.0.0.1, as its kubelet would.
func (s *scaledProc) markReady(ctx context.Context, d *unstructured.Unstructured) (string, error) {
	sel, _, _ := unstructured.NestedMap(d.Object, "spec", "selector")
	var ls metav1.LabelSelector
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(sel, &ls); err != nil {
		return "", err
	}
	selector, err := metav1.LabelSelectorAsSelector(&ls)
	if err != nil {
		return "", err
	}
	pods := s.p.apply.dyn.Resource(podsGVR).Namespace(d.GetNamespace())
	l, err := pods.List(ctx, metav1.ListOptions{LabelSelector: selector.String()})
	if err != nil {
		return "", err
	}
	for i := range l.Items {
		pod := &l.Items[i]
		if pod.GetDeletionTimestamp() != nil {
			continue
		}
		pod.Object["status"] = podStatus(true)
		if _, err := pods.UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err == nil {
			return pod.GetName(), nil
		}
	}
	return "", fmt.Errorf("no pod of Deployment %s to mark ready yet", key(d))
}
