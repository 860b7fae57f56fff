package serverless

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/opzero/opzero/builder"
	"github.com/opzero/opzero/internal/backoff"
	"github.com/opzero/opzero/internal/genskip"
	"github.com/opzero/opzero/internal/keyq"
	"github.com/opzero/opzero/internal/lease"
	"github.com/opzero/opzero/internal/standin"
	"github.com/opzero/opzero/internal/telemetry"
)

// Options tunes an Engine. Zero values take the defaults in parentheses.
type Options struct {
	// MaxConcurrentReconciles bounds the reconciler calls at once (8):
	// distinct keys reconciling. With a Locker, taking, keeping and
	// releasing keys' Leases does not count against it: up to as many more
	// keys may be doing that, or holding a Lease while they wait for a
	// reconcile slot (slot.go).
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
	// Durable, if set, is durable time: retries and requeues are recorded as
	// Wakeups that outlive the instance, instead of in-process timers; a
	// failed reconcile is then answered 200 once its retry is recorded, 503
	// if it cannot be.
	Durable Durable
	// Async answers 202 as soon as each key's intent is durable (an
	// Accepted Wakeup; needs Durable) and reconciles afterwards.
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
	// AnswerAdmitted answers an ApiServerSource event (an object event) 200
	// as soon as its keys are admitted to the per-key queue, and reconciles
	// afterwards, so that one sender that delivers one event at a time
	// feeds up to MaxConcurrentReconciles reconciles at once. What 2xx then
	// means, what a SIGKILL can lose and what heals it: the package
	// documentation. PingSource sweeps and wakeups are still answered after
	// their reconciles.
	AnswerAdmitted bool
	// MaxAdmitted bounds the keys admitted and not yet reconciled (256);
	// past it, an event is answered after its reconciles, as without
	// AnswerAdmitted: the sender is slowed to the reconciles' pace.
	MaxAdmitted int
	// Locker, if set, serializes each key across instances with a
	// coordination.k8s.io Lease (package lease): for operators that may
	// run more than one instance. nil keeps serialization in memory only.
	Locker *lease.Locker
	// LeaseKeepIdle (with a Locker) keeps a key's Lease after its run, renewed,
	// for the key's next run, and releases it once the key has had no run
	// for that long, or on shutdown: a stream of events for a key costs two
	// Lease writes (and a renewal every third of the Lease's duration)
	// instead of two per reconcile. An event for the key that reaches
	// another instance meanwhile is handed off and reconciled here when
	// the Lease is released: up to LeaseKeepIdle later (1 s; negative:
	// release after each run).
	LeaseKeepIdle time.Duration
	// EventCache answers the reconcilers' Gets of owned and watched objects
	// from the objects Resource-mode events delivered while this instance
	// is warm, and (for kinds whose source has no label selector: every
	// change of them arrives as an event) from what an earlier Get read
	// until an event of the object arrives (standin.Cache states the
	// rules), instead of the API server. Opt-in: it saves a GET per read,
	// and holds those objects in memory (at most 10000, each served for at
	// most a minute after its event or read).
	EventCache bool
	// Logger (logr.Discard()). Each reconcile's context carries it with the
	// controller, the key and a reconcile ID, as controller-runtime's does.
	Logger logr.Logger
}

// aloneAware is a Durable that looks for records less while this
// instance runs alone (wakeup.Store.SetAlone: no other instance writes
// retries then). SetAlone must not block: it is called under the sole
// Lease's lock.
type aloneAware interface {
	SetAlone(alone bool)
}

// Durable is durable time: the store of Wakeup records (package wakeup's
// Store) that the wakeup source delivers back to the operator.
type Durable interface {
	// Requeue records, after a success, a reconcile of key after d.
	Requeue(ctx context.Context, key reconcile.Request, d time.Duration) error
	// Failed counts a failure of key and records its retry after the
	// key's backoff; it returns when the retry is due and the attempt.
	Failed(ctx context.Context, key reconcile.Request) (retryIn time.Duration, attempt int, err error)
	// Succeeded cancels key's pending retry and resets its backoff.
	Succeeded(ctx context.Context, key reconcile.Request) error
	// Accept records that an event for key was taken on: if key is not
	// reconciled within grace, it is delivered again (async mode, and a
	// look at a Lease held by another instance).
	Accept(ctx context.Context, key reconcile.Request, grace time.Duration) error
	// Overdue lists the keys whose records are past due (the sweep heals a
	// wakeup source that was down).
	Overdue(ctx context.Context) ([]reconcile.Request, error)
}

// Engine is the serverless runtime of one operator: an http.Handler.
type Engine struct {
	op    *builder.Controller
	c     client.Client // the API server, uncached; reconcilers get the same, wrapped
	opts  Options
	log   logr.Logger
	queue *keyq.Queue[reconcile.Request, *arrival]
	// slots bounds the reconciles at once (MaxConcurrentReconciles); with
	// a Locker the queue runs more keys than that (slot.go).
	slots slots
	// claims: arrivals answered at admission that a run claimed (slot.go).
	claims claims
	// retry schedules what follows a reconcile: durably or in memory.
	retry retrier
	// checks looks again at a Lease another instance held when it
	// expires (Options.Locker), in case its holder died.
	checks *backoff.Tracker[reconcile.Request]
	// readmit submits again, after the key's backoff, a key whose admitted
	// event's run could not happen (Options.AnswerAdmitted): nobody waits
	// for its answer to deliver it again.
	readmit *backoff.Tracker[reconcile.Request]
	// admitted counts the admitted arrivals not yet taken by a run.
	admitted atomic.Int64
	// keeper holds the Leases kept between a key's runs (Options.LeaseKeepIdle).
	keeper keeper
	// fwd sends events to the instance holding their key's Lease
	// (forward.go); nil without a Locker.
	fwd *forwarder
	// sole is the operator's sole Lease (sole.go): with a Locker whose
	// instances may run alone (lease.Options.Sole); else nil.
	sole *sole
	// versions is the newest resourceVersion known per primary object, so
	// that an event's object never stands in when it is older.
	versions *standin.Versions
	// cache holds the owned and watched objects events delivered
	// (Options.EventCache); nil when off.
	cache *standin.Cache

	memoMu sync.Mutex
	memo   *genskip.Memo[reconcile.Request] // last primary metadata fingerprint per key

	draining atomic.Bool
	inFlight chan struct{} // a slot per request being handled
	stats    Stats
	obs      *telemetry.Observer
}

// arrival is one event's contribution to a key's next reconcile.
type arrival struct {
	object  []byte // the primary object, Resource mode only
	version string // its resourceVersion
	reason  string
	// check: no event, only a look at the key's Lease at its expiry.
	check bool
	obs   telemetry.Arrival // when and in which trace it was queued
	// admitted: its request was answered at admission (Options.AnswerAdmitted).
	admitted bool
	// release: no event, the key's kept Lease has been idle
	// (Options.LeaseKeepIdle) since its idle period seq began.
	release bool
	seq     int
	// forward: its request can forward itself to the key's holder (forward.go).
	forward bool
	// keyLease: take the key's own Lease even while running alone (a
	// sweep found it expired: taking it over deletes it).
	keyLease bool
}

// Stats counts what the engine did, for tests and the dev status line.
type Stats struct {
	Requests   atomic.Int64
	Submitted  atomic.Int64 // keys submitted to the queue
	Skipped    atomic.Int64
	Reconciles atomic.Int64
	Failures   atomic.Int64 // reconciles that returned an error
	// HandOffs counts events left to the instance holding their key's
	// Lease; Reruns the extra reconciles such marks caused here.
	HandOffs atomic.Int64
	Reruns   atomic.Int64
	// Forwarded counts events sent on to the instance holding their key's
	// Lease and answered by it; ForwardFailures those it did not take
	// (then marked, as hand-offs).
	Forwarded       atomic.Int64
	ForwardFailures atomic.Int64
	// Admitted counts events answered at admission (Options.AnswerAdmitted).
	Admitted atomic.Int64
	// MemoryConflicts counts reconciles whose write conflicted after a Get
	// answered from an event's object or the event cache, and that were
	// run again at once reading from the API server (each also counts in
	// Reconciles).
	MemoryConflicts atomic.Int64
}

// New returns an engine for op. c must read from the API server (no cache);
// the reconciler should have been given standin.NewClient(c) (or the same
// client wrapped by the runtime) so that the first-Get stand-in applies.
func New(op *builder.Controller, c client.Client, opts Options) (*Engine, error) {
	if op == nil || op.Reconciler == nil {
		return nil, errors.New("serverless: the operator or its reconciler is nil")
	}
	if c == nil {
		return nil, errors.New("serverless: the client is nil")
	}
	if _, ok := c.(standin.Client); !ok {
		c = standin.NewClient(c) // so the engine's own writes are known to standin.Versions
	}
	opts = opts.withDefaults()
	if opts.Async && opts.AnswerAdmitted {
		return nil, errors.New("serverless: async mode and answering at admission exclude each other; choose one")
	}
	if opts.Async && opts.Durable == nil {
		return nil, errors.New("serverless: async mode needs durable time (a wakeup store) to record accepted events")
	}
	e := &Engine{op: op, c: c, opts: opts, log: opts.Logger, memo: genskip.NewMemo[reconcile.Request](100_000),
		versions: standin.NewVersions(), inFlight: make(chan struct{}, opts.MaxInFlight),
		obs: telemetry.NewObserver(op.Name, opts.MaxConcurrentReconciles, opts.Logger), slots: make(slots, opts.MaxConcurrentReconciles)}
	e.queue = keyq.New[reconcile.Request, *arrival](keyq.Options{MaxConcurrent: opts.queueRuns(),
		Settle: max(opts.FollowUpSettle, 0), MaxSettle: opts.FollowUpMaxSettle}, e.run)
	if opts.Locker != nil {
		e.fwd = newForwarder(opts.Locker.Duration())
	}
	if opts.EventCache {
		var kinds, reads []schema.GroupVersionKind
		add := func(k builder.Kind) {
			kinds = append(kinds, k.GVK)
			if k.Selector == nil { // every change of every object is delivered
				reads = append(reads, k.GVK)
			}
		}
		for _, k := range op.Owned {
			add(k)
		}
		for _, w := range op.Watched {
			add(w.Kind)
		}
		e.cache = standin.NewCache(kinds...)
		e.cache.KeepReads(reads...)
	}
	if opts.Locker != nil && opts.Locker.Sole() {
		d, _ := opts.Durable.(aloneAware)
		e.sole = newSole(opts.Locker, opts.Logger, func(alone bool) {
			e.cache.Serve(alone)
			if d != nil {
				d.SetAlone(alone)
			}
		})
		e.cache.Serve(false) // until this instance runs alone
	}
	if opts.Durable != nil {
		e.retry = durableRetry{opts.Durable}
	} else {
		e.retry = memoryRetry{backoff.NewTracker[reconcile.Request](*opts.Backoff, opts.Clock, func(key reconcile.Request) {
			e.queue.Submit(key, &arrival{reason: "retry"})
		})}
	}
	e.checks = backoff.NewTracker[reconcile.Request](*opts.Backoff, opts.Clock, func(key reconcile.Request) {
		e.queue.Submit(key, &arrival{reason: "lease expiry check", check: true})
	})
	e.readmit = backoff.NewTracker[reconcile.Request](*opts.Backoff, opts.Clock, func(key reconcile.Request) {
		e.queue.Submit(key, &arrival{reason: "retry of an event answered at admission"})
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
	if o.LeaseKeepIdle == 0 {
		o.LeaseKeepIdle = time.Second
	}
	if o.MaxAdmitted <= 0 {
		o.MaxAdmitted = 256
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

// Draining reports whether the engine has begun shutting down.
func (e *Engine) Draining() bool { return e.draining.Load() }

// Stats returns the engine's counters.
func (e *Engine) Stats() *Stats { return &e.stats }

// Operator is the name of the operator the engine runs.
func (e *Engine) Operator() string { return e.op.Name }
