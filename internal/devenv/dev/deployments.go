package dev

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"slices"
	"strings"
	"syscall"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// startDeployments runs each Deployment with a ko:// image as one local
// process (the wakeup source is one), always on.
func (p *Platform) startDeployments(ctx context.Context, _ []net.Listener) error {
	objs, err := p.readBack(ctx, "apps", "Deployment")
	if err != nil {
		return err
	}
	for _, u := range objs {
		pkg, ok, err := deploymentImage(u)
		if err != nil {
			return err
		}
		if !ok {
			continue
		}
		exe, err := p.build.build(ctx, pkg)
		if err != nil {
			return err
		}
		cs, _, _ := unstructured.NestedSlice(u.Object, "spec", "template", "spec", "containers")
		c, _ := cs[0].(map[string]any)
		argv, _, _ := unstructured.NestedStringSlice(c, "args")
		for i := range argv {
			argv[i] = rewrite(argv[i], p.localURLs)
		}
		kc, as, err := p.kubeconfigFor(ctx, u, "spec", "template", "spec")
		if err != nil {
			return err
		}
		env, err := p.containerEnv(ctx, "Deployment "+key(u), pod{u: u, namespace: u.GetNamespace(), name: u.GetName() + "-local"}, c, "KUBECONFIG="+kc)
		if err != nil {
			return err
		}
		argv = expandArgs(argv, env)
		name := "deployment-" + u.GetNamespace() + "-" + u.GetName()
		logf, err := p.logFile(name)
		if err != nil {
			return err
		}
		cmd := exec.Command(exe[0], slices.Concat(exe[1:], argv)...)
		cmd.Env, cmd.Stdout, cmd.Stderr = env, logf, logf
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			return fmt.Errorf("Deployment %s: starting ko://%s: %w", key(u), pkg, err)
		}
		p.procs = append(p.procs, cmd)
		p.Sources = append(p.Sources, fmt.Sprintf("Deployment %s (ko://%s %s)", key(u), pkg, strings.Join(argv, " ")))
		p.say("Deployment %s: ko://%s running as pid %d (one replica, always on; runs as %s; log %s)", key(u), pkg, cmd.Process.Pid, as, p.LogPath(name))
		p.opts.Events.Write(Event{Event: EventProcessStarted, Deployment: key(u), PID: cmd.Process.Pid})
	}
	return nil
}
