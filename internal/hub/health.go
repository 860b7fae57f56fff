package hub

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"time"
)

// health tracks the watch of Subscriptions for /healthz.
type health struct {
	mu    sync.Mutex
	ok    bool
	since time.Time
	err   error
}

func (x *health) set(ok bool, err error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if ok != x.ok || x.since.IsZero() {
		x.ok, x.since = ok, time.Now()
	}
	x.err = err
}

// HealthHandler serves /healthz: 200 while the watch of Subscriptions is
// open or has been down for less than two minutes.
func (h *Hub) HealthHandler() http.Handler {
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		h.health.mu.Lock()
		ok, since, err := h.health.ok, h.health.since, h.health.err
		h.health.mu.Unlock()
		if ok || since.IsZero() || time.Since(since) < 2*time.Minute {
			_, _ = rw.Write([]byte("ok\n"))
			return
		}
		rw.WriteHeader(http.StatusServiceUnavailable)
		_ = json.NewEncoder(rw).Encode(map[string]string{"error": fmt.Sprintf("the watch of Subscriptions has been down since %s: %v", since.Format(time.RFC3339), err)})
	})
}

// ReadyHandler serves /readyz: 200 once the watch of Subscriptions has
// synced and every bucket was tried (held here, or found held by another
// replica); its body lists the buckets. A light standby is ready while it
// waits: it has found every bucket held, and takes one when it is free.
func (h *Hub) ReadyHandler() http.Handler {
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		rw.Header().Set("Content-Type", "application/json")
		if h.standing.Load() {
			_ = json.NewEncoder(rw).Encode(map[string]any{"lightStandby": true})
			return
		}
		h.health.mu.Lock()
		synced := h.health.ok
		h.health.mu.Unlock()
		tried := h.el.Tried()
		if !synced || !tried {
			rw.WriteHeader(http.StatusServiceUnavailable)
		}
		_ = json.NewEncoder(rw).Encode(map[string]any{"subscriptionsSynced": synced, "bucketsTried": tried, "buckets": h.el.Status()})
	})
}
