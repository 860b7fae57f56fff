package wakesource

import (
	"fmt"
	"net/http"
	"sync"
	"time"
)

// DefaultWatchGrace is how long the Source's watch of Wakeups may be down
// before Healthy fails: longer than the Source backs off between attempts
// (up to 30 s), so one failed attempt is not a failure, a watch that does
// not come back is.
const DefaultWatchGrace = 2 * time.Minute

// watchHealth records whether the Source's watch of Wakeups is open.
type watchHealth struct {
	mu       sync.Mutex
	started  time.Time // Run began
	listed   bool      // a list succeeded once
	watching bool      // a watch is open now
	since    time.Time // when watching last changed
	lastErr  error
}

func (h *watchHealth) set(watching bool, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if watching != h.watching {
		h.watching, h.since = watching, time.Now()
	}
	if err != nil {
		h.lastErr = err
	}
}

// begin marks the start (end false) or the end of Run.
func (h *watchHealth) begin(running bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.started, h.since, h.watching, h.listed = time.Time{}, time.Now(), false, false
	if running {
		h.started = h.since
	}
}

// synced records a read of every Wakeup (initial events or a list): the
// watch is alive from there.
func (h *watchHealth) synced() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.listed = true
	if !h.watching {
		h.since = time.Now()
	}
}

// Healthy reports whether the Source's watch of Wakeups is alive: nil while
// a watch is open or has been down for less than SourceOptions.WatchGrace (also from
// the start of Run until the first list succeeds). A Source that is not
// running is not healthy.
func (s *Source) Healthy() error {
	h, grace := &s.health, s.opts.WatchGrace
	h.mu.Lock()
	defer h.mu.Unlock()
	now := time.Now()
	switch {
	case h.started.IsZero():
		return fmt.Errorf("the wakeup source is not running")
	case h.watching:
		return nil
	case !h.listed && now.Sub(h.started) < grace, h.listed && now.Sub(h.since) < grace:
		return nil
	case !h.listed:
		return fmt.Errorf("no list of Wakeups has succeeded in %s since the start (last error: %v)", now.Sub(h.started).Round(time.Second), h.lastErr)
	default:
		return fmt.Errorf("no watch of Wakeups for %s (last error: %v)", now.Sub(h.since).Round(time.Second), h.lastErr)
	}
}

// Synced reports whether the Source has read every Wakeup once (its
// watch's initial events, or a paged list).
func (s *Source) Synced() bool {
	s.health.mu.Lock()
	defer s.health.mu.Unlock()
	return s.health.listed
}

// HealthHandler serves /healthz (Healthy: a liveness probe restarts a
// source whose watch is gone) and /readyz (Synced).
func (s *Source) HealthHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		if err := s.Healthy(); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !s.Synced() {
			http.Error(w, "the Wakeups have not been listed yet", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	return mux
}
