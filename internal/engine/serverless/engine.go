package serverless

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/opzero/opzero/builder"
	"github.com/opzero/opzero/internal/backoff"
	"github.com/opzero/opzero/internal/cloudevent"
	"github.com/opzero/opzero/internal/genskip"
	"github.com/opzero/opzero/internal/keyq"
	"github.com/opzero/opzero/internal/lease"
)

// Options tunes an Engine. Zero values take the defaults in parentheses.
type Options struct {
	// MaxConcurrentReconciles bounds distinct keys reconciling at once (8).
	MaxConcurrentReconciles int
	// ReconcileTimeout bounds one reconcile (5 min).
	ReconcileTimeout time.Duration
	// MaxWait bounds how long a request waits for its keys (4 min 30 s,
	// under Knative's default revision timeout of 5 min).
	MaxWait time.Duration
	// Backoff is the per-key retry policy after a failed reconcile
	// (backoff.DefaultPolicy()).
	Backoff *backoff.Policy
	// Clock drives retry timers (the real clock); tests step a fake one.
	Clock backoff.Clock
	// MaxBodyBytes bounds an event's size (4 MiB; etcd's object limit is 1.5).
	MaxBodyBytes int64
	// Durable, if set, records retries and RequeueAfter so they survive the
	// instance (package wakeup's Store); in-process timers are then not used,
	// and a failed reconcile is answered 200 once its retry is recorded, 503
	// if it cannot be.
	Durable Durable
	// Async answers 202 as soon as each key's intent is durable (an
	// Accepted wakeup, Durable must be an Acceptor) and reconciles afterwards.
	Async bool
	// AsyncGrace is how long an accepted event may take before the wakeup
	// source delivers it again (1 min).
	AsyncGrace time.Duration
	// FollowUpSettle holds a key's follow-up reconcile (for events that
	// arrived while the key reconciled) until the key's events have paused
	// that long, so a burst that outlasts one reconcile still costs only one
	// follow-up (2 ms; negative: queue follow-ups at once). A first
	// reconcile is never held. See keyq.Options.Settle.
	FollowUpSettle time.Duration
	// FollowUpMaxSettle bounds that hold: at most this long after the
	// previous reconcile ended (20 ms).
	FollowUpMaxSettle time.Duration
	// MaxInFlight bounds requests being handled at once (1000); more get
	// 429 with Retry-After, which every Knative sender retries.
	MaxInFlight int
	// Locker, if set, serializes each key across instances with a
	// coordination.k8s.io Lease (package lease): for operators that may
	// run more than one instance. nil keeps serialization in memory only.
	Locker *lease.Locker
	// Logger (logr.Discard()).
	Logger logr.Logger
}

// Durable records retries and requeues outside the process.
type Durable interface {
	Requeue(ctx context.Context, key reconcile.Request, after time.Duration) error
	Failed(ctx context.Context, key reconcile.Request) (retryIn time.Duration, attempt int, err error)
	Succeeded(ctx context.Context, key reconcile.Request) error
}

// Acceptor records accepted events (async mode).
type Acceptor interface {
	Accept(ctx context.Context, key reconcile.Request, grace time.Duration) error
}

// Engine is the serverless runtime of one Operator: an http.Handler.
type Engine struct {
	op      *builder.Controller
	c       client.Client // the API server, uncached; reconcilers get the same, wrapped
	opts    Options
	log     logr.Logger
	queue   *keyq.Queue[reconcile.Request, *arrival]
	retries *backoff.Tracker[reconcile.Request]
	// checks looks again at a Lease another instance held when it
	// expires (Options.Locker), in case its holder died.
	checks *backoff.Tracker[reconcile.Request]

	memoMu sync.Mutex
	memo   *genskip.Memo[reconcile.Request] // last primary metadata fingerprint per key

	draining atomic.Bool
	inFlight chan struct{} // a slot per request being handled
	stats    Stats
}

// arrival is one event's contribution to a key's next reconcile.
type arrival struct {
	object []byte // the primary object, Resource mode only
	reason string
	// check: no event, only a look at the key's Lease at its expiry.
	check bool
}

// New returns an engine for op. c must read from the API server (no cache);
// the reconciler should have been given NewClient(c) (or the same client
// wrapped by the runtime) so that the first-Get stand-in applies.
func New(op *builder.Controller, c client.Client, opts Options) (*Engine, error) {
	if op == nil || op.Reconciler == nil {
		return nil, errors.New("serverless: the operator or its reconciler is nil")
	}
	if c == nil {
		return nil, errors.New("serverless: the client is nil")
	}
	opts = opts.withDefaults()
	if _, ok := opts.Durable.(Acceptor); opts.Async && !ok {
		return nil, errors.New("serverless: async mode needs a durable store that records accepted events (wakeup.Store)")
	}
	e := &Engine{op: op, c: c, opts: opts, log: opts.Logger, memo: genskip.NewMemo[reconcile.Request](100_000),
		inFlight: make(chan struct{}, opts.MaxInFlight)}
	e.queue = keyq.New[reconcile.Request, *arrival](keyq.Options{MaxConcurrent: opts.MaxConcurrentReconciles,
		Settle: max(opts.FollowUpSettle, 0), MaxSettle: opts.FollowUpMaxSettle}, e.run)
	e.retries = backoff.NewTracker[reconcile.Request](*opts.Backoff, opts.Clock, func(key reconcile.Request) {
		e.queue.Submit(key, &arrival{reason: "retry"})
	})
	e.checks = backoff.NewTracker[reconcile.Request](*opts.Backoff, opts.Clock, func(key reconcile.Request) {
		e.queue.Submit(key, &arrival{reason: "lease expiry check", check: true})
	})
	return e, nil
}

func (o Options) withDefaults() Options {
	if o.MaxConcurrentReconciles <= 0 {
		o.MaxConcurrentReconciles = 8
	}
	if o.ReconcileTimeout <= 0 {
		o.ReconcileTimeout = 5 * time.Minute
	}
	if o.MaxWait <= 0 {
		o.MaxWait = 4*time.Minute + 30*time.Second
	}
	if o.Backoff == nil {
		p := backoff.DefaultPolicy()
		o.Backoff = &p
	}
	if o.Clock == nil {
		o.Clock = backoff.RealClock()
	}
	if o.MaxBodyBytes <= 0 {
		o.MaxBodyBytes = 4 << 20
	}
	if o.AsyncGrace <= 0 {
		o.AsyncGrace = time.Minute
	}
	if o.MaxInFlight <= 0 {
		o.MaxInFlight = 1000
	}
	if o.FollowUpSettle == 0 {
		o.FollowUpSettle = 2 * time.Millisecond
	}
	if o.FollowUpMaxSettle <= 0 {
		o.FollowUpMaxSettle = 20 * time.Millisecond
	}
	if o.Logger.GetSink() == nil {
		o.Logger = logr.Discard()
	}
	return o
}

// ResultHeader carries the reason of a 2xx answer (whose body stays empty).
const ResultHeader = "Opzero-Result"

// ServeHTTP handles one delivery.
func (e *Engine) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	e.stats.Requests.Add(1)
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "POST a CloudEvent here", http.StatusMethodNotAllowed)
		return
	}
	if e.draining.Load() {
		unavailable(w, "shutting down; deliver to another instance or retry")
		return
	}
	select {
	case e.inFlight <- struct{}{}:
		defer func() { <-e.inFlight }()
	default:
		w.Header().Set("Retry-After", "1")
		http.Error(w, fmt.Sprintf("too many events in flight (%d); retry", e.opts.MaxInFlight), http.StatusTooManyRequests)
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, e.opts.MaxBodyBytes)
	ev, err := cloudevent.DecodeRequest(r.Context(), r)
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			http.Error(w, fmt.Sprintf("event larger than %d bytes", e.opts.MaxBodyBytes), http.StatusRequestEntityTooLarge)
			return
		}
		badRequest(w, err)
		return
	}
	rt, err := e.route(r.Context(), ev)
	if err != nil {
		var t transient
		if errors.As(err, &t) {
			unavailable(w, err.Error())
			return
		}
		badRequest(w, err)
		return
	}
	if len(rt.keys) == 0 {
		handled(w, rt.why)
		return
	}
	e.answer(w, r.Context(), rt)
}

// answer submits the routed keys and writes the answer once each has been
// reconciled by a run that started after this request arrived.
func (e *Engine) answer(w http.ResponseWriter, ctx context.Context, rt *routed) {
	if e.opts.Async {
		e.accept(w, ctx, rt)
		return
	}
	tickets := make([]*keyq.Ticket, len(rt.keys))
	for i, k := range rt.keys {
		tickets[i] = e.queue.Submit(k, rt.arrival(k))
		e.stats.Submitted.Add(1)
	}
	ctx, cancel := context.WithTimeout(ctx, e.opts.MaxWait)
	defer cancel()
	var failed, away, terminal, recorded, handedOff []string
	for i, t := range tickets {
		err := t.Wait(ctx)
		var re *ReconcileError
		var ho *HandedOff
		switch {
		case err == nil:
		case errors.As(err, &ho):
			handedOff = append(handedOff, ho.Error())
		case errors.As(err, &re) && re.Terminal:
			terminal = append(terminal, re.Error())
		case errors.As(err, &re) && re.Recorded:
			recorded = append(recorded, re.Error())
		case errors.As(err, &re) && re.Unrecorded:
			unavailable(w, re.Error())
			return
		case errors.As(err, &re) && apiServerAway(re.Err):
			away = append(away, re.Error())
		case errors.As(err, &re):
			failed = append(failed, re.Error())
		case errors.Is(err, keyq.ErrShutdown):
			unavailable(w, "shutting down before "+rt.keys[i].String()+" was reconciled; retry")
			return
		case ctx.Err() != nil:
			unavailable(w, fmt.Sprintf("%s still queued after %s; it will be reconciled, retry to be told when", rt.keys[i], e.opts.MaxWait))
			return
		default:
			failed = append(failed, fmt.Sprintf("%s: %v", rt.keys[i], err))
		}
	}
	switch {
	case len(away) > 0:
		unavailable(w, "the API server cannot be reached or is overloaded; retry scheduled here too: "+strings.Join(append(away, failed...), "; "))
	case len(failed) > 0:
		http.Error(w, "reconcile failed, retry scheduled: "+strings.Join(append(failed, terminal...), "; "), http.StatusInternalServerError)
	case len(terminal) > 0:
		http.Error(w, "reconcile failed terminally, not retried: "+strings.Join(terminal, "; "), http.StatusUnprocessableEntity)
	case len(recorded) > 0:
		handled(w, "reconcile failed, retry recorded: "+strings.Join(recorded, "; "))
	case len(handedOff) > 0:
		handled(w, fmt.Sprintf("reconciled %d key(s), handed off %d: %s", len(rt.keys)-len(handedOff), len(handedOff), strings.Join(handedOff, "; ")))
	default:
		handled(w, fmt.Sprintf("reconciled %d key(s): %s", len(rt.keys), rt.why))
	}
}

func handled(w http.ResponseWriter, why string) {
	w.Header().Set(ResultHeader, why)
	w.WriteHeader(http.StatusOK)
}

func badRequest(w http.ResponseWriter, err error) {
	http.Error(w, "bad event: "+err.Error(), http.StatusBadRequest)
}

func unavailable(w http.ResponseWriter, msg string) {
	w.Header().Set("Retry-After", "1")
	http.Error(w, msg, http.StatusServiceUnavailable)
}

// Stats counts what the engine did, for tests and the dev status line.
type Stats struct {
	Requests   atomic.Int64
	Submitted  atomic.Int64 // keys submitted to the queue
	Skipped    atomic.Int64
	Reconciles atomic.Int64
	Failures   atomic.Int64
	// HandOffs counts events left to the instance holding their key's
	// Lease; Reruns the extra reconciles such marks caused here.
	HandOffs atomic.Int64
	Reruns   atomic.Int64
}

// Draining reports whether the engine has begun shutting down.
func (e *Engine) Draining() bool { return e.draining.Load() }

// Stats returns the engine's counters.
func (e *Engine) Stats() *Stats { return &e.stats }

// accept (async mode) makes each key's intent durable, answers 202 and lets
// the reconciles run after the answer.
func (e *Engine) accept(w http.ResponseWriter, ctx context.Context, rt *routed) {
	acc := e.opts.Durable.(Acceptor)
	for _, k := range rt.keys {
		if err := acc.Accept(ctx, k, e.opts.AsyncGrace); err != nil {
			unavailable(w, fmt.Sprintf("could not record the event for %s: %v", k, err))
			return
		}
	}
	for _, k := range rt.keys {
		e.queue.Submit(k, rt.arrival(k))
		e.stats.Submitted.Add(1)
	}
	w.Header().Set(ResultHeader, fmt.Sprintf("accepted %d key(s): %s", len(rt.keys), rt.why))
	w.WriteHeader(http.StatusAccepted)
}
