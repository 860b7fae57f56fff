package admission

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	admissionv1 "k8s.io/api/admission/v1"
	admissionregv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/opzero/opzero/internal/testkit"
)

// staticResolver maps operators to URLs.
type staticResolver map[types.NamespacedName]string

func (s staticResolver) URL(_ context.Context, op types.NamespacedName) (string, error) {
	if u, ok := s[op]; ok {
		return u, nil
	}
	return "", fmt.Errorf("no Knative Service %s", op)
}
func (staticResolver) Forget(types.NamespacedName) {}

var (
	opA = types.NamespacedName{Namespace: "team-a", Name: "gadgets"}
	opB = types.NamespacedName{Namespace: "team-b", Name: "widgets"}
)

func rules(group, resource string, ops ...admissionregv1.OperationType) []admissionregv1.RuleWithOperations {
	return []admissionregv1.RuleWithOperations{{Operations: ops,
		Rule: admissionregv1.Rule{APIGroups: []string{group}, APIVersions: []string{"v1"}, Resources: []string{resource}}}}
}

// testTable: operator A's webhook on gadgets, B's on widgets, each with
// timeout seconds.
func testTable(timeout time.Duration) table {
	return table{
		Path(opA.Namespace, opA.Name, "tok-a", "/mutate-gadget"): {operator: opA, audience: "aud-a", path: "/mutate-gadget", webhooks: []string{"mgadget.example.com"},
			rules: rules("example.com", "gadgets", admissionregv1.Create, admissionregv1.Update), timeout: timeout},
		Path(opB.Namespace, opB.Name, "tok-b", "/validate-widget"): {operator: opB, audience: "aud-b", path: "/validate-widget", webhooks: []string{"vwidget.example.com"},
			rules: rules("example.com", "widgets", admissionregv1.OperationAll), timeout: timeout},
	}
}

func review(uid, group, resource string, op admissionv1.Operation) string {
	b, _ := json.Marshal(admissionv1.AdmissionReview{TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{UID: types.UID(uid), Operation: op,
			Resource: metav1.GroupVersionResource{Group: group, Version: "v1", Resource: resource}}})
	return string(b)
}

// fakeOperator records the calls it gets and answers allowed (or blocks
// until release is closed).
type fakeOperator struct {
	srv     *httptest.Server
	calls   atomic.Int64
	mu      sync.Mutex
	last    *http.Request
	body    string
	block   chan struct{} // nil: answers at once
	entered chan struct{} // gets a value per call that blocks
}

func newFakeOperator(t *testing.T, block bool) *fakeOperator {
	f := &fakeOperator{entered: make(chan struct{}, 100)}
	if block {
		f.block = make(chan struct{})
	}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.calls.Add(1)
		b, _ := io.ReadAll(r.Body)
		f.mu.Lock()
		f.last, f.body = r, string(b)
		f.mu.Unlock()
		if f.block != nil {
			f.entered <- struct{}{}
			select {
			case <-f.block:
			case <-r.Context().Done():
			}
			return
		}
		fmt.Fprint(w, `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"uid":"x","allowed":true}}`)
	}))
	t.Cleanup(func() {
		if f.block != nil {
			select {
			case <-f.block:
			default:
				close(f.block)
			}
		}
		f.srv.Close()
	})
	return f
}

func newTestProxy(tb table, res Resolver, inFlight int) *proxy {
	return &proxy{routes: func() table { return tb }, resolve: res, inFlight: inFlight, http: http.DefaultClient, log: logr.Discard(),
		tokens: func(_ context.Context, aud string) (string, error) { return "token-for-" + aud, nil },
		slots:  map[types.NamespacedName]chan struct{}{}}
}

func call(h http.Handler, method, path, body string) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(method, path, strings.NewReader(body)))
	return rec
}

// TestForgedCallsAreRefused: a call with an unknown path (no token, a
// wrong token, another operator's token with this one's path), a review
// of a resource the path's webhook does not declare (another operator's
// kind), a body that is no AdmissionReview, or a GET reaches no operator.
func TestForgedCallsAreRefused(t *testing.T) {
	a, b := newFakeOperator(t, false), newFakeOperator(t, false)
	p := newTestProxy(testTable(10*time.Second), staticResolver{opA: a.srv.URL, opB: b.srv.URL}, 4)
	good := Path(opA.Namespace, opA.Name, "tok-a", "/mutate-gadget")
	for _, tc := range []struct {
		name, method, path, body string
		code                     int
	}{
		{"no token", "POST", "/admission/team-a/gadgets/mutate-gadget", review("1", "example.com", "gadgets", admissionv1.Create), 404},
		{"wrong token", "POST", Path(opA.Namespace, opA.Name, "guess", "/mutate-gadget"), review("1", "example.com", "gadgets", admissionv1.Create), 404},
		{"B's token on A's path", "POST", Path(opA.Namespace, opA.Name, "tok-b", "/mutate-gadget"), review("1", "example.com", "gadgets", admissionv1.Create), 404},
		{"another operator's kind", "POST", good, review("1", "example.com", "widgets", admissionv1.Create), 403},
		{"a subresource not declared", "POST", good, strings.Replace(review("1", "example.com", "gadgets", admissionv1.Create), `"operation"`, `"subResource":"status","operation"`, 1), 403},
		{"an operation not declared", "POST", good, review("1", "example.com", "gadgets", admissionv1.Delete), 403},
		{"another group", "POST", good, review("1", "other.io", "gadgets", admissionv1.Create), 403},
		{"not a review", "POST", good, `{"kind":"Pod"}`, 400},
		{"a review without a request", "POST", good, `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}`, 400},
		{"GET", "GET", good, "", 405},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := call(p, tc.method, tc.path, tc.body)
			if rec.Code != tc.code {
				t.Errorf("answered %d %q, want %d", rec.Code, rec.Body.String(), tc.code)
			}
			if strings.Contains(rec.Body.String(), `"allowed":true`) {
				t.Errorf("answered %q: admitted", rec.Body.String())
			}
		})
	}
	if n := a.calls.Load() + b.calls.Load(); n != 0 {
		t.Fatalf("the operators were called %d times, want none", n)
	}
	if got := p.refused.Load(); got != 10 {
		t.Errorf("refused counter %d, want 10", got)
	}
}

// TestForwardsWithTheOperatorsToken: a declared review goes as is to the
// operator's webhook path with the hub's token for its audience, and its
// answer comes back.
func TestForwardsWithTheOperatorsToken(t *testing.T) {
	a := newFakeOperator(t, false)
	p := newTestProxy(testTable(10*time.Second), staticResolver{opA: a.srv.URL}, 4)
	body := review("u1", "example.com", "gadgets", admissionv1.Update)
	rec := call(p, "POST", Path(opA.Namespace, opA.Name, "tok-a", "/mutate-gadget"), body)
	if rec.Code != 200 || !strings.Contains(rec.Body.String(), `"allowed":true`) {
		t.Fatalf("answered %d %q, want the operator's answer", rec.Code, rec.Body.String())
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.last.URL.Path != "/mutate-gadget" || a.last.Header.Get("Authorization") != "Bearer token-for-aud-a" || a.body != body {
		t.Fatalf("the operator got %s with %q and body %q, want /mutate-gadget, the hub's token for aud-a and the review as sent",
			a.last.URL.Path, a.last.Header.Get("Authorization"), a.body)
	}
}

// TestOperatorFailuresAreNotAnswers: a dead operator or one that cannot be
// resolved gets a non-200 answer (503 and a Status saying why), never a verdict, so the API
// server applies the webhook's failurePolicy.
func TestOperatorFailuresAreNotAnswers(t *testing.T) {
	dead := httptest.NewServer(http.NotFoundHandler())
	deadURL := dead.URL
	dead.Close()
	for name, res := range map[string]Resolver{"dead": staticResolver{opA: deadURL}, "unresolved": staticResolver{}} {
		p := newTestProxy(testTable(10*time.Second), res, 4)
		rec := call(p, "POST", Path(opA.Namespace, opA.Name, "tok-a", "/mutate-gadget"), review("1", "example.com", "gadgets", admissionv1.Create))
		if rec.Code != http.StatusServiceUnavailable || !strings.Contains(rec.Body.String(), `"kind":"Status"`) || strings.Contains(rec.Body.String(), "allowed") {
			t.Errorf("%s: answered %d %q, want 503 with a Status and no verdict", name, rec.Code, rec.Body.String())
		}
	}
}

// TestHangingOperatorDoesNotHoldAnother: operator A never answers. Its
// calls take its in-flight slots (the ones beyond are answered 503 at
// once, 429), and end in 503 with the reason at its webhook's timeout; while
// they hang, operator B's calls are answered.
func TestHangingOperatorDoesNotHoldAnother(t *testing.T) {
	a, b := newFakeOperator(t, true), newFakeOperator(t, false)
	const inFlight = 4
	p := newTestProxy(testTable(2*time.Second), staticResolver{opA: a.srv.URL, opB: b.srv.URL}, inFlight)
	codes := make(chan *httptest.ResponseRecorder, inFlight)
	for i := range inFlight {
		go func() {
			codes <- call(p, "POST", Path(opA.Namespace, opA.Name, "tok-a", "/mutate-gadget"), review(fmt.Sprint(i), "example.com", "gadgets", admissionv1.Create))
		}()
	}
	for range inFlight {
		<-a.entered // every slot of A is taken by a hanging call
	}
	if rec := call(p, "POST", Path(opA.Namespace, opA.Name, "tok-a", "/mutate-gadget"), review("x", "example.com", "gadgets", admissionv1.Create)); rec.Code != http.StatusTooManyRequests {
		t.Fatalf("a call to A beyond its %d in flight: %d %q, want 429 at once", inFlight, rec.Code, rec.Body.String())
	}
	for i := range 20 {
		rec := call(p, "POST", Path(opB.Namespace, opB.Name, "tok-b", "/validate-widget"), review(fmt.Sprint("b", i), "example.com", "widgets", admissionv1.Create))
		if rec.Code != 200 {
			t.Fatalf("B's call %d while A hangs: %d %q, want B's answer", i, rec.Code, rec.Body.String())
		}
	}
	select {
	case rec := <-codes:
		t.Fatalf("a call to A ended (%d) before its timeout while A hangs", rec.Code)
	default:
	}
	for range inFlight {
		rec := <-codes
		if rec.Code != http.StatusServiceUnavailable || !strings.Contains(rec.Body.String(), "did not answer within") {
			t.Errorf("A's hanging call: %d %q, want 503 with the reason", rec.Code, rec.Body.String())
		}
	}
	if b.calls.Load() != 20 {
		t.Errorf("B was called %d times, want 20", b.calls.Load())
	}
}

// TestRouteTable: the table holds the labelled webhooks that call the hub
// with a well-formed path of the configuration's own operator.
func TestRouteTable(t *testing.T) {
	hub := types.NamespacedName{Namespace: "opzero-system", Name: "opzero-hub"}
	svc := func(p string) admissionregv1.WebhookClientConfig {
		return admissionregv1.WebhookClientConfig{Service: &admissionregv1.ServiceReference{Namespace: hub.Namespace, Name: hub.Name, Path: ptr.To(p)}}
	}
	pa := Path("team-a", "gadgets", "t0k", "/mutate-gadget")
	cfgs := []config{
		{kind: "MutatingWebhookConfiguration", name: "a", annotations: map[string]string{AnnotationOperator: "team-a/gadgets"}, webhooks: []webhook{
			{name: "m.a", cc: svc(pa), rules: rules("example.com", "gadgets", admissionregv1.Create), timeout: ptr.To[int32](3)},
			{name: "elsewhere", cc: admissionregv1.WebhookClientConfig{Service: &admissionregv1.ServiceReference{Namespace: "x", Name: "y", Path: ptr.To("/z")}}},
			{name: "bad-path", cc: svc("/mutate-gadget")},
			{name: "b's", cc: svc(Path("team-b", "widgets", "t0k", "/v"))},
		}},
		{kind: "ValidatingWebhookConfiguration", name: "a", annotations: map[string]string{AnnotationOperator: "team-a/gadgets"}, webhooks: []webhook{
			{name: "dev", cc: admissionregv1.WebhookClientConfig{URL: ptr.To("https://127.0.0.1:4443" + Path("team-a", "gadgets", "t0k", "/validate-gadget"))},
				rules: rules("example.com", "gadgets", admissionregv1.Create)},
		}},
		{kind: "ValidatingWebhookConfiguration", name: "unowned", webhooks: []webhook{{name: "v", cc: svc(Path("team-a", "gadgets", "t0k", "/v"))}}},
	}
	tb, skipped := buildTable(cfgs, hub)
	if len(tb) != 2 || tb[pa] == nil || tb[Path("team-a", "gadgets", "t0k", "/validate-gadget")] == nil {
		t.Fatalf("routes %v, want A's two", keys(tb))
	}
	if r := tb[pa]; r.operator != opAName() || r.path != "/mutate-gadget" || r.timeout != 3*time.Second || r.audience != "opzero:team-a:gadgets" {
		t.Errorf("route %+v", r)
	}
	if r := tb[Path("team-a", "gadgets", "t0k", "/validate-gadget")]; r.timeout != defaultTimeout {
		t.Errorf("a webhook without timeoutSeconds: %s, want the API server's default %s", r.timeout, defaultTimeout)
	}
	if len(skipped) != 3 || !strings.Contains(skipped[0], "bad-path") || !strings.Contains(skipped[1], "calls operator team-b/widgets but the configuration is operator team-a/gadgets's") ||
		!strings.Contains(skipped[2], "unowned") {
		t.Errorf("skipped %q", skipped)
	}
}

func opAName() types.NamespacedName {
	return types.NamespacedName{Namespace: "team-a", Name: "gadgets"}
}

func keys(t table) []string {
	var out []string
	for k := range t {
		out = append(out, k)
	}
	return out
}

// TestRuleMatching follows the API server's matching of a rule's
// resources, groups, versions and operations.
func TestRuleMatching(t *testing.T) {
	req := func(op admissionv1.Operation, group, version, resource, sub string) *admissionv1.AdmissionRequest {
		return &admissionv1.AdmissionRequest{Operation: op, SubResource: sub, Resource: metav1.GroupVersionResource{Group: group, Version: version, Resource: resource}}
	}
	rule := func(res string, ops ...admissionregv1.OperationType) admissionregv1.RuleWithOperations {
		return admissionregv1.RuleWithOperations{Operations: ops, Rule: admissionregv1.Rule{APIGroups: []string{"apps"}, APIVersions: []string{"v1"}, Resources: []string{res}}}
	}
	for _, tc := range []struct {
		rule admissionregv1.RuleWithOperations
		req  *admissionv1.AdmissionRequest
		want bool
	}{
		{rule("deployments", admissionregv1.Create), req("CREATE", "apps", "v1", "deployments", ""), true},
		{rule("deployments", admissionregv1.Create), req("UPDATE", "apps", "v1", "deployments", ""), false},
		{rule("deployments", admissionregv1.OperationAll), req("DELETE", "apps", "v1", "deployments", ""), true},
		{rule("deployments", admissionregv1.Create), req("CREATE", "apps", "v1", "deployments", "scale"), false},
		{rule("deployments/scale", admissionregv1.Create), req("CREATE", "apps", "v1", "deployments", "scale"), true},
		{rule("deployments/*", admissionregv1.Create), req("CREATE", "apps", "v1", "deployments", "status"), true},
		{rule("*", admissionregv1.Create), req("CREATE", "apps", "v1", "statefulsets", ""), true},
		{rule("*", admissionregv1.Create), req("CREATE", "apps", "v1", "statefulsets", "status"), false},
		{rule("*/*", admissionregv1.Create), req("CREATE", "apps", "v1", "statefulsets", "status"), true},
		{rule("*/status", admissionregv1.Create), req("CREATE", "apps", "v1", "statefulsets", "status"), true},
		{rule("deployments", admissionregv1.Create), req("CREATE", "extensions", "v1", "deployments", ""), false},
		{rule("deployments", admissionregv1.Create), req("CREATE", "apps", "v1beta1", "deployments", ""), false},
	} {
		if got := ruleMatches(tc.rule, tc.req); got != tc.want {
			t.Errorf("rule %v, request %s %s/%s %s/%s: %v, want %v", tc.rule.Resources, tc.req.Operation, tc.req.Resource.Group, tc.req.Resource.Version,
				tc.req.Resource.Resource, tc.req.SubResource, got, tc.want)
		}
	}
}

// TestUpstreamAnnotations: an unchanged operator's configuration names
// its webhook Service and exactly one CA; anything else is not served,
// with a reason that names the annotation.
func TestUpstreamAnnotations(t *testing.T) {
	ca := base64.StdEncoding.EncodeToString(testkit.NewCA(t).PEM)
	for _, tc := range []struct {
		ann     map[string]string
		want    *upstream // nil with wantErr ""
		wantErr string
	}{
		{ann: map[string]string{}},
		{ann: map[string]string{AnnotationUpstream: "svc", AnnotationUpstreamCASecret: "certs"},
			want: &upstream{service: types.NamespacedName{Namespace: "ns", Name: "svc"}, port: 443, caSecret: "certs"}},
		{ann: map[string]string{AnnotationUpstream: "svc:9443", AnnotationUpstreamCA: ca},
			want: &upstream{service: types.NamespacedName{Namespace: "ns", Name: "svc"}, port: 9443}},
		{ann: map[string]string{AnnotationUpstream: "svc"}, wantErr: "needs exactly one of"},
		{ann: map[string]string{AnnotationUpstream: "svc", AnnotationUpstreamCA: ca, AnnotationUpstreamCASecret: "certs"}, wantErr: "needs exactly one of"},
		{ann: map[string]string{AnnotationUpstream: "svc", AnnotationUpstreamCA: "bm90IGEgY2VydA=="}, wantErr: "not a base64 PEM certificate"},
		{ann: map[string]string{AnnotationUpstream: "svc:http", AnnotationUpstreamCASecret: "certs"}, wantErr: "not a number"},
		{ann: map[string]string{AnnotationUpstream: "other-ns/svc", AnnotationUpstreamCASecret: "certs"}, wantErr: "Subscription's namespace"},
	} {
		got, err := parseUpstream(tc.ann, "ns")
		switch {
		case tc.wantErr != "":
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), "opzero.dev/upstream") {
				t.Errorf("%v: error %v, want one saying %q and naming the annotation", tc.ann, err, tc.wantErr)
			}
		case err != nil:
			t.Errorf("%v: %v", tc.ann, err)
		case (got == nil) != (tc.want == nil) || got != nil && (got.service != tc.want.service || got.port != tc.want.port || got.caSecret != tc.want.caSecret || (got.caPEM == nil) != (tc.ann[AnnotationUpstreamCA] == "")):
			t.Errorf("%v: got %+v, want %+v", tc.ann, got, tc.want)
		}
	}
}

// TestNewConfigurationIsAwaited: a call for a path of the right shape that
// the routes do not know yet (the API server saw a new configuration
// before the hub did) waits for the routes to change and is forwarded once
// they know it; one the routes never learn is 404 (after routeWait); a
// path of another shape is 404 without waiting.
func TestNewConfigurationIsAwaited(t *testing.T) {
	op := newFakeOperator(t, false)
	var mu sync.Mutex
	tb := table{}
	swapped := make(chan struct{})
	p := newTestProxy(nil, staticResolver{opA: op.srv.URL}, 4)
	p.routes = func() table { mu.Lock(); defer mu.Unlock(); return tb }
	p.changed = func() <-chan struct{} { mu.Lock(); defer mu.Unlock(); return swapped }
	path := Path(opA.Namespace, opA.Name, "tok-a", "/mutate-gadget")
	go func() {
		time.Sleep(300 * time.Millisecond)
		mu.Lock()
		tb = testTable(5 * time.Second)
		close(swapped)
		swapped = make(chan struct{})
		mu.Unlock()
	}()
	if rec := call(p, http.MethodPost, path, review("u1", "example.com", "gadgets", admissionv1.Create)); rec.Code != http.StatusOK || op.calls.Load() != 1 {
		t.Fatalf("a call for a configuration the hub learned of meanwhile: %d %s (operator called %d times), want it forwarded", rec.Code, rec.Body, op.calls.Load())
	}
	if rec := call(p, http.MethodPost, Path(opA.Namespace, opA.Name, "wrong-token", "/mutate-gadget"), review("u2", "example.com", "gadgets", admissionv1.Create)); rec.Code != http.StatusNotFound {
		t.Fatalf("a path the routes never learn: %d, want 404", rec.Code)
	}
	if rec := call(p, http.MethodPost, "/admission/no-shape", "{}"); rec.Code != http.StatusNotFound {
		t.Fatalf("a path of another shape: %d, want 404", rec.Code)
	}
}
