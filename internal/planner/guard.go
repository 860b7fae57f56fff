package planner

import (
	"fmt"
	"net/http"
	"sync/atomic"
)

// mutating are the methods that write.
func mutating(method string) bool {
	switch method {
	case http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete:
		return true
	}
	return false
}

func dryRun(r *http.Request) bool { return r.URL.Query().Get("dryRun") == "All" }

// Guard is the plan client's transport: a write that is not dry-run is
// refused before it leaves the process (counted in Refused), so nothing
// reaches the API server even if a write slipped past the dry-run
// client.
type Guard struct {
	Next    http.RoundTripper
	Refused *atomic.Int64
}

func (g Guard) RoundTrip(r *http.Request) (*http.Response, error) {
	if mutating(r.Method) && !dryRun(r) {
		g.Refused.Add(1)
		return nil, fmt.Errorf("plan mode: %s %s is not a dry-run write: refused, never sent", r.Method, r.URL.Path)
	}
	return g.Next.RoundTrip(r)
}

// Foreign is the transport of the rest.Config a reconciler gets from
// rt.GetConfig() in plan mode, for clients opzero does not own: it sends
// every write as dry-run (adding dryRun=All) and reports each request of
// a planned reconcile in the plan (Object.External).
type Foreign struct{ Next http.RoundTripper }

func (f Foreign) RoundTrip(r *http.Request) (*http.Response, error) {
	rec := recordFrom(r.Context())
	if mutating(r.Method) && !dryRun(r) {
		r = r.Clone(r.Context())
		q := r.URL.Query()
		q.Set("dryRun", "All")
		r.URL.RawQuery = q.Encode()
	}
	if rec.open() {
		what := r.Method + " " + r.URL.Path + " through a client built from rt.GetConfig()"
		if mutating(r.Method) {
			what += " (sent as dry-run, not in the plan's writes)"
		}
		rec.external(what)
	}
	return f.Next.RoundTrip(r)
}

// External wraps http.DefaultClient's transport in plan mode: a request
// made with a planned reconcile's context is reported in the plan as an
// external call. Clients of their own (a database driver, an SDK's HTTP
// client, a clone of http.DefaultTransport) are not seen. It is sent as it is: opzero cannot dry-run what is
// not the API server (the reconciler can ask operator.Planning(ctx)).
type External struct{ Next http.RoundTripper }

func (x External) RoundTrip(r *http.Request) (*http.Response, error) {
	if rec := recordFrom(r.Context()); rec.open() {
		rec.external(r.Method + " " + r.URL.Scheme + "://" + r.URL.Host + r.URL.Path + ": an external call, sent for real (not dry-run)")
	}
	return x.Next.RoundTrip(r)
}
