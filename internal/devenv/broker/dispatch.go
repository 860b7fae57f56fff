package broker

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/opzero/opzero/internal/cloudevent"
)

// Knative's dead-letter extensions (knative.dev/eventing pkg/channel/attributes).
const (
	ErrorDestExtension = "knativeerrordest"
	ErrorCodeExtension = "knativeerrorcode"
	ErrorDataExtension = "knativeerrordata"
	errorDataMax       = 1024
)

// dispatch delivers ev to t's subscriber with t's retries, then to its
// dead-letter sink if every attempt failed.
func (in *Ingress) dispatch(t *Trigger, ev *event.Event) {
	out := Outcome{Trigger: t.Name, EventID: ev.ID()}
	code, body, attempts := in.send(t, t.Subscriber, ev)
	out.Attempts, out.Code = attempts, code
	switch {
	case ok(code):
		out.Delivered = true
	case in.ctx.Err() != nil:
		in.logf("Trigger %s: event %s (type %s) not delivered: opzero dev stopped (events live in memory, as in Knative's in-memory channel)", t.Name, ev.ID(), ev.Type())
	case t.Delivery.DeadLetter.URL == "":
		in.logf("Trigger %s: event %s (type %s) dropped after %d attempts, last answer %d; set delivery.deadLetterSink to keep such events", t.Name, ev.ID(), ev.Type(), attempts, code)
	default:
		dl := ev.Clone()
		dl.SetExtension(ErrorDestExtension, t.Subscriber.URL)
		dl.SetExtension(ErrorCodeExtension, code)
		data := base64.StdEncoding.EncodeToString(body)
		if len(data) > errorDataMax {
			data = data[:errorDataMax]
		}
		dl.SetExtension(ErrorDataExtension, data)
		dcode, _, _ := in.send(t, t.Delivery.DeadLetter, &dl)
		out.DeadLettered = ok(dcode)
		if out.DeadLettered {
			in.logf("Trigger %s: event %s (type %s) sent to the dead-letter sink after %d attempts, last answer %d", t.Name, ev.ID(), ev.Type(), attempts, code)
		} else {
			in.logf("Trigger %s: event %s (type %s) lost: %d attempts failed (last %d) and the dead-letter sink answered %d", t.Name, ev.ID(), ev.Type(), attempts, code, dcode)
		}
	}
	if in.opts.Delivered != nil {
		in.opts.Delivered(out)
	}
}

func ok(code int) bool { return code >= 200 && code < 300 }

// retryable is Knative's SelectiveRetry: no answer, 5xx, 404, 408, 409, 429.
func retryable(code int) bool {
	return code >= 500 || code == http.StatusNotFound || code == http.StatusRequestTimeout ||
		code == http.StatusConflict || code == http.StatusTooManyRequests
}

// send posts ev to to with t's delivery retries; it returns the last
// answer's code (500 when there was none, as Knative records it) and body,
// and how many attempts it made.
func (in *Ingress) send(t *Trigger, to Target, ev *event.Event) (code int, body []byte, attempts int) {
	for n := 0; ; n++ {
		code, body = in.attempt(t, to, ev)
		attempts++
		if ok(code) || !retryable(code) || n >= t.Delivery.Retry {
			return code, body, attempts
		}
		if in.opts.Sleep(in.ctx, t.Delivery.Wait(n+1)) != nil {
			return code, body, attempts
		}
	}
}

func (in *Ingress) attempt(t *Trigger, to Target, ev *event.Event) (int, []byte) {
	req, err := cloudevent.NewRequest(in.ctx, to.URL, ev, false)
	if err != nil {
		return http.StatusInternalServerError, []byte("dispatch error: " + err.Error())
	}
	req.Header.Set("Prefer", "reply")
	if to.Audience != "" && t.Token != nil {
		tok, err := t.Token(in.ctx, to.Audience)
		if err != nil {
			return http.StatusInternalServerError, []byte(fmt.Sprintf("dispatch error: a token of the Trigger's OIDC identity for %s: %v", to.Audience, err))
		}
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := in.opts.Client.Do(req)
	if err != nil {
		return http.StatusInternalServerError, []byte("dispatch error: " + err.Error())
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	_, _ = io.Copy(&b, io.LimitReader(resp.Body, 64<<10))
	return resp.StatusCode, b.Bytes()
}

func (in *Ingress) logf(format string, args ...any) {
	if in.opts.Logf != nil {
		in.opts.Logf(format, args...)
	}
}
