package operator

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"sync/atomic"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/config"

	"github.com/opzero/opzero/internal/plan"
	"github.com/opzero/opzero/internal/planner"
	"github.com/opzero/opzero/internal/standin"
)

// Plan is the mode of a binary started with --mode=plan or with
// OPZERO_PLAN set (`opzero plan` runs it so, with its request): it plans,
// it does not serve. Start reconciles every object the request names
// (without one: every object, 3 rounds) once, each write sent as
// server-side dry-run and recorded, writes the plan (the text form on
// standard output without a request) and returns (internal/planner).
const Plan Mode = "plan"

// Planning reports whether ctx is a reconcile's that is planned, not run:
// every write through the runtime's client is dry-run, but a call to
// anything else (a database, a cloud API) would happen for real. A
// reconciler skips its external writes when it returns true:
//
//	if !operator.Planning(ctx) {
//		if err := db.Exec(ctx, "CREATE DATABASE ..."); err != nil { ... }
//	}
//
// The plan says which reconciles asked (they know they are planned).
func Planning(ctx context.Context) bool { return plan.Planning(ctx) }

// planMode is a Runtime's plan-mode machinery (nil when serving).
type planMode struct {
	req     plan.Request
	plan    *planner.Client
	events  *planner.Events
	refused atomic.Int64
}

// newPlanRuntime returns the Runtime of a binary started with
// OPZERO_PLAN or in mode Plan, nil otherwise. Its client reads from the API
// server (no cache, in either mode) and writes only in dry-run, through
// a transport that refuses any write that is not; rt.GetConfig() gives
// reconcilers a config whose clients' writes are dry-run too.
func newPlanRuntime(opts Options) (*Runtime, error) {
	if os.Getenv(plan.Env) == "" && opts.Mode != Plan {
		return nil, nil
	}
	req, err := plan.ReadRequest()
	if err != nil {
		return nil, err
	}
	opts.applyStandIns(opts.Logger)
	cfg := opts.Config
	if cfg == nil {
		if cfg, err = config.GetConfig(); err != nil {
			return nil, fmt.Errorf("no Kubernetes API server to plan against: set KUBECONFIG or run in a cluster: %w", err)
		}
	}
	opts.Mode = Plan
	pm := &planMode{req: req}
	rc := opts.withTimeout(withRate(cfg))
	guarded := rest.CopyConfig(rc)
	guarded.Wrap(func(rt http.RoundTripper) http.RoundTripper { return planner.Guard{Next: rt, Refused: &pm.refused} })
	hc, err := rest.HTTPClientFor(guarded)
	if err != nil {
		return nil, err
	}
	mapper, err := newGVMapper(guarded, hc)
	if err != nil {
		return nil, err
	}
	c, err := client.New(guarded, client.Options{Scheme: opts.Scheme, HTTPClient: hc, Mapper: mapper})
	if err != nil {
		return nil, err
	}
	pm.plan = planner.NewClient(c)
	foreign := rest.CopyConfig(rc)
	foreign.Wrap(func(rt http.RoundTripper) http.RoundTripper { return planner.Foreign{Next: rt} })
	// A one-shot process: HTTP calls made with a planned reconcile's
	// context through http.DefaultClient (http.Get, ...) are reported as
	// external. http.DefaultTransport stays an *http.Transport: code that
	// clones it (a common idiom) must not panic in plan mode.
	if _, ok := http.DefaultClient.Transport.(planner.External); !ok {
		next := http.DefaultClient.Transport
		if next == nil {
			next = http.DefaultTransport
		}
		http.DefaultClient.Transport = planner.External{Next: next}
	}
	r := &Runtime{opts: opts, cfg: foreign, client: standin.NewClient(pm.plan), mapper: mapper, plan: pm}
	pm.events = planner.NewEvents(r.client)
	return r, nil
}

// runPlan is Start in plan mode: it plans and writes the Report (JSON to
// the request's Out, else the text form on standard output).
func (r *Runtime) runPlan(ctx context.Context) error {
	p := planner.New(planner.Options{Client: r.client, Plan: r.plan.plan, Events: r.plan.events, Refused: &r.plan.refused,
		Concurrency: r.opts.MaxConcurrentReconciles, Logger: r.opts.Logger})
	rep := p.Run(ctx, r.ops, r.plan.req)
	if out := r.plan.req.Out; out != "" && out != "-" {
		f, err := os.Create(out)
		if err != nil {
			return fmt.Errorf("%s: writing the plan: %w", plan.Env, err)
		}
		if err := rep.Write(f); err != nil {
			f.Close()
			return err
		}
		return f.Close()
	}
	return plan.PrintText(os.Stdout, rep)
}
