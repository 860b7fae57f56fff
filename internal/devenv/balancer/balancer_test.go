package balancer_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/opzero/opzero/internal/devenv/balancer"
)

func backend(t *testing.T, name string) *httptest.Server {
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		w.Header().Set("X-Backend", name)
		w.WriteHeader(http.StatusAccepted)
		_, _ = w.Write(append([]byte(name+":"), b...))
	}))
	t.Cleanup(s.Close)
	return s
}

func post(t *testing.T, url, body string) (*http.Response, string) {
	t.Helper()
	resp, err := http.Post(url, "text/plain", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

func TestRoundRobinPassesAnswersThrough(t *testing.T) {
	a, b := backend(t, "a"), backend(t, "b")
	lb := balancer.New(a.URL, b.URL)
	front := httptest.NewServer(lb)
	defer front.Close()
	got := map[string]int{}
	for i := 0; i < 10; i++ {
		resp, body := post(t, front.URL+"/x", "hello")
		if resp.StatusCode != http.StatusAccepted || !strings.HasSuffix(body, ":hello") {
			t.Fatalf("answer %d %q: want the backend's 202 and body", resp.StatusCode, body)
		}
		got[resp.Header.Get("X-Backend")]++
	}
	if got["a"] != 5 || got["b"] != 5 || lb.Served(a.URL) != 5 {
		t.Fatalf("spread %v, want 5 each", got)
	}
}

func TestDeadBackendIsSkipped(t *testing.T) {
	a := backend(t, "a")
	dead := httptest.NewServer(http.NotFoundHandler())
	deadURL := dead.URL
	dead.Close() // refuses connections from now on
	front := httptest.NewServer(balancer.New(deadURL, a.URL))
	defer front.Close()
	for i := 0; i < 4; i++ {
		resp, body := post(t, front.URL, "e")
		if resp.StatusCode != http.StatusAccepted || body != "a:e" {
			t.Fatalf("request %d: %d %q, want it delivered to the live backend with its body", i, resp.StatusCode, body)
		}
	}
}

func TestNoBackendAnswers(t *testing.T) {
	front := httptest.NewServer(balancer.New())
	defer front.Close()
	if resp, _ := post(t, front.URL, "e"); resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("no backends: %d, want 503", resp.StatusCode)
	}
	dead := httptest.NewServer(http.NotFoundHandler())
	dead.Close()
	front2 := httptest.NewServer(balancer.New(dead.URL))
	defer front2.Close()
	if resp, body := post(t, front2.URL, "e"); resp.StatusCode != http.StatusBadGateway || !strings.Contains(body, "no backend answered") {
		t.Fatalf("all dead: %d %q, want 502 naming the failure", resp.StatusCode, body)
	}
}
