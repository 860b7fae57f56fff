package hub

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"

	v1alpha1 "github.com/opzero/opzero/api/v1alpha1"
	"github.com/opzero/opzero/internal/genskip"
)

// check validates the spec, resolves the sink and asks whether the
// service account may read what it subscribes to; it writes the
// conditions (and an Event for each that changed).
func (h *Hub) check(ctx context.Context, s *sub) {
	s.mu.Lock()
	s.unwired = true // the conditions set below wait for the wiring (Hub.rewire)
	s.mu.Unlock()
	spec := s.spec()
	atts, sweeps, err := h.plan(ctx, s, spec)
	var sink string
	var sinkErr, authErr error
	var topts targetOptions
	if err == nil {
		topts, err = targetOptionsOf(spec)
	}
	if err == nil {
		if isDeploymentSink(spec.Sink) {
			sink, sinkErr = h.resolveTarget(ctx, s, spec)
		} else {
			sink, sinkErr = h.resolve(ctx, s.key.Namespace, spec.Sink)
		}
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
	if notReady == nil && isDeploymentSink(spec.Sink) {
		s.setTarget(spec.Sink.Ref.Name, topts)
	} else {
		s.setTarget("", topts)
		s.mu.Lock()
		had := meta.FindStatusCondition(s.conds, v1alpha1.SubscriptionTargetHealthy) != nil
		if had && !isDeploymentSink(spec.Sink) {
			meta.RemoveStatusCondition(&s.conds, v1alpha1.SubscriptionTargetHealthy)
		}
		s.mu.Unlock()
	}

	s.mu.Lock()
	s.sink, s.dirty = sink, true // the status is written once the hub has rewired (Hub.rewire)
	same := sameAttachments(s.attachments, atts)
	if !same {
		inherit(atts, s.attachments)
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
		for j, e := range r.Events {
			if e != v1alpha1.EventCreated && e != v1alpha1.EventUpdated && e != v1alpha1.EventDeleted {
				return nil, nil, withReason("InvalidSpec", "%s.events[%d] %q: want %s, %s or %s", field, j, e, v1alpha1.EventCreated, v1alpha1.EventUpdated, v1alpha1.EventDeleted)
			}
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
			if len(r.UpdatedWhen) > 0 {
				a.when = slices.Clone(r.UpdatedWhen)
				a.whenMemo = genskip.NewMemo[string](skipMemo)
			}
			if len(r.Events) > 0 {
				a.events = slices.Clone(r.Events)
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

// sameAttachments says whether b filters and sends as a does: then an
// edit of the spec keeps the wired attachments (and their memos). Every
// filter counts: an edit of one that is not compared would go unapplied
// until the hub restarts.
func sameAttachments(a, b []*attachment) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := a[i], b[i]
		if x.key != y.key || x.mode != y.mode || x.pkey != y.pkey || (x.owner == nil) != (y.owner == nil) || (x.ref == nil) != (y.ref == nil) ||
			(x.skip == nil) != (y.skip == nil) || !slices.Equal(x.when, y.when) || !slices.Equal(x.events, y.events) {
			return false
		}
		if x.skip != nil && *x.skip != *y.skip {
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
		verbs := []string{"get", "list", "watch"}
		if isDeploymentSink(spec.Sink) {
			// Sent nothing of the objects, only woken: what it may list and
			// watch itself is what it is woken for (its own informers need
			// no more).
			verbs = verbs[1:]
		}
		for _, verb := range verbs {
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
