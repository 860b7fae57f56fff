package dev

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/opzero/opzero/internal/devenv/broker"
	"github.com/opzero/opzero/internal/eventfilter"
)

// triggerSpec is what dev reads of a Trigger's (or a Broker's) spec.
type triggerSpec struct {
	Broker string `json:"broker"`
	Filter *struct {
		Attributes map[string]string `json:"attributes"`
	} `json:"filter"`
	Filters  []eventfilter.Filter `json:"filters"`
	Delivery *deliverySpec        `json:"delivery"`
}

type deliverySpec struct {
	Retry          *int64 `json:"retry"`
	BackoffPolicy  string `json:"backoffPolicy"`
	BackoffDelay   string `json:"backoffDelay"`
	DeadLetterSink any    `json:"deadLetterSink"`
}

func readSpec(u *unstructured.Unstructured) (triggerSpec, error) {
	var s triggerSpec
	b, err := json.Marshal(u.Object["spec"])
	if err == nil {
		err = json.Unmarshal(b, &s)
	}
	if err != nil {
		return s, fmt.Errorf("%s %s: spec: %w", u.GetKind(), key(u), err)
	}
	return s, nil
}

// startBrokers plays every Broker and Trigger (package broker): one
// ingress on a free local port serves each Broker at /<namespace>/<name>,
// which becomes its status.address.url; each Trigger's subscriber and
// dead-letter sink are resolved to local URLs, and its OIDC identity
// created when its subscriber has an audience. Statuses are written as
// Knative's controllers would.
func (p *Platform) startBrokers(ctx context.Context, _ []net.Listener) error {
	brokers, err := p.readBack(ctx, "eventing.knative.dev", "Broker")
	if err != nil {
		return err
	}
	triggers, err := p.readBack(ctx, "eventing.knative.dev", "Trigger")
	if err != nil || len(brokers)+len(triggers) == 0 {
		return err
	}
	byBroker := map[string]*unstructured.Unstructured{}
	for _, b := range brokers {
		byBroker[key(b)] = b
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("Brokers: a local port for their ingress: %w", err)
	}
	base := "http://" + l.Addr().String()
	in := broker.New(p.ctx, broker.Options{Logf: p.say})
	srv := &http.Server{Handler: in, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(l) }()
	p.servers = append(p.servers, srv)
	// Brokers first: a Trigger (or a source) may resolve one's address.
	for _, b := range brokers {
		if err := p.brokerReady(ctx, b, base+broker.Path(b.GetNamespace(), b.GetName())); err != nil {
			return err
		}
	}
	played := map[string][]*broker.Trigger{}
	for _, u := range triggers {
		t, spec, err := p.trigger(ctx, u, byBroker)
		if err != nil {
			return err
		}
		bk := u.GetNamespace() + "/" + spec.Broker
		played[bk] = append(played[bk], t)
	}
	for _, b := range brokers {
		in.Set(b.GetNamespace(), b.GetName(), played[key(b)])
		p.say("Broker %s: ingress %s, in memory like Knative's in-memory channel, %d Trigger(s)", key(b), base+broker.Path(b.GetNamespace(), b.GetName()), len(played[key(b)]))
	}
	return nil
}

// brokerReady writes the status Knative's Broker controller writes.
func (p *Platform) brokerReady(ctx context.Context, b *unstructured.Unstructured, url string) error {
	spec, err := readSpec(b)
	if err != nil {
		return err
	}
	status := map[string]any{"observedGeneration": b.GetGeneration(),
		"address":    map[string]any{"name": "http", "url": url},
		"conditions": trueConditions("Addressable", "FilterReady", "IngressReady", "TriggerChannelReady", "DeadLetterSinkResolved", "EventPoliciesReady")}
	urls := []string{"address"}
	if spec.Delivery != nil && spec.Delivery.DeadLetterSink != nil {
		dls, err := p.resolveDestination(ctx, b, "spec", "delivery", "deadLetterSink")
		if err != nil {
			return err
		}
		status["deadLetterSinkUri"] = dls.URI
		urls = append(urls, "deadLetterSinkUri")
	}
	if err := p.apply.patchStatus(ctx, b, status); err != nil {
		return err
	}
	p.madeReady(b, status, urls...)
	return nil
}

// trigger resolves one Trigger and writes its status.
func (p *Platform) trigger(ctx context.Context, u *unstructured.Unstructured, brokers map[string]*unstructured.Unstructured) (*broker.Trigger, triggerSpec, error) {
	where := "Trigger " + key(u)
	spec, err := readSpec(u)
	if err != nil {
		return nil, spec, err
	}
	b := brokers[u.GetNamespace()+"/"+spec.Broker]
	if spec.Broker == "" || b == nil {
		return nil, spec, fmt.Errorf("%s: spec.broker %q is not a Broker in the manifests (opzero dev plays Brokers it applies; spec.brokerRef is not supported)", where, spec.Broker)
	}
	f := eventfilter.Spec{Filters: spec.Filters}
	if spec.Filter != nil && len(spec.Filters) == 0 { // Knative ignores filter when filters is set
		f.Attributes = spec.Filter.Attributes
	}
	if err := f.Validate(); err != nil {
		return nil, spec, fmt.Errorf("%s: %w", where, err)
	}
	sub, err := p.resolveDestination(ctx, u, "spec", "subscriber")
	if err != nil {
		return nil, spec, err
	}
	// The Trigger's delivery, else its Broker's (as Knative's subscription).
	src, path := u, []string{"spec", "delivery"}
	if spec.Delivery == nil {
		bs, _ := readSpec(b)
		spec.Delivery, src = bs.Delivery, b
	}
	t := &broker.Trigger{Name: key(u), Filter: f, Subscriber: broker.Target{URL: sub.URI, Audience: sub.Audience}}
	status := map[string]any{"observedGeneration": u.GetGeneration(), "subscriberUri": sub.URI,
		"conditions": trueConditions("BrokerReady", "SubscriptionReady", "DependencyReady", "SubscriberResolved", "DeadLetterSinkResolved", "OIDCIdentityCreated")}
	urls := []string{"subscriberUri"}
	if d := spec.Delivery; d != nil {
		if t.Delivery, err = broker.ParseDelivery(d.Retry, d.BackoffPolicy, d.BackoffDelay); err != nil {
			return nil, spec, fmt.Errorf("%s %s: %w", src.GetKind(), key(src), err)
		}
		if d.DeadLetterSink != nil {
			dls, err := p.resolveDestination(ctx, src, append(path, "deadLetterSink")...)
			if err != nil {
				return nil, spec, err
			}
			t.Delivery.DeadLetter = broker.Target{URL: dls.URI, Audience: dls.Audience}
			status["deadLetterSinkUri"] = dls.URI
			urls = append(urls, "deadLetterSinkUri")
			if dls.Audience != "" {
				status["deadLetterSinkAudience"] = dls.Audience
			}
		}
	}
	oidc := ""
	if sub.Audience != "" || t.Delivery.DeadLetter.Audience != "" {
		if oidc, err = ensureOIDCIdentity(ctx, p.cs, u); err != nil {
			return nil, spec, err
		}
		t.Token = (&tokens{p: p, ns: u.GetNamespace(), sa: oidc}).get
		status["auth"] = map[string]any{"serviceAccountName": oidc}
		if sub.Audience != "" {
			status["subscriberAudience"] = sub.Audience
		}
	}
	if err := p.apply.patchStatus(ctx, u, status); err != nil {
		return nil, spec, err
	}
	p.madeReady(u, status, urls...)
	p.Sources = append(p.Sources, fmt.Sprintf("Trigger %s (Broker %s, %s) -> %s", key(u), spec.Broker, orDefault(f.String(), "every event"), sub.URI))
	p.say("Trigger %s: events of Broker %s passing %s -> %s, retry %d (%s backoff %s)%s%s", key(u), spec.Broker, orDefault(f.String(), "every event"),
		sub.URI, t.Delivery.Retry, orDefault(t.Delivery.Policy, "no"), t.Delivery.Delay, dlsNote(t.Delivery.DeadLetter), authNote(sub, oidc))
	return t, spec, nil
}

func dlsNote(t broker.Target) string {
	if t.URL == "" {
		return ""
	}
	return ", then dead-letter sink " + t.URL
}

func trueConditions(types ...string) []any {
	now := time.Now().UTC().Format(time.RFC3339)
	var conds []any
	for _, t := range append(types, "Ready") {
		conds = append(conds, map[string]any{"type": t, "status": "True", "lastTransitionTime": now})
	}
	return conds
}

// tokens are a Trigger's OIDC tokens (TokenRequest for its identity), one
// per audience, renewed a minute before they expire.
type tokens struct {
	p      *Platform
	ns, sa string
	mu     sync.Mutex
	cache  map[string]authnv1.TokenRequestStatus
}

func (t *tokens) get(ctx context.Context, audience string) (string, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if c, ok := t.cache[audience]; ok && time.Until(c.ExpirationTimestamp.Time) > time.Minute {
		return c.Token, nil
	}
	exp := int64(3600)
	tr, err := t.p.cs.CoreV1().ServiceAccounts(t.ns).CreateToken(ctx, t.sa,
		&authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{Audiences: []string{audience}, ExpirationSeconds: &exp}}, metav1.CreateOptions{})
	if err != nil {
		return "", err
	}
	if t.cache == nil {
		t.cache = map[string]authnv1.TokenRequestStatus{}
	}
	t.cache[audience] = tr.Status
	return tr.Status.Token, nil
}
