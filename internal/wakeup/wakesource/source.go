package wakesource

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/clock"

	v1alpha1 "github.com/opzero/opzero/api/v1alpha1"
	"github.com/opzero/opzero/internal/backoff"
	"github.com/opzero/opzero/internal/cloudevent"
	"github.com/opzero/opzero/internal/resourceversion"
)

// SourceOptions configures a Source.
type SourceOptions struct {
	// Namespace to watch; empty watches every namespace.
	Namespace string
	// Operator, if set, limits the Source to that operator's records (label
	// opzero.dev/operator): one source per operator, several operators on a
	// cluster, each record delivered once.
	Operator string
	// Operators, if set instead, limits the Source to the records of these
	// operators (the hub: those whose Subscriptions ask for wakeups).
	Operators []string
	// Route, if set, decides where a record goes and with which token,
	// instead of the record's spec.sink and Token: the hub sends each
	// record to the sink of its operator's Subscription. An error is a
	// failed delivery (backed off), except one wrapping ErrNoRoute: nowhere
	// to send it yet (the Subscription not Ready again after a restart),
	// tried again after NoRouteRetry doubling up to NoRouteRetryMax, not
	// the Backoff, so that the record goes out within seconds of its route
	// coming back, however long it was gone.
	Route func(ctx context.Context, operator, namespace, sink string) (url, token string, err error)
	// Concurrency bounds the events being sent at once (16); up to four
	// times as many delivered records may be waiting for their DELETE.
	Concurrency int
	// Backoff after a failed delivery (1 s doubling to 1 min).
	Backoff backoff.Policy
	// Token, if set, returns the bearer token to send (Knative OIDC style).
	Token func(ctx context.Context) (string, error)
	// HTTP delivers the events (a client with a 30 s timeout).
	HTTP *http.Client
	Log  logr.Logger
	// WatchGrace is how long the watch of Wakeups may be down before
	// Healthy fails (DefaultWatchGrace).
	WatchGrace time.Duration
	// Delivered, if set, is told of each successful delivery (tests, metrics).
	Delivered func(ns, name string, due, at time.Time)
	// Clock decides when a record is due and times the backoff (the wall
	// clock if nil). Tests pass k8s.io/utils/clock/testing's FakeClock.
	Clock clock.Clock
	// Window bounds the labeled records held at once (DefaultWindow): the
	// earliest ones; the rest are read by due bucket when their turn comes.
	Window int
	// PageSize is how many records one list request returns (500).
	PageSize int64
	// PagedStart reads every record at start by paged lists, as the Source
	// does by itself on an API server without WatchList (before 1.32, or
	// 1.33 with the gate off): each page costs the server a pass over the
	// rest of the records, so the start grows with their square (keep.go).
	// Off, the start is a watch's initial events (sendInitialEvents), one
	// pass over the API server's watch cache.
	PagedStart bool
}

// ErrNoRoute is what a Route wraps when a record has nowhere to go yet.
var ErrNoRoute = errors.New("no route for the wakeup yet")

// NoRouteRetry and NoRouteRetryMax: a record whose Route said ErrNoRoute is
// tried again after NoRouteRetry, doubling up to NoRouteRetryMax (each try
// is a lookup in the hub's memory, no request; a record whose route stays
// gone costs one every few seconds).
const (
	NoRouteRetry    = 500 * time.Millisecond
	NoRouteRetryMax = 4 * time.Second
)

// DefaultWindow is how many records a Source holds at most (besides
// strays, records without a valid DueBucketLabel): ~3 MiB of entries, a
// few seconds of deliveries at full speed.
const DefaultWindow = 10_000

// Source delivers due Wakeups: see the package documentation.
type Source struct {
	c    Records
	opts SourceOptions

	mu      sync.Mutex
	entries map[string]*entry // by namespace/name: the window (window.go)
	due     dueHeap           // entries not being delivered, by due time
	labeled int               // entries with a valid due bucket
	cutoff  time.Time         // labeled records due at or after it are not held
	horizon time.Time         // the cutoff's ceiling: the end of the bucket after the clock's
	listed  map[int64]string  // bucket -> resource version of the list that last read it
	scans   uint64
	paged   bool // start by paged lists (SourceOptions.PagedStart, or the server lacks WatchList)
	group   int  // buckets the next read of the window takes (advance)
	gated   bool // a list is being read: deliver only entries due before below
	below   time.Time
	kick    chan struct{}
	seen    string // the resource version the watch has brought the window to

	health watchHealth
}

// entry is what the Source keeps of a record: a few strings, no object.
type entry struct {
	ns, name, rv string
	due          time.Time
	sink         string
	target       v1alpha1.Target
	operator     string
	reason       string
	failures     int
	unrouted     int // tries in a row that found no route (ErrNoRoute): logged at the first
	index        int // in the heap; -1 when not queued (being delivered)
	labeled      bool
	bucket       int64  // its DueBucketLabel, if labeled
	scan         uint64 // the last list that showed it
}

// Seen says whether the Source's watch has brought it every change of its
// records up to resourceVersion rv (a write's): false before its first
// sync and for a version it cannot compare.
func (s *Source) Seen(rv string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.seen == "" {
		return false
	}
	c, err := resourceversion.CompareResourceVersion(s.seen, rv)
	return err == nil && c >= 0
}

// Pending is how many records the Source holds: every pending record while
// they fit in its window, else the window's earliest (the rest are listed
// when their turn comes, and not counted here).
func (s *Source) Pending() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.entries)
}

// NewSource returns a Source reading and deleting Wakeups through c.
func NewSource(c Records, o SourceOptions) *Source {
	if o.Concurrency <= 0 {
		o.Concurrency = 16
	}
	if o.Backoff.Base == 0 {
		o.Backoff = backoff.Policy{Base: time.Second, Cap: time.Minute}
	}
	if o.WatchGrace <= 0 {
		o.WatchGrace = DefaultWatchGrace
	}
	if o.HTTP == nil {
		o.HTTP = &http.Client{Timeout: 30 * time.Second}
	}
	if o.Log.GetSink() == nil {
		o.Log = logr.Discard()
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	if o.Window <= 0 {
		o.Window = DefaultWindow
	}
	if o.PageSize <= 0 {
		o.PageSize = 500
	}
	return &Source{c: c, opts: o, entries: map[string]*entry{}, listed: map[int64]string{}, paged: o.PagedStart, group: maxBuckets, kick: make(chan struct{}, 1)}
}

// Held is the number of records the Source holds (its window and strays).
func (s *Source) Held() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.entries)
}

// Run watches Wakeups and delivers them when due until ctx ends.
func (s *Source) Run(ctx context.Context) error {
	s.health.begin(true)
	defer s.health.begin(false)
	// A delivery holds a slot of sending while it sends the event, and one
	// of settling until its record is deleted: a slow DELETE does not hold
	// back the next events, and both stay bounded.
	sending := make(chan struct{}, s.opts.Concurrency)
	settling := make(chan struct{}, 4*s.opts.Concurrency)
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Add(1)
	go func() { defer wg.Done(); s.keep(ctx) }()
	timer := s.opts.Clock.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		next, wait := s.popDue(s.opts.Clock.Now())
		if next != nil {
			settling <- struct{}{}
			sending <- struct{}{}
			wg.Add(1)
			go func() { defer wg.Done(); defer func() { <-settling }(); s.deliver(ctx, next, sending) }()
			continue
		}
		timer.Reset(wait)
		select {
		case <-ctx.Done():
			return nil
		case <-s.kick:
		case <-timer.C():
		}
	}
}

// popDue takes the earliest entry if it is due, or says how long to wait.
func (s *Source) popDue(now time.Time) (*entry, time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.due) == 0 {
		return nil, time.Hour
	}
	e := s.due[0]
	if wait := e.due.Sub(now); wait > 0 {
		return nil, wait
	}
	if s.gated && !e.due.Before(s.below) {
		return nil, time.Hour // a list is being read (keep.go): the keeper pokes when it is done
	}
	heap.Pop(&s.due)
	cp := *e
	return &cp, 0
}

// deliver sends e's event, releases its slot of sending, and deletes the
// record after a 2xx; it backs off after a failure.
func (s *Source) deliver(ctx context.Context, e *entry, sending <-chan struct{}) {
	err := s.send(ctx, e)
	<-sending
	if err == nil {
		if s.opts.Delivered != nil {
			s.opts.Delivered(e.ns, e.name, e.due, s.opts.Clock.Now())
		}
		// Only the record as delivered: a new due time written meanwhile stays.
		derr := s.c.Delete(ctx, e.ns, e.name, e.rv)
		if derr == nil || apierrors.IsNotFound(derr) || apierrors.IsConflict(derr) {
			return
		}
		err = fmt.Errorf("delivered, but deleting the record failed: %w", derr)
	}
	noRoute := errors.Is(err, ErrNoRoute)
	if !noRoute || e.unrouted == 0 {
		if noRoute {
			s.opts.Log.Info("no route for a due wakeup yet; trying again until there is one", "wakeup", e.ns+"/"+e.name, "reason", err.Error(), "atMost", NoRouteRetryMax)
		} else {
			s.opts.Log.Error(err, "wakeup delivery failed; backing off", "wakeup", e.ns+"/"+e.name, "sink", e.sink)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if cur, ok := s.entries[e.ns+"/"+e.name]; ok && cur.rv == e.rv && cur.index < 0 {
		if noRoute { // not a failure of the sink: no backoff
			cur.due = s.opts.Clock.Now().Add(min(NoRouteRetry<<min(cur.unrouted, 8), NoRouteRetryMax))
			cur.unrouted++
		} else {
			cur.unrouted = 0
			cur.failures++
			cur.due = s.opts.Clock.Now().Add(s.opts.Backoff.Delay(cur.failures - 1))
		}
		heap.Push(&s.due, cur)
		s.poke()
	}
}

func (s *Source) send(ctx context.Context, e *entry) error {
	ev := cloudevent.NewWakeup(cloudevent.Wakeup{
		Source:   "/apis/opzero.dev/v1alpha1/namespaces/" + e.ns + "/wakeups/" + e.name,
		Operator: e.operator, APIVersion: e.target.APIVersion, Kind: e.target.Kind,
		Namespace: e.target.Namespace, Name: e.target.Name, Reason: e.reason,
	})
	url, tok := e.sink, ""
	if s.opts.Route != nil {
		var err error
		if url, tok, err = s.opts.Route(ctx, e.operator, e.ns, e.sink); err != nil {
			return err
		}
	}
	req, err := cloudevent.NewRequest(ctx, url, ev, false)
	if err != nil {
		return fmt.Errorf("building the request to %s: %w", url, err)
	}
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	} else if s.opts.Token != nil {
		tok, err := s.opts.Token(ctx)
		if err != nil {
			return fmt.Errorf("getting a token: %w", err)
		}
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := s.opts.HTTP.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%s answered %s", url, resp.Status)
	}
	return nil
}

func (s *Source) poke() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}
