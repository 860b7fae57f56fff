package knative

import (
	"context"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"time"
)

// What Knative's ApiServerSource adapter (eventing v0.50.0) shows of its
// health, read from its source:
//
//   - Probes: /health and /readiness on :8080, a port fixed in the binary
//     (knative.dev/pkg injection.HealthCheckDefaultPort, no setting moves
//     it). They fail only after SIGTERM, say nothing of the watches, and a
//     second adapter on the machine cannot bind the port (the error is
//     dropped): a probe of :8080 may reach another adapter. Not used.
//   - Metrics: with K_OBSERVABILITY_CONFIG protocol prometheus, /metrics on
//     an endpoint of our choice (Go runtime, client-go request durations).
//     One port per adapter: Probe reads it, as kubelet's liveness probe
//     would read /health.
//   - Its reflectors (client-go): an abnormal end of a watch is logged as
//     "watch ended with error" (level 0); the reflector then lists again
//     after a backoff of up to 30 s (60 s with jitter), and "Caches
//     populated" is logged (level 2) after every list. The adapter's store
//     sends nothing for a list (its Replace is empty), so every change made
//     between the end of the watch and the next list is never sent. Those
//     two lines are what Gap reports.

var reflectorName = regexp.MustCompile(`reflector="([^"]*)"`)

// watchLog follows the reflectors' lines of one adapter's output.
type watchLog struct {
	want int // reflectors the adapter runs

	mu        sync.Mutex
	populated map[string]int // lists per reflector
}

// readWatchLine is called with every line of the adapter's output.
func (a *Adapter) readWatchLine(line string) {
	w := a.watch
	switch {
	case strings.Contains(line, "watch ended with error"):
		a.reportGap(line)
	case strings.Contains(line, `"Caches populated"`):
		name := ""
		if m := reflectorName.FindStringSubmatch(line); m != nil {
			name = m[1]
		}
		w.mu.Lock()
		if w.populated == nil {
			w.populated = map[string]int{}
		}
		w.populated[name]++
		n, distinct := w.populated[name], len(w.populated)
		w.mu.Unlock()
		if n > 1 {
			a.reportGap(line)
		} else if distinct == w.want {
			close(a.synced)
		}
	}
}

func (a *Adapter) reportGap(line string) {
	select {
	case a.gap <- strings.TrimSpace(line):
	default: // one gap pending is enough: the adapter is restarted for it
	}
}

// Gap receives a line of the adapter's log that shows its watch stream
// had a gap: a watch that ended with an error, or a list after the first
// one of a reflector (the changes in between are never sent).
func (a *Adapter) Gap() <-chan string { return a.gap }

// Synced is closed once every reflector of the adapter has listed its
// objects and opened its watch (at once for mtping).
func (a *Adapter) Synced() <-chan struct{} { return a.synced }

// Probe asks the adapter's metrics endpoint, as a liveness probe would:
// an error if it does not answer 200 within timeout. An adapter without
// one (mtping) always passes.
func (a *Adapter) Probe(ctx context.Context, timeout time.Duration) error {
	if a.metricsURL == "" {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, a.metricsURL, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("GET %s: %w", a.metricsURL, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", a.metricsURL, resp.Status)
	}
	return nil
}

// ExitErr is how the process ended, once Done is closed.
func (a *Adapter) ExitErr() error {
	select {
	case <-a.done:
		return a.err
	default:
		return nil
	}
}
