package serverless

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/opzero/opzero/internal/cloudevent"
	"github.com/opzero/opzero/internal/cloudevent/receive"
)

// Group serves several engines, one per controller of a binary, on one
// endpoint (one Knative Service). Each event goes to the engines it
// concerns:
//
//   - an object event (ApiServerSource) to those whose primary, owned or
//     watched kinds include its kind;
//   - a durable wakeup to the engine of the operator it names;
//   - a request another instance forwarded to the engine that forwarded it;
//   - a PingSource tick to every engine (each sweeps its own kind);
//   - any other CloudEvent to the engines that take Broker events.
//
// The answer waits for all of them and is the worst of theirs (a 5xx
// before a 4xx before a 2xx; the longest Retry-After), so a sender retries
// when any of them must retry; 2xx reasons are joined. An event none of
// them concerns is answered 400.
type Group struct {
	engines []*Engine
	maxBody int64
	maxWait time.Duration
}

var _ http.Handler = (*Group)(nil)

// NewGroup returns the group of engines; their operators' names and
// primary kinds must differ.
func NewGroup(engines ...*Engine) (*Group, error) {
	if len(engines) == 0 {
		return nil, errors.New("a group of no engines")
	}
	g := &Group{engines: engines}
	names := map[string]bool{}
	primaries := map[schema.GroupVersionKind]string{}
	for _, e := range engines {
		if names[e.op.Name] {
			return nil, fmt.Errorf("two controllers named %s: name them apart (builder Named)", e.op.Name)
		}
		names[e.op.Name] = true
		if other, dup := primaries[e.op.Primary.GVK]; dup {
			return nil, fmt.Errorf("controllers %s and %s both reconcile %s: one serverless endpoint routes wakeups and sweeps by kind, so give the kind one controller", other, e.op.Name, e.op.Primary.GVK)
		}
		primaries[e.op.Primary.GVK] = e.op.Name
		g.maxBody = max(g.maxBody, e.opts.MaxBodyBytes)
		g.maxWait = max(g.maxWait, e.opts.MaxWait)
	}
	return g, nil
}

// handles reports whether e's operator reconciles or watches kind gvk.
func (e *Engine) handles(gvk schema.GroupVersionKind) bool {
	if e.op.Primary.GVK == gvk {
		return true
	}
	for _, k := range e.op.Owned {
		if k.GVK == gvk {
			return true
		}
	}
	for _, w := range e.op.Watched {
		if w.GVK == gvk {
			return true
		}
	}
	return false
}

// targets returns the engines an event concerns; body is the request's.
func (g *Group) targets(r *http.Request, body []byte) ([]*Engine, error) {
	if by := r.Header.Get(ForwardedByHeader); by != "" {
		name, _, _ := strings.Cut(by, "/")
		for _, e := range g.engines {
			if e.op.Name == name {
				return []*Engine{e}, nil
			}
		}
		return nil, fmt.Errorf("forwarded by controller %q, which this binary does not run", name)
	}
	ev, err := receive.DecodeRequest(r.Context(), withBody(r, body))
	if err != nil {
		return g.engines, nil // each answers the bad event (and forgets its event cache: it may have been any object's)
	}
	var out []*Engine
	switch ev := ev.(type) {
	case *cloudevent.ObjectEvent:
		gv, err := schema.ParseGroupVersion(ev.APIVersion)
		if err != nil {
			return g.engines, nil // each answers the bad event
		}
		for _, e := range g.engines {
			if e.handles(gv.WithKind(ev.Kind)) {
				out = append(out, e)
			}
		}
		if len(out) == 0 {
			return nil, fmt.Errorf("kind %s is watched by none of the controllers (%s)", gv.WithKind(ev.Kind), g.names())
		}
	case *cloudevent.Wakeup:
		for _, e := range g.engines {
			if e.op.Name == ev.Operator {
				out = append(out, e)
			}
		}
		if len(out) == 0 {
			return nil, fmt.Errorf("wakeup for operator %q, which is none of the controllers (%s)", ev.Operator, g.names())
		}
	case *cloudevent.Other:
		for _, e := range g.engines {
			if len(e.op.Events) > 0 {
				out = append(out, e)
			}
		}
		if len(out) == 0 {
			return g.engines[:1], nil
		}
	default: // a PingSource tick
		out = g.engines
	}
	return out, nil
}

func (g *Group) names() string {
	var ns []string
	for _, e := range g.engines {
		ns = append(ns, e.op.Name)
	}
	return strings.Join(ns, ", ")
}

// ServeHTTP hands the request to each engine it concerns and answers the
// worst of their answers.
func (g *Group) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		g.engines[0].ServeHTTP(w, r)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, g.maxBody))
	if err != nil {
		for _, e := range g.engines {
			e.cache.Forget() // an event refused unread may have been any object's
		}
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			http.Error(w, fmt.Sprintf("event larger than %d bytes", g.maxBody), http.StatusRequestEntityTooLarge)
			return
		}
		badRequest(w, fmt.Errorf("reading the event: %w", err))
		return
	}
	targets, err := g.targets(r, body)
	if err != nil {
		badRequest(w, err)
		return
	}
	if len(targets) == 1 {
		targets[0].ServeHTTP(w, withBody(r, body))
		return
	}
	answers := make([]*recorded, len(targets))
	var wg sync.WaitGroup
	for i, e := range targets {
		answers[i] = &recorded{header: http.Header{}, code: http.StatusOK}
		wg.Add(1)
		go func() {
			defer wg.Done()
			e.ServeHTTP(answers[i], withBody(r, body))
		}()
	}
	wg.Wait()
	worst(answers).writeTo(w, answers)
}

func withBody(r *http.Request, body []byte) *http.Request {
	c := r.Clone(r.Context())
	c.Body = io.NopCloser(bytes.NewReader(body))
	c.ContentLength = int64(len(body))
	return c
}

// recorded is one engine's answer.
type recorded struct {
	header http.Header
	code   int
	body   bytes.Buffer
	wrote  bool
}

func (a *recorded) Header() http.Header { return a.header }
func (a *recorded) Write(b []byte) (int, error) {
	if !a.wrote {
		a.WriteHeader(http.StatusOK)
	}
	return a.body.Write(b)
}
func (a *recorded) WriteHeader(code int) {
	if !a.wrote {
		a.code, a.wrote = code, true
	}
}

// severity orders answers: the sender acts on the worst.
func severity(code int) int {
	switch {
	case code == http.StatusServiceUnavailable:
		return 6
	case code >= 500:
		return 5
	case code == http.StatusTooManyRequests:
		return 4
	case code >= 400:
		return 3
	case code == http.StatusAccepted:
		return 1
	case code >= 200 && code < 300:
		return 0
	}
	return 2
}

func worst(as []*recorded) *recorded {
	w := as[0]
	for _, a := range as[1:] {
		if severity(a.code) > severity(w.code) {
			w = a
		}
	}
	return w
}

// writeTo writes the worst answer a, with the longest Retry-After of all,
// every 2xx reason joined, and every failure's body.
func (a *recorded) writeTo(w http.ResponseWriter, all []*recorded) {
	for k, vs := range a.header {
		w.Header()[k] = slices.Clone(vs)
	}
	var reasons []string
	var retry time.Duration
	var bodies []string
	for _, o := range all {
		if v := o.header.Get(ResultHeader); v != "" {
			reasons = append(reasons, v)
		}
		if d, err := time.ParseDuration(o.header.Get("Retry-After") + "s"); err == nil {
			retry = max(retry, d)
		}
		if o.code >= 300 && o.body.Len() > 0 {
			bodies = append(bodies, strings.TrimSpace(o.body.String()))
		}
	}
	if len(reasons) > 0 {
		w.Header().Set(ResultHeader, strings.Join(reasons, "; "))
	}
	if retry > 0 {
		w.Header().Set("Retry-After", fmt.Sprint(int(retry.Seconds())))
	}
	w.WriteHeader(a.code)
	if a.code >= 300 {
		_, _ = io.WriteString(w, strings.Join(bodies, "\n")+"\n")
	}
}

// Serve listens and serves the group until ctx ends, then drains every
// engine as Engine.Serve drains one.
func (g *Group) Serve(ctx context.Context, o ServeOptions) error {
	return serve(ctx, g, o, g.maxWait, g.engines)
}
