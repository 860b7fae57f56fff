package manifests

import (
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
)

// The flags of a kubebuilder project for what opzero's --disable-leader-election
// and --health-addr set: an adopted binary has these instead
// (operator.Options.BindFlags leaves its own out).
const (
	projectLeaderFlag = "leader-elect"
	projectProbeFlag  = "health-probe-bind-address"
)

// probeFlag is the operator's flag for its health probe address:
// --health-addr, or its old name --health-probe-addr for a binary built
// with an opzero that has only that (which still takes it).
func (g *gen) probeFlag() string {
	if g.hasFlag("health-probe-addr") && !g.hasFlag("health-addr") {
		return "health-probe-addr"
	}
	return "health-addr"
}

// classicProbes is where an always-on pod of the operator serves its
// health probes and the arguments that put them there: kubebuilder's
// --health-probe-bind-address or opzero's flag set to classicProbePort;
// for an adopted project whose manager's probe address comes from a flag
// of its own (a --readiness-probe-port), the port it serves on by default
// (the description's Probes), with no argument. port is 0 when such a
// project serves no probes: the pod is then not probed.
func (g *gen) classicProbes() (port int64, args []any) {
	switch {
	case g.hasFlag(projectProbeFlag):
		return classicProbePort, []any{fmt.Sprintf("--%s=:%d", projectProbeFlag, classicProbePort)}
	case g.in.Probes != "":
		_, p, err := net.SplitHostPort(g.in.Probes)
		n, perr := strconv.ParseInt(p, 10, 32)
		if err != nil || perr != nil || n <= 0 {
			return 0, nil
		}
		return n, nil
	}
	return classicProbePort, []any{fmt.Sprintf("--%s=:%d", g.probeFlag(), classicProbePort)}
}

// hasFlag reports whether the operator binary has flag name.
func (g *gen) hasFlag(name string) bool {
	return slices.Contains(g.in.Flags, name)
}

// classicEventsPort is where a classic operator takes its Broker's events
// (--events-addr; its Service's port 80 forwards to it).
const classicEventsPort = 8082

// eventsService is the Service in front of a classic operator's events
// endpoint: its Triggers' subscriber (Knative resolves a Service to
// http://<name>.<namespace>.svc.cluster.local).
func (g *gen) eventsService() Object {
	l := g.labels("operator")
	svc := object("v1", "Service", g.o.Namespace, g.name(), l)
	svc["spec"] = map[string]any{
		"selector": map[string]any{"app.kubernetes.io/name": g.op.Name, "app.kubernetes.io/component": "operator"},
		"ports":    []any{map[string]any{"name": "events", "port": int64(80), "targetPort": "events"}},
	}
	return Object{File: FileOperator, Obj: svc}
}

// deployment is the operator in classic mode: a controller-runtime manager
// with leader election (its Lease Role comes with operatorRBAC).
func (g *gen) deployment() Object {
	probePort, probeArgs := g.classicProbes()
	var ports []any
	if probePort > 0 {
		ports = append(ports, map[string]any{"name": "probes", "containerPort": probePort})
	}
	args := []any{"--mode=classic"}
	if g.hasFlag(projectLeaderFlag) {
		// an adopted project: its own flags fill the ctrl.Options classic
		// mode runs (the Lease's namespace: the pod's, or $POD_NAMESPACE)
		args = append(args, "--"+projectLeaderFlag)
	} else {
		args = append(args, "--leader-election-namespace="+g.o.Namespace)
	}
	args = append(args, probeArgs...)
	if len(g.op.Events) > 0 { // the Triggers deliver here, with OIDC tokens
		ports = append(ports, map[string]any{"name": "events", "containerPort": int64(classicEventsPort)})
		args = append(args, fmt.Sprintf("--events-addr=:%d", classicEventsPort), "--audience="+g.o.Audience,
			"--allowed-senders="+strings.Join(g.senders(), ","))
	}
	l := g.labels("operator")
	sel := map[string]any{"app.kubernetes.io/name": g.op.Name, "app.kubernetes.io/component": "operator"}
	c := map[string]any{"name": "operator", "image": g.o.Image, "ports": ports}
	if probePort > 0 {
		c["livenessProbe"] = httpProbe("/healthz", "probes", 3)
		c["readinessProbe"] = httpProbe("/readyz", "probes", 1)
	}
	pod := map[string]any{"serviceAccountName": g.name()}
	if g.in.Webhooks != nil { // controller-runtime's manager serves them (webhooks.go)
		args = g.webhookServing(c, args)
		pod["volumes"] = g.certVolume()
	}
	g.project.pod(pod)
	pod["containers"] = []any{g.container(c, args, []any{map[string]any{"name": "POD_NAMESPACE",
		"valueFrom": map[string]any{"fieldRef": map[string]any{"fieldPath": "metadata.namespace"}}}})}
	dep := object("apps/v1", "Deployment", g.o.Namespace, g.name(), l)
	dep["spec"] = map[string]any{
		"replicas": int64(1),
		"selector": map[string]any{"matchLabels": sel},
		"template": map[string]any{"metadata": map[string]any{"labels": l}, "spec": pod},
	}
	return Object{File: FileOperator, Obj: dep}
}
