// Package outcome is the one place that interprets what a reconcile
// returned, with controller-runtime's semantics, for both engines:
//
//   - an error wrapping reconcile.TerminalError: no retry;
//   - any other error: retry with per-key backoff (the Result is ignored);
//   - Result.RequeueAfter > 0: reconcile again after that long;
//   - Result.Requeue (deprecated upstream): retry with backoff;
//   - otherwise: done, and a pending retry of the key is cancelled.
package outcome

import (
	"errors"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// Action is what the engine does next for the key.
type Action int

// The actions, from best to worst.
const (
	// Done: success; forget failures and cancel a pending retry.
	Done Action = iota
	// RequeueAfter: success; reconcile again after Decision.After.
	RequeueAfter
	// Retry: failure; retry after the key's backoff.
	Retry
	// Terminal: failure that retrying cannot fix.
	Terminal
)

func (a Action) String() string {
	switch a {
	case Done:
		return "done"
	case RequeueAfter:
		return "requeue-after"
	case Retry:
		return "retry"
	case Terminal:
		return "terminal"
	}
	return "unknown"
}

// Decision is the interpretation of one reconcile.
type Decision struct {
	Action Action
	After  time.Duration // RequeueAfter only
	Err    error         // Retry and Terminal
}

// Decide interprets (res, err) as controller-runtime's controller does.
func Decide(res reconcile.Result, err error) Decision {
	switch {
	case err != nil && errors.Is(err, reconcile.TerminalError(nil)):
		return Decision{Action: Terminal, Err: err}
	case err != nil:
		return Decision{Action: Retry, Err: err}
	case res.RequeueAfter > 0:
		return Decision{Action: RequeueAfter, After: res.RequeueAfter}
	case res.Requeue: //nolint:staticcheck // honoured for reconcilers written against it
		return Decision{Action: Retry}
	}
	return Decision{Action: Done}
}
