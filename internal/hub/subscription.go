package hub

import (
	"context"
	"encoding/json"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	v1alpha1 "github.com/opzero/opzero/api/v1alpha1"
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

	// vouched: since the anti-entropy sweep was last sent, every event was
	// answered as reconciled or durably recorded (sweep.go): the next
	// scheduled one would find nothing and is not sent. False at the start
	// (nothing vouches for the time before) and after a drop, a
	// dead-letter, an in-memory retry (500) or an answer before the
	// reconcile (admitted).
	vouched bool

	disp    *dispatcher
	sweeps  *sweeper
	target  *scaler // a Deployment sink's (target.go)
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
	s.stopTarget()
	s.disp.stop()
}

// scalerOf is the Deployment sink's scaler, nil for other sinks.
func (s *sub) scalerOf() *scaler {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.target
}

// setTarget serves the Deployment name (the sink) with o, or stops serving
// one (name ""): a Subscription not Ready scales nothing.
func (s *sub) setTarget(name string, o targetOptions) {
	s.mu.Lock()
	old := s.target
	if old != nil && old.name == name && !s.stopped {
		s.mu.Unlock()
		old.setOptions(o)
		return
	}
	s.target = nil
	var t *scaler
	if name != "" && !s.stopped {
		prev := s.obj.Status.Target
		if old != nil {
			prev = old.status()
		}
		t = newScaler(s, name, o, prev)
		s.target = t
	}
	s.mu.Unlock()
	if old != nil {
		old.stop()
	}
	if t != nil {
		t.start()
	}
}

func (s *sub) stopTarget() {
	s.mu.Lock()
	t := s.target
	s.target = nil
	s.mu.Unlock()
	if t != nil {
		t.stop()
	}
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

// writeStatus writes conditions, sink and progress if they changed, and
// only while this replica holds the Subscription's bucket: its status has
// one writer.
func (s *sub) writeStatus(ctx context.Context, gen int64) {
	if !s.h.el.Holds(s.h.bucketOf(s.key)) {
		return
	}
	s.mu.Lock()
	st := v1alpha1.SubscriptionStatus{ObservedGeneration: gen, Conditions: append([]metav1.Condition(nil), s.conds...), SinkURI: s.sink}
	if s.target != nil {
		st.Target = s.target.status()
	}
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
		if apierrors.IsNotFound(err) {
			// Deleted (or its namespace): its delete event ends it; no
			// write is retried until then.
			s.mu.Lock()
			s.written, s.dirty = body, false
			s.mu.Unlock()
			return
		}
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
