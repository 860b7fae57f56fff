package serverless

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/opzero/opzero/internal/cloudevent/receive"
	"github.com/opzero/opzero/internal/keyq"
)

// ResultHeader carries the reason of a 2xx answer (whose body stays empty).
const ResultHeader = "Opzero-Result"

// HubEpochHeader is the opzero hub's epoch (hub.EpochHeader): when it
// changes, the hub may not have told of every change (it started, or
// listed again), and the event cache drops what it holds.
const HubEpochHeader = "Opzero-Hub-Epoch"

// ServeHTTP handles one delivery: admit and decode it, route it to its keys,
// have each key reconciled (run, then settle) and answer from the verdicts.
func (e *Engine) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	e.stats.Requests.Add(1)
	ctx, d := e.obs.Intake(r)
	defer d.End()
	w, r = d.Writer(w), r.WithContext(ctx)
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "POST a CloudEvent here", http.StatusMethodNotAllowed)
		return
	}
	if !e.acceptForwarded(w, r) {
		return
	}
	if e.draining.Load() {
		unavailable(w, "shutting down; deliver to another instance or retry")
		return
	}
	select {
	case e.inFlight <- struct{}{}:
		defer func() { <-e.inFlight }()
	default:
		e.cache.Forget() // an event refused unread may have been any object's
		w.Header().Set("Retry-After", "1")
		http.Error(w, fmt.Sprintf("too many events in flight (%d); retry", e.opts.MaxInFlight), http.StatusTooManyRequests)
		return
	}
	if ep := r.Header.Get(HubEpochHeader); ep != "" {
		e.cache.Epoch(ep)
	}
	r.Body = http.MaxBytesReader(w, r.Body, e.opts.MaxBodyBytes)
	body, err := e.keepBody(r)
	var ev any
	if err == nil {
		ev, err = receive.DecodeRequest(r.Context(), r)
	}
	if err != nil {
		e.cache.Forget() // an event refused unread may have been any object's
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			http.Error(w, fmt.Sprintf("event larger than %d bytes", e.opts.MaxBodyBytes), http.StatusRequestEntityTooLarge)
			return
		}
		badRequest(w, err)
		return
	}
	described(d, ev)
	rt, err := e.route(r.Context(), ev)
	if err == nil {
		routedTo(d, rt)
	}
	var t transient
	switch {
	case errors.As(err, &t):
		unavailable(w, err.Error())
	case err != nil:
		badRequest(w, err)
	case len(rt.keys) == 0:
		handled(w, rt.why)
	case e.opts.Async:
		e.accept(w, r.Context(), rt)
	case e.forwarded(w, r, ev, rt, body): // answered by the holder of the key's Lease, or reconciled here
	case e.opts.AnswerAdmitted && rt.object && e.admit(rt):
		e.affirm(w, r, rt)
		handled(w, fmt.Sprintf("admitted %d key(s): %s", len(rt.keys), rt.why))
	default:
		vs := e.reconcileAll(r.Context(), rt)
		e.affirm(w, r, rt)
		answer(w, rt, vs)
	}
}

// reconcileAll submits the routed keys and returns each key's verdict, from
// a run that started after this request arrived.
func (e *Engine) reconcileAll(ctx context.Context, rt *routed) []*Verdict {
	tickets := make([]*keyq.Ticket, len(rt.keys))
	for i, k := range rt.keys {
		tickets[i] = e.queue.Submit(k, rt.arrival(k))
		e.stats.Submitted.Add(1)
	}
	ctx, cancel := context.WithTimeout(ctx, e.opts.MaxWait)
	defer cancel()
	verdicts := make([]*Verdict, len(tickets))
	for i, t := range tickets {
		verdicts[i] = e.verdictOf(rt.keys[i], t.Wait(ctx))
	}
	return verdicts
}

// admit submits the routed keys of an object event without waiting for
// their runs (Options.AnswerAdmitted), unless MaxAdmitted keys are admitted
// and not yet reconciled already: then it returns false and the request
// waits for its reconciles.
func (e *Engine) admit(rt *routed) bool {
	n := int64(len(rt.keys))
	if e.admitted.Add(n) > int64(e.opts.MaxAdmitted) {
		e.admitted.Add(-n)
		return false
	}
	for _, k := range rt.keys {
		a := rt.arrival(k)
		a.admitted = true
		e.queue.Submit(k, a)
		e.stats.Submitted.Add(1)
	}
	e.stats.Admitted.Add(1)
	return true
}

// verdictOf is what a ticket's error says of key: a run's error is always
// its *Verdict; anything else means the run did not happen or did not end
// in time, and the sender must deliver again.
func (e *Engine) verdictOf(key reconcile.Request, err error) *Verdict {
	var v *Verdict
	switch {
	case errors.As(err, &v):
		return v
	case errors.Is(err, keyq.ErrShutdown):
		return unavailableVerdict(key, errors.New("shutting down before it was reconciled; retry"))
	case errors.Is(err, context.DeadlineExceeded):
		return unavailableVerdict(key, fmt.Errorf("still queued after %s; it will be reconciled, retry to be told when", e.opts.MaxWait))
	}
	return unavailableVerdict(key, fmt.Errorf("not reconciled: %v; retry", err))
}

// accept (async mode) makes each key's intent durable, answers 202 and lets
// the reconciles run after the answer.
func (e *Engine) accept(w http.ResponseWriter, ctx context.Context, rt *routed) {
	for _, k := range rt.keys {
		if err := e.opts.Durable.Accept(ctx, k, e.opts.AsyncGrace); err != nil {
			unavailable(w, fmt.Sprintf("could not record the event for %s: %v", k, err))
			return
		}
	}
	for _, k := range rt.keys {
		e.queue.Submit(k, rt.arrival(k))
		e.stats.Submitted.Add(1)
	}
	w.Header().Set(ResultHeader, fmt.Sprintf("accepted %d key(s): %s", len(rt.keys), rt.why))
	w.WriteHeader(http.StatusAccepted)
}

func handled(w http.ResponseWriter, why string) {
	w.Header().Set(ResultHeader, why)
	w.WriteHeader(http.StatusOK)
}

func badRequest(w http.ResponseWriter, err error) {
	http.Error(w, "bad event: "+err.Error(), http.StatusBadRequest)
}

func unavailable(w http.ResponseWriter, msg string) {
	w.Header().Set("Retry-After", "1")
	http.Error(w, msg, http.StatusServiceUnavailable)
}

// answer writes the HTTP answer for the verdicts of one request's keys: the
// worst Outcome chooses the code, and the body (or, for a 2xx, the
// Opzero-Result header) says what became of the keys it concerns.
func answer(w http.ResponseWriter, rt *routed, verdicts []*Verdict) {
	worst := Reconciled
	for _, v := range verdicts {
		worst = max(worst, v.Outcome)
	}
	var said []string // the worst verdicts; a 500 names the terminal ones too
	for _, v := range verdicts {
		if v.Outcome == worst || worst == Retrying && v.Outcome == Terminal {
			said = append(said, v.Error())
		}
	}
	all := strings.Join(said, "; ")
	switch worst {
	case Reconciled:
		msg := fmt.Sprintf("reconciled %d key(s): %s", len(verdicts), rt.why)
		for _, v := range verdicts {
			if v.Note != "" {
				msg += "; " + v.Error()
			}
		}
		handled(w, msg)
	case HandedOff:
		handled(w, fmt.Sprintf("reconciled %d key(s), handed off %d: %s", len(verdicts)-len(said), len(said), all))
	case RetryRecorded:
		handled(w, "reconcile failed, retry recorded: "+all)
	case Terminal:
		http.Error(w, "reconcile failed terminally, not retried: "+all, worst.Code())
	case Retrying:
		http.Error(w, "reconcile failed, retry scheduled: "+all, worst.Code())
	default:
		unavailable(w, all)
	}
}
