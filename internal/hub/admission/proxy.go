package admission

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/opzero/opzero/internal/hub/starting"
)

// maxReview bounds an AdmissionReview read from the API server or an
// answer read from an operator (the API server's own request limit is 3 MiB).
const maxReview = 8 << 20

// Resolver finds where an operator's Knative Service answers.
type Resolver interface {
	// URL is the address of the Knative Service op (status.address.url).
	URL(ctx context.Context, op types.NamespacedName) (string, error)
	// Forget drops what URL remembered of op (its address failed).
	Forget(op types.NamespacedName)
}

// Tokens gives the hub's OIDC token for an audience.
type Tokens func(ctx context.Context, audience string) (string, error)

// proxy is the hub's admission endpoint: it checks a call against the
// routes and forwards it to the operator; see the package documentation.
type proxy struct {
	routes func() table
	// synced, if set, is closed once the routes were first listed: a call
	// for an unknown path waits for it.
	synced <-chan struct{}
	// changed, if set, returns a channel closed at the next change of the
	// routes: a call for a path of the right shape that is not known yet
	// waits for one, up to routeWait (a configuration just created: the API
	// server may call it before the hub's watch has brought it).
	changed  func() <-chan struct{}
	resolve  Resolver
	tokens   Tokens
	http     *http.Client
	inFlight int // per operator
	log      logr.Logger
	// starting follows the operators' starting pods: a call that waits
	// for a cold start goes to the pod too once it listens (nil: never).
	starting *starting.Services
	// targets wakes unchanged operators' Deployments (nil: none served);
	// upstreams reads their webhook Services and CAs.
	targets   Targets
	upstreams *upstreams

	mu    sync.Mutex
	slots map[types.NamespacedName]chan struct{}

	// counters (Stats)
	forwarded, refused, failed, early atomic.Int64
}

// slot takes one of op's in-flight slots, or says there is none free.
func (p *proxy) slot(op types.NamespacedName) (release func(), ok bool) {
	p.mu.Lock()
	s := p.slots[op]
	if s == nil {
		s = make(chan struct{}, p.inFlight)
		p.slots[op] = s
	}
	p.mu.Unlock()
	select {
	case s <- struct{}{}:
		return func() { <-s }, true
	default:
		return nil, false
	}
}

func (p *proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rt := p.routes()[r.URL.Path]
	if rt == nil && p.synced != nil {
		select { // a call right after the start: the routes are being listed
		case <-p.synced:
			rt = p.routes()[r.URL.Path]
		case <-r.Context().Done():
		}
	}
	if rt == nil && p.changed != nil {
		if _, _, _, ok := parsePath(r.URL.Path); ok {
			rt = p.awaitRoute(r.Context(), r.URL.Path)
		}
	}
	if rt == nil {
		// Unknown paths (a forged call without the install's token among
		// them) learn nothing: not which operators exist.
		p.refused.Add(1)
		http.NotFound(w, r)
		return
	}
	if r.Method != http.MethodPost {
		p.refused.Add(1)
		http.Error(w, "admission reviews are POSTed", http.StatusMethodNotAllowed)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxReview+1))
	if err != nil || len(body) > maxReview {
		p.refused.Add(1)
		http.Error(w, "reading the AdmissionReview: too large or cut short", http.StatusBadRequest)
		return
	}
	req, err := decodeReview(body)
	if err != nil {
		p.refused.Add(1)
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if !rt.allows(req) {
		// The API server only sends what a webhook's rules match: this is
		// not from it, or names another operator's kinds.
		p.refused.Add(1)
		p.log.Info("refused an AdmissionReview the webhook does not declare", "operator", rt.operator.String(), "webhooks", strings.Join(rt.webhooks, ","),
			"resource", resourceString(req), "operation", req.Operation, "from", r.RemoteAddr)
		http.Error(w, fmt.Sprintf("%s %s is not among what the webhooks %s of operator %s declare", req.Operation, resourceString(req),
			strings.Join(rt.webhooks, ", "), rt.operator), http.StatusForbidden)
		return
	}
	release, ok := p.slot(rt.operator)
	if !ok {
		p.failed.Add(1)
		failure(w, http.StatusTooManyRequests, metav1.StatusReasonTooManyRequests,
			fmt.Sprintf("the opzero hub: operator %s has %d admission calls in flight; not forwarded", rt.operator, p.inFlight))
		return
	}
	defer release()
	// Answer before the API server gives up, so that it reads why.
	budget := rt.timeout - min(rt.timeout/10, 500*time.Millisecond)
	ctx, cancel := context.WithTimeout(r.Context(), budget)
	defer cancel()
	var code int
	var answer []byte
	if rt.upstream != nil {
		code, answer, err = p.forwardUpstream(ctx, rt, req, body)
	} else {
		code, answer, err = p.forward(ctx, rt, body)
	}
	if err != nil {
		p.failed.Add(1)
		if errors.Is(err, context.DeadlineExceeded) {
			err = fmt.Errorf("operator %s did not answer within %s (the webhook's timeoutSeconds %s, less a margin; a cold start that does not fit: see docs/webhooks.md): %w",
				rt.operator, budget, rt.timeout, err)
		}
		p.log.Info("an admission call failed", "operator", rt.operator.String(), "path", rt.path, "error", err.Error())
		failure(w, http.StatusServiceUnavailable, metav1.StatusReasonServiceUnavailable, "the opzero hub: "+err.Error())
		return
	}
	p.forwarded.Add(1)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(answer)
}

// routeWait bounds how long a call for an unknown path waits for the
// routes to change before it is answered 404.
const routeWait = 2 * time.Second

// awaitRoute waits, up to routeWait, for path to appear in the routes.
func (p *proxy) awaitRoute(ctx context.Context, path string) *route {
	deadline := time.NewTimer(routeWait)
	defer deadline.Stop()
	for {
		ch := p.changed()
		if rt := p.routes()[path]; rt != nil {
			return rt
		}
		select {
		case <-ch:
		case <-deadline.C:
			return nil
		case <-ctx.Done():
			return nil
		}
	}
}

// decodeReview reads an admission.k8s.io/v1 (or v1beta1, the same shape)
// AdmissionReview with a request.
func decodeReview(body []byte) (*admissionv1.AdmissionRequest, error) {
	var rev admissionv1.AdmissionReview
	if err := json.Unmarshal(body, &rev); err != nil {
		return nil, fmt.Errorf("not an AdmissionReview: %w", err)
	}
	if rev.Kind != "AdmissionReview" || (rev.APIVersion != "admission.k8s.io/v1" && rev.APIVersion != "admission.k8s.io/v1beta1") {
		return nil, fmt.Errorf("not an AdmissionReview: apiVersion %q kind %q", rev.APIVersion, rev.Kind)
	}
	if rev.Request == nil || rev.Request.UID == "" {
		return nil, errors.New("an AdmissionReview without a request (or its uid)")
	}
	return rev.Request, nil
}

// forward sends the review to the operator's webhook path with the hub's
// token for its audience, and returns its answer. When the answer takes
// longer than starting.After, the review goes also to a starting pod of
// the operator's Knative Service (package starting) once it listens; its
// answer counts if it is a 200 (an AdmissionReview), else the route's.
func (p *proxy) forward(ctx context.Context, rt *route, body []byte) (int, []byte, error) {
	base, err := p.resolve.URL(ctx, rt.operator)
	if err != nil {
		return 0, nil, fmt.Errorf("resolving operator %s's Knative Service: %w", rt.operator, err)
	}
	type answer struct {
		code int
		body []byte
		err  error
	}
	a, early := starting.Race(ctx, p.starting.Get(rt.operator.Namespace, rt.operator.Name),
		func(ctx context.Context) answer {
			code, b, err := p.call(ctx, p.http, base, rt, body, true)
			if err != nil && ctx.Err() == nil {
				p.resolve.Forget(rt.operator)
			}
			if code == http.StatusNotFound {
				p.resolve.Forget(rt.operator)
			}
			return answer{code, b, err}
		},
		func(ctx context.Context, pod string) (answer, starting.Outcome) {
			code, b, err := p.call(ctx, starting.Client, pod, rt, body, true)
			switch {
			case err == nil && code == http.StatusOK:
				return answer{code, b, nil}, starting.Settled
			case err == nil:
				return answer{}, starting.GiveUp
			}
			return answer{}, starting.Again
		})
	if early {
		p.early.Add(1)
	}
	return a.code, a.body, a.err
}

// call posts the review to base+rt.path through c, with the hub's token
// for the route's audience if withToken.
func (p *proxy) call(ctx context.Context, c *http.Client, base string, rt *route, body []byte, withToken bool) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSuffix(base, "/")+rt.path, bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	if p.tokens != nil && withToken {
		tok, err := p.tokens(ctx, rt.audience)
		if err != nil {
			return 0, nil, fmt.Errorf("a token for audience %q: %w", rt.audience, err)
		}
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, nil, fmt.Errorf("calling operator %s: %w", rt.operator, err)
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(io.LimitReader(resp.Body, maxReview+1))
	if err != nil {
		return 0, nil, fmt.Errorf("reading operator %s's answer: %w", rt.operator, err)
	}
	if len(answer) > maxReview {
		return 0, nil, fmt.Errorf("operator %s answered more than %d bytes", rt.operator, maxReview)
	}
	return resp.StatusCode, answer, nil
}

// resourceString is group/version/resource[/subresource] of req.
func resourceString(req *admissionv1.AdmissionRequest) string {
	s := req.Resource.Group + "/" + req.Resource.Version + "/" + req.Resource.Resource
	if req.SubResource != "" {
		s += "/" + req.SubResource
	}
	return strings.TrimPrefix(s, "/")
}

// failure answers a call the hub could not complete: never a verdict (the
// webhook's failurePolicy decides), a Status the API server reads the
// message of (it shows only a generic one for a text body). 503 and a
// Status are not retried by the API server (its webhook client retries
// 500, 504 and 429 within the timeout); 429 is, on purpose.
func failure(w http.ResponseWriter, code int, reason metav1.StatusReason, msg string) {
	b, _ := json.Marshal(metav1.Status{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Status"}, Status: metav1.StatusFailure,
		Message: msg, Reason: reason, Code: int32(code)})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(b)
}
