package testkit

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// probe asks whether a child answers; a short timeout, as something else
// may hold the port and never answer.
var probe = &http.Client{Timeout: time.Second}

// Child is a process started by StartChild.
type Child struct {
	Cmd  *exec.Cmd
	Log  string // the file holding its stdout and stderr
	done chan struct{}
	err  error // cmd.Wait's, set before done is closed
}

// StartChild starts cmd with its output in a log file in t's temporary
// folder and waits up to timeout until an HTTP GET of readyURL gets an
// answer (any status); an empty readyURL means at once. If cmd exits first or does not answer in time,
// StartChild kills it and returns an error quoting the end of its log, so
// that PortTaken recognises a port taken meanwhile (use it inside
// OnFreePort). A started child is killed when t ends, and its log is
// printed if t failed.
func StartChild(t testing.TB, cmd *exec.Cmd, readyURL string, timeout time.Duration) (*Child, error) {
	t.Helper()
	f, err := os.CreateTemp(t.TempDir(), filepath.Base(cmd.Path)+"-*.log")
	if err != nil {
		return nil, err
	}
	defer f.Close() // the child keeps its own copy of the descriptor
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	c := &Child{Cmd: cmd, Log: f.Name(), done: make(chan struct{})}
	go func() { c.err = cmd.Wait(); close(c.done) }()
	ready := readyURL == "" || Wait(timeout, func() bool {
		select {
		case <-c.done:
			return true
		default:
		}
		resp, err := probe.Get(readyURL)
		if err == nil {
			resp.Body.Close()
		}
		return err == nil
	})
	select {
	case <-c.done:
		return nil, fmt.Errorf("%s exited before answering %s; its log ends:\n%s", cmd.Path, readyURL, c.tail())
	default:
	}
	if !ready {
		c.Kill()
		return nil, fmt.Errorf("%s did not answer %s within %s; its log ends:\n%s", cmd.Path, readyURL, timeout, c.tail())
	}
	t.Cleanup(func() {
		c.Kill()
		if t.Failed() {
			t.Logf("%s log (end):\n%s", cmd.Path, c.tail())
		}
	})
	return c, nil
}

// Kill sends SIGKILL and returns once the child has exited.
func (c *Child) Kill() {
	_ = c.Cmd.Process.Kill()
	<-c.done
}

// Interrupt sends SIGINT, as Ctrl-C does, and returns the child's exit
// error once it has exited (nil for status 0).
func (c *Child) Interrupt() error {
	_ = c.Cmd.Process.Signal(os.Interrupt)
	<-c.done
	return c.err
}

// Exited is closed once the child has exited.
func (c *Child) Exited() <-chan struct{} { return c.done }

// tail is the last 3000 bytes of the child's log.
func (c *Child) tail() string {
	b, err := os.ReadFile(c.Log)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err.Error()
	}
	if len(b) > 3000 {
		b = b[len(b)-3000:]
	}
	return string(b)
}
