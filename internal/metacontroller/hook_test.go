package metacontroller

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func hookServer(t *testing.T, h http.HandlerFunc) string {
	s := httptest.NewServer(h)
	t.Cleanup(s.Close)
	return s.URL
}

func TestHookGarbageIsABadAnswer(t *testing.T) {
	for name, body := range map[string]string{
		"not JSON":       "<html>oops</html>",
		"empty":          "",
		"array":          `[1,2]`,
		"child no kind":  `{"children":[{"apiVersion":"v1","metadata":{"name":"x"}}]}`,
		"status string":  `{"status":"fine"}`,
		"children a map": `{"children":{"a":1}}`,
	} {
		t.Run(name, func(t *testing.T) {
			var calls atomic.Int32
			url := hookServer(t, func(w http.ResponseWriter, r *http.Request) {
				calls.Add(1)
				_, _ = w.Write([]byte(body))
			})
			var resp CompositeSyncResponse
			err := (&HookClient{}).Call(context.Background(), url, time.Second, CompositeSyncRequest{}, &resp)
			var bad *BadAnswer
			if !errors.As(err, &bad) {
				t.Fatalf("want a BadAnswer, got %v", err)
			}
			if calls.Load() != 1 {
				t.Fatalf("a garbage answer was retried: %d calls", calls.Load())
			}
		})
	}
}

func TestHookTimeoutIsRetriedThenFails(t *testing.T) {
	var calls atomic.Int32
	release := make(chan struct{})
	url := hookServer(t, func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	t.Cleanup(func() { close(release) }) // before the server's Close, which waits for handlers
	c := &HookClient{Attempts: 2, Backoff: time.Millisecond}
	var resp CompositeSyncResponse
	err := c.Call(context.Background(), url, 50*time.Millisecond, CompositeSyncRequest{}, &resp)
	if err == nil || !strings.Contains(err.Error(), "did not answer within 50ms") {
		t.Fatalf("want a timeout error, got %v", err)
	}
	if calls.Load() != 2 {
		t.Fatalf("want 2 attempts, got %d", calls.Load())
	}
}

func TestHookRetriesUnavailableAndSendsTheToken(t *testing.T) {
	var calls atomic.Int32
	url := hookServer(t, func(w http.ResponseWriter, r *http.Request) {
		if got := r.Header.Get("Authorization"); got != "Bearer s3cret" {
			t.Errorf("Authorization %q", got)
		}
		if calls.Add(1) < 3 {
			w.Header().Set("Retry-After", "0")
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte(`{"status":{"ok":true},"children":[{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a"}}],"resyncAfterSeconds":1.5}`))
	})
	c := &HookClient{Backoff: time.Millisecond, Token: func(context.Context) (string, error) { return "s3cret", nil }}
	var resp CompositeSyncResponse
	if err := c.Call(context.Background(), url, time.Second, CompositeSyncRequest{}, &resp); err != nil {
		t.Fatal(err)
	}
	if calls.Load() != 3 || len(resp.Children) != 1 || resp.Children[0].GetName() != "a" || resp.ResyncAfterSeconds != 1.5 {
		t.Fatalf("calls %d, answer %+v", calls.Load(), resp)
	}
}

func TestHookClientErrorIsNotRetried(t *testing.T) {
	var calls atomic.Int32
	url := hookServer(t, func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		http.Error(w, "no such parent", http.StatusBadRequest)
	})
	var resp CompositeSyncResponse
	err := (&HookClient{Backoff: time.Millisecond}).Call(context.Background(), url, time.Second, CompositeSyncRequest{}, &resp)
	if err == nil || !strings.Contains(err.Error(), "400") || calls.Load() != 1 {
		t.Fatalf("err %v after %d calls; want one call and the status", err, calls.Load())
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}
