package dev

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"
)

// StatusLine is one line for every Service: instances, events answered
// (failed ones), reconciles as the operator's answers reported them
// (failed ones), cold starts, and the last error with its time.
func (p *Platform) StatusLine() string {
	var parts []string
	for _, s := range p.Services {
		n := s.Activator.Instances()
		inst := "instances"
		if n == 1 {
			inst = "instance"
		}
		failed := s.FailedReconciles.Load()
		part := fmt.Sprintf("%s: %d %s, %d events (%d failed), %d reconciles (%d failed), %d cold starts",
			s.Name, n, inst, s.Events.Load(), s.Failures.Load(), s.Reconciles.Load()+failed, failed, s.Activator.ColdStarts.Load())
		if d, ok := s.LastError(); ok {
			part += fmt.Sprintf("; last error %s: %s", d.At.Format("15:04:05"), clip(d.Error, maxErrorOnLine))
		}
		parts = append(parts, part)
	}
	return strings.Join(parts, " | ")
}

// maxErrorOnLine keeps a status line with an error within a wide terminal
// (it is rewritten in place, which a wrapped line defeats); -v and the
// event stream have the whole error.
const maxErrorOnLine = 100

// clip shortens s to at most n runes, marking the cut with "...".
func clip(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n-3]) + "..."
	}
	return s
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
