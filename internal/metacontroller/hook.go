package metacontroller

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// The hook protocol, as Metacontroller's hooks speak it (JSON over POST).

// CompositeSyncRequest is what a CompositeController's sync and finalize
// hooks receive.
type CompositeSyncRequest struct {
	Controller any                        `json:"controller"`
	Parent     *unstructured.Unstructured `json:"parent"`
	// Children maps "Kind.apiVersion" to name to object (every child
	// resource of the controller has an entry, empty if it has no children).
	Children ChildMap `json:"children"`
	// Related is what the customize hook named, keyed as Children (empty
	// without a customize hook).
	Related    ChildMap `json:"related"`
	Finalizing bool     `json:"finalizing"`
}

// CompositeSyncResponse is what they answer.
type CompositeSyncResponse struct {
	Status             map[string]any               `json:"status"`
	Children           []*unstructured.Unstructured `json:"children"`
	ResyncAfterSeconds float64                      `json:"resyncAfterSeconds"`
	Finalized          bool                         `json:"finalized"`
}

// DecoratorSyncRequest is what a DecoratorController's hooks receive.
type DecoratorSyncRequest struct {
	Controller  any                        `json:"controller"`
	Object      *unstructured.Unstructured `json:"object"`
	Attachments ChildMap                   `json:"attachments"`
	Related     ChildMap                   `json:"related"`
	Finalizing  bool                       `json:"finalizing"`
}

// DecoratorSyncResponse is what they answer. A nil label or annotation
// value removes it.
type DecoratorSyncResponse struct {
	Labels             map[string]*string           `json:"labels"`
	Annotations        map[string]*string           `json:"annotations"`
	Status             map[string]any               `json:"status"`
	Attachments        []*unstructured.Unstructured `json:"attachments"`
	ResyncAfterSeconds float64                      `json:"resyncAfterSeconds"`
	Finalized          bool                         `json:"finalized"`
}

// ChildMap is "Kind.apiVersion" -> name -> object.
type ChildMap map[string]map[string]*unstructured.Unstructured

// ChildKey is the key of a kind in a ChildMap: "Kind.apiVersion", e.g.
// "Pod.v1", "Deployment.apps/v1".
func ChildKey(apiVersion, kind string) string { return kind + "." + apiVersion }

// BadAnswer is a hook answer that cannot be used: not JSON, or JSON of the
// wrong shape. Nothing is applied from it.
type BadAnswer struct {
	URL    string
	Reason string
}

func (e *BadAnswer) Error() string {
	return fmt.Sprintf("hook %s answered something opzero cannot use: %s (fix the hook; no child was changed)", e.URL, e.Reason)
}

// HookClient calls hooks: POST JSON, with a timeout per attempt, retries of
// what may pass (network errors, timeouts, 429, 502, 503, 504, honouring
// Retry-After), and a bearer token when Token is set (unless the hook's
// endpoint has an Authorization of its own).
type HookClient struct {
	// HTTP does the calls (default: a client without a global timeout; each
	// attempt is bounded by the hook's timeout).
	HTTP *http.Client
	// Token returns the bearer token to send ("" sends none).
	Token func(ctx context.Context) (string, error)
	// Attempts is how many times a call is tried (default 3).
	Attempts int
	// Backoff is the wait before the second attempt, doubled for each next
	// one (default 200 ms); a Retry-After header overrides it, up to MaxWait.
	Backoff time.Duration
	// MaxWait bounds one wait between attempts (default 5 s).
	MaxWait time.Duration

	mu  sync.Mutex
	tls map[string]tlsClient // host -> the client of its current TLS material
}

type tlsClient struct {
	material string
	http     *http.Client
}

// client is the HTTP client for a call of ep: HTTP (or the default) without
// TLS material; with it, one client per host, replaced (its idle
// connections closed) when the material changes, e.g. a rotated
// certificate.
func (c *HookClient) client(host string, ep Endpoint) *http.Client {
	if ep.TLS == nil {
		if c.HTTP != nil {
			return c.HTTP
		}
		return http.DefaultClient
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if cur, ok := c.tls[host]; ok && cur.material == ep.Material {
		return cur.http
	} else if ok {
		cur.http.CloseIdleConnections()
	}
	t := http.DefaultTransport.(*http.Transport).Clone()
	if c.HTTP != nil {
		if base, ok := c.HTTP.Transport.(*http.Transport); ok {
			t = base.Clone()
		}
	}
	t.TLSClientConfig = ep.TLS
	hc := &http.Client{Transport: t}
	if c.tls == nil {
		c.tls = map[string]tlsClient{}
	}
	c.tls[host] = tlsClient{material: ep.Material, http: hc}
	return hc
}

// DefaultHookTimeout bounds one hook call when the webhook sets no timeout
// (Metacontroller's default).
const DefaultHookTimeout = 10 * time.Second

// maxAnswer bounds a hook's answer.
const maxAnswer = 16 << 20

// Call POSTs req to url and decodes the answer into resp.
func (c *HookClient) Call(ctx context.Context, url string, timeout time.Duration, req, resp any) error {
	return c.CallEndpoint(ctx, Endpoint{URL: url, Timeout: timeout}, req, resp)
}

// CallEndpoint is Call with ep's TLS and credentials.
func (c *HookClient) CallEndpoint(ctx context.Context, ep Endpoint, req, resp any) error {
	url, timeout := ep.URL, ep.Timeout
	body, err := json.Marshal(req)
	if err != nil {
		return fmt.Errorf("encoding the request for hook %s: %w", url, err)
	}
	if timeout <= 0 {
		timeout = DefaultHookTimeout
	}
	attempts, wait := c.Attempts, c.Backoff
	if attempts <= 0 {
		attempts = 3
	}
	if wait <= 0 {
		wait = 200 * time.Millisecond
	}
	maxWait := c.MaxWait
	if maxWait <= 0 {
		maxWait = 5 * time.Second
	}
	var last error
	for i := 0; i < attempts; i++ {
		if i > 0 {
			d := min(wait, maxWait)
			var ra *retryAfter
			if errors.As(last, &ra) && ra.d > 0 {
				d = min(ra.d, maxWait)
			}
			t := time.NewTimer(d)
			select {
			case <-ctx.Done():
				t.Stop()
				return fmt.Errorf("hook %s: %w (after %v)", url, ctx.Err(), last)
			case <-t.C:
			}
			wait *= 2
		}
		data, retry, err := c.once(ctx, ep, timeout, body)
		if err == nil {
			return decodeAnswer(url, data, resp)
		}
		last = err
		if !retry {
			return err
		}
	}
	return fmt.Errorf("hook %s failed %d times, the last: %w", url, attempts, last)
}

type retryAfter struct {
	d   time.Duration
	err error
}

func (e *retryAfter) Error() string { return e.err.Error() }
func (e *retryAfter) Unwrap() error { return e.err }

// once is one attempt: the answer's body, or an error and whether another
// attempt may succeed.
func (c *HookClient) once(ctx context.Context, ep Endpoint, timeout time.Duration, body []byte) ([]byte, bool, error) {
	url := ep.URL
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return nil, false, fmt.Errorf("hook URL %q: %w", url, err)
	}
	hr.Header.Set("Content-Type", "application/json")
	hr.Header.Set("Accept", "application/json")
	if ep.Authorization != "" {
		hr.Header.Set("Authorization", ep.Authorization)
	} else if c.Token != nil {
		tok, err := c.Token(ctx)
		if err != nil {
			return nil, true, fmt.Errorf("token for hook %s: %w", url, err)
		}
		if tok != "" {
			hr.Header.Set("Authorization", "Bearer "+tok)
		}
	}
	res, err := c.client(hr.URL.Host, ep).Do(hr)
	if err != nil {
		if ctx.Err() != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return nil, true, fmt.Errorf("hook %s did not answer within %s", url, timeout)
		}
		return nil, true, fmt.Errorf("calling hook %s: %w", url, err)
	}
	defer res.Body.Close()
	data, err := io.ReadAll(io.LimitReader(res.Body, maxAnswer+1))
	if err != nil {
		return nil, true, fmt.Errorf("reading the answer of hook %s: %w", url, err)
	}
	switch {
	case res.StatusCode == http.StatusOK:
		if len(data) > maxAnswer {
			return nil, false, &BadAnswer{URL: url, Reason: fmt.Sprintf("answer larger than %d bytes", maxAnswer)}
		}
		return data, false, nil
	case res.StatusCode == http.StatusTooManyRequests || res.StatusCode == http.StatusBadGateway ||
		res.StatusCode == http.StatusServiceUnavailable || res.StatusCode == http.StatusGatewayTimeout:
		err := fmt.Errorf("hook %s answered %s: %s", url, res.Status, snippet(data))
		if s, perr := strconv.Atoi(res.Header.Get("Retry-After")); perr == nil && s >= 0 {
			return nil, true, &retryAfter{d: time.Duration(s) * time.Second, err: err}
		}
		return nil, true, err
	default:
		return nil, false, fmt.Errorf("hook %s answered %s: %s", url, res.Status, snippet(data))
	}
}

// decodeAnswer decodes a 200 answer strictly enough to catch garbage.
func decodeAnswer(url string, data []byte, resp any) error {
	if len(bytes.TrimSpace(data)) == 0 {
		return &BadAnswer{URL: url, Reason: "empty body"}
	}
	var probe any
	if err := json.Unmarshal(data, &probe); err != nil {
		return &BadAnswer{URL: url, Reason: "not JSON: " + err.Error() + ": " + snippet(data)}
	}
	if _, ok := probe.(map[string]any); !ok {
		return &BadAnswer{URL: url, Reason: "not a JSON object: " + snippet(data)}
	}
	if err := decodeInto(data, resp); err != nil {
		return &BadAnswer{URL: url, Reason: "wrong shape: " + err.Error()}
	}
	return nil
}

func snippet(b []byte) string {
	s := string(bytes.TrimSpace(b))
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	return strconv.Quote(s)
}
