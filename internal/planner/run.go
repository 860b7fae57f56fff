package planner

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/opzero/opzero/builder"
	"github.com/opzero/opzero/internal/plan"
	"github.com/opzero/opzero/internal/standin"
)

// Options configures a Planner.
type Options struct {
	// Client is what the reconcilers were given: standin.NewClient over
	// Plan (map functions and observedGeneration writes use it too).
	Client client.Client
	// Plan is the recording dry-run client under Client.
	Plan *Client
	// Events is the recorders' client.
	Events *Events
	// Refused counts the writes the Guard refused.
	Refused *atomic.Int64
	// Concurrency bounds reconciles at once (8).
	Concurrency int
	Logger      logr.Logger
}

// Planner runs the planned reconciles.
type Planner struct {
	opts Options
}

// New returns a Planner.
func New(o Options) *Planner {
	if o.Concurrency <= 0 {
		o.Concurrency = 8
	}
	if o.Refused == nil {
		o.Refused = &atomic.Int64{}
	}
	return &Planner{opts: o}
}

// work is one reconcile to plan.
type work struct {
	op  *builder.Controller
	key reconcile.Request
	why string
}

// Run plans the reconciles of ops over what req names, in rounds.
func (p *Planner) Run(ctx context.Context, ops []*builder.Controller, req plan.Request) *plan.Report {
	rep := &plan.Report{APIVersion: plan.APIVersion}
	var todo []work
	for _, op := range ops {
		c := plan.Controller{Name: op.Name, Primary: op.Primary.GVK.String()}
		keys, err := p.list(ctx, op, req)
		if err != nil {
			c.Error = err.Error()
		}
		c.Listed = len(keys)
		for _, k := range keys {
			todo = append(todo, work{op: op, key: k, why: "listed"})
		}
		if req.Watched && err == nil {
			mapped, err := p.mapWatched(ctx, op, req, keys)
			if err != nil {
				c.Error = err.Error()
			}
			c.Listed += len(mapped)
			todo = append(todo, mapped...)
		}
		rep.Controllers = append(rep.Controllers, c)
	}
	p.nothingNamed(ops, req, rep)
	rounds := max(req.Rounds, 1)
	for round := 1; round <= rounds && len(todo) > 0; round++ {
		rep.Rounds = round
		recs := p.round(ctx, round, todo, time.Duration(req.Timeout))
		for _, r := range recs {
			p.opts.Plan.done.commit(r.rec.local)
		}
		todo = p.follow(ctx, ops, round, recs)
		for _, r := range recs {
			rep.Objects = append(rep.Objects, r.obj)
		}
	}
	for _, w := range todo {
		rep.Pending = append(rep.Pending, refOf(w.op.Primary.GVK, w.key.NamespacedName))
	}
	if others := p.opts.Events.takeOthers(); len(others) > 0 {
		for _, e := range others {
			rep.Objects = append(rep.Objects, plan.Object{Ref: e.Regarding, Round: rep.Rounds,
				Why: "an Event about an object no planned reconcile was running for", Events: []plan.Event{e}})
		}
	}
	rep.Refused = int(p.opts.Refused.Load())
	rep.Sort()
	return rep
}

// nothingNamed makes a plan of one object that no controller found an
// error of each controller it could have named (exit code 1, as kubectl
// diff of a missing object): a typo would otherwise plan nothing and exit
// 0, "nothing would change".
func (p *Planner) nothingNamed(ops []*builder.Controller, req plan.Request, rep *plan.Report) {
	if req.Name == "" {
		return
	}
	for _, c := range rep.Controllers {
		if c.Listed > 0 || c.Error != "" {
			return
		}
	}
	kind, name, typed := strings.Cut(req.Name, "/")
	if !typed {
		name = req.Name
	}
	where := " in any namespace"
	if req.Namespace != "" {
		where = " in namespace " + req.Namespace
	}
	for i, op := range ops {
		if typed && !strings.EqualFold(kind, op.Primary.GVK.Kind) {
			continue
		}
		rep.Controllers[i].Error = fmt.Sprintf("no %s named %q%s: nothing to plan", op.Primary.GVK.Kind, name, where)
	}
}

// list returns the keys of op's primary objects req names.
func (p *Planner) list(ctx context.Context, op *builder.Controller, req plan.Request) ([]reconcile.Request, error) {
	name := req.Name
	if kind, n, ok := strings.Cut(name, "/"); ok {
		if !strings.EqualFold(kind, op.Primary.GVK.Kind) {
			return nil, nil
		}
		name = n
	}
	opts := []client.ListOption{client.Limit(500)}
	if req.Namespace != "" {
		opts = append(opts, client.InNamespace(req.Namespace))
	}
	sel := labels.Everything()
	if req.Selector != "" {
		s, err := labels.Parse(req.Selector)
		if err != nil {
			return nil, fmt.Errorf("-l %s: %w", req.Selector, err)
		}
		sel = s
	}
	if op.Primary.Selector != nil {
		if rs, ok := op.Primary.Selector.Requirements(); ok {
			sel = sel.Add(rs...)
		}
	}
	if !sel.Empty() {
		opts = append(opts, client.MatchingLabelsSelector{Selector: sel})
	}
	list := &metav1.PartialObjectMetadataList{}
	list.SetGroupVersionKind(op.Primary.GVK.GroupVersion().WithKind(op.Primary.GVK.Kind + "List"))
	var keys []reconcile.Request
	for cont := ""; ; {
		if err := p.opts.Plan.raw.List(ctx, list, append(opts, client.Continue(cont))...); err != nil {
			return keys, fmt.Errorf("listing %s: %w", op.Primary.GVK.Kind, err)
		}
		for _, it := range list.Items {
			if name == "" || it.Name == name {
				keys = append(keys, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: it.Namespace, Name: it.Name}})
			}
		}
		if cont = list.Continue; cont == "" {
			break
		}
	}
	return keys, nil
}

// done is one planned reconcile's outcome.
type done struct {
	w   work
	rec *record
	obj plan.Object
	wr  []written
}

// round plans todo, Concurrency at once, and returns them in order.
func (p *Planner) round(ctx context.Context, round int, todo []work, timeout time.Duration) []done {
	out := make([]done, len(todo))
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(p.opts.Concurrency, len(todo)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				out[i] = p.one(ctx, round, todo[i], timeout)
			}
		}()
	}
	for i := range todo {
		next <- i
	}
	close(next)
	wg.Wait()
	return out
}

var errTimeout = errors.New("the plan's per-object timeout")

// one plans one reconcile: its panics and errors are its own, and one
// that does not return within timeout is left behind (its later writes
// are still dry-run, and left out of the plan).
func (p *Planner) one(ctx context.Context, round int, w work, timeout time.Duration) done {
	ref := refOf(w.op.Primary.GVK, w.key.NamespacedName)
	rec := &record{round: round, local: newOverlay(), obj: plan.Object{Controller: w.op.Name, Ref: ref, Round: round, Why: w.why}}
	st := standin.New(w.op.Primary.GVK, w.key.NamespacedName, nil, nil)
	rctx, cancel := context.WithTimeoutCause(withRecord(standin.With(ctx, st), rec), timeout, errTimeout)
	defer cancel()
	rctx = log.IntoContext(rctx, p.opts.Logger.WithValues("controller", w.op.Name, "namespace", w.key.Namespace, "name", w.key.Name, "plan", true, "round", round))
	p.opts.Events.start(ref, rec)
	defer p.opts.Events.end(ref)

	type result struct {
		res reconcile.Result
		err error
	}
	ch := make(chan result, 1)
	go func() {
		var r result
		defer func() {
			if v := recover(); v != nil {
				r.err = fmt.Errorf("panic: %v", v)
				log.FromContext(rctx).Error(r.err, "reconciler panicked", "stack", string(debug.Stack()))
			}
			ch <- r
		}()
		r.res, r.err = w.op.Reconciler.Reconcile(rctx, w.key)
		if r.err == nil && w.op.AutoObservedGeneration {
			if err := standin.WriteObservedGeneration(rctx, p.opts.Client, w.op.Primary.GVK, w.key.NamespacedName, st.Generation()); err != nil {
				r.err = fmt.Errorf("reconciled, but writing status.observedGeneration failed: %w", err)
			}
		}
	}()
	var r result
	select {
	case r = <-ch:
	case <-rctx.Done():
		select {
		case r = <-ch: // it returned on its context's end
		case <-time.After(time.Second):
			rec.close()
			obj, wr := rec.result()
			obj.Error = fmt.Sprintf("did not return within %s (--timeout): left running; what it wrote after is dry-run and not in the plan", timeout)
			return done{w: w, rec: rec, obj: obj, wr: wr}
		}
	}
	obj, wr := rec.result()
	settle(rctx, &obj, st, r.res, r.err, timeout)
	return done{w: w, rec: rec, obj: obj, wr: wr}
}

// settle says what the operator would do with what the reconcile
// returned, as the engines interpret it (internal/engine/serverless
// settle.go).
func settle(ctx context.Context, obj *plan.Object, st *standin.State, res reconcile.Result, err error, timeout time.Duration) {
	switch {
	case err != nil && errors.Is(context.Cause(ctx), errTimeout):
		obj.Error = fmt.Sprintf("timed out after %s (--timeout): %v", timeout, err)
	case err != nil && errors.Is(err, reconcile.TerminalError(nil)):
		obj.Error = "terminal error (the operator would not retry it): " + err.Error()
	case err != nil && apierrors.IsNotFound(err) && st.Gone():
		obj.Gone = true // a write that found it deleted: settled, as the engines do
	case err != nil:
		obj.Error = err.Error() + " (the operator would retry it with backoff)"
	case res.RequeueAfter > 0:
		obj.Requeue = fmt.Sprintf("requeue after %s (a Wakeup with durable time)", res.RequeueAfter)
	case res.Requeue: //nolint:staticcheck // honoured for reconcilers written against it
		obj.Requeue = "requeue after the key's backoff (rate limited)"
	case st.Gone():
		obj.Gone = true
	}
}

// sortWork orders todo by controller and key, for a deterministic plan.
func sortWork(todo []work) {
	sort.Slice(todo, func(i, j int) bool {
		a, b := todo[i], todo[j]
		if a.op.Name != b.op.Name {
			return a.op.Name < b.op.Name
		}
		return a.key.String() < b.key.String()
	})
}
