package serverless

import (
	"fmt"
	"net/http"
	"strings"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// Verdict is what became of one key's reconcile: settle (or, before the
// reconcile, the key's Lease) returns it, and it alone chooses the HTTP
// answer. A run's error, as its ticket reports it, is always its *Verdict.
type Verdict struct {
	Key     reconcile.Request
	Outcome Outcome
	// Err is the reconcile's error (Retrying, RetryRecorded, Terminal), or
	// why what must follow could not be arranged (Unavailable).
	Err error
	// Next is how long until the key's next reconcile, if one is scheduled.
	Next time.Duration
	// Note says more: a requeue, the instance a key was handed off to.
	Note string
}

// Outcome classifies a Verdict, from best to worst: a request about
// several keys is answered for the worst.
type Outcome int

const (
	// Reconciled: the reconcile succeeded (a requeue it asked for is
	// scheduled: Next). 200.
	Reconciled Outcome = iota
	// HandedOff: another live instance holds the key's Lease; it was marked
	// and reconciles the key again before letting go. 200.
	HandedOff
	// RetryRecorded: the reconcile failed and its retry is a durable
	// Wakeup. 200: the event is handled.
	RetryRecorded
	// Terminal: the reconcile returned a reconcile.TerminalError: retrying
	// cannot help. 422, which no sender retries.
	Terminal
	// Retrying: the reconcile failed; its retry is an in-process timer.
	// 500 (ApiServerSource does not retry it; a Broker does).
	Retrying
	// Unavailable: the key was not reconciled, or what must follow could
	// not be recorded: the sender must deliver again. 503.
	Unavailable
)

// Code is the HTTP status an Outcome is answered with.
func (o Outcome) Code() int {
	switch o {
	case Terminal:
		return http.StatusUnprocessableEntity
	case Retrying:
		return http.StatusInternalServerError
	case Unavailable:
		return http.StatusServiceUnavailable
	}
	return http.StatusOK
}

func (v *Verdict) Error() string {
	switch {
	case v.Outcome == HandedOff:
		return fmt.Sprintf("%s: %s", v.Key, v.Note)
	case v.Err == nil && v.Note != "":
		return fmt.Sprintf("%s: %s", v.Key, v.Note)
	case v.Err == nil:
		return v.Key.String() + ": reconciled"
	case v.Outcome == Retrying || v.Outcome == RetryRecorded:
		return fmt.Sprintf("%s: %v (retry in %s)", v.Key, v.Err, v.Next)
	}
	return fmt.Sprintf("%s: %v", v.Key, v.Err)
}

func (v *Verdict) Unwrap() error { return v.Err }

func unavailableVerdict(key reconcile.Request, err error) *Verdict {
	return &Verdict{Key: key, Outcome: Unavailable, Err: err}
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
