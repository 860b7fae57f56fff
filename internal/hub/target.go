package hub

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/common/expfmt"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	v1alpha1 "github.com/opzero/opzero/api/v1alpha1"
)

// A Deployment sink: an unchanged operator (any image, any language),
// started by the hub when something it needs changed and stopped when it
// is idle. The hub sends it no event: controller-runtime operators (and
// kopf, JOSDK, kube-rs ones) list what they watch when they start and
// reconcile all of it, so scaling the Deployment to one replica is the
// delivery, and the operator's own list sees the change.
//
// Expected flow (one scaler per Subscription, on the replica holding its
// bucket):
//
//   - a change let through by the Subscription's filters (or a sweep, or
//     MaxSleep at zero) is "sent" by wake: the Deployment's scale is read
//     and, at 0, a leader-election Lease still held by a pod of it that is
//     gone is released, then spec.replicas is set to 1 (a merge patch of
//     the scale subresource with the read resourceVersion as
//     precondition). The send is settled once that is written: the pod's
//     initial list comes after it.
//   - tick (every second while up, every 5 s at zero) reads the
//     Deployment: a ready pod with nothing let through for IdleAfter
//     (counted from its readiness too), no send of the Subscription
//     pending and, where it exposes them, workqueue metrics at 0, is
//     stopped: spec.replicas 0, with the same precondition. Wakes and stops
//     are serialized: a change that arrives while the Deployment stops
//     scales it up again.
//   - anything else (more than one replica, an HPA naming it) is someone
//     else's scaling: the hub writes nothing to the Deployment until it is
//     back to 0 or 1 (TargetHealthy False, state Unmanaged).

var (
	deploymentsGVR = schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}
	podsGVR        = schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	leasesGVR      = schema.GroupVersionResource{Group: "coordination.k8s.io", Version: "v1", Resource: "leases"}
	hpasGVR        = schema.GroupVersionResource{Group: "autoscaling", Version: "v2", Resource: "horizontalpodautoscalers"}
)

// Defaults of spec.scaleToZero.
const (
	defaultIdleAfter    = time.Minute
	defaultMaxSleep     = time.Hour
	defaultReadyTimeout = 5 * time.Minute
	// upWindow: a change let through this recently shows the state Up
	// rather than Idle.
	upWindow = 5 * time.Second
)

// isDeploymentSink: the sink is an unchanged operator's Deployment.
func isDeploymentSink(d v1alpha1.Destination) bool {
	return d.Ref != nil && d.Ref.Kind == "Deployment" && d.Ref.APIVersion == "apps/v1"
}

// deploymentSinkURI is what status.sinkUri shows for a Deployment sink.
func deploymentSinkURI(ns, name string) string { return "deployment:" + ns + "/" + name }

// targetOptions is spec.scaleToZero with its defaults.
type targetOptions struct {
	idleAfter, maxSleep, readyTimeout time.Duration
	metrics                           *v1alpha1.MetricsEndpoint
	leases                            []string
}

func targetOptionsOf(spec v1alpha1.SubscriptionSpec) (targetOptions, error) {
	o := targetOptions{idleAfter: defaultIdleAfter, maxSleep: defaultMaxSleep, readyTimeout: defaultReadyTimeout}
	z := spec.ScaleToZero
	if !isDeploymentSink(spec.Sink) {
		if z != nil {
			return o, withReason("InvalidSpec", "spec.scaleToZero is only for a Deployment sink (apps/v1 Deployment in spec.sink.ref)")
		}
		return o, nil
	}
	if spec.Wakeups {
		return o, withReason("InvalidSpec", "spec.wakeups: an unchanged operator's Deployment writes no Wakeups; "+
			"spec.scaleToZero.maxSleep wakes it for what the hub cannot see")
	}
	if spec.Sink.Audience != "" {
		return o, withReason("InvalidSpec", "spec.sink.audience: a Deployment sink is sent no event, so no token; remove it")
	}
	if z == nil {
		return o, nil
	}
	for _, d := range []struct {
		field string
		v     *metav1.Duration
		to    *time.Duration
		min   time.Duration
	}{{"idleAfter", z.IdleAfter, &o.idleAfter, time.Second}, {"maxSleep", z.MaxSleep, &o.maxSleep, 0}, {"readyTimeout", z.ReadyTimeout, &o.readyTimeout, time.Second}} {
		if d.v == nil {
			continue
		}
		if d.v.Duration < d.min || (d.v.Duration > 0 && d.v.Duration < time.Second) {
			return o, withReason("InvalidSpec", "spec.scaleToZero.%s %s: want at least 1s%s", d.field, d.v.Duration, map[bool]string{true: " (or 0: never)"}[d.min == 0])
		}
		*d.to = d.v.Duration
	}
	if m := z.Metrics; m != nil {
		if m.Port <= 0 || m.Port > 65535 {
			return o, withReason("InvalidSpec", "spec.scaleToZero.metrics.port %d: want a port (controller-runtime's metrics port, 8443 in kubebuilder's manifests)", m.Port)
		}
		if m.Scheme != "" && m.Scheme != "http" && m.Scheme != "https" {
			return o, withReason("InvalidSpec", "spec.scaleToZero.metrics.scheme %q: want http or https", m.Scheme)
		}
		if m.Path != "" && !strings.HasPrefix(m.Path, "/") {
			return o, withReason("InvalidSpec", "spec.scaleToZero.metrics.path %q: want a path from /", m.Path)
		}
		o.metrics = m
	}
	o.leases = z.LeaderElectionLeases
	return o, nil
}

// resolveTarget checks a Deployment sink: it exists, no other
// Subscription claims it, no HorizontalPodAutoscaler scales it.
func (h *Hub) resolveTarget(ctx context.Context, s *sub, spec v1alpha1.SubscriptionSpec) (string, error) {
	ns, name := s.key.Namespace, spec.Sink.Ref.Name
	if _, err := h.dyn.Resource(deploymentsGVR).Namespace(ns).Get(ctx, name, metav1.GetOptions{}); err != nil {
		if apierrors.IsNotFound(err) {
			return "", withReason("SinkNotFound", "Deployment %s/%s does not exist: the hub starts the operator's own Deployment, in the Subscription's namespace", ns, name)
		}
		return "", withReason("SinkNotFound", "reading Deployment %s/%s: %v", ns, name, err)
	}
	if other := h.claimant(s.key, name); other != "" {
		return "", withReason("TargetClaimed", "Deployment %s/%s is served by Subscription %s, which was made first: "+
			"one Deployment, one Subscription (merge their resources, or delete one)", ns, name, other)
	}
	hpas, err := h.dyn.Resource(hpasGVR).Namespace(ns).List(ctx, metav1.ListOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return "", withReason("SinkNotChecked", "listing the HorizontalPodAutoscalers of %s (one may scale the Deployment): %v", ns, err)
	}
	if hpas != nil {
		for _, a := range hpas.Items {
			k, _, _ := unstructured.NestedString(a.Object, "spec", "scaleTargetRef", "kind")
			n, _, _ := unstructured.NestedString(a.Object, "spec", "scaleTargetRef", "name")
			if k == "Deployment" && n == name {
				return "", withReason("TargetAutoscaled", "Deployment %s/%s is scaled by HorizontalPodAutoscaler %s: the hub leaves it to it (delete the HPA for the hub to scale it to zero)", ns, name, a.GetName())
			}
		}
	}
	return deploymentSinkURI(ns, name), nil
}

// claimant names the Subscription that serves Deployment name of key's
// namespace instead of key: the oldest one naming it (then by name), ""
// when key is. Every replica sees every Subscription, so all agree.
func (h *Hub) claimant(key types.NamespacedName, name string) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	me := h.all[key]
	for k, o := range h.all {
		if k == key || k.Namespace != key.Namespace || !isDeploymentSink(o.Spec.Sink) || o.Spec.Sink.Ref.Name != name {
			continue
		}
		if me == nil || o.CreationTimestamp.Before(&me.CreationTimestamp) ||
			(o.CreationTimestamp.Equal(&me.CreationTimestamp) && k.Name < key.Name) {
			return k.Name
		}
	}
	return ""
}

// scaler serves one Deployment sink.
type scaler struct {
	s      *sub
	name   string // the Deployment, in the Subscription's namespace
	cancel context.CancelFunc
	done   chan struct{}
	poked  chan struct{}

	// scaleMu orders the scale writes: a wake and a stop never cross.
	scaleMu sync.Mutex

	mu       sync.Mutex
	opts     targetOptions
	st       v1alpha1.TargetStatus
	activity time.Time // the last change let through, or work seen in flight
	wokeAt   time.Time // the hub's last scale-up ("": not since this holder serves it)
	readyAt  time.Time // when a pod was first seen ready since the last scale-up
	zeroAt   time.Time // when it was first seen at 0
	draining bool      // stopped by the hub, its pods not all gone: their Leases to release
	calls    int       // admission calls under way (admission.go): never stopped meanwhile
	health   metav1.Condition
}

func newScaler(s *sub, name string, o targetOptions, prev *v1alpha1.TargetStatus) *scaler {
	t := &scaler{s: s, name: name, opts: o, poked: make(chan struct{}, 1), done: make(chan struct{})}
	if prev != nil {
		t.st = *prev.DeepCopy() // the counters go on
	}
	t.health = metav1.Condition{Type: v1alpha1.SubscriptionTargetHealthy, Status: metav1.ConditionTrue, Reason: "Served"}
	return t
}

func (t *scaler) start() {
	ctx, cancel := context.WithCancel(context.Background())
	t.cancel = cancel
	go func() {
		defer close(t.done)
		t.run(ctx)
	}()
}

func (t *scaler) stop() {
	if t.cancel != nil {
		t.cancel()
		<-t.done
	}
}

func (t *scaler) setOptions(o targetOptions) {
	t.mu.Lock()
	t.opts = o
	t.mu.Unlock()
	t.poke()
}

func (t *scaler) poke() {
	select {
	case t.poked <- struct{}{}:
	default:
	}
}

func (t *scaler) status() *v1alpha1.TargetStatus {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.st.DeepCopy()
}

// update changes the status under t.mu and marks the Subscription's
// status to be written if it changed.
func (t *scaler) update(f func(st *v1alpha1.TargetStatus)) {
	t.mu.Lock()
	before := *t.st.DeepCopy()
	f(&t.st)
	changed := !targetStatusEqual(before, t.st)
	t.mu.Unlock()
	if changed {
		t.s.mu.Lock()
		t.s.dirty = true
		t.s.mu.Unlock()
	}
}

func targetStatusEqual(a, b v1alpha1.TargetStatus) bool {
	tm := func(x, y *metav1.Time) bool { return (x == nil) == (y == nil) && (x == nil || x.Equal(y)) }
	return a.State == b.State && a.Replicas == b.Replicas && a.Wakes == b.Wakes && tm(a.LastWake, b.LastWake) &&
		a.LastWakeReason == b.LastWakeReason && a.ReadyAfter == b.ReadyAfter && tm(a.IdleSince, b.IdleSince) && a.Metrics == b.Metrics
}

// setHealth sets the TargetHealthy condition (an Event when it changes).
func (t *scaler) setHealth(reason, format string, a ...any) {
	c := metav1.Condition{Type: v1alpha1.SubscriptionTargetHealthy, Status: metav1.ConditionTrue, Reason: "Served"}
	if reason != "" {
		c.Status, c.Reason, c.Message = metav1.ConditionFalse, reason, fmt.Sprintf(format, a...)
	}
	t.mu.Lock()
	same := t.health.Status == c.Status && t.health.Reason == c.Reason && t.health.Message == c.Message
	t.health = c
	t.mu.Unlock()
	if !same {
		t.s.setCondition(c)
	}
}

// wake is the send of a change to a Deployment sink: the Deployment is
// scaled to 1 if it is at 0. Written before it returns.
func (t *scaler) wake(ctx context.Context, reason string) error {
	_, err := t.wakeRead(ctx, reason)
	return err
}

// wakeRead is wake, returning the Deployment as it read it.
func (t *scaler) wakeRead(ctx context.Context, reason string) (*unstructured.Unstructured, error) {
	now := time.Now()
	t.mu.Lock()
	t.activity = now
	t.mu.Unlock()
	t.scaleMu.Lock()
	defer t.scaleMu.Unlock()
	h, ns := t.s.h, t.s.key.Namespace
	d, woke, err := h.wakeFromZero(ctx, ns, t.name, func(d *unstructured.Unstructured) { t.releaseLeases(ctx, d) })
	if apierrors.IsNotFound(err) {
		h.poke() // checked again: SinkResolved False
	}
	if err != nil || !woke {
		t.poke() // up, waking, or someone else's: its own watch sees the change
		return d, err
	}
	h.opts.Log.Info("woke an operator's Deployment", "subscription", t.s.key.String(), "deployment", t.name, "reason", reason)
	t.mu.Lock()
	t.wokeAt, t.readyAt, t.zeroAt = now, time.Time{}, time.Time{}
	t.mu.Unlock()
	mt := metav1.NewTime(now)
	t.update(func(st *v1alpha1.TargetStatus) {
		st.State, st.Replicas, st.Wakes, st.LastWake, st.LastWakeReason, st.ReadyAfter = v1alpha1.TargetWaking, 1, st.Wakes+1, &mt, reason, ""
	})
	t.poke()
	return d, nil
}

// wakeFromZero scales Deployment ns/name to 1 if it is at 0, through the
// conditional write of scaleTo (a conflict: read again), after before (if
// set) has seen the Deployment as read; woke says whether it did, d is the
// Deployment as last read (nil on an error).
func (h *Hub) wakeFromZero(ctx context.Context, ns, name string, before func(*unstructured.Unstructured)) (d *unstructured.Unstructured, woke bool, _ error) {
	for attempt := 0; ; attempt++ {
		d, err := h.dyn.Resource(deploymentsGVR).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return nil, false, fmt.Errorf("reading Deployment %s/%s to wake it: %w", ns, name, err)
		}
		if replicasOf(d) != 0 {
			return d, false, nil
		}
		if before != nil {
			before(d)
		}
		err = h.scaleTo(ctx, d, 1)
		if apierrors.IsConflict(err) && attempt < 5 {
			continue
		}
		if err != nil {
			return nil, false, fmt.Errorf("scaling Deployment %s/%s to 1: %w", ns, name, err)
		}
		h.stats.targetWakes.Inc()
		return d, true, nil
	}
}

// scaleTo sets the Deployment's spec.replicas to n through its scale
// subresource, if it is still the version read (a conflict otherwise).
func (h *Hub) scaleTo(ctx context.Context, d *unstructured.Unstructured, n int) error {
	body := fmt.Sprintf(`{"metadata":{"resourceVersion":%q},"spec":{"replicas":%d}}`, d.GetResourceVersion(), n)
	_, err := h.dyn.Resource(deploymentsGVR).Namespace(d.GetNamespace()).Patch(ctx, d.GetName(), types.MergePatchType, []byte(body),
		metav1.PatchOptions{FieldManager: fieldManager}, "scale")
	return err
}

// fieldManager names the hub's writes of a Deployment's scale.
const fieldManager = "opzero-hub"

func replicasOf(d *unstructured.Unstructured) int64 {
	r, found, _ := unstructured.NestedInt64(d.Object, "spec", "replicas")
	if !found {
		return 1 // the API server's default
	}
	return r
}

func (t *scaler) run(ctx context.Context) {
	for {
		next := t.tick(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.poked:
		case <-time.After(next):
		}
	}
}

// tick reads the Deployment, updates the state and stops it when idle; it
// returns when to look again.
func (t *scaler) tick(ctx context.Context) time.Duration {
	h, ns := t.s.h, t.s.key.Namespace
	d, err := h.dyn.Resource(deploymentsGVR).Namespace(ns).Get(ctx, t.name, metav1.GetOptions{})
	if err != nil {
		if apierrors.IsNotFound(err) {
			h.poke() // SinkResolved False; the others are served on
		} else if ctx.Err() == nil {
			h.opts.Log.Error(err, "reading an operator's Deployment", "subscription", t.s.key.String(), "deployment", t.name)
		}
		return 5 * time.Second
	}
	now := time.Now()
	replicas := replicasOf(d)
	ready, _, _ := unstructured.NestedInt64(d.Object, "status", "readyReplicas")
	t.mu.Lock()
	o := t.opts
	t.mu.Unlock()

	if replicas > 1 {
		t.update(func(st *v1alpha1.TargetStatus) { st.State, st.Replicas = v1alpha1.TargetUnmanaged, int32(replicas) })
		t.setHealth("ScaledElsewhere", "Deployment %s has spec.replicas %d, which the hub never writes (scaled by hand or by another controller): "+
			"left as it is; scale it to 0 or 1 to hand it back", t.name, replicas)
		return 5 * time.Second
	}
	if replicas == 0 {
		t.mu.Lock()
		if t.zeroAt.IsZero() {
			t.zeroAt = now
		}
		zeroAt := t.zeroAt
		t.mu.Unlock()
		t.update(func(st *v1alpha1.TargetStatus) { st.State, st.Replicas = v1alpha1.TargetZero, 0 })
		t.clearScaledElsewhere()
		if o.maxSleep > 0 && now.Sub(zeroAt) >= o.maxSleep {
			// What the hub cannot see (a RequeueAfter, an external system):
			// the operator's own initial list reconciles it.
			if err := t.wake(ctx, fmt.Sprintf("MaxSleep: at zero for %s (spec.scaleToZero.maxSleep)", o.maxSleep)); err != nil && ctx.Err() == nil {
				h.opts.Log.Error(err, "waking an operator's Deployment after its longest sleep", "subscription", t.s.key.String())
			}
			return time.Second
		}
		t.mu.Lock()
		draining := t.draining
		t.mu.Unlock()
		if draining {
			// The stopped pod's leader Lease is released as soon as the pod
			// is gone (status.replicas leaves out terminating pods: the pods
			// are listed), so the next wake does not wait for it.
			if pods, err := h.deploymentPods(ctx, d); err != nil || len(pods) > 0 {
				return time.Second
			}
			t.releaseLeases(ctx, d)
			t.mu.Lock()
			t.draining = false
			t.mu.Unlock()
		}
		return 5 * time.Second
	}

	// One replica: ours (woken), or found so.
	t.clearScaledElsewhere()
	t.mu.Lock()
	if t.wokeAt.IsZero() {
		t.wokeAt = now // found up (a hub restart, a hand-off): counted from now
	}
	if t.activity.IsZero() {
		t.activity = now
	}
	wokeAt := t.wokeAt
	t.mu.Unlock()
	if ready == 0 {
		t.update(func(st *v1alpha1.TargetStatus) { st.State, st.Replicas = v1alpha1.TargetWaking, 1 })
		t.releaseLeases(ctx, d) // a pod gone after the wake may still hold it
		if now.Sub(wokeAt) >= o.readyTimeout {
			t.setHealth("PodNotReady", "Deployment %s was scaled to 1 %s ago and has no ready pod (kubectl describe deployment %s; its pod's events): "+
				"woken again by the next change, stopped when idle", t.name, now.Sub(wokeAt).Round(time.Second), t.name)
			t.stopIfIdle(ctx, o, wokeAt.Add(o.readyTimeout))
		}
		return time.Second
	}
	t.mu.Lock()
	if t.readyAt.IsZero() {
		t.readyAt = now
		t.mu.Unlock()
		h.stats.targetReady.Observe(now.Sub(wokeAt).Seconds())
		t.update(func(st *v1alpha1.TargetStatus) { st.ReadyAfter = now.Sub(wokeAt).Round(time.Millisecond).String() })
		t.setHealth("", "")
	} else {
		t.mu.Unlock()
	}
	busy, note := t.workInFlight(ctx, d, o)
	t.update(func(st *v1alpha1.TargetStatus) { st.Metrics = note })
	if busy || t.s.disp.pending() {
		t.mu.Lock()
		t.activity = now
		t.mu.Unlock()
	}
	t.mu.Lock()
	from := t.activity
	if t.readyAt.After(from) {
		from = t.readyAt // the idle period covers the operator's own start
	}
	t.mu.Unlock()
	since := metav1.NewTime(from)
	t.update(func(st *v1alpha1.TargetStatus) {
		st.Replicas, st.IdleSince = 1, &since
		st.State = v1alpha1.TargetIdle
		if now.Sub(from) < upWindow {
			st.State = v1alpha1.TargetUp
		}
	})
	t.stopIfIdle(ctx, o, from.Add(o.idleAfter))
	return time.Second
}

func (t *scaler) clearScaledElsewhere() {
	t.mu.Lock()
	was := t.health.Reason == "ScaledElsewhere"
	t.mu.Unlock()
	if was {
		t.setHealth("", "")
	}
}

// stopIfIdle scales the Deployment to 0 once now is past until and nothing
// was let through since it was computed.
func (t *scaler) stopIfIdle(ctx context.Context, o targetOptions, until time.Time) {
	if time.Now().Before(until) {
		return
	}
	t.scaleMu.Lock()
	defer t.scaleMu.Unlock()
	t.mu.Lock()
	from, calls := t.activity, t.calls
	t.mu.Unlock()
	if from.Add(o.idleAfter).After(time.Now()) || t.s.disp.pending() || calls > 0 {
		return // a change or an admission call arrived meanwhile
	}
	h, ns := t.s.h, t.s.key.Namespace
	d, err := h.dyn.Resource(deploymentsGVR).Namespace(ns).Get(ctx, t.name, metav1.GetOptions{})
	if err != nil || replicasOf(d) != 1 {
		return
	}
	if err := h.scaleTo(ctx, d, 0); err != nil {
		if !apierrors.IsConflict(err) && ctx.Err() == nil {
			h.opts.Log.Error(err, "scaling an idle operator's Deployment to 0", "subscription", t.s.key.String(), "deployment", t.name)
		}
		return
	}
	now := time.Now()
	t.mu.Lock()
	up := time.Duration(0)
	if !t.wokeAt.IsZero() {
		up = now.Sub(t.wokeAt)
	}
	t.wokeAt, t.readyAt, t.zeroAt, t.draining = time.Time{}, time.Time{}, now, true
	t.mu.Unlock()
	h.stats.targetStops.Inc()
	h.stats.targetUp.Add(up.Seconds())
	h.opts.Log.Info("stopped an idle operator's Deployment", "subscription", t.s.key.String(), "deployment", t.name, "up", up.Round(time.Millisecond))
	t.update(func(st *v1alpha1.TargetStatus) { st.State, st.Replicas = v1alpha1.TargetZero, 0 })
}

// handBack, when a Subscription with a Deployment sink is deleted, scales
// the Deployment back to 1 if the hub left it at 0: the operator runs as
// it did before, always on, rather than never again. Only the replica
// serving the Subscription does it, when it sees the deletion (a
// deletion made while no replica serves it leaves the Deployment as it
// was: said in docs/unchanged.md).
func (h *Hub) handBack(ctx context.Context, key types.NamespacedName) {
	h.mu.Lock()
	s := h.subs[key]
	h.mu.Unlock()
	if s == nil {
		return
	}
	t := s.scalerOf()
	if t == nil {
		return
	}
	t.scaleMu.Lock()
	defer t.scaleMu.Unlock()
	d, err := h.dyn.Resource(deploymentsGVR).Namespace(key.Namespace).Get(ctx, t.name, metav1.GetOptions{})
	if err != nil || replicasOf(d) != 0 {
		return
	}
	if err := h.scaleTo(ctx, d, 1); err != nil {
		h.opts.Log.Error(err, "scaling a Deployment back to 1 after its Subscription was deleted", "deployment", key.Namespace+"/"+t.name)
		return
	}
	h.opts.Log.Info("its Subscription deleted: the Deployment runs always on again", "deployment", key.Namespace+"/"+t.name)
}

// deploymentPods lists the Deployment's pods (its selector).
func (h *Hub) deploymentPods(ctx context.Context, d *unstructured.Unstructured) ([]unstructured.Unstructured, error) {
	sel, _, _ := unstructured.NestedMap(d.Object, "spec", "selector")
	var ls metav1.LabelSelector
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(sel, &ls); err != nil {
		return nil, err
	}
	s, err := metav1.LabelSelectorAsSelector(&ls)
	if err != nil {
		return nil, err
	}
	l, err := h.dyn.Resource(podsGVR).Namespace(d.GetNamespace()).List(ctx, metav1.ListOptions{LabelSelector: s.String()})
	if err != nil {
		return nil, err
	}
	return l.Items, nil
}

// releaseLeases clears the holder of each leader-election Lease held by a
// pod of the Deployment that no longer exists, as client-go's
// ReleaseOnCancel would have: the next pod takes it at once instead of
// waiting its whole LeaseDuration (kubebuilder's: 15 s). A Lease held by
// a pod that still exists (stopping: it may still reconcile) is left.
func (t *scaler) releaseLeases(ctx context.Context, d *unstructured.Unstructured) {
	h, ns := t.s.h, d.GetNamespace()
	t.mu.Lock()
	names := t.opts.leases
	t.mu.Unlock()
	var leases []unstructured.Unstructured
	if len(names) > 0 {
		for _, n := range names {
			l, err := h.dyn.Resource(leasesGVR).Namespace(ns).Get(ctx, n, metav1.GetOptions{})
			if err == nil {
				leases = append(leases, *l)
			}
		}
	} else {
		l, err := h.dyn.Resource(leasesGVR).Namespace(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return
		}
		leases = l.Items
	}
	for i := range leases {
		l := &leases[i]
		holder, _, _ := unstructured.NestedString(l.Object, "spec", "holderIdentity")
		pod, _, _ := strings.Cut(holder, "_") // controller-runtime's identity: <hostname>_<uuid>; a pod's hostname is its name
		if pod == "" || !strings.HasPrefix(pod, d.GetName()+"-") {
			continue
		}
		if _, err := h.dyn.Resource(podsGVR).Namespace(ns).Get(ctx, pod, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			continue
		}
		unstructured.RemoveNestedField(l.Object, "spec", "holderIdentity")
		if _, err := h.dyn.Resource(leasesGVR).Namespace(ns).Update(ctx, l, metav1.UpdateOptions{FieldManager: fieldManager}); err != nil {
			if !apierrors.IsConflict(err) {
				h.opts.Log.Error(err, "releasing the Lease of a stopped operator pod", "lease", ns+"/"+l.GetName(), "holder", holder)
			}
			continue
		}
		h.stats.targetLeases.Inc()
		h.opts.Log.Info("released the leader-election Lease of a stopped pod", "lease", ns+"/"+l.GetName(), "holder", holder)
	}
}

// queueMetrics are controller-runtime's metrics of work in flight.
var queueMetrics = []string{"workqueue_depth", "workqueue_unfinished_work_seconds", "controller_runtime_active_workers"}

// workInFlight reads the ready pods' metrics (spec.scaleToZero.metrics):
// busy when one of queueMetrics is above 0 in one of them; the note says
// what was found, for status.target.metrics.
func (t *scaler) workInFlight(ctx context.Context, d *unstructured.Unstructured, o targetOptions) (bool, string) {
	if o.metrics == nil {
		return false, "none declared: the idle period alone decides"
	}
	pods, err := t.s.h.deploymentPods(ctx, d)
	if err != nil {
		return false, "listing the pods: " + err.Error()
	}
	var notes []string
	for _, p := range pods {
		ip, _, _ := unstructured.NestedString(p.Object, "status", "podIP")
		if ip == "" || !podReady(&p) {
			continue
		}
		vals, err := t.scrape(ctx, ip, o.metrics)
		if err != nil {
			notes = append(notes, p.GetName()+": "+err.Error())
			continue
		}
		var busy []string
		for _, m := range queueMetrics {
			if v := vals[m]; v > 0 {
				busy = append(busy, fmt.Sprintf("%s %g", m, v))
			}
		}
		if len(busy) > 0 {
			return true, p.GetName() + ": " + strings.Join(busy, ", ")
		}
		notes = append(notes, p.GetName()+": idle")
	}
	if len(notes) == 0 {
		return false, "no ready pod with an address"
	}
	sort.Strings(notes)
	return false, strings.Join(notes, "; ")
}

func podReady(p *unstructured.Unstructured) bool {
	conds, _, _ := unstructured.NestedSlice(p.Object, "status", "conditions")
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["type"] == "Ready" && m["status"] == "True" {
			return true
		}
	}
	return false
}

// metricsClient reads operators' metrics: their serving certificates are
// their own (controller-runtime's secure metrics server makes one).
var metricsClient = &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{
	TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, // #nosec G402: the hub reads gauges, sends only its token
	DialContext:     (&net.Dialer{Timeout: time.Second}).DialContext,
}}

// scrape sums each of queueMetrics over its series at one pod.
func (t *scaler) scrape(ctx context.Context, ip string, m *v1alpha1.MetricsEndpoint) (map[string]float64, error) {
	scheme, path := m.Scheme, m.Path
	if scheme == "" {
		scheme = "http"
	}
	if path == "" {
		path = "/metrics"
	}
	url := scheme + "://" + net.JoinHostPort(ip, strconv.Itoa(int(m.Port))) + path
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	if scheme == "https" {
		if tok := t.s.h.bearer(); tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
	}
	resp, err := metricsClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 200))
		return nil, fmt.Errorf("GET %s: %s %s", url, resp.Status, strings.TrimSpace(string(b)))
	}
	var p expfmt.TextParser
	fams, err := p.TextToMetricFamilies(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return nil, fmt.Errorf("GET %s: not Prometheus text: %w", url, err)
	}
	out := map[string]float64{}
	for _, name := range queueMetrics {
		f := fams[name]
		if f == nil {
			continue
		}
		for _, s := range f.GetMetric() {
			if g := s.GetGauge(); g != nil {
				out[name] += g.GetValue()
			}
		}
	}
	return out, nil
}

// bearer is the hub's own token (its service account's, in a pod), sent
// to an operator's secure metrics endpoint.
func (h *Hub) bearer() string {
	if h.cfg == nil {
		return ""
	}
	if h.cfg.BearerToken != "" {
		return h.cfg.BearerToken
	}
	if h.cfg.BearerTokenFile != "" {
		b, err := os.ReadFile(h.cfg.BearerTokenFile)
		if err == nil {
			return strings.TrimSpace(string(b))
		}
	}
	return ""
}
