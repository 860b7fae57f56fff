package dev

import (
	"context"
	"errors"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/opzero/opzero/internal/devenv/interp"
)

// A kubelet does not fail a pod whose configMap or secret volume names an
// object that does not exist (and is not optional): the pod stays
// ContainerCreating, with an event "MountVolume.SetUp failed ... not
// found", and its container starts once the object exists. An always-on
// hook Deployment dev runs on its interpreter does the same: its process
// is not started, dev says once which object it waits for (again if that
// changes), and tries every mountPoll; its pods are not marked Ready
// meanwhile.
const mountPoll = time.Second

// pending is the running of such a Deployment: no process while it
// waits, then the one it started, until that exits (the supervisor then
// restarts it as any other).
type pending struct {
	cancel context.CancelFunc
	done   chan struct{} // closed once the process it started exits, or on Stop

	mu  sync.Mutex
	cur running
}

// waitMounts says why Deployment u does not start (first, the start's
// error) and tries start every mountPoll until it succeeds, then calls
// started with the process.
func (p *Platform) waitMounts(u *unstructured.Unstructured, first error,
	start func(context.Context) (running, error), started func(context.Context, running) error) *pending {
	ctx, cancel := context.WithCancel(context.Background())
	w := &pending{cancel: cancel, done: make(chan struct{})}
	said := ""
	say := func(err error) {
		if err.Error() == said {
			return
		}
		said = err.Error()
		msg := err.Error()
		var missing *interp.MissingError
		if errors.As(err, &missing) {
			msg = missing.Error()
			p.say("Deployment %s: not started, as a kubelet keeps its pod ContainerCreating (MountVolume.SetUp failed): %s; "+
				"started once it exists (checked every %s)", key(u), msg, mountPoll)
		} else {
			p.say("Deployment %s: not started yet: %s; again every %s", key(u), msg, mountPoll)
		}
		p.opts.Events.Write(Event{Event: EventProcessWaiting, Deployment: key(u), Message: msg})
	}
	say(first)
	go func() {
		defer close(w.done)
		tick := time.NewTicker(mountPoll)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			r, err := start(ctx)
			if ctx.Err() != nil {
				if r != nil {
					r.Stop()
				}
				return
			}
			if err != nil {
				say(err)
				continue
			}
			w.mu.Lock()
			w.cur = r
			w.mu.Unlock()
			if err := started(ctx, r); err != nil {
				p.say("Deployment %s: %v", key(u), err)
			}
			select {
			case <-r.Done():
			case <-ctx.Done():
			}
			return
		}
	}()
	return w
}

func (w *pending) current() running {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.cur
}

// Waiting reports that no process has started yet: the supervisor
// neither probes it nor marks its pods Ready.
func (w *pending) Waiting() bool { return w.current() == nil }

func (w *pending) Done() <-chan struct{} { return w.done }

func (w *pending) PID() int {
	if r := w.current(); r != nil {
		return r.PID()
	}
	return 0
}

func (w *pending) Stop() {
	w.cancel()
	<-w.done
	if r := w.current(); r != nil {
		r.Stop()
	}
}

func (w *pending) Probe(ctx context.Context, timeout time.Duration) error {
	if pr, ok := w.current().(probed); ok {
		return pr.Probe(ctx, timeout)
	}
	return nil
}

func (w *pending) ExitErr() error {
	if e, ok := w.current().(interface{ ExitErr() error }); ok {
		return e.ExitErr()
	}
	return nil
}
