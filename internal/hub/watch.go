package hub

// Why this file is over 500 lines: it is one concept, a shared watch (its
// start, resume from progress, relist after 410 Gone, decode and fan-out
// to the Subscriptions attached), whose steps share its state; the parts
// that stand alone are in refindex.go and deliver.go.

import (
	"context"
	"fmt"
	"hash/fnv"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"

	v1alpha1 "github.com/opzero/opzero/api/v1alpha1"
	"github.com/opzero/opzero/internal/genskip"
	"github.com/opzero/opzero/internal/resourceversion"
)

// watchKey is one shared watch: a resource in a namespace ("" all) with a
// label selector, as whole objects (full) or metadata only.
type watchKey struct {
	gvr      schema.GroupVersionResource
	ns       string
	selector string
	full     bool
}

func (k watchKey) String() string {
	s := k.gvr.GroupResource().String()
	if k.ns != "" {
		s += " in " + k.ns
	}
	if k.selector != "" {
		s += " where " + k.selector
	}
	if !k.full {
		s += " (metadata)"
	}
	return s
}

// attachment is one Subscription's use of one shared watch.
type attachment struct {
	sub        *sub
	key        watchKey
	gvk        schema.GroupVersionKind
	mode       string
	namespaced bool
	owner      *v1alpha1.OwnerFilter
	ref        *refFilter
	skip       *genskip.Options // SkipObserved; nil: every update is sent
	pkey       string           // its progress key

	memoMu sync.Mutex
	memo   *genskip.Memo[string] // last metadata fingerprint per object (skip)
	// when is UpdatedWhen (nil: every update is sent), whenMemo the last
	// fingerprint of those parts per object.
	when     []v1alpha1.UpdatedPart
	whenMemo *genskip.Memo[string]
	// events is Events: the types of change sent (nil: every type).
	events []v1alpha1.EventType

	mu   sync.Mutex
	seq  []*mark // sends pending, in watch order
	mark string  // every change up to it is sent (its progress)
	// handed is the newest change handed to it: sent, being sent or
	// passed. A watch gone back to an older subscriber's progress skips
	// what it was handed already: a change being sent (or sent after one
	// still being sent, its progress held behind that one) is not sent
	// again.
	handed string
	// resend: changes up to it were handed to the attachment this one
	// replaced (the Subscription's spec before an edit, same progress):
	// sent again from the progress, they carry the replay mark. Set
	// before the attachment is wired.
	resend string
	// retired: a spec edit replaced this attachment (inherit); it takes
	// no new change, so that what it was handed stays within its
	// successor's resend bound, and its progress moves no further than
	// that. The rewire that follows detaches it.
	retired bool
	// relisted is the newest change a relist handed it (a relist hands
	// changes out of order and moves handed only at its end).
	relisted string
	fresh    bool // mark is the Subscription's own version, not a progress
	moved    bool // the progress moved since
}

// mark is a change of the watch being sent: the progress moves past it
// once it, and everything before it, is done.
type mark struct {
	a       *attachment
	rv      string
	pending int
}

// the progress already made, read once when the attachment starts.
func (a *attachment) start() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.mark == "" {
		a.mark, a.fresh = a.sub.getProgress(a.pkey)
	}
	return a.mark
}

// replay reports whether a change at rv is one the bucket's previous
// holder may have sent: rv is at or before the Subscription's version read
// when the bucket was won (every send of the previous holder was before
// it). An upper bound: it counts too the changes that holder never sent
// (those after its last progress write, before its death was noticed).
//
// Or rv is at or before resend: the attachment this one replaced was
// handed it, and may have sent it.
func (a *attachment) replay(rv string) bool {
	if rv == "" {
		return false
	}
	return atOrBefore(rv, a.sub.takeover) || atOrBefore(rv, a.resend)
}

// inherit retires old, which atts replace (a spec edit), and sets the
// resend bound of atts: what an old attachment of the same progress was
// handed. Retired in the same step, an old attachment is handed nothing
// after its bound was read, so every change it may have sent is within
// the bound whenever the watch gets to the new one.
func inherit(atts, old []*attachment) {
	for _, x := range old {
		x.mu.Lock()
		x.retired = true
		bound := []string{x.handed, x.resend, x.relisted}
		x.mu.Unlock()
		for _, y := range atts {
			if x.pkey != y.pkey {
				continue
			}
			for _, rv := range bound {
				if rv != "" && !atOrBefore(rv, y.resend) {
					y.resend = rv
				}
			}
		}
	}
}

// delivered reports whether a change was ever delivered (or persisted)
// for a: a gap in a watch can hide a deletion the operator knew of.
func (a *attachment) delivered() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return !a.fresh || len(a.seq) > 0 || a.moved
}

// sent reports whether rv is at or before the progress already made, or
// was handed to a already (sent or being sent), or a is retired: its
// successor sends what is left, so a change is not even filtered for it
// in the moment until the rewire (a referencedBy filter may wait for its
// index to sync, the generation rule updates its memo).
func (a *attachment) sent(rv string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.retired || atOrBefore(rv, a.mark) || atOrBefore(rv, a.handed)
}

func atOrBefore(rv, than string) bool {
	if than == "" {
		return false
	}
	c, err := resourceversion.CompareResourceVersion(rv, than)
	return err == nil && c <= 0
}

// add records a change being sent (n sends to finish); nil if a is
// retired: the change is not its to send.
func (a *attachment) add(rv string, n int) *mark {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.retired {
		return nil
	}
	m := &mark{a: a, rv: rv, pending: n}
	a.seq = append(a.seq, m)
	a.handedTo(rv)
	return m
}

// handedTo moves handed to rv if it is newer. Called with a.mu held.
func (a *attachment) handedTo(rv string) {
	if rv != "" && (a.handed == "" || !atOrBefore(rv, a.handed)) {
		a.handed = rv
	}
}

// pass moves the progress to rv for a change that needs no send (filtered,
// a bookmark), after whatever is still pending.
func (a *attachment) pass(rv string) {
	if rv == "" {
		return
	}
	if m := a.add(rv, 1); m != nil {
		m.done()
	}
}

// done finishes one send of m and moves the progress over every finished
// change at the head.
func (m *mark) done() {
	a := m.a
	a.mu.Lock()
	m.pending--
	moved := ""
	for len(a.seq) > 0 && a.seq[0].pending <= 0 {
		if c, err := resourceversion.CompareResourceVersion(a.seq[0].rv, a.mark); a.mark == "" || err != nil || c > 0 {
			a.mark, moved, a.moved = a.seq[0].rv, a.seq[0].rv, true
		}
		a.seq[0] = nil
		a.seq = a.seq[1:]
	}
	a.mu.Unlock()
	if moved != "" {
		a.sub.setProgress(a.pkey, moved)
	}
}

// sharedWatch streams one watchKey to its subscribers.
type sharedWatch struct {
	h      *Hub
	key    watchKey
	cancel context.CancelFunc
	done   chan struct{}

	mu      sync.Mutex
	subs    []*attachment
	taps    []*refIndex   // referrer indexes fed by this watch's changes
	restart chan struct{} // a subscriber needs changes older than the watch's position
	rv      string        // where the watch is
	// behind are the subscribers that joined with progress older than
	// where the watch is: they are handed nothing (no change, no
	// bookmark, no relist) until it has gone back to them (rewind), or a
	// change handed meanwhile would count as handed, for the way back,
	// every older one they were never given.
	behind map[*attachment]bool
	// relisting: a relist is under way; it hands nothing to a subscriber
	// that joins meanwhile, which is behind until the watch goes back.
	relisting bool

	positioned chan struct{} // closed once the watch knows where it starts
	posOnce    sync.Once
}

func (w *sharedWatch) addTap(ix *refIndex) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.taps = append(w.taps, ix)
}

func (w *sharedWatch) removeTap(ix *refIndex) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.taps = slices.DeleteFunc(slices.Clone(w.taps), func(t *refIndex) bool { return t == ix })
}

// resyncTaps has every index fed by this watch list again: the watch
// missed changes (a 410) or goes back to replay older ones.
func (w *sharedWatch) resyncTaps() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, ix := range w.taps {
		select {
		case ix.resync <- struct{}{}:
		default:
		}
	}
}

// feedTaps gives a change to the indexes fed by this watch; it returns the
// names the change made referenced.
func (w *sharedWatch) feedTaps(obj runtime.Object, deleted bool) []refAdded {
	w.mu.Lock()
	taps := w.taps
	w.mu.Unlock()
	var out []refAdded
	for _, ix := range taps {
		if c, ok := ix.referrerOf(obj, deleted); ok {
			if added := ix.tapped(c); added != "" {
				if users := ix.usersOf(added); len(users) > 0 {
					out = append(out, refAdded{added, users})
				}
			}
		}
	}
	return out
}

// startWatch starts a watch for its first subscribers, from their oldest
// progress.
func (h *Hub) startWatch(ctx context.Context, k watchKey, atts []*attachment) *sharedWatch {
	ctx, cancel := context.WithCancel(ctx)
	w := &sharedWatch{h: h, key: k, cancel: cancel, done: make(chan struct{}), restart: make(chan struct{}, 1), subs: atts, positioned: make(chan struct{})}
	go func() { defer close(w.done); w.run(ctx) }()
	return w
}

func (w *sharedWatch) stop() { w.cancel() }

// setSubscribers replaces the subscribers; one whose progress is older
// than the watch's position (or that joins during a relist) is behind, and
// restarts the watch from there.
func (w *sharedWatch) setSubscribers(atts []*attachment) {
	w.mu.Lock()
	defer w.mu.Unlock()
	known, now := map[*attachment]bool{}, map[*attachment]bool{}
	for _, a := range w.subs {
		known[a] = true
	}
	w.subs = atts
	for _, a := range atts {
		now[a] = true
		if known[a] {
			continue
		}
		p := a.start()
		c, err := resourceversion.CompareResourceVersion(p, w.rv)
		if w.relisting || (w.rv != "" && p != "" && err == nil && c < 0) {
			if w.behind == nil {
				w.behind = map[*attachment]bool{}
			}
			w.behind[a] = true
			select {
			case w.restart <- struct{}{}:
			default:
			}
		}
	}
	for a := range w.behind {
		if !now[a] {
			delete(w.behind, a)
		}
	}
}

// subscribers are those the watch hands its changes to: all but those
// behind.
func (w *sharedWatch) subscribers() []*attachment {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.handedLocked()
}

func (w *sharedWatch) handedLocked() []*attachment {
	if len(w.behind) == 0 {
		return w.subs
	}
	out := make([]*attachment, 0, len(w.subs))
	for _, a := range w.subs {
		if !w.behind[a] {
			out = append(out, a)
		}
	}
	return out
}

// rewind is where the watch starts (again): the oldest progress of its
// subscribers, or "" (now) if one has none. Every subscriber is handed
// changes from there on: none is behind the watch's position any more,
// which moves there at once, so that a subscriber joining before the
// watch is started is compared with where it will be.
func (w *sharedWatch) rewind() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	min := ""
	for _, a := range w.subs {
		p := a.start()
		if p == "" {
			min = ""
			break
		}
		if c, err := resourceversion.CompareResourceVersion(p, min); min == "" || (err == nil && c < 0) {
			min = p
		}
	}
	w.behind = nil
	if min != "" {
		w.rv = min
	}
	return min
}

func (w *sharedWatch) run(ctx context.Context) {
	log := w.h.opts.Log.WithValues("watch", w.key.String())
	rv := w.rewind()
	fails := 0
	for ctx.Err() == nil {
		var err error
		if rv == "" {
			rv, err = w.current(ctx)
		}
		if err == nil {
			w.setRV(rv)
			rv, err = w.stream(ctx, rv)
		}
		if ctx.Err() != nil {
			return
		}
		if err == errRestart {
			rv = w.rewind()
			fails = 0
			w.resyncTaps()
			continue
		}
		if apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
			w.h.stats.relists.Inc()
			w.resyncTaps()
			log.Info("the watch's resource version is gone; listing what changed since", "since", rv)
			if rv, err = w.relist(ctx, rv); err == nil {
				fails = 0
				continue
			}
		}
		if err != nil {
			fails++
			log.Error(err, "watch failed; watching again", "attempt", fails)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(min(time.Duration(fails)*time.Second, 30*time.Second)):
		}
	}
}

func (w *sharedWatch) setRV(rv string) {
	w.mu.Lock()
	w.rv = rv
	w.mu.Unlock()
	w.posOnce.Do(func() { close(w.positioned) })
}

var errRestart = fmt.Errorf("restart")

// current is the collection's resource version now: a list of one.
func (w *sharedWatch) current(ctx context.Context) (string, error) {
	l, err := w.h.meta.Resource(w.key.gvr).Namespace(w.key.ns).List(ctx, metav1.ListOptions{Limit: 1, LabelSelector: w.key.selector})
	if err != nil {
		return "", err
	}
	return l.ResourceVersion, nil
}

// stream sends the watch's changes from rv until it ends; it returns the
// last resource version seen.
func (w *sharedWatch) stream(ctx context.Context, rv string) (string, error) {
	var wi watch.Interface
	var err error
	if w.key.full { // the objects' JSON kept as sent (rawObject)
		req := w.h.raw.Get().AbsPath(resourcePath(w.key.gvr, w.key.ns)).Param("watch", "true").
			Param("resourceVersion", rv).Param("allowWatchBookmarks", "true")
		if w.key.selector != "" {
			req = req.Param("labelSelector", w.key.selector)
		}
		wi, err = req.Watch(ctx)
	} else {
		wi, err = w.h.meta.Resource(w.key.gvr).Namespace(w.key.ns).Watch(ctx, metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true, LabelSelector: w.key.selector})
	}
	if err != nil {
		return rv, err
	}
	defer wi.Stop()
	for {
		select {
		case <-ctx.Done():
			return rv, nil
		case <-w.restart:
			return rv, errRestart
		case ev, ok := <-wi.ResultChan():
			if !ok {
				return rv, nil // closed by the server: resume from rv
			}
			switch ev.Type {
			case watch.Error:
				return rv, apierrors.FromObject(ev.Object)
			case watch.Bookmark:
				if m, err := metaOf(ev.Object); err == nil {
					rv = m.GetResourceVersion()
					for _, a := range w.subscribers() {
						a.pass(rv)
					}
				}
			case watch.Added, watch.Modified, watch.Deleted:
				o, err := metaOf(ev.Object)
				if err != nil {
					continue
				}
				rv = o.GetResourceVersion()
				added := w.feedTaps(ev.Object, ev.Type == watch.Deleted) // first: a referrer's change before what it references
				w.dispatch(ctx, action(ev.Type), ev.Object, o, added)
			}
			w.setRV(rv)
		}
	}
}

func action(t watch.EventType) string {
	switch t {
	case watch.Added:
		return "add"
	case watch.Deleted:
		return "delete"
	}
	return "update"
}

func metaOf(o runtime.Object) (metav1.Object, error) {
	if m, ok := o.(metav1.Object); ok {
		return m, nil
	}
	return nil, fmt.Errorf("%T has no metadata", o)
}

// dispatch hands one change to every subscriber that wants it. added are
// the names it made referenced (feedTaps): their updates are sent too
// (refIndex.tell), and the progress of this watch's subscribers does not
// move past the change until those are settled, so that a hub that dies
// before sending them sends the change again (and its successor has the
// operators drop what they cache: epoch.go).
func (w *sharedWatch) dispatch(ctx context.Context, act string, obj runtime.Object, m metav1.Object, added []refAdded) {
	rv := m.GetResourceVersion()
	c := &change{act: act, obj: obj, m: m}
	told := 0
	for _, r := range added {
		told += len(r.users)
	}
	var holds []*mark
	for _, a := range w.subscribers() {
		if a.sent(rv) {
			continue
		}
		want := a.wants(ctx, m) && !a.skips(act, obj, m) && !a.unchanged(act, m) && a.takes(act)
		if !want {
			a.sub.h.stats.filtered.Inc()
			if told == 0 {
				a.pass(rv)
				continue
			}
		}
		n := told
		if want {
			n++
		}
		mk := a.add(rv, n)
		if mk == nil {
			continue // retired meanwhile
		}
		if told > 0 {
			holds = append(holds, mk)
		}
		if want {
			a.sub.disp.enqueue(a, c, mk)
		}
	}
	for _, r := range added {
		w.h.tell(r, holds)
	}
}

// wants applies the owner and referencedBy filters.
func (a *attachment) wants(ctx context.Context, m metav1.Object) bool {
	if a.sub.h.scalingChange(a.gvk.GroupKind(), m) {
		return false
	}
	if a.owner != nil {
		ok := false
		for _, o := range m.GetOwnerReferences() {
			if o.Controller != nil && *o.Controller && o.Kind == a.owner.Kind && o.APIVersion == a.owner.APIVersion {
				ok = true
			}
		}
		if !ok {
			return false
		}
	}
	if a.ref != nil {
		if ix := a.ref.index.Load(); ix != nil {
			return ix.has(ctx, m.GetNamespace()+"/"+m.GetName())
		}
	}
	return true
}

// scalingChange: m is a Deployment sink of some Subscription of the
// cluster, one of its ReplicaSets or one of their pods. Their changes are
// what the hub's own scaling makes, which no classic operator would see
// (its peers' pods run on): delivered to nobody, or an operator would be
// started again by its own stop, and two that watch pods would wake each
// other without end.
func (h *Hub) scalingChange(gk schema.GroupKind, m metav1.Object) bool {
	t := h.targets.Load()
	if t == nil || len(*t) == 0 {
		return false
	}
	ns := m.GetNamespace()
	controller := func(kind string) string {
		for _, o := range m.GetOwnerReferences() {
			if o.Controller != nil && *o.Controller && o.Kind == kind && strings.HasPrefix(o.APIVersion, "apps/") {
				return o.Name
			}
		}
		return ""
	}
	switch gk {
	case schema.GroupKind{Group: "apps", Kind: "Deployment"}:
		return (*t)[ns+"/"+m.GetName()]
	case schema.GroupKind{Group: "apps", Kind: "ReplicaSet"}:
		d := controller("Deployment")
		return d != "" && (*t)[ns+"/"+d]
	case schema.GroupKind{Kind: "Pod"}:
		rs, hash := controller("ReplicaSet"), m.GetLabels()["pod-template-hash"]
		d, found := strings.CutSuffix(rs, "-"+hash)
		return hash != "" && found && (*t)[ns+"/"+d]
	}
	return false
}

// skips applies the operator's generation-aware rule (genskip) to a
// change, remembering each object's metadata fingerprint: an update of an
// already observed generation whose finalizers (and the labels or
// annotations the Subscription names) did not change since the object's
// previous change is not sent. A forgotten object (the memo is bounded)
// is sent.
func (a *attachment) skips(act string, obj runtime.Object, m metav1.Object) bool {
	if a.skip == nil {
		return false
	}
	k := m.GetNamespace() + "/" + m.GetName()
	a.memoMu.Lock()
	defer a.memoMu.Unlock()
	if act == "delete" {
		a.memo.Forget(k)
		return false
	}
	same := a.memo.Swap(k, genskip.FingerprintOf(*a.skip, m))
	if act != "update" || !same {
		return false
	}
	observed, has := observedGeneration(obj)
	return genskip.Observed(m.GetGeneration(), observed, has, m.GetDeletionTimestamp() != nil)
}

// unchanged applies UpdatedWhen: an update that changes none of the named
// parts since the object's previous change is not sent. Creates and
// deletes are; so is an update of an object not remembered (the hub
// started since, or the bounded memo forgot it), as an informer delivers
// an object it did not hold as a create.
func (a *attachment) unchanged(act string, m metav1.Object) bool {
	if a.when == nil {
		return false
	}
	k := m.GetNamespace() + "/" + m.GetName()
	a.memoMu.Lock()
	defer a.memoMu.Unlock()
	if act == "delete" {
		a.whenMemo.Forget(k)
		return false
	}
	same := a.whenMemo.Swap(k, partsFingerprint(a.when, m)) // false for a key not remembered
	return act == "update" && same
}

// takes applies Events to a change the watch reported as act (add,
// update, delete). Last of the filters, so that the memos of the others
// see every change.
func (a *attachment) takes(act string) bool {
	if a.events == nil {
		return true
	}
	t := v1alpha1.EventUpdated
	switch act {
	case "add":
		t = v1alpha1.EventCreated
	case "delete":
		t = v1alpha1.EventDeleted
	}
	return slices.Contains(a.events, t)
}

// takesRelisted applies Events to what a relist found changed, which may
// have been created or updated since: sent if either is taken.
func (a *attachment) takesRelisted() bool {
	return a.events == nil || slices.Contains(a.events, v1alpha1.EventCreated) || slices.Contains(a.events, v1alpha1.EventUpdated)
}

// partsFingerprint hashes the parts of m that UpdatedWhen names.
func partsFingerprint(parts []v1alpha1.UpdatedPart, m metav1.Object) uint64 {
	h := fnv.New64a()
	write := func(s string) { h.Write([]byte(s)); h.Write([]byte{0}) }
	for _, p := range parts {
		write(string(p))
		switch p {
		case v1alpha1.UpdatedGeneration:
			write(strconv.FormatInt(m.GetGeneration(), 10))
		case v1alpha1.UpdatedLabels:
			writeMap(write, m.GetLabels())
		case v1alpha1.UpdatedAnnotations:
			writeMap(write, m.GetAnnotations())
		}
	}
	return h.Sum64()
}

func writeMap(write func(string), kv map[string]string) {
	for _, k := range slices.Sorted(maps.Keys(kv)) {
		write(k)
		write(kv[k])
	}
}

// skipMemo bounds the objects an attachment with SkipObserved remembers.
const skipMemo = 4096

// relist lists what changed since rv after the watch lost it, sends it as
// updates, and asks each subscriber's operator for a sweep (deletions in
// the gap cannot be seen). It returns the list's resource version.
func (w *sharedWatch) relist(ctx context.Context, since string) (string, error) {
	w.h.epoch.bump() // the gap may hide what the indexes would have told (EpochHeader)
	w.mu.Lock()
	subs := w.handedLocked()
	w.relisting = true
	w.mu.Unlock()
	next := "" // where the watch goes on from, once listed
	defer func() {
		w.mu.Lock()
		w.relisting = false
		if next != "" {
			w.rv = next
		}
		w.mu.Unlock()
	}()
	type item struct {
		obj runtime.Object
		m   metav1.Object
	}
	var items []item // what changed since: metadata or objects, one page at a time
	listRV, cont := "", ""
	marks, known := map[*attachment]*mark{}, map[*attachment]bool{}
	for _, a := range subs {
		if mk := a.add("", 1); mk != nil { // its version: the list's, set at the end
			known[a] = a.delivered()
			marks[a] = mk
		}
	}
	// A list that fails settles the marks at since (every change up to it
	// was sent before them), else they would hold the progress forever.
	fail := func(err error) (string, error) {
		for _, mk := range marks {
			mk.a.mu.Lock()
			mk.rv = since
			mk.a.mu.Unlock()
			mk.done()
		}
		return since, err
	}
	for {
		opts := metav1.ListOptions{Limit: 500, Continue: cont, LabelSelector: w.key.selector}
		items = items[:0]
		if w.key.full {
			l, err := w.h.dyn.Resource(w.key.gvr).Namespace(w.key.ns).List(ctx, opts)
			if err != nil {
				return fail(err)
			}
			for i := range l.Items {
				items = append(items, item{&l.Items[i], &l.Items[i]})
			}
			listRV, cont = l.GetResourceVersion(), l.GetContinue()
		} else {
			l, err := w.h.meta.Resource(w.key.gvr).Namespace(w.key.ns).List(ctx, opts)
			if err != nil {
				return fail(err)
			}
			for i := range l.Items {
				items = append(items, item{&l.Items[i], &l.Items[i]})
			}
			listRV, cont = l.ResourceVersion, l.Continue
		}
		for _, it := range items {
			rv := it.m.GetResourceVersion()
			if c, err := resourceversion.CompareResourceVersion(rv, since); err == nil && c <= 0 {
				continue
			}
			c := &change{act: "update", obj: it.obj, m: it.m}
			for _, a := range subs {
				mk := marks[a]
				if mk == nil || a.sent(rv) || !a.wants(ctx, it.m) {
					continue
				}
				if !a.takesRelisted() {
					a.sub.h.stats.filtered.Inc()
					continue // the list's mark moves its progress past it
				}
				a.mu.Lock()
				if a.retired {
					a.mu.Unlock()
					continue
				}
				mk.pending++
				if !atOrBefore(rv, a.relisted) {
					a.relisted = rv
				}
				a.mu.Unlock()
				a.sub.disp.enqueue(a, c, mk)
			}
		}
		if cont == "" {
			break
		}
	}
	swept := map[*sub]bool{}
	for _, a := range subs {
		mk := marks[a]
		if mk == nil {
			continue
		}
		a.mu.Lock()
		if a.retired {
			// Retired during the list: what it was handed is in its
			// successor's bound (relisted), and its progress stays at
			// since (the list's changes are not all sent).
			mk.rv = since
		} else {
			mk.rv = listRV
			a.handedTo(listRV) // every change up to it was listed
		}
		a.mu.Unlock()
		mk.done()
		if known[a] && !swept[a.sub] {
			swept[a.sub] = true
			a.sub.sweepNow()
		}
	}
	next = listRV
	return listRV, nil
}

// watchRBAC asks for every Subscription to be checked again whenever an
// RBAC object changes (metadata only).
func (h *Hub) watchRBAC(ctx context.Context) {
	var wg sync.WaitGroup
	defer wg.Wait()
	for _, res := range []string{"roles", "rolebindings", "clusterroles", "clusterrolebindings"} {
		gvr := schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: res}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				l, err := h.meta.Resource(gvr).List(ctx, metav1.ListOptions{Limit: 1})
				if err == nil {
					var wi watch.Interface
					if wi, err = h.meta.Resource(gvr).Watch(ctx, metav1.ListOptions{ResourceVersion: l.ResourceVersion}); err == nil {
						for ev := range wi.ResultChan() {
							if ev.Type != watch.Error && ev.Type != watch.Bookmark {
								h.poke()
							}
						}
						wi.Stop()
					}
				}
				select {
				case <-ctx.Done():
				case <-time.After(time.Second):
				}
			}
		}()
	}
}
