// This file is hack/demo/events.go (package main there, so not importable).
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/opzero/opzero/internal/devenv/dev"
)

// devProcess is `opzero dev --events=json` running as a child: its events
// (standard output) are decoded and kept in order, its human log (standard
// error) is shown indented.
type devProcess struct {
	cmd    *exec.Cmd
	done   chan struct{}
	mu     sync.Mutex
	cond   *sync.Cond
	events []dev.Event
	bad    error // a line that was not an event
}

func startDev(bin string, args []string) (*devProcess, error) {
	p := &devProcess{cmd: exec.Command(bin, args...), done: make(chan struct{})}
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

func (p *devProcess) len() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.events)
}

// next returns the first event at index from or later that matches,
// waiting for it up to timeout.
func (p *devProcess) next(ctx context.Context, from int, timeout time.Duration, what string, match func(dev.Event) bool) (dev.Event, error) {
	var found dev.Event
	err := p.until(ctx, from, timeout, what, func(events []dev.Event) bool {
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

// waitZero waits until every operator instance opzero dev reported started
// has stopped (a sweep may have started one).
func (p *devProcess) waitZero(ctx context.Context) error {
	return p.until(ctx, 0, time.Minute, "0 operator instances", func(events []dev.Event) bool {
		n := 0
		for _, e := range events {
			switch {
			case e.Service != svc:
			case e.Event == dev.EventProcessStarted:
				n++
			case e.Event == dev.EventProcessStopped:
				n--
			}
		}
		return n == 0
	})
}

// until waits up to timeout for done to hold of the events so far; an
// error event from index from on, or opzero dev exiting, ends the wait.
func (p *devProcess) until(ctx context.Context, from int, timeout time.Duration, what string, done func([]dev.Event) bool) error {
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

// coldNote says whether the events after mark include a cold start, and
// how long the process took to become ready.
func (p *devProcess) coldNote(mark int) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	pid := 0
	for _, e := range p.events[mark:] {
		switch {
		case e.Event == dev.EventProcessStarted && e.Service == svc && e.ColdStart:
			pid = e.PID
		case e.Event == dev.EventProcessReady && pid != 0 && e.PID == pid:
			return fmt.Sprintf(" (cold start included: pid %d ready %.0f ms after exec)", pid, e.ReadyMS)
		}
	}
	return " (an instance was already running)"
}

// summarize prints the operator's processes and deliveries as the event
// stream reported them.
func (p *devProcess) summarize(t0 time.Time) {
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

// stop sends SIGINT (Ctrl-C) and waits for opzero dev to exit.
func (p *devProcess) stop() {
	_ = p.cmd.Process.Signal(os.Interrupt)
	select {
	case <-p.done:
	case <-time.After(20 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}
