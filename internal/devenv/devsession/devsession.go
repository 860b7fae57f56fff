// Package devsession is one `opzero dev` session, driven from outside: it
// runs `opzero dev --events=json` as a child process and waits on its event
// stream (devtest, by contrast, runs dev's platform inside a test process): what the demos (hack/demo,
// examples/postgres/demo) print and wait for.
package devsession

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/opzero/opzero/internal/devenv/dev"
	"github.com/opzero/opzero/internal/devenv/timeline"
)

// Process is `opzero dev --events=json` running as a child: its events
// (standard output) are decoded and kept in order, its human log (standard
// error) is shown indented.
type Process struct {
	cmd    *exec.Cmd
	done   chan struct{}
	mu     sync.Mutex
	cond   *sync.Cond
	events []dev.Event
	bad    error // a line that was not an event
	// service is the Knative Service (namespace/name) whose instances
	// WaitZero and ColdNote follow.
	service string
}

// Start runs bin with args (an `opzero dev --events=json` command line) and
// follows the instances of service (namespace/name).
func Start(bin, service string, args []string) (*Process, error) {
	p := &Process{cmd: exec.Command(bin, args...), done: make(chan struct{}), service: service}
	p.cond = sync.NewCond(&p.mu)
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	stderr, err := p.cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting opzero dev: %w", err)
	}
	var readers sync.WaitGroup
	readers.Add(2)
	go func() {
		defer readers.Done()
		s := bufio.NewScanner(stderr)
		for s.Scan() {
			fmt.Println("    opzero dev | " + s.Text())
		}
	}()
	go func() {
		defer readers.Done()
		s := bufio.NewScanner(stdout)
		s.Buffer(nil, 1<<20)
		for s.Scan() {
			var e dev.Event
			err := json.Unmarshal(s.Bytes(), &e)
			p.mu.Lock()
			if err != nil && p.bad == nil {
				p.bad = fmt.Errorf("opzero dev --events=json wrote %q, not an event: %w", s.Text(), err)
			} else if err == nil {
				p.events = append(p.events, e)
			}
			p.cond.Broadcast()
			p.mu.Unlock()
		}
	}()
	go func() {
		readers.Wait() // both pipes drained before Wait closes them
		_ = p.cmd.Wait()
		close(p.done)
		p.mu.Lock()
		p.cond.Broadcast()
		p.mu.Unlock()
	}()
	return p, nil
}

// PID is opzero dev's process ID: the processes it runs are its children.
func (p *Process) PID() int { return p.cmd.Process.Pid }

// Len is the number of events so far: a mark for next.
func (p *Process) Len() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.events)
}

// Events returns a copy of the events from index from on.
func (p *Process) Events(from int) []dev.Event {
	p.mu.Lock()
	defer p.mu.Unlock()
	if from > len(p.events) {
		return nil
	}
	return append([]dev.Event(nil), p.events[from:]...)
}

// Next returns the first event at index from or later that matches,
// waiting for it up to timeout.
func (p *Process) Next(ctx context.Context, from int, timeout time.Duration, what string, match func(dev.Event) bool) (dev.Event, error) {
	var found dev.Event
	err := p.Until(ctx, from, timeout, what, func(events []dev.Event) bool {
		for _, e := range events[from:] {
			if match(e) {
				found = e
				return true
			}
		}
		return false
	})
	return found, err
}

// WaitZero waits until every operator instance opzero dev reported started
// has stopped (a sweep may have started one).
func (p *Process) WaitZero(ctx context.Context) error {
	return p.Until(ctx, 0, time.Minute, "0 operator instances", func(events []dev.Event) bool {
		n := 0
		for _, e := range events {
			switch {
			case e.Service != p.service:
			case e.Event == dev.EventProcessStarted:
				n++
			case e.Event == dev.EventProcessStopped:
				n--
			}
		}
		return n == 0
	})
}

// Until waits up to timeout for done to hold of the events so far; an
// error event from index from on, or opzero dev exiting, ends the wait.
func (p *Process) Until(ctx context.Context, from int, timeout time.Duration, what string, done func([]dev.Event) bool) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	stop := context.AfterFunc(ctx, func() { p.mu.Lock(); p.cond.Broadcast(); p.mu.Unlock() })
	defer stop()
	p.mu.Lock()
	defer p.mu.Unlock()
	for {
		for _, e := range p.events[from:] {
			if e.Event == dev.EventError {
				return fmt.Errorf("opzero dev reported an error while the demo waited for %s: %s", what, e.Message)
			}
		}
		if done(p.events) {
			return nil
		}
		select {
		case <-p.done:
			return fmt.Errorf("opzero dev exited before it reported %s", what)
		default:
		}
		if p.bad != nil {
			return p.bad
		}
		if ctx.Err() != nil {
			return fmt.Errorf("opzero dev did not report %s within %s", what, timeout)
		}
		p.cond.Wait()
	}
}

// ColdNote says whether the events after mark include a cold start, and
// how long the process took to become ready.
func (p *Process) ColdNote(mark int) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	pid := 0
	for _, e := range p.events[mark:] {
		switch {
		case e.Event == dev.EventProcessStarted && e.Service == p.service && e.ColdStart:
			pid = e.PID
		case e.Event == dev.EventProcessReady && pid != 0 && e.PID == pid:
			return fmt.Sprintf(" (cold start included: pid %d ready %.0f ms after exec)", pid, e.ReadyMS)
		}
	}
	return " (an instance was already running)"
}

// Summarize prints the operator's processes and deliveries as the event
// stream reported them.
func (p *Process) Summarize(t0 time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, e := range p.events {
		at := e.Time.Sub(t0).Round(time.Millisecond)
		switch e.Event {
		case dev.EventProcessStarted:
			where := e.Service + e.Deployment
			cold := ""
			if e.ColdStart {
				cold = " (cold start)"
			}
			fmt.Printf("    %9s  %-16s %s pid %d%s\n", at, e.Event, where, e.PID, cold)
		case dev.EventProcessReady:
			fmt.Printf("    %9s  %-16s pid %d, %.0f ms after exec\n", at, e.Event, e.PID, e.ReadyMS)
		case dev.EventProcessStopped:
			fmt.Printf("    %9s  %-16s pid %d (%s)\n", at, e.Event, e.PID, e.Reason)
		case dev.EventDelivery:
			fmt.Printf("    %9s  %-16s %s %s %s -> %d in %.1f ms\n", at, e.Event, e.Type, e.Kind, e.Key, e.Code, e.DurationMS)
		case dev.EventScaledToZero:
			fmt.Printf("    %9s  %-16s %s\n", at, e.Event, e.Service)
		}
	}
}

// DrawTimeline writes the events so far as an SVG timeline to path
// (package timeline).
func (p *Process) DrawTimeline(path string) error {
	p.mu.Lock()
	events := slices.Clone(p.events)
	p.mu.Unlock()
	svg, err := timeline.SVG(events)
	if err != nil {
		return err
	}
	return os.WriteFile(path, svg, 0o644)
}

// Stop sends SIGINT (Ctrl-C) and waits for opzero dev to exit.
func (p *Process) Stop() {
	_ = p.cmd.Process.Signal(os.Interrupt)
	select {
	case <-p.done:
	case <-time.After(20 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}
