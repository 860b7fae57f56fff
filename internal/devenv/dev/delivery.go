package dev

import (
	"net/http"
	"regexp"
	"strconv"
	"strings"
)

// Why an operator was woken: the wake reason of a delivery, from its
// CloudEvent type.
const (
	WakeCreate   = "create"   // ApiServerSource: an object was added (the kind is Delivery.Kind)
	WakeUpdate   = "update"   // ApiServerSource: an object changed
	WakeDelete   = "delete"   // ApiServerSource: an object was deleted
	WakeSweep    = "sweep"    // a PingSource tick (or dev's sweep after an adapter's gap)
	WakeWakeup   = "wakeup"   // a durable Wakeup fell due (a retry, a RequeueAfter, an accepted event)
	WakeExternal = "external" // any other CloudEvent (a Broker's, a system's of its own)
)

// Headers of an operator's answer that dev reads besides Opzero-Result,
// when the operator sets them (package telemetry's wire).
const (
	// wakeReasonHeader is the operator's own wake reason: create, update or
	// delete with the kind ("update ConfigMap"), sweep, full_sweep, ping,
	// wakeup with its reason, external.
	wakeReasonHeader = "Opzero-Wake-Reason"
	// traceHeader is the W3C trace ID of the delivery, to find it in a
	// tracing backend.
	traceHeader = "Opzero-Trace-Id"
)

// wakeReason classifies a request by its binary-mode CloudEvent headers.
// A structured-mode event has none (no Ce-Type): then the operator's
// answer may say (wakeReasonHeader); else it is external.
func wakeReason(h http.Header) string {
	t := h.Get("Ce-Type")
	for _, pfx := range []string{"dev.knative.apiserver.resource.", "dev.knative.apiserver.ref."} {
		if action, ok := strings.CutPrefix(t, pfx); ok {
			switch action {
			case "add":
				return WakeCreate
			case "update":
				return WakeUpdate
			case "delete":
				return WakeDelete
			}
		}
	}
	switch t {
	case "dev.knative.sources.ping":
		return WakeSweep
	case "dev.opzero.wakeup":
		return WakeWakeup
	}
	return WakeExternal
}

// operatorsWake maps the operator's wake reason (wakeReasonHeader) to
// dev's, with the kind or the Wakeup's reason it names; ok is false for
// an empty or unknown reason.
func operatorsWake(reason string) (wake, detail string, ok bool) {
	first, rest, _ := strings.Cut(strings.TrimSpace(reason), " ")
	switch first {
	case WakeCreate, WakeUpdate, WakeDelete, WakeWakeup, WakeExternal:
		return first, rest, true
	case "sweep", "full_sweep", "ping":
		return WakeSweep, "", true
	}
	return "", "", false
}

// answer is what an operator's answer says of the reconciles it ran, read
// from the Opzero-Result header of a 2xx and from the body of the others
// (package serverless writes both): keys reconciled, keys whose reconcile
// failed, and the error (the failed keys' verdicts, or why the delivery
// failed).
type answer struct {
	reconciled, failed int
	err                string
}

var (
	reconciledN = regexp.MustCompile(`^reconciled (\d+) key`)
	// A verdict in a list: "<namespace>/<name>: ...", after "; " or at the start.
	verdictKey = regexp.MustCompile(`(?:^|; )[^\s;:]+: `)
)

// The answers of package serverless that report failed reconciles, their
// verdicts after the prefix: a 200 with durable time, a 500, a 422.
var failedPrefixes = []string{
	"reconcile failed, retry recorded: ",
	"reconcile failed, retry scheduled: ",
	"reconcile failed terminally, not retried: ",
}

// apiServerAway is in the verdict of a reconcile that failed because the
// API server could not be reached, answered 503.
const apiServerAway = "the API server cannot be reached or is overloaded (retry scheduled here too)"

func readAnswer(code int, result, body string) answer {
	ok := code >= 200 && code <= 299
	text := strings.TrimSpace(result)
	if !ok {
		text = strings.TrimSpace(body)
	}
	verdicts, failed := "", false
	for _, pfx := range failedPrefixes {
		if v, found := strings.CutPrefix(text, pfx); found {
			verdicts, failed = v, true
		}
	}
	if code == http.StatusServiceUnavailable && strings.Contains(text, apiServerAway) {
		verdicts, failed = text, true
	}
	switch {
	case failed:
		return answer{failed: max(1, len(verdictKey.FindAllString(verdicts, -1))), err: text}
	case !ok && text == "":
		return answer{err: strconv.Itoa(code) + " " + http.StatusText(code)}
	case !ok:
		return answer{err: text}
	}
	if m := reconciledN.FindStringSubmatch(text); m != nil {
		n, _ := strconv.Atoi(m[1])
		return answer{reconciled: n}
	}
	return answer{}
}
