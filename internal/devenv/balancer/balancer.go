// Package balancer is a round-robin HTTP load balancer over a set of
// backends, standing in for Knative's routing to several pods of one
// revision: in tests of scale-out, and in the local serverless platform.
//
// A backend that refuses the connection (a process that died) is skipped
// for that request and the next one is tried; the request body is buffered
// (up to MaxBody) so it can be sent again. Any answer, even a 5xx, is
// passed back as it is: retrying a delivered event is the sender's call.
package balancer

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
)

// MaxBody bounds a buffered request body (the engine's own default limit).
const MaxBody = 4 << 20

// Balancer is an http.Handler that spreads requests over its backends.
type Balancer struct {
	client *http.Client

	mu       sync.RWMutex
	backends []string // base URLs, e.g. http://127.0.0.1:18081

	next atomic.Uint64
	// Requests counts requests per backend URL that reached it.
	requests sync.Map // string -> *atomic.Int64
}

// New returns a Balancer over backends (base URLs).
func New(backends ...string) *Balancer {
	return &Balancer{client: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}, backends: backends}
}

// SetBackends replaces the backends (an instance started or stopped).
func (b *Balancer) SetBackends(backends ...string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.backends = append([]string(nil), backends...)
}

// Served returns how many requests backend answered.
func (b *Balancer) Served(backend string) int64 {
	if v, ok := b.requests.Load(backend); ok {
		return v.(*atomic.Int64).Load()
	}
	return 0
}

func (b *Balancer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, MaxBody+1))
	if err != nil {
		http.Error(w, "reading the request: "+err.Error(), http.StatusBadRequest)
		return
	}
	if len(body) > MaxBody {
		http.Error(w, fmt.Sprintf("request larger than %d bytes", MaxBody), http.StatusRequestEntityTooLarge)
		return
	}
	b.mu.RLock()
	backends := b.backends
	b.mu.RUnlock()
	if len(backends) == 0 {
		w.Header().Set("Retry-After", "1")
		http.Error(w, "no backend", http.StatusServiceUnavailable)
		return
	}
	start := int(b.next.Add(1) - 1)
	var errs []error
	for i := range backends {
		backend := backends[(start+i)%len(backends)]
		resp, err := b.send(r, backend, body)
		if err != nil {
			errs = append(errs, err)
			continue // refused or reset: try the next instance
		}
		v, _ := b.requests.LoadOrStore(backend, new(atomic.Int64))
		v.(*atomic.Int64).Add(1)
		defer resp.Body.Close()
		for k, vs := range resp.Header {
			w.Header()[k] = vs
		}
		w.WriteHeader(resp.StatusCode)
		_, _ = io.Copy(w, resp.Body)
		return
	}
	w.Header().Set("Retry-After", "1")
	http.Error(w, "no backend answered: "+errors.Join(errs...).Error(), http.StatusBadGateway)
}

func (b *Balancer) send(r *http.Request, backend string, body []byte) (*http.Response, error) {
	req, err := http.NewRequestWithContext(r.Context(), r.Method, backend+r.URL.RequestURI(), bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header = r.Header.Clone()
	req.Host = r.Host
	return b.client.Do(req)
}
