package hub

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	v1alpha1 "github.com/opzero/opzero/api/v1alpha1"
	"github.com/opzero/opzero/internal/genskip"
)

// sub is the hub's state of one Subscription.
type sub struct {
	h   *Hub
	key types.NamespacedName

	mu          sync.Mutex
	obj         *v1alpha1.Subscription // the version being served
	conds       []metav1.Condition
	sink        string
	resolving   bool // a sender is reading the sink's address again
	attachments []*attachment
	progress    map[string]string // progress key -> resourceVersion (status.progress)
	// base is where a watch starts for this spec when it has no progress
	// yet: the Subscription's resourceVersion when this spec was read, so
	// that every change after the Subscription was written is delivered,
	// however long the hub takes to start the watch.
	base  string
	dirty bool // progress or conditions not yet written
	// unwired: checked since the hub last wired: the conditions just set
	// wait for the watches and indexes they call for (Hub.rewire), so
	// that Ready is never shown before them.
	unwired bool
	written []byte // the status last written
	// takeover is the resourceVersion at which the Subscription was read
	// when its bucket was won ("" for one created since): changes up to it
	// may have been sent by the bucket's previous holder.
	takeover string
	// attempted is the newest change whose event was posted (maybe
	// received): with takeover, what a graceful hand-off tells the next
	// holder (bucket.HandoffAnnotation).
	attempted string

	disp    *dispatcher
	sweeps  *sweeper
	stopped bool
}

func newSub(h *Hub, obj *v1alpha1.Subscription) *sub {
	s := &sub{h: h, key: keyOf(obj), obj: obj.DeepCopy(), progress: map[string]string{}, base: obj.ResourceVersion}
	for _, p := range obj.Status.Progress {
		s.progress[p.Resource] = p.ResourceVersion
	}
	s.conds = append(s.conds, obj.Status.Conditions...)
	s.disp = newDispatcher(s)
	return s
}

func (s *sub) uid() types.UID {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.obj.UID
}

func (s *sub) generation() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.obj.Generation
}

func (s *sub) spec() v1alpha1.SubscriptionSpec {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.obj.Spec
}

// unknownFields are the spec's fields this hub does not know
// (toSubscription), "" when none.
func (s *sub) unknownFields() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.obj.Annotations[unknownFieldsAnnotation]
}

func (s *sub) setSpec(obj *v1alpha1.Subscription) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.obj, s.base = obj.DeepCopy(), obj.ResourceVersion
}

func (s *sub) sinkURL() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sink
}

// ready: every condition True.
func (s *sub) ready() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return meta.IsStatusConditionTrue(s.conds, v1alpha1.SubscriptionReady) && !s.stopped
}

func (s *sub) stop() {
	s.stopSweeps(true)
	s.disp.stop()
}

func (s *sub) stopSweeps(stopped bool) {
	s.mu.Lock()
	s.stopped = s.stopped || stopped
	sw := s.sweeps
	s.sweeps = nil
	s.mu.Unlock()
	if sw != nil {
		sw.stop()
	}
}

// drain stops the sweeps and lets the sends under way settle until
// deadline; nothing queued is started.
func (s *sub) drain(deadline time.Time) {
	s.stopSweeps(false)
	s.disp.drain(deadline)
}

// getProgress returns how far key has been delivered, or if never, the
// Subscription's version that asked for it (fresh: nothing was delivered
// before, so no deletion can have been missed).
func (s *sub) getProgress(key string) (rv string, fresh bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p := s.progress[key]; p != "" {
		return p, false
	}
	return s.base, true
}

func (s *sub) setProgress(key, rv string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.progress[key] != rv {
		s.progress[key], s.dirty = rv, true
	}
}

// check validates the spec, resolves the sink and asks whether the
// service account may read what it subscribes to; it writes the
// conditions (and an Event for each that changed).
func (h *Hub) check(ctx context.Context, s *sub) {
	spec := s.spec()
	atts, sweeps, err := h.plan(ctx, s, spec)
	var sink string
	var sinkErr, authErr error
	if err == nil {
		sink, sinkErr = h.resolve(ctx, s.key.Namespace, spec.Sink)
		authErr = h.authorize(ctx, s.key.Namespace, spec, atts)
	}
	set := func(typ string, err error, okReason string) {
		c := metav1.Condition{Type: typ, Status: metav1.ConditionTrue, Reason: okReason, Message: ""}
		if err != nil {
			c.Status, c.Reason, c.Message = metav1.ConditionFalse, reasonOf(err), err.Error()
		}
		s.setCondition(c)
	}
	set(v1alpha1.SubscriptionValid, err, "Valid")
	if err != nil {
		unknown := fmt.Errorf("the spec is not valid")
		set(v1alpha1.SubscriptionSinkResolved, unknown, "")
		set(v1alpha1.SubscriptionAuthorized, unknown, "")
	} else {
		set(v1alpha1.SubscriptionSinkResolved, sinkErr, "Resolved")
		set(v1alpha1.SubscriptionAuthorized, authErr, "Authorized")
	}
	var notReady error
	for _, e := range []error{err, sinkErr, authErr} {
		if e != nil {
			notReady = e
			break
		}
	}
	set(v1alpha1.SubscriptionReady, notReady, "Ready")

	s.mu.Lock()
	s.sink, s.dirty, s.unwired = sink, true, true // the status is written once the hub has rewired (Hub.rewire)
	same := sameAttachments(s.attachments, atts)
	if !same {
		s.attachments = atts
	}
	old := s.sweeps
	replaceSweeps := old == nil || !old.same(sweeps) || notReady != nil
	if replaceSweeps {
		s.sweeps = nil
	}
	s.mu.Unlock()
	if replaceSweeps {
		if old != nil {
			old.stop()
		}
		if notReady == nil && len(sweeps) > 0 {
			sw := newSweeper(s, sweeps)
			s.mu.Lock()
			s.sweeps = sw
			s.mu.Unlock()
		}
	}
}

var reasonWord = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9]*$`)

// reasoned errors carry a condition reason.
type reasoned struct {
	reason string
	err    error
}

func (r reasoned) Error() string { return r.err.Error() }
func (r reasoned) Unwrap() error { return r.err }

func withReason(reason string, format string, a ...any) error {
	return reasoned{reason, fmt.Errorf(format, a...)}
}

func reasonOf(err error) string {
	var r reasoned
	if errors.As(err, &r) && reasonWord.MatchString(r.reason) {
		return r.reason
	}
	return "Failed"
}

// setCondition sets c, keeping its transition time when the status did
// not change, and records an Event when status or reason changed.
func (s *sub) setCondition(c metav1.Condition) {
	s.mu.Lock()
	prev := meta.FindStatusCondition(s.conds, c.Type)
	changed := prev == nil || prev.Status != c.Status || prev.Reason != c.Reason || prev.Message != c.Message
	c.ObservedGeneration = s.obj.Generation
	meta.SetStatusCondition(&s.conds, c)
	obj := s.obj.DeepCopy()
	if changed {
		s.dirty = true
	}
	s.mu.Unlock()
	if changed && c.Type != v1alpha1.SubscriptionReady && (prev != nil || c.Status != metav1.ConditionTrue) {
		typ := "Normal"
		if c.Status != metav1.ConditionTrue {
			typ = "Warning"
		}
		msg := c.Type + " is " + string(c.Status)
		if c.Message != "" {
			msg += ": " + c.Message
		}
		s.h.event(obj, typ, c.Reason, msg)
	}
}

// plan turns the spec into attachments to watches, checking every field.
func (h *Hub) plan(ctx context.Context, s *sub, spec v1alpha1.SubscriptionSpec) ([]*attachment, []v1alpha1.Sweep, error) {
	if u := s.unknownFields(); u != "" {
		return nil, nil, withReason("HubOutdated", "%s: not known to this hub (opzero %s): the Subscription was written by a newer opzero; "+
			"upgrade the hub (opzero hub manifests | kubectl apply --server-side -f -) or regenerate the operator's manifests with this hub's opzero", u, h.opts.Version)
	}
	if spec.Operator == "" {
		return nil, nil, withReason("InvalidSpec", "spec.operator is empty: name the operator (its builder name)")
	}
	for i, op := range spec.Operators {
		if op == "" || op == spec.Operator {
			return nil, nil, withReason("InvalidSpec", "spec.operators[%d] is %q: name another controller of the operator's binary (spec.operator is %q)", i, op, spec.Operator)
		}
	}
	if spec.ServiceAccountName == "" {
		return nil, nil, withReason("InvalidSpec", "spec.serviceAccountName is empty: name the operator's service account (what it may read bounds what is delivered)")
	}
	if (spec.Sink.Ref == nil) == (spec.Sink.URI == "") {
		return nil, nil, withReason("InvalidSink", "spec.sink: set exactly one of ref and uri")
	}
	if _, err := deliveryOf(spec.Delivery); err != nil {
		return nil, nil, err
	}
	var atts []*attachment
	for i, r := range spec.Resources {
		field := fmt.Sprintf("spec.resources[%d]", i)
		gv, err := schema.ParseGroupVersion(r.APIVersion)
		if err != nil || r.Kind == "" {
			return nil, nil, withReason("UnknownKind", "%s: apiVersion %q and kind %q do not name a kind", field, r.APIVersion, r.Kind)
		}
		gvk := gv.WithKind(r.Kind)
		gvr, namespaced, err := h.kinds.mapping(ctx, gvk)
		if err != nil {
			return nil, nil, withReason("UnknownKind", "%s: the API server does not serve %s (is its CRD installed?): %v", field, gvk, err)
		}
		sel, err := labels.Parse(r.LabelSelector)
		if err != nil {
			return nil, nil, withReason("InvalidSelector", "%s.labelSelector %q: %v", field, r.LabelSelector, err)
		}
		mode := r.Mode
		if mode == "" {
			mode = v1alpha1.ModeReference
		}
		if mode != v1alpha1.ModeReference && mode != v1alpha1.ModeResource {
			return nil, nil, withReason("InvalidSpec", "%s.mode %q: want Resource or Reference", field, r.Mode)
		}
		var ref *refFilter
		if rb := r.ReferencedBy; rb != nil {
			rgv, err := schema.ParseGroupVersion(rb.APIVersion)
			if err != nil || rb.Kind == "" {
				return nil, nil, withReason("UnknownKind", "%s.referencedBy: apiVersion %q and kind %q do not name a kind", field, rb.APIVersion, rb.Kind)
			}
			rgvr, _, err := h.kinds.mapping(ctx, rgv.WithKind(rb.Kind))
			if err != nil {
				return nil, nil, withReason("UnknownKind", "%s.referencedBy: the API server does not serve %s: %v", field, rgv.WithKind(rb.Kind), err)
			}
			if !fieldPath.MatchString(rb.FieldPath) {
				return nil, nil, withReason("InvalidSpec", "%s.referencedBy.fieldPath %q: want a dot-separated path such as spec.configMap", field, rb.FieldPath)
			}
			if !namespaced {
				return nil, nil, withReason("InvalidSpec", "%s.referencedBy: %s is cluster-scoped; referencedBy names objects in the referrer's namespace", field, gvk.Kind)
			}
			ref = &refFilter{gvk: rgv.WithKind(rb.Kind), key: indexKey{gvr: rgvr, field: rb.FieldPath}}
		}
		var skip *genskip.Options
		if so := r.SkipObserved; so != nil {
			if mode != v1alpha1.ModeResource {
				return nil, nil, withReason("InvalidSpec", "%s.skipObserved needs mode Resource: a Reference-mode (metadata) watch carries no status.observedGeneration", field)
			}
			skip = &genskip.Options{OnLabelChange: so.Labels, OnAnnotationChange: so.Annotations}
		}
		nss := r.Namespaces
		if len(nss) == 0 || !namespaced {
			nss = []string{""}
		}
		for _, ns := range nss {
			k := watchKey{gvr: gvr, ns: ns, selector: sel.String(), full: mode == v1alpha1.ModeResource}
			a := &attachment{sub: s, key: k, gvk: gvk, mode: mode, owner: r.Owner, namespaced: namespaced,
				pkey: progressKey(gvk, ns, k.selector), skip: skip}
			if skip != nil {
				a.memo = genskip.NewMemo[string](skipMemo)
			}
			if ref != nil {
				a.ref = &refFilter{gvk: ref.gvk, key: ref.key}
				a.ref.key.ns = ns
			}
			atts = append(atts, a)
		}
	}
	for i, sw := range spec.Sweeps {
		if sw.Name == "" {
			return nil, nil, withReason("InvalidSpec", "spec.sweeps[%d].name is empty", i)
		}
		if _, err := parseSchedule(sw.Schedule); err != nil {
			return nil, nil, withReason("InvalidSchedule", "spec.sweeps[%d].schedule %q: %v", i, sw.Schedule, err)
		}
	}
	return atts, spec.Sweeps, nil
}

var fieldPath = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$`)

// progressKey names one watch's progress in status.progress.
func progressKey(gvk schema.GroupVersionKind, ns, selector string) string {
	k := gvk.GroupVersion().String() + "/" + gvk.Kind
	if ns != "" {
		k += "@" + ns
	}
	if selector != "" {
		k += "?" + selector
	}
	return k
}

func sameAttachments(a, b []*attachment) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := a[i], b[i]
		if x.key != y.key || x.mode != y.mode || x.pkey != y.pkey || (x.owner == nil) != (y.owner == nil) || (x.ref == nil) != (y.ref == nil) {
			return false
		}
		if x.owner != nil && *x.owner != *y.owner {
			return false
		}
		if x.ref != nil && x.ref.key != y.ref.key {
			return false
		}
	}
	return true
}

// resolve finds the sink's URL: a referenced object's status.address.url
// (Knative's Addressable), or the URI.
func (h *Hub) resolve(ctx context.Context, ns string, d v1alpha1.Destination) (string, error) {
	if d.Ref == nil {
		if !strings.HasPrefix(d.URI, "http://") && !strings.HasPrefix(d.URI, "https://") {
			return "", withReason("InvalidSink", "sink uri %q: want an http:// or https:// URL", d.URI)
		}
		return d.URI, nil
	}
	gv, err := schema.ParseGroupVersion(d.Ref.APIVersion)
	if err != nil {
		return "", withReason("InvalidSink", "sink ref apiVersion %q: %v", d.Ref.APIVersion, err)
	}
	gvr, _, err := h.kinds.mapping(ctx, gv.WithKind(d.Ref.Kind))
	if err != nil {
		return "", withReason("SinkNotFound", "sink %s %s/%s: %v", d.Ref.Kind, ns, d.Ref.Name, err)
	}
	u, err := h.dyn.Resource(gvr).Namespace(ns).Get(ctx, d.Ref.Name, metav1.GetOptions{})
	if err != nil {
		return "", withReason("SinkNotFound", "sink %s %s/%s: %v", d.Ref.Kind, ns, d.Ref.Name, err)
	}
	url, _, _ := unstructured.NestedString(u.Object, "status", "address", "url")
	if url == "" {
		url, _, _ = unstructured.NestedString(u.Object, "status", "url")
	}
	if url == "" {
		return "", withReason("SinkNotAddressable", "sink %s %s/%s has no status.address.url yet (not ready?)", d.Ref.Kind, ns, d.Ref.Name)
	}
	return url, nil
}

// authorize asks, for every resource and referrer the spec subscribes to,
// whether the service account may get, list and watch it where it is
// watched.
func (h *Hub) authorize(ctx context.Context, ns string, spec v1alpha1.SubscriptionSpec, atts []*attachment) error {
	user := "system:serviceaccount:" + ns + ":" + spec.ServiceAccountName
	groups := []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"}
	type ask struct {
		gvr schema.GroupVersionResource
		ns  string
	}
	var asks []ask
	for _, a := range atts {
		asks = append(asks, ask{a.key.gvr, a.key.ns})
		if a.ref != nil {
			asks = append(asks, ask{a.ref.key.gvr, a.ref.key.ns})
		}
	}
	seen := map[ask]bool{}
	for _, q := range asks {
		if seen[q] {
			continue
		}
		seen[q] = true
		for _, verb := range []string{"get", "list", "watch"} {
			ok, err := h.allowed(ctx, user, groups, q.ns, verb, q.gvr)
			if err != nil {
				return withReason("AuthorizationCheckFailed", "asking whether %s may %s %s: %v", user, verb, q.gvr.Resource, err)
			}
			if !ok {
				where := "in every namespace"
				if q.ns != "" {
					where = "in namespace " + q.ns
				}
				return withReason("Forbidden", "%s may not %s %s %s: grant it (the hub delivers only what the operator may read itself)", user, verb, q.gvr.GroupResource(), where)
			}
		}
	}
	return nil
}

// writeStatus writes conditions, sink and progress if they changed, and
// only while this replica holds the Subscription's bucket: its status has
// one writer.
func (s *sub) writeStatus(ctx context.Context, gen int64) {
	if !s.h.el.Holds(s.h.bucketOf(s.key)) {
		return
	}
	s.mu.Lock()
	st := v1alpha1.SubscriptionStatus{ObservedGeneration: gen, Conditions: append([]metav1.Condition(nil), s.conds...), SinkURI: s.sink}
	for _, a := range s.attachments {
		if rv := s.progress[a.pkey]; rv != "" {
			st.Progress = append(st.Progress, v1alpha1.Progress{Resource: a.pkey, ResourceVersion: rv})
		}
	}
	body, _ := json.Marshal(map[string]any{"status": st})
	if string(body) == string(s.written) {
		s.dirty = false
		s.mu.Unlock()
		return
	}
	s.mu.Unlock()
	if _, err := s.h.dyn.Resource(subscriptionsGVR).Namespace(s.key.Namespace).Patch(ctx, s.key.Name, types.MergePatchType, body, metav1.PatchOptions{}, "status"); err != nil {
		s.h.opts.Log.Error(err, "writing the Subscription's status", "subscription", s.key.String())
		return
	}
	s.mu.Lock()
	s.written, s.dirty = body, false
	s.mu.Unlock()
}

// flushLoop writes progress every Options.Flush.
func (h *Hub) flushLoop(ctx context.Context) {
	t := time.NewTicker(h.opts.Flush)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			h.flush(context.WithoutCancel(ctx))
			return
		case <-t.C:
			h.flush(ctx)
		}
	}
}

// flush writes the status of every Subscription with unwritten progress.
func (h *Hub) flush(ctx context.Context) {
	h.mu.Lock()
	var dirty []*sub
	for _, s := range h.subs {
		s.mu.Lock()
		if s.dirty && !s.unwired {
			dirty = append(dirty, s)
		}
		s.mu.Unlock()
	}
	h.mu.Unlock()
	for _, s := range dirty {
		s.writeStatus(ctx, s.generation())
	}
}

// event records a Kubernetes Event on a Subscription, written before it
// returns.
func (h *Hub) event(obj *v1alpha1.Subscription, typ, reason, msg string) {
	now := time.Now().UTC().Format(time.RFC3339)
	ev := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "Event",
		"metadata": map[string]any{"namespace": obj.Namespace, "generateName": obj.Name + "."},
		"involvedObject": map[string]any{"apiVersion": v1alpha1.GroupVersion.String(), "kind": "Subscription",
			"namespace": obj.Namespace, "name": obj.Name, "uid": string(obj.UID), "resourceVersion": obj.ResourceVersion},
		"reason": reason, "message": msg, "type": typ, "source": map[string]any{"component": "opzero-hub"},
		"firstTimestamp": now, "lastTimestamp": now, "count": int64(1),
		"reportingComponent": "opzero.dev/hub", "reportingInstance": "opzero-hub",
	}}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := h.dyn.Resource(eventsGVR).Namespace(obj.Namespace).Create(ctx, ev, metav1.CreateOptions{}); err != nil {
		h.opts.Log.Error(err, "recording an Event", "subscription", obj.Namespace+"/"+obj.Name, "reason", reason)
	}
}
