package wakeup_test

import (
	"context"
	"errors"
	"github.com/opzero/opzero/internal/testkit"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/opzero/opzero/internal/wakeup"
	"github.com/opzero/opzero/testenv"
)

// TestSourceHealth: /healthz follows the watch of Wakeups against the real
// API server. Not running: unhealthy. Running: ready and healthy. When the
// watch ends and every new list and watch fails (the API server away, as
// injected around the real client), healthy for WatchGrace, then 503 with
// the reason; once the API server answers again, healthy without a
// restart.
func TestSourceHealth(t *testing.T) {
	env := testenv.Get(t)
	ns := env.Namespace(t)
	real, err := client.NewWithWatch(env.Config, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	var away atomic.Bool
	var mu sync.Mutex
	var open []watch.Interface
	c, err := interceptor.NewClient(real, interceptor.Funcs{
		List: func(ctx context.Context, c client.WithWatch, l client.ObjectList, o ...client.ListOption) error {
			if away.Load() {
				return errors.New("injected: the API server is away")
			}
			return c.List(ctx, l, o...)
		},
		Watch: func(ctx context.Context, c client.WithWatch, l client.ObjectList, o ...client.ListOption) (watch.Interface, error) {
			if away.Load() {
				return nil, errors.New("injected: the API server is away")
			}
			w, err := c.Watch(ctx, l, o...)
			if err == nil {
				mu.Lock()
				open = append(open, w)
				mu.Unlock()
			}
			return w, err
		},
	}), nil
	if err != nil {
		t.Fatal(err)
	}
	const grace = 3 * time.Second
	src := wakeup.NewSource(c, wakeup.SourceOptions{Namespace: ns, WatchGrace: grace})
	srv := httptest.NewServer(src.HealthHandler())
	defer srv.Close()
	code := func(path string) (int, string) {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if got, _ := code("/healthz"); got != http.StatusServiceUnavailable {
		t.Fatalf("/healthz before Run: %d, want 503", got)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx) }()
	defer func() { cancel(); <-done }()
	testkit.Eventually(t, 10*time.Second, "ready and healthy", func(context.Context) (bool, error) {
		r, _ := code("/readyz")
		h, _ := code("/healthz")
		return r == http.StatusOK && h == http.StatusOK, nil
	})

	away.Store(true)
	mu.Lock()
	for _, w := range open {
		w.Stop() // the API server went away: the watch ends
	}
	mu.Unlock()
	down := time.Now()
	var body string
	testkit.Eventually(t, grace+30*time.Second, "unhealthy once the watch is gone for the grace", func(context.Context) (bool, error) {
		var got int
		got, body = code("/healthz")
		if got == http.StatusOK {
			return false, nil
		}
		if since := time.Since(down); since < grace {
			t.Fatalf("/healthz %d %q after %s, before the grace of %s", got, body, since, grace)
		}
		return true, nil
	})
	if !strings.Contains(body, "no watch of Wakeups") || !strings.Contains(body, "injected") {
		t.Fatalf("/healthz body %q, want the reason with the last error", body)
	}

	away.Store(false)
	testkit.Eventually(t, 90*time.Second, "healthy again without a restart", func(context.Context) (bool, error) {
		got, _ := code("/healthz")
		return got == http.StatusOK, nil
	})
}
