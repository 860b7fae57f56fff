package serverless

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/opzero/opzero/internal/cloudevent"
	"github.com/opzero/opzero/internal/lease"
)

// Forwarding (with a Locker whose instances record their address on the
// Leases they hold, lease.Options.Address): an event for a key whose Lease
// a live other instance holds is sent on to that instance, which reconciles
// it, instead of marking the Lease (two Lease writes: the mark and the
// holder's clearing of it). The package documentation states the protocol.
const (
	// ForwardedByHeader marks a request that an instance sent on to the
	// holder of its key's Lease: "<operator>/<identity of the sender>". It
	// is handled as any delivery (authenticated, routed, reconciled under
	// the key's Lease, or marked if another instance holds it now) and is
	// never forwarded again.
	ForwardedByHeader = "Opzero-Forwarded-By"
	// HolderHeader, on the answer to a forwarded request, is the identity of
	// the instance of the operator that handled it. An answer without it did
	// not come from one (the address was reused): the sender falls back.
	HolderHeader = "Opzero-Holder"
	// LeaseUntilHeader, on the answer to a forwarded request, is when the
	// answering instance's Lease of the key runs out unless renewed (RFC
	// 3339), if it kept the Lease: the sender forwards the key's next
	// events there until then without asking the API server.
	LeaseUntilHeader = "Opzero-Lease-Until"
)

// maxHints bounds the remembered holders of other instances' keys.
const maxHints = 10_000

// forwarder remembers, per key, which instance holds its Lease and where
// it takes forwarded events (a hint: as last read or as the holder last
// said), and which addresses failed lately.
type forwarder struct {
	client *http.Client
	cool   time.Duration // how long a failed address is not tried again

	mu    sync.Mutex
	hints map[reconcile.Request]hint
	down  map[string]time.Time // address -> not tried before
}

// hint: key's Lease is held by holder, which takes events at address,
// until (as last read, or as the holder said when it last answered).
type hint struct {
	holder, address string
	until           time.Time
}

func newForwarder(cool time.Duration) *forwarder {
	return &forwarder{cool: cool, hints: map[reconcile.Request]hint{}, down: map[string]time.Time{},
		client: &http.Client{
			Transport: &http.Transport{
				Proxy:               nil, // instances reach each other directly
				DialContext:         (&net.Dialer{Timeout: time.Second, KeepAlive: 30 * time.Second}).DialContext,
				MaxIdleConnsPerHost: 64,
				IdleConnTimeout:     90 * time.Second,
			},
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		}}
}

// hint returns key's holder if it is known and its address has not failed.
func (f *forwarder) hint(key reconcile.Request, now time.Time) (hint, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	h, ok := f.hints[key]
	if ok && (!now.Before(h.until) || now.Before(f.down[h.address])) {
		delete(f.hints, key)
		return hint{}, false
	}
	return h, ok
}

// up: address has not failed lately.
func (f *forwarder) up(address string, now time.Time) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return !now.Before(f.down[address])
}

// learn remembers what taking key's Lease found: held here (no hint), or
// held by a live instance with an address (a hint until its expiry).
func (f *forwarder) learn(key reconcile.Request, held *lease.Held, err error, now time.Time) {
	var he *lease.HeldElsewhere
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case held != nil:
		delete(f.hints, key)
	case errors.As(err, &he) && he.Address != "" && now.Before(he.Expires) && !now.Before(f.down[he.Address]):
		f.put(key, hint{holder: he.Holder, address: he.Address, until: he.Expires}, now)
	}
}

func (f *forwarder) put(key reconcile.Request, h hint, now time.Time) {
	if _, ok := f.hints[key]; !ok && len(f.hints) >= maxHints {
		for k, old := range f.hints {
			if !now.Before(old.until) {
				delete(f.hints, k)
			}
		}
		if len(f.hints) >= maxHints {
			return
		}
	}
	f.hints[key] = h
}

// answered: the holder took key's event; until, if set, is when its Lease
// runs out (it kept it), which extends the hint.
func (f *forwarder) answered(key reconcile.Request, h hint, until string, now time.Time) {
	t, err := time.Parse(time.RFC3339Nano, until)
	if err != nil || !t.After(now) {
		return
	}
	h.until = t
	f.mu.Lock()
	defer f.mu.Unlock()
	f.put(key, h, now)
}

// failed: the holder at address did not take key's event. Unless it was
// only busy, its address is not tried again for a while (it may be dead
// or draining; its Leases expire meanwhile).
func (f *forwarder) failed(key reconcile.Request, address string, busy bool, now time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.hints, key)
	if !busy {
		for a, until := range f.down { // a few entries: addresses of instances that went away
			if !now.Before(until) {
				delete(f.down, a)
			}
		}
		f.down[address] = now.Add(f.cool)
	}
}

// keepBody reads the request's body so that it can be decoded and still
// forwarded; nil without forwarding (the decoder reads the body itself).
func (e *Engine) keepBody(r *http.Request) ([]byte, error) {
	if e.fwd == nil {
		return nil, nil
	}
	b, err := io.ReadAll(r.Body)
	if err != nil {
		return nil, err
	}
	r.Body = io.NopCloser(bytes.NewReader(b))
	return b, nil
}

// acceptForwarded checks a forwarded request before it is handled like any
// other: it must be for this operator (421 otherwise: the sender falls back
// to marking), and its answer names this instance.
func (e *Engine) acceptForwarded(w http.ResponseWriter, r *http.Request) bool {
	by := r.Header.Get(ForwardedByHeader)
	if by == "" {
		return true
	}
	if op, _, _ := strings.Cut(by, "/"); op != e.op.Name {
		http.Error(w, fmt.Sprintf("forwarded for operator %q; this is %q", op, e.op.Name), http.StatusMisdirectedRequest)
		return false
	}
	w.Header().Set(HolderHeader, e.identity())
	return true
}

func (e *Engine) identity() string {
	if e.opts.Locker != nil {
		return e.opts.Locker.Identity()
	}
	return e.op.Name
}

// affirm tells the sender of a forwarded request until when this instance
// keeps its key's Lease, if it does (LeaseUntilHeader).
func (e *Engine) affirm(w http.ResponseWriter, r *http.Request, rt *routed) {
	if e.fwd == nil || len(rt.keys) != 1 || r.Header.Get(ForwardedByHeader) == "" {
		return
	}
	if until, ok := e.keeper.until(rt.keys[0]); ok {
		w.Header().Set(LeaseUntilHeader, until.Format(time.RFC3339Nano))
	}
}

// forwarded handles a delivery that may be forwarded: one object or
// Broker event for one key, not forwarded already. If another live
// instance holds the key's Lease and takes the request, its answer is the
// answer, and forwarded returns true; it returns true too if the key was
// reconciled here. false: not forwardable, or the holder did not take it;
// the caller then handles the request as usual, marking the Lease if it is
// still held elsewhere.
func (e *Engine) forwarded(w http.ResponseWriter, r *http.Request, ev any, rt *routed, body []byte) bool {
	if e.fwd == nil || len(rt.keys) != 1 || r.Header.Get(ForwardedByHeader) != "" {
		return false
	}
	switch ev.(type) {
	case *cloudevent.ObjectEvent, *cloudevent.Other:
	default:
		return false // a wakeup: the mark path, as the sweeps
	}
	key := rt.keys[0]
	if h, ok := e.fwd.hint(key, e.opts.Clock.Now()); ok && e.send(w, r, body, key, h) {
		return true
	}
	if e.opts.AnswerAdmitted && rt.object {
		return false // admitted; its run marks the Lease and leaves a hint for the next event
	}
	rt.forward = true
	vs := e.reconcileAll(r.Context(), rt)
	rt.forward = false
	var he *lease.HeldElsewhere
	if !errors.As(vs[0].Err, &he) || !he.Forward {
		answer(w, rt, vs)
		return true
	}
	return e.send(w, r, body, key, hint{holder: he.Holder, address: he.Address, until: he.Expires})
}

// send forwards r to key's holder and, if it takes it, copies its answer:
// true. false (nothing written): it could not be reached, or answered
// anything but a decision on the event (not an instance of this operator,
// 421, 429, 502-504 from a draining or dying holder).
func (e *Engine) send(w http.ResponseWriter, r *http.Request, body []byte, key reconcile.Request, h hint) bool {
	ctx, cancel := context.WithTimeout(r.Context(), e.opts.MaxWait)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, r.Method, strings.TrimSuffix(h.address, "/")+r.URL.RequestURI(), bytes.NewReader(body))
	if err != nil {
		e.fwd.failed(key, h.address, false, e.opts.Clock.Now())
		return false
	}
	for k, vs := range r.Header {
		if !hopByHop[http.CanonicalHeaderKey(k)] {
			req.Header[k] = vs
		}
	}
	req.Header.Set(ForwardedByHeader, e.op.Name+"/"+e.identity())
	resp, err := e.fwd.client.Do(req)
	if err != nil {
		e.stats.ForwardFailures.Add(1)
		e.obs.Forward(false)
		e.fwd.failed(key, h.address, false, e.opts.Clock.Now())
		e.log.Info("forwarding to the holder of the key's Lease failed; marking the Lease instead", "key", key.String(), "holder", h.holder, "address", h.address, "error", err.Error())
		return false
	}
	defer resp.Body.Close()
	if resp.Header.Get(HolderHeader) == "" || !decisive(resp.StatusCode) {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		e.stats.ForwardFailures.Add(1)
		e.obs.Forward(false)
		e.fwd.failed(key, h.address, resp.StatusCode == http.StatusTooManyRequests, e.opts.Clock.Now())
		e.log.Info("the holder of the key's Lease did not take a forwarded event; marking the Lease instead", "key", key.String(), "holder", h.holder, "address", h.address, "status", resp.StatusCode)
		return false
	}
	e.fwd.answered(key, h, resp.Header.Get(LeaseUntilHeader), e.opts.Clock.Now())
	e.stats.Forwarded.Add(1)
	e.obs.Forward(true)
	for k, vs := range resp.Header {
		if !hopByHop[http.CanonicalHeaderKey(k)] {
			w.Header()[k] = vs
		}
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(w, io.LimitReader(resp.Body, 1<<20))
	return true
}

// decisive: the holder decided on the event; its answer is the answer.
// Anything else falls back to the mark, which loses nothing.
func decisive(code int) bool {
	switch {
	case code >= 200 && code < 300:
		return true
	case code == http.StatusBadRequest, code == http.StatusRequestEntityTooLarge,
		code == http.StatusUnprocessableEntity, code == http.StatusInternalServerError:
		return true
	}
	return false
}

var hopByHop = map[string]bool{"Connection": true, "Keep-Alive": true, "Proxy-Authenticate": true,
	"Proxy-Authorization": true, "Proxy-Connection": true, "Te": true, "Trailer": true,
	"Transfer-Encoding": true, "Upgrade": true, "Content-Length": true}

// acquire takes key's Lease for a run of arrivals. If each of them is an
// event its request can forward, a Lease held by a live instance with a
// reachable address is not marked: *lease.HeldElsewhere with Forward set,
// from the hint without an API call while the hint holds.
func (e *Engine) acquire(ctx context.Context, key reconcile.Request, arrivals []*arrival) (*lease.Held, error) {
	if e.fwd == nil {
		return e.opts.Locker.Acquire(ctx, key)
	}
	var held *lease.Held
	var err error
	if forwardAll(arrivals) {
		now := e.opts.Clock.Now()
		if h, ok := e.fwd.hint(key, now); ok {
			return nil, &lease.HeldElsewhere{Key: key, Holder: h.holder, Expires: h.until, Address: h.address, Forward: true}
		}
		held, err = e.opts.Locker.AcquireOrLocate(ctx, key, func(a string) bool { return e.fwd.up(a, now) })
	} else {
		held, err = e.opts.Locker.Acquire(ctx, key)
	}
	e.fwd.learn(key, held, err, e.opts.Clock.Now())
	return held, err
}

func forwardAll(arrivals []*arrival) bool {
	for _, a := range arrivals {
		if a == nil || !a.forward {
			return false
		}
	}
	return len(arrivals) > 0
}

// forwardVerdict: key's Lease is held by a live instance that takes
// forwarded events; each request of the run forwards itself (forwarded).
// Unavailable, so that a request that could not would be delivered again.
func forwardVerdict(key reconcile.Request, he *lease.HeldElsewhere) *Verdict {
	return &Verdict{Key: key, Outcome: Unavailable, Err: he}
}

// DefaultAdvertiseAddress is where the other instances of an operator
// listening on listen reach this one: in a pod ($KUBERNETES_SERVICE_HOST
// set), http://<the first non-loopback IPv4 address>:<listen's port>;
// otherwise "" (unknown: no forwarding to this instance).
func DefaultAdvertiseAddress(listen string) string {
	if os.Getenv("KUBERNETES_SERVICE_HOST") == "" {
		return ""
	}
	_, port, err := net.SplitHostPort(listen)
	if err != nil || port == "" {
		return ""
	}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return ""
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() && n.IP.To4() != nil {
			return "http://" + net.JoinHostPort(n.IP.String(), port)
		}
	}
	return ""
}
