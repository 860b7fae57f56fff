package dev

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/opzero/opzero/internal/devenv/knative"
)

// PingNamespace is the SYSTEM_NAMESPACE opzero dev runs mtping with.
const PingNamespace = "knative-eventing"

// startApiServerSources runs Knative's adapter for each ApiServerSource and
// writes its status (watchApiServerSources runs those made later).
func (p *Platform) startApiServerSources(ctx context.Context, _ []net.Listener) error {
	objs, err := p.readBack(ctx, "sources.knative.dev", "ApiServerSource")
	if err != nil {
		return err
	}
	var started []*supervised
	for _, u := range objs {
		sup, err := p.startApiServerSource(ctx, u)
		if err != nil {
			return err
		}
		started = append(started, sup)
	}
	// Each resource has its own reflector; let them list and watch before
	// the caller changes objects (the adapter sends nothing for what it
	// lists).
	for _, s := range started {
		if err := waitSynced(ctx, s); err != nil {
			return err
		}
	}
	return nil
}

func waitSynced(ctx context.Context, s *supervised) error {
	g := s.current().(gapped)
	select {
	case <-g.Synced():
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(30 * time.Second):
		return fmt.Errorf("%s: its adapter has not listed its objects within 30s (its log says why)", s.what)
	}
}

// startApiServerSource runs Knative's adapter for u, supervised, and
// writes u's status.
func (p *Platform) startApiServerSource(ctx context.Context, u *unstructured.Unstructured) (*supervised, error) {
	c, err := p.apiServerSource(ctx, u)
	if err != nil {
		return nil, err
	}
	if err := p.checkPermissions(ctx, u, c); err != nil {
		return nil, err
	}
	s, err := p.resolveSink(ctx, u)
	if err != nil {
		return nil, err
	}
	c.Sink, c.Audience = s.URI, s.Audience
	oidc := ""
	if s.Audience != "" {
		if oidc, err = ensureOIDCIdentity(ctx, p.cs, u); err != nil {
			return nil, err
		}
		c.OIDCServiceAccount = oidc
	}
	name := "apiserversource-" + u.GetNamespace() + "-" + u.GetName()
	if c.Log, err = p.logFile(name); err != nil {
		return nil, err
	}
	c.Name = u.GetName()
	t := time.Now()
	c.BinDir = p.opts.BinDir
	start := func(ctx context.Context) (running, error) {
		a, err := knative.StartApiServerSource(ctx, c)
		if err != nil {
			return nil, fmt.Errorf("ApiServerSource %s: %w", key(u), err)
		}
		return a, nil
	}
	a, err := start(ctx)
	if err != nil {
		return nil, err
	}
	sinkURI := s.URI
	sup := &supervised{what: "ApiServerSource " + key(u), start: start, cur: a,
		restarted: func(ctx context.Context, _ string) { p.sweep(ctx, "ApiServerSource "+key(u), sinkURI) }}
	p.adaptersMu.Lock()
	if p.stopping {
		p.adaptersMu.Unlock()
		a.Stop()
		return nil, errors.New("opzero dev is stopping")
	}
	p.supervise(sup)
	p.adapters = append(p.adapters, sup)
	if p.adapterOf == nil {
		p.adapterOf = map[string]bool{}
	}
	p.adapterOf[key(u)] = true
	p.adaptersMu.Unlock()
	status := sourceStatus(u, s, oidc, "Deployed", "SinkProvided", "SufficientPermissions", "OIDCIdentityCreated")
	if err := p.apply.patchStatus(ctx, u, status); err != nil {
		return nil, err
	}
	p.madeReady(u, status, "sinkUri")
	kinds := make([]string, len(c.Resources))
	for i, r := range c.Resources {
		kinds[i] = r.Resource
	}
	p.adaptersMu.Lock()
	p.Sources = append(p.Sources, fmt.Sprintf("ApiServerSource %s (%s, %s mode) -> %s", key(u), strings.Join(kinds, ", "), orDefault(c.Mode, "Reference"), s.URI))
	p.adaptersMu.Unlock()
	p.say("ApiServerSource %s: Knative's adapter pid %d started in %s, watching %s -> %s%s (log %s)",
		key(u), a.PID(), since(t), strings.Join(kinds, ", "), s.URI, authNote(s, oidc), p.LogPath(name))
	return sup, nil
}

// watchApiServerSources polls for ApiServerSources that no adapter runs
// and whose sink is a Knative Service this platform runs, and runs theirs,
// until the platform stops: an operator may make sources at run time
// (opzero-metacontroller, for the resources its customize hooks name).
func (p *Platform) watchApiServerSources() {
	gvr := schema.GroupVersionResource{Group: "sources.knative.dev", Version: "v1", Resource: "apiserversources"}
	ours := map[string]bool{}
	for _, s := range p.Services {
		ours[s.Namespace+"/"+s.Name] = true
	}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-p.ctx.Done():
			return
		case <-tick.C:
		}
		list, err := p.apply.dyn.Resource(gvr).Namespace(metav1.NamespaceAll).List(p.ctx, metav1.ListOptions{})
		if err != nil {
			continue // the API server away: next tick
		}
		for i := range list.Items {
			u := &list.Items[i]
			p.adaptersMu.Lock()
			running := p.adapterOf[key(u)]
			p.adaptersMu.Unlock()
			ref, _, _ := unstructured.NestedStringMap(u.Object, "spec", "sink", "ref")
			ns := ref["namespace"]
			if ns == "" {
				ns = u.GetNamespace()
			}
			if running || ref["kind"] != "Service" || !strings.HasPrefix(ref["apiVersion"], "serving.knative.dev/") || !ours[ns+"/"+ref["name"]] {
				continue
			}
			p.say("ApiServerSource %s: made after opzero dev started, to %s/%s: starting its adapter", key(u), ns, ref["name"])
			sup, err := p.startApiServerSource(p.ctx, u)
			if err == nil {
				err = waitSynced(p.ctx, sup)
			}
			if err != nil {
				p.say("ApiServerSource %s: %v (retried in a second)", key(u), err)
			}
		}
	}
}

// adapterList is the adapters running now.
func (p *Platform) adapterList() []*supervised {
	p.adaptersMu.Lock()
	defer p.adaptersMu.Unlock()
	return slices.Clone(p.adapters)
}

func authNote(s sink, oidc string) string {
	if s.Audience == "" {
		return ""
	}
	return fmt.Sprintf(" with OIDC tokens of %s for audience %s", oidc, s.Audience)
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

func (p *Platform) startPingSources(ctx context.Context, _ []net.Listener) error {
	objs, err := p.readBack(ctx, "sources.knative.dev", "PingSource")
	if err != nil || len(objs) == 0 {
		return err
	}
	// mtping schedules only Ready sources and sends to status.sinkUri:
	// write the statuses first.
	for _, u := range objs {
		s, err := p.resolveSink(ctx, u)
		if err != nil {
			return err
		}
		oidc := ""
		if s.Audience != "" {
			if oidc, err = ensureOIDCIdentity(ctx, p.cs, u); err != nil {
				return err
			}
		}
		status := sourceStatus(u, s, oidc, "Deployed", "SinkProvided", "OIDCIdentityCreated")
		if err := p.apply.patchStatus(ctx, u, status); err != nil {
			return err
		}
		p.madeReady(u, status, "sinkUri")
		p.pingMu.Lock()
		p.pings = append(p.pings, ping{u: u, sink: s, oidc: oidc})
		p.pingMu.Unlock()
		sched, _, _ := unstructured.NestedString(u.Object, "spec", "schedule")
		p.Sources = append(p.Sources, fmt.Sprintf("PingSource %s (%s) -> %s", key(u), orDefault(sched, "* * * * *"), s.URI))
		p.say("PingSource %s: schedule %q -> %s%s", key(u), orDefault(sched, "* * * * *"), s.URI, authNote(s, oidc))
	}
	logf, err := p.logFile("mtping")
	if err != nil {
		return err
	}
	t := time.Now()
	start := func(ctx context.Context) (running, error) {
		a, err := knative.StartPing(ctx, knative.PingConfig{Kubeconfig: p.kubeconfig, Namespace: PingNamespace, Log: logf, BinDir: p.opts.BinDir})
		if err != nil {
			return nil, err
		}
		return a, nil
	}
	a, err := start(ctx)
	if err != nil {
		return err
	}
	sup := &supervised{what: "mtping", start: start, cur: a}
	p.supervise(sup)
	p.adaptersMu.Lock()
	p.adapters = append(p.adapters, sup)
	p.adaptersMu.Unlock()
	p.say("PingSources: Knative's mtping pid %d started in %s, restarted if it exits (log %s)", a.PID(), since(t), p.LogPath("mtping"))
	return nil
}
