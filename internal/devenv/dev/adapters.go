package dev

import (
	"context"
	"fmt"
	"net"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/opzero/opzero/internal/devenv/knative"
)

// PingNamespace is the SYSTEM_NAMESPACE opzero dev runs mtping with.
const PingNamespace = "knative-eventing"

// startApiServerSources runs Knative's adapter for each ApiServerSource and
// writes its status.
func (p *Platform) startApiServerSources(ctx context.Context, _ []net.Listener) error {
	objs, err := p.readBack(ctx, "sources.knative.dev", "ApiServerSource")
	if err != nil {
		return err
	}
	for _, u := range objs {
		c, err := p.apiServerSource(ctx, u)
		if err != nil {
			return err
		}
		if err := p.checkPermissions(ctx, u, c); err != nil {
			return err
		}
		s, err := p.resolveSink(ctx, u)
		if err != nil {
			return err
		}
		c.Sink, c.Audience = s.URI, s.Audience
		oidc := ""
		if s.Audience != "" {
			if oidc, err = ensureOIDCIdentity(ctx, p.cs, u); err != nil {
				return err
			}
			c.OIDCServiceAccount = oidc
		}
		name := "apiserversource-" + u.GetNamespace() + "-" + u.GetName()
		if c.Log, err = p.logFile(name); err != nil {
			return err
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
			return err
		}
		sinkURI := s.URI
		sup := &supervised{what: "ApiServerSource " + key(u), start: start, cur: a,
			restarted: func(ctx context.Context, _ string) { p.sweep(ctx, "ApiServerSource "+key(u), sinkURI) }}
		p.supervise(sup)
		p.adapters = append(p.adapters, sup)
		status := sourceStatus(u, s, oidc, "Deployed", "SinkProvided", "SufficientPermissions", "OIDCIdentityCreated")
		if err := p.apply.patchStatus(ctx, u, status); err != nil {
			return err
		}
		p.madeReady(u, status, "sinkUri")
		kinds := make([]string, len(c.Resources))
		for i, r := range c.Resources {
			kinds[i] = r.Resource
		}
		p.Sources = append(p.Sources, fmt.Sprintf("ApiServerSource %s (%s, %s mode) -> %s", key(u), strings.Join(kinds, ", "), orDefault(c.Mode, "Reference"), s.URI))
		p.say("ApiServerSource %s: Knative's adapter pid %d started in %s, watching %s -> %s%s (log %s)",
			key(u), a.PID(), since(t), strings.Join(kinds, ", "), s.URI, authNote(s, oidc), p.LogPath(name))
	}
	// Each resource has its own reflector; let them list and watch before
	// the caller changes objects (the adapter sends nothing for what it
	// lists).
	for _, s := range p.adapters {
		g := s.current().(gapped)
		select {
		case <-g.Synced():
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(30 * time.Second):
			return fmt.Errorf("%s: its adapter has not listed its objects within 30s (its log says why)", s.what)
		}
	}
	return nil
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
	p.adapters = append(p.adapters, sup)
	p.say("PingSources: Knative's mtping pid %d started in %s, restarted if it exits (log %s)", a.PID(), since(t), p.LogPath("mtping"))
	return nil
}
