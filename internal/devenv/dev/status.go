package dev

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"
)

// StatusLine is one line for every Service: instances, events answered
// (failed ones), keys reconciled as the operator reported them, cold starts.
func (p *Platform) StatusLine() string {
	var parts []string
	for _, s := range p.Services {
		n := s.Activator.Instances()
		inst := "instances"
		if n == 1 {
			inst = "instance"
		}
		parts = append(parts, fmt.Sprintf("%s: %d %s, %d events (%d failed), %d reconciles, %d cold starts",
			s.Name, n, inst, s.Events.Load(), s.Failures.Load(), s.Reconciles.Load(), s.Activator.ColdStarts.Load()))
	}
	return strings.Join(parts, " | ")
}

// WatchStatus writes StatusLine to w until ctx ends: on a terminal it
// rewrites one line in place twice a second; otherwise it prints a line
// whenever the status changes.
func (p *Platform) WatchStatus(ctx context.Context, w io.Writer, terminal bool) {
	t := time.NewTicker(500 * time.Millisecond)
	defer t.Stop()
	last := ""
	for {
		select {
		case <-ctx.Done():
			if terminal {
				fmt.Fprintln(w)
			}
			return
		case <-t.C:
		}
		line := p.StatusLine()
		switch {
		case terminal:
			fmt.Fprintf(w, "\r\033[K%s %s", time.Now().Format("15:04:05"), line)
		case line != last:
			fmt.Fprintf(w, "%s %s\n", time.Now().Format("15:04:05"), line)
		}
		last = line
	}
}
