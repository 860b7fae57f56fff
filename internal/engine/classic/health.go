package classic

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	toolscache "k8s.io/client-go/tools/cache"
)

// Informers is a liveness check of the manager's informers: an informer
// whose list or watch has kept failing (the API server away, access
// revoked) for StuckAfter is stuck, and the check fails, so kubelet
// restarts the pod, as it would a process that stopped making progress.
// It learns of failures from the cache's watch error hook
// (cache.Options.DefaultWatchErrorHandler: WatchError); it passes the errors
// on to client-go's default handler, which logs them.
//
// A failure streak ends when the informer makes progress (its reflector's
// last synced resourceVersion moves) or no error came for Quiet (longer
// than client-go's longest backoff between tries, 30 s plus jitter).
type Informers struct {
	StuckAfter time.Duration // DefaultStuckAfter if zero
	Quiet      time.Duration // DefaultQuiet if zero

	mu      sync.Mutex
	failing map[*toolscache.Reflector]*streak
}

// The defaults of Informers.
const (
	DefaultStuckAfter = 2 * time.Minute
	DefaultQuiet      = 70 * time.Second
)

type streak struct {
	what        string // the reflector's type and name
	rv          string // its last synced resourceVersion when the streak began
	first, last time.Time
	err         error
}

// WatchError is the cache's watch error handler.
func (h *Informers) WatchError(ctx context.Context, r *toolscache.Reflector, err error) {
	toolscache.DefaultWatchErrorHandler(ctx, r, err)
	if err == nil || err == io.EOF || apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
		return // a watch that ended normally, or must list again: no failure
	}
	now := time.Now()
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.failing == nil {
		h.failing = map[*toolscache.Reflector]*streak{}
	}
	s := h.failing[r]
	if s == nil || h.ended(r, s, now) {
		s = &streak{what: r.TypeDescription() + " (" + r.Name() + ")", rv: r.LastSyncResourceVersion(), first: now}
		h.failing[r] = s
	}
	s.last, s.err = now, err
}

// ended: the informer progressed or was quiet since the streak's last error.
func (h *Informers) ended(r *toolscache.Reflector, s *streak, now time.Time) bool {
	return r.LastSyncResourceVersion() != s.rv || now.Sub(s.last) > orDefault(h.Quiet, DefaultQuiet)
}

// Check is a healthz.Checker: an error names each stuck informer, since
// when and its last error.
func (h *Informers) Check(*http.Request) error {
	now := time.Now()
	h.mu.Lock()
	defer h.mu.Unlock()
	var stuck []string
	for r, s := range h.failing {
		if h.ended(r, s, now) {
			delete(h.failing, r)
			continue
		}
		if since := now.Sub(s.first); since >= orDefault(h.StuckAfter, DefaultStuckAfter) {
			stuck = append(stuck, fmt.Sprintf("informer for %s has failed to list or watch for %s: %v", s.what, since.Round(time.Second), s.err))
		}
	}
	if len(stuck) == 0 {
		return nil
	}
	sort.Strings(stuck)
	return fmt.Errorf("%s", strings.Join(stuck, "; "))
}

func orDefault(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}
