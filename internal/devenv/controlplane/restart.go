package controlplane

import (
	"context"
	"fmt"
	"syscall"
	"time"
)

// Kill sends SIGKILL to the named component (etcd, kube-apiserver,
// kube-controller-manager), as a crash would, and returns once it is gone.
// Fault tests use it with Restart.
func (p *Plane) Kill(name string) error {
	pr, err := p.process(name)
	if err != nil {
		return err
	}
	if !pr.alive() {
		return nil
	}
	if err := syscall.Kill(pr.PID, syscall.SIGKILL); err != nil {
		return fmt.Errorf("killing %s (pid %d): %w", name, pr.PID, err)
	}
	for i := 0; i < 250 && pr.alive(); i++ {
		time.Sleep(20 * time.Millisecond)
	}
	if pr.alive() {
		return fmt.Errorf("%s (pid %d) still runs after SIGKILL", name, pr.PID)
	}
	return nil
}

// Restart starts the named component again with the arguments it was
// first started with (same ports, data and keys), its output appended to
// the same log, and returns once it is ready (etcd /health, kube-apiserver
// /readyz; after etcd, also kube-apiserver's /readyz if it runs, as it
// reconnects to etcd on its own); it refuses a component that still runs. The plane is
// recorded again in state.json with the new PID.
func (p *Plane) Restart(ctx context.Context, name string, dieWithParent bool) error {
	pr, err := p.process(name)
	if err != nil {
		return err
	}
	if pr.alive() {
		return fmt.Errorf("%s (pid %d) still runs: Kill or stop it before Restart", name, pr.PID)
	}
	np, err := startProcess(name, pr.Path, pr.Args, pr.Log, dieWithParent)
	if err != nil {
		return err
	}
	*pr = *np
	token := ""
	if p.Config != nil {
		token = p.Config.BearerToken
	}
	switch name {
	case "etcd":
		err = waitHTTP(ctx, pr, p.EtcdURL+"/health", "", time.Minute)
		if api, aerr := p.process("kube-apiserver"); err == nil && aerr == nil && api.alive() {
			err = waitHTTP(ctx, api, p.Server+"/readyz", token, time.Minute)
		}
	case "kube-apiserver":
		err = waitHTTP(ctx, pr, p.Server+"/readyz", token, time.Minute)
	}
	if err != nil {
		return err
	}
	return p.save()
}

func (p *Plane) process(name string) (*Process, error) {
	for _, pr := range p.Processes {
		if pr.Name == name {
			return pr, nil
		}
	}
	return nil, fmt.Errorf("the plane in %s runs no %s", p.Dir, name)
}
