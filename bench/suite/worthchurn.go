package main

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opzero/opzero/internal/devenv/dev"
)

// churnResult is one serverless wiring under unrelated churn, read from
// opzero dev's event stream over the churn's window.
type churnResult struct {
	window     time.Duration
	updates    int           // changes made (ConfigMap updates, unless said)
	up         time.Duration // time with at least one operator instance running
	coldStarts int           // instances started with none running
	starts     int           // instances started
	deliveries int           // requests the operator answered
	reconciles int           // keys its answers report reconciled
}

// runChurn runs the wiring for one operator, waits until it is at zero,
// then updates the churn ConfigMaps (in the wcm-N namespaces, which hold no
// ConfigWatcher) worthChurnHz times a second for d, while the operator's
// own ConfigWatcher stays idle.
func (w *worthPart) runChurn(ctx context.Context, wiring string, d time.Duration) (churnResult, error) {
	// The Knative churn session runs first and leaves its ApiServerSources:
	// without this, the hub's session ran their adapters too (measured: the
	// hub wiring 80.5% of the time with an instance, 58 deliveries of 60
	// unrelated updates).
	if err := w.clearOtherWiring(ctx, wiring); err != nil {
		return churnResult{}, err
	}
	s, err := w.startDev(ctx, fmt.Sprintf("%s-churn", wiring[:3]), w.manifests[wiring][1])
	if err != nil {
		return churnResult{}, err
	}
	defer s.stop()
	// At zero: no instance running for worthIdle (dev starts none at ready;
	// this waits out one woken by the start).
	for deadline := time.Now().Add(2 * time.Minute); ; {
		if instances(readEvents(s.events), time.Now(), ofServices) == 0 {
			break
		}
		if time.Now().After(deadline) {
			return churnResult{}, fmt.Errorf("the operator did not scale to zero within 2 minutes of ready")
		}
		time.Sleep(time.Second)
	}
	return w.churnFor(ctx, s, d, ofServices)
}

// churnFor updates the churn ConfigMaps (in the wcm-N namespaces)
// worthChurnHz times a second for d and reads the instances of the
// operator (the process events of matches) from s's event stream over
// that window.
func (w *worthPart) churnFor(ctx context.Context, s *devSession, d time.Duration, matches func(dev.Event) bool) (churnResult, error) {
	return w.churnWith(ctx, s, d, matches, w.touchConfigMap)
}

// churnWith makes change(i), i = 0, 1, ..., worthChurnHz times a second
// for d and reads the instances of the operator (the process events of
// matches) from s's event stream over that window.
func (w *worthPart) churnWith(ctx context.Context, s *devSession, d time.Duration, matches func(dev.Event) bool, change func(context.Context, int) error) (churnResult, error) {
	res := churnResult{}
	t0 := time.Now()
	tick := time.NewTicker(time.Second / worthChurnHz)
	defer tick.Stop()
	for i := 0; time.Since(t0) < d; i++ {
		if err := change(ctx, i); err != nil {
			return churnResult{}, err
		}
		res.updates++
		<-tick.C
	}
	t1 := time.Now()
	time.Sleep(2 * time.Second) // the last updates' deliveries are answered
	res.window = t1.Sub(t0)
	churnWindow(readEvents(s.events), t0, t1, &res, matches)
	return res, nil
}

// touchConfigMap updates the i-th change's churn ConfigMap (round-robin
// over the wcm-N namespaces).
func (w *worthPart) touchConfigMap(ctx context.Context, i int) error {
	return w.touch(ctx, &corev1.ConfigMap{}, client.ObjectKey{Namespace: cmNamespace(i % worthCMNS), Name: "churn"}, func(o client.Object) {
		o.(*corev1.ConfigMap).Data = map[string]string{"n": strconv.Itoa(i)}
	})
}

// touch reads o at key, applies set to it and updates it.
func (w *worthPart) touch(ctx context.Context, o client.Object, key client.ObjectKey, set func(client.Object)) error {
	if err := w.c.Get(ctx, key, o); err != nil {
		return err
	}
	set(o)
	return w.c.Update(ctx, o)
}

// ofServices matches the events of Knative Services' instances (not of
// ko:// Deployments).
func ofServices(e dev.Event) bool { return e.Service != "" }

// ofDeployment matches the events of Deployment ns/name's processes.
func ofDeployment(key string) func(dev.Event) bool {
	return func(e dev.Event) bool { return e.Deployment == key }
}

// instances is how many operator instances run at t, from the stream's
// process-started and process-stopped events that match.
func instances(evs []dev.Event, t time.Time, matches func(dev.Event) bool) int {
	n := 0
	for _, e := range evs {
		if !matches(e) || e.Time.After(t) {
			continue
		}
		switch e.Event {
		case dev.EventProcessStarted:
			n++
		case dev.EventProcessStopped:
			n--
		}
	}
	return n
}

// churnWindow fills res from the events in [t0, t1]: the time with at
// least one instance (a step function of the process events), the starts,
// deliveries and reconciles; matches says which process events are the
// operator's.
func churnWindow(evs []dev.Event, t0, t1 time.Time, res *churnResult, matches func(dev.Event) bool) {
	sort.SliceStable(evs, func(i, j int) bool { return evs[i].Time.Before(evs[j].Time) })
	n := instances(evs, t0, matches)
	last := t0
	for _, e := range evs {
		if e.Time.Before(t0) || e.Time.After(t1) {
			continue
		}
		switch e.Event {
		case dev.EventProcessStarted, dev.EventProcessStopped:
			if !matches(e) {
				continue
			}
			if n > 0 {
				res.up += e.Time.Sub(last)
			}
			last = e.Time
			if e.Event == dev.EventProcessStarted {
				n++
				res.starts++
				if e.ColdStart {
					res.coldStarts++
				}
			} else {
				n--
			}
		case dev.EventDelivery:
			if e.Service != "" {
				res.deliveries++
			}
		case dev.EventReconciled:
			res.reconciles += e.Reconciled
		}
	}
	if n > 0 {
		res.up += t1.Sub(last)
	}
}
