package hub

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/opzero/opzero/internal/hub/starting"
)

// postSink posts ev to the sink at url and, when the sink is a Knative
// Service and the answer takes longer than starting.After, to a starting
// pod of it too (package starting: early delivery). The pod's answer
// counts when it settles the send as the route's would (2xx, or the
// operator's 500 "failed, retry scheduled"); any other answer of the pod
// (a 503 while it starts, a 4xx) leaves the send to the route.
func (s *sub) postSink(ctx context.Context, url, audience string, ev *event.Event) (time.Duration, http.Header, error) {
	type answer struct {
		wait time.Duration
		hdr  http.Header
		err  error
	}
	a, early := starting.Race(ctx, s.startingPods(),
		func(ctx context.Context) answer {
			w, h, err := s.h.postAnswer(ctx, s.h.opts.HTTP, url, audience, ev)
			return answer{w, h, err}
		},
		func(ctx context.Context, base string) (answer, starting.Outcome) {
			w, h, err := s.h.postAnswer(ctx, s.h.direct, base+"/", audience, ev)
			var se sendError
			switch {
			case err == nil || handedOver(err):
				return answer{w, h, err}, starting.Settled
			case errors.As(err, &se):
				return answer{}, starting.GiveUp
			}
			return answer{}, starting.Again
		})
	if early {
		s.h.stats.early.Inc()
	}
	return a.wait, a.hdr, a.err
}

// startingPods is the sink's Knative Service to race (package starting),
// nil when the sink is not one or early delivery is off.
func (s *sub) startingPods() *starting.Service {
	s.mu.Lock()
	r := s.obj.Spec.Sink.Ref
	s.mu.Unlock()
	if r == nil || !starting.IsKnativeService(r.APIVersion, r.Kind) {
		return nil
	}
	return s.h.starting.Get(s.key.Namespace, r.Name)
}
