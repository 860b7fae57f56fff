package hub

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/google/uuid"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	v1alpha1 "github.com/opzero/opzero/api/v1alpha1"
	"github.com/opzero/opzero/internal/cloudevent"
	"github.com/opzero/opzero/internal/wakeup/wakesource"
)

// delivery is one event waiting to be sent.
type delivery struct {
	build  func() (*event.Event, error)
	mark   *mark   // nil for sweeps
	holds  []*mark // also done once it is settled (refIndex's updates)
	rv     string  // of the change ("" for sweeps)
	replay bool    // the bucket's previous holder may have sent it (attachment.replay)
}

// settled: sent, dead-lettered, dropped or superseded; the progress may
// move past it.
func (dl *delivery) settled() {
	if dl.mark != nil {
		dl.mark.done()
	}
	for _, m := range dl.holds {
		m.done()
	}
}

// keyState is one object's (or sweep's) sends: one at a time, in order.
type keyState struct {
	busy   bool
	queued bool
	next   *delivery
}

// dispatcher sends one Subscription's events: up to its concurrency at
// once, one at a time per key, a waiting change replaced by a newer one.
type dispatcher struct {
	s      *sub
	ctx    context.Context
	cancel context.CancelFunc

	mu       sync.Mutex
	keys     map[string]*keyState
	ready    []string
	workers  int // running; they exit when nothing is ready
	max      int
	draining chan struct{} // closed by drain: nothing more is started
}

func newDispatcher(s *sub) *dispatcher {
	ctx, cancel := context.WithCancel(context.Background())
	d := &dispatcher{s: s, ctx: ctx, cancel: cancel, keys: map[string]*keyState{}, max: 16, draining: make(chan struct{})}
	if dl := s.obj.Spec.Delivery; dl != nil && dl.Concurrency != nil && *dl.Concurrency > 0 {
		d.max = int(*dl.Concurrency)
	}
	return d
}

func (d *dispatcher) stop() { d.cancel() }

// drain starts nothing more and waits, until deadline, for the sends under
// way to settle; a send waiting to retry gives up at once (unsettled: its
// progress does not move, the next holder sends it).
func (d *dispatcher) drain(deadline time.Time) {
	d.mu.Lock()
	select {
	case <-d.draining:
	default:
		close(d.draining)
	}
	d.mu.Unlock()
	for time.Now().Before(deadline) {
		d.mu.Lock()
		n := d.workers
		d.mu.Unlock()
		if n == 0 {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// pending: a send of this Subscription is queued or under way (a
// Deployment sink is not stopped then).
func (d *dispatcher) pending() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.keys) > 0
}

func (d *dispatcher) isDraining() bool {
	select {
	case <-d.draining:
		return true
	default:
		return false
	}
}

// wake starts a worker if keys are ready and fewer than max run: an idle
// Subscription costs no goroutine. Called with d.mu held.
func (d *dispatcher) wake() {
	if len(d.ready) > 0 && d.workers < d.max && !d.isDraining() {
		d.workers++
		go d.work()
	}
}

// change is one object's change as a watch sent it, shared by the
// subscribers it goes to: its JSON is encoded once, by the first that
// needs it.
type change struct {
	act  string
	obj  runtime.Object
	m    metav1.Object
	once sync.Once
	data []byte
	err  error
}

func (c *change) json() ([]byte, error) {
	c.once.Do(func() {
		if r, ok := c.obj.(*rawObject); ok {
			c.data = r.raw // as the API server sent it
			return
		}
		c.data, c.err = json.Marshal(c.obj)
	})
	return c.data, c.err
}

// enqueue queues c for a.
func (d *dispatcher) enqueue(a *attachment, c *change, mk *mark) {
	gvk, mode, plural, host := a.gvk, a.mode, a.key.gvr.Resource, d.s.h.host
	var data []byte
	var meta *cloudevent.RefMeta
	var err error
	if mode == v1alpha1.ModeResource {
		data, err = c.json() // the object as the watch sent it (Unstructured)
	} else {
		meta = refMeta(c.m)
	}
	act, ns, name := c.act, c.m.GetNamespace(), c.m.GetName()
	build := func() (*event.Event, error) {
		if err != nil {
			return nil, err
		}
		return objectEvent(host, mode, act, gvk.GroupVersion().String(), gvk.Kind, ns, name, plural, data, meta)
	}
	// One key per event an operator tells apart: the same object's changes
	// in one mode carry the same event, and a newer one replaces the one
	// waiting; a Reference-mode and a Resource-mode event of it are two
	// (an operator may map them to different primaries), and so are two
	// kinds of one name in different groups.
	d.put(string(mode)+" "+gvk.GroupKind().String()+" "+ns+"/"+name, &delivery{build: build, mark: mk, rv: c.m.GetResourceVersion(), replay: a.replay(c.m.GetResourceVersion())})
}

// ReasonExtension, on an event the hub sends that is not of a change
// (ApiServerSource has no such events), says why it is sent:
// ReasonReferenced, an update of an object that became referenced
// (referencedBy) after changes that were not sent.
const (
	ReasonExtension  = "opzeroreason"
	ReasonReferenced = "referenced"
)

// enqueueRef queues for a (a referencedBy attachment) a Reference-mode
// update of the object ns/name, which just became referenced, tied to
// holds (refIndex, Hub.tell). It is keyed as the object's own changes in
// that mode: in order with them, and replaced by a newer one waiting.
func (d *dispatcher) enqueueRef(a *attachment, ns, name string, holds []*mark) {
	gvk, plural, host := a.gvk, a.key.gvr.Resource, d.s.h.host
	build := func() (*event.Event, error) {
		ev, err := objectEvent(host, v1alpha1.ModeReference, "update", gvk.GroupVersion().String(), gvk.Kind, ns, name, plural, nil, nil)
		if err == nil {
			ev.SetExtension(ReasonExtension, ReasonReferenced)
		}
		return ev, err
	}
	d.put(v1alpha1.ModeReference+" "+gvk.GroupKind().String()+" "+ns+"/"+name, &delivery{build: build, holds: holds})
}

// put queues dl under key, replacing a change still waiting there.
func (d *dispatcher) put(key string, dl *delivery) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.ctx.Err() != nil {
		return // stopped: the change stays unsent, its progress unmoved
	}
	k := d.keys[key]
	if k == nil {
		k = &keyState{}
		d.keys[key] = k
	}
	if k.next != nil && (k.next.mark != nil || len(k.next.holds) > 0) {
		d.s.h.stats.coalesced.Inc()
		k.next.settled() // the newer change carries the object's state
	}
	k.next = dl
	if !k.busy && !k.queued {
		k.queued = true
		d.ready = append(d.ready, key)
		d.wake()
	}
}

func (d *dispatcher) work() {
	for {
		d.mu.Lock()
		if len(d.ready) == 0 || d.ctx.Err() != nil || d.isDraining() {
			d.workers--
			d.mu.Unlock()
			return
		}
		key := d.ready[0]
		d.ready = d.ready[1:]
		k := d.keys[key]
		dl := k.next
		k.next, k.queued, k.busy = nil, false, true
		d.mu.Unlock()

		sent := d.s.send(d.ctx, dl, func() bool {
			d.mu.Lock()
			defer d.mu.Unlock()
			return k.next != nil
		}, d.draining)

		d.mu.Lock()
		k.busy = false
		if k.next != nil {
			k.queued = true
			d.ready = append(d.ready, key)
			d.wake()
		} else {
			delete(d.keys, key)
		}
		d.mu.Unlock()
		if sent {
			dl.settled()
		}
	}
}

// policy is a Subscription's spec.delivery with defaults.
type policy struct {
	retry int
	delay time.Duration
	dls   *v1alpha1.Destination
}

func deliveryOf(d *v1alpha1.Delivery) (policy, error) {
	p := policy{retry: 10, delay: 200 * time.Millisecond}
	if d == nil {
		return p, nil
	}
	if d.Retry != nil {
		if *d.Retry < 0 {
			return p, withReason("InvalidSpec", "spec.delivery.retry %d: want 0 or more", *d.Retry)
		}
		p.retry = int(*d.Retry)
	}
	if d.BackoffDelay != "" {
		dur, err := parseDelay(d.BackoffDelay)
		if err != nil {
			return p, withReason("InvalidSpec", "spec.delivery.backoffDelay %q: %v", d.BackoffDelay, err)
		}
		p.delay = dur
	}
	p.dls = d.DeadLetterSink
	return p, nil
}

// parseDelay reads Knative's ISO-8601 seconds (PT0.2S, PT2S) or a Go
// duration (200ms).
func parseDelay(s string) (time.Duration, error) {
	if rest, ok := strings.CutPrefix(s, "PT"); ok && strings.HasSuffix(rest, "S") {
		f, err := strconv.ParseFloat(strings.TrimSuffix(rest, "S"), 64)
		if err != nil || f < 0 {
			return 0, fmt.Errorf("want PT<seconds>S, e.g. PT0.2S")
		}
		return time.Duration(f * float64(time.Second)), nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("want PT<seconds>S (PT0.2S) or a duration (200ms)")
	}
	return d, nil
}

// send sends dl with retries; it returns false only when the hub stopped
// before the event was settled (sent, dead-lettered, dropped, or superseded:
// a retry is not sent once superseded reports a newer change of the same
// object waiting), so that its progress does not move.
func (s *sub) send(ctx context.Context, dl *delivery, superseded func() bool, draining <-chan struct{}) bool {
	ev, err := dl.build()
	if err != nil {
		s.h.opts.Log.Error(err, "building an event; dropped", "subscription", s.key.String())
		s.h.stats.dropped.Inc()
		return true
	}
	if dl.replay {
		// The operator may have acted on a newer version already (even the
		// object's deletion): this one must not stand in for its read.
		ev.SetExtension(cloudevent.ReplayExtension, "true")
	}
	spec := s.spec()
	p, _ := deliveryOf(spec.Delivery)
	var last error
	for attempt := 0; ; attempt++ {
		url := s.sinkURL()
		var wait time.Duration
		if url == "" {
			last = fmt.Errorf("the sink is not resolved")
		} else if t := s.scalerOf(); t != nil {
			// An unchanged operator: the change is delivered by starting it
			// (its own list sees it), not sent.
			s.noteAttempt(dl.rv)
			last = t.wake(ctx, wakeReason(ev))
		} else if isDeploymentSink(spec.Sink) {
			last = fmt.Errorf("the Deployment sink is not served (the Subscription is not Ready)")
		} else {
			s.noteAttempt(dl.rv)
			var hdr http.Header
			wait, hdr, last = s.postSink(ctx, url, spec.Sink.Audience, ev)
			switch {
			case last == nil && strings.HasPrefix(hdr.Get(resultHeader), "admitted "):
				s.unvouch("answered before its reconcile (--answer=admitted): a SIGKILL would lose it")
			case handedOver(last):
				s.unvouch("its reconcile failed and the operator retries it in memory")
			}
		}
		if last == nil || handedOver(last) {
			s.h.stats.sent.Inc()
			if dl.replay {
				s.h.stats.replayed.Inc()
			}
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		if !retryable(last) || attempt >= p.retry {
			break
		}
		s.h.stats.retries.Inc()
		backoff := p.delay << attempt
		if backoff > 5*time.Minute || backoff <= 0 {
			backoff = 5 * time.Minute
		}
		wait = max(wait, backoff)
		select {
		case <-ctx.Done():
			return false
		case <-draining:
			return false // the hub hands over: the next holder sends it
		case <-time.After(wait):
		}
		if superseded() {
			// A newer change of the object waits behind this one: it carries
			// the object's state, and this stale copy, sent now, would be
			// reconciled as if it were current (a child re-created for an
			// object deleted meanwhile).
			s.h.stats.coalesced.Inc()
			return true
		}
		s.reresolve(ctx, url)
	}
	if p.dls != nil {
		if url, err := s.h.resolve(ctx, s.key.Namespace, *p.dls); err == nil {
			ev.SetExtension("knativeerrordest", s.sinkURL())
			if se, ok := last.(sendError); ok && se.code != 0 {
				ev.SetExtension("knativeerrorcode", strconv.Itoa(se.code))
			}
			if _, err := s.h.post(ctx, s.h.opts.HTTP, url, p.dls.Audience, ev); err == nil {
				s.unvouch("an event was dead-lettered")
				s.h.stats.deadLettered.Inc()
				return true
			}
		}
	}
	s.unvouch("an event was dropped")
	s.h.stats.dropped.Inc()
	s.h.opts.Log.Error(last, "event not delivered after retries; dropped", "subscription", s.key.String(), "type", ev.Type(), "subject", ev.Subject())
	s.mu.Lock()
	obj := s.obj.DeepCopy()
	s.mu.Unlock()
	s.h.event(obj, "Warning", "DeliveryFailed", fmt.Sprintf("%s %s not delivered after %d retries: %v", ev.Type(), ev.Subject(), p.retry, last))
	return true
}

const lastApplied = "kubectl.kubernetes.io/last-applied-configuration"

// refMeta is what a Reference-mode event carries of m beside the
// reference: its labels, annotations and owner references, as the watch
// last saw them (a delete's are its last), for the operator's owner- and
// label-mapped handlers.
func refMeta(m metav1.Object) *cloudevent.RefMeta {
	r := &cloudevent.RefMeta{UID: string(m.GetUID()), Labels: m.GetLabels(), Annotations: m.GetAnnotations()}
	if _, ok := r.Annotations[lastApplied]; ok { // kubectl's copy of the object: up to 256 KiB, for no handler
		r.Annotations = maps.Clone(r.Annotations)
		delete(r.Annotations, lastApplied)
	}
	for _, o := range m.GetOwnerReferences() {
		r.OwnerReferences = append(r.OwnerReferences, cloudevent.RefOwner{APIVersion: o.APIVersion, Kind: o.Kind, Name: o.Name, UID: string(o.UID),
			Controller: o.Controller, BlockOwnerDeletion: o.BlockOwnerDeletion})
	}
	return r
}

// wakeReason says, in a Deployment sink's status.target.lastWakeReason,
// what woke it: the change's type and object, or the sweep.
func wakeReason(ev *event.Event) string {
	t := strings.TrimPrefix(strings.TrimPrefix(ev.Type(), "dev.knative.apiserver.ref."), "dev.knative.apiserver.resource.")
	if t == ev.Type() {
		return ev.Type() + " " + ev.Source() // a sweep (PingSource's event)
	}
	k, _ := ev.Extensions()["kind"].(string)
	ns, _ := ev.Extensions()["namespace"].(string)
	n, _ := ev.Extensions()["name"].(string)
	if ns != "" {
		n = ns + "/" + n
	}
	return t + " " + k + " " + n
}

// noteAttempt records that the event of the change at rv is being posted.
func (s *sub) noteAttempt(rv string) {
	if rv == "" {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.attempted == "" || newer(rv, s.attempted) {
		s.attempted = rv
	}
}

// reresolve reads the sink's address again after a failed send to url: a
// Knative Service deleted and created again, or opzero dev restarted, has a
// new one, and waiting for the periodic recheck would drop the events.
// Concurrent senders share one lookup per failed address.
func (s *sub) reresolve(ctx context.Context, url string) {
	s.mu.Lock()
	if s.sink != url || s.resolving {
		s.mu.Unlock()
		return
	}
	s.resolving = true
	d := s.obj.Spec.Sink
	s.mu.Unlock()
	got, err := s.h.resolve(ctx, s.key.Namespace, d)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.resolving = false
	if err == nil && got != s.sink {
		s.h.opts.Log.Info("the sink's address changed", "subscription", s.key.String(), "was", s.sink, "now", got)
		s.sink, s.dirty = got, true
	}
}

// sendError is a non-2xx answer.
type sendError struct {
	code int
	body string
}

func (e sendError) Error() string { return fmt.Sprintf("the sink answered %d %s", e.code, e.body) }

// retryable follows Knative's ApiServerSource, whose place the hub takes:
// transport errors, 404, 413, 425, 429, 502, 503 and 504 are retried.
// Any other answer is final: a 500 from an opzero operator means its
// reconcile failed and it scheduled the retry itself (resending would
// override its backoff), a 4xx that the event is bad.
func retryable(err error) bool {
	se, ok := err.(sendError)
	if !ok {
		return true
	}
	switch se.code {
	case 404, 413, 425, 429, 502, 503, 504:
		return true
	}
	return false
}

// handedOver: the sink answered 500, an opzero operator's "failed, retry
// scheduled": nothing to dead-letter.
func handedOver(err error) bool {
	se, ok := err.(sendError)
	return ok && se.code == 500
}

// post sends ev in binary mode with a token for audience through c; it
// returns how long a Retry-After asked to wait.
func (h *Hub) post(ctx context.Context, c *http.Client, url, audience string, ev *event.Event) (time.Duration, error) {
	w, _, err := h.postAnswer(ctx, c, url, audience, ev)
	return w, err
}

// resultHeader is the header an opzero operator says what became of an
// event in (the engine's ResultHeader); "admitted ..." when it answered
// before reconciling (--answer=admitted).
const resultHeader = "Opzero-Result"

// postAnswer is post, with the answer's headers.
func (h *Hub) postAnswer(ctx context.Context, c *http.Client, url, audience string, ev *event.Event) (time.Duration, http.Header, error) {
	req, err := cloudevent.NewRequest(ctx, url, ev, false)
	if err != nil {
		return 0, nil, err
	}
	if audience != "" {
		tok, err := h.token(ctx, audience)
		if err != nil {
			return 0, nil, fmt.Errorf("getting a token for audience %q: %w", audience, err)
		}
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode/100 == 2 {
		return 0, resp.Header, nil
	}
	var wait time.Duration
	if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s > 0 {
		wait = time.Duration(s) * time.Second
	}
	return wait, resp.Header, sendError{code: resp.StatusCode, body: strings.TrimSpace(string(body))}
}

// token returns a token of the hub's service account for audience.
func (h *Hub) token(ctx context.Context, audience string) (string, error) {
	if audience == "" || h.opts.Identity.Name == "" {
		return "", nil
	}
	h.mu.Lock()
	t := h.tokens[audience]
	if t == nil {
		t = wakesource.TokenRequester(h.dyn, h.opts.Identity.Namespace, h.opts.Identity.Name, audience)
		h.tokens[audience] = t
	}
	h.mu.Unlock()
	return t(ctx)
}

// objectEvent is the event Knative's ApiServerSource sends (EVENTS.md):
// binary mode, its types, subject, extensions, and data (the object, or a
// reference).
func objectEvent(host, mode, act, apiVersion, kind, ns, name, plural string, object []byte, meta *cloudevent.RefMeta) (*event.Event, error) {
	ev := event.New()
	ev.SetID(uuid.NewString())
	pfx := "dev.knative.apiserver.ref."
	data := object
	if mode == v1alpha1.ModeResource {
		pfx = "dev.knative.apiserver.resource."
	} else {
		ref := map[string]any{"kind": kind, "name": name, "apiVersion": apiVersion}
		if ns != "" {
			ref["namespace"] = ns
		}
		if meta != nil {
			ref["metadata"] = meta // beside Knative's reference; its consumers read the four fields
		}
		data, _ = json.Marshal(ref)
	}
	ev.SetType(pfx + act)
	ev.SetSource(host)
	ev.SetSubject(fmt.Sprintf("/apis/%s/namespaces/%s/%s/%s", apiVersion, ns, plural, name))
	ev.SetExtension("kind", kind)
	ev.SetExtension("apiversion", apiVersion)
	ev.SetExtension("name", name)
	ev.SetExtension("namespace", ns)
	if err := ev.SetData(event.ApplicationJSON, data); err != nil {
		return nil, err
	}
	return &ev, nil
}
