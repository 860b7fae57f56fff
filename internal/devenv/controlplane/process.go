package controlplane

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/opzero/opzero/internal/proc"
)

// Process is one component the plane started, as recorded in state.json.
type Process struct {
	Name string   `json:"name"`
	PID  int      `json:"pid"`
	Path string   `json:"path"`
	Args []string `json:"args,omitempty"`
	Log  string   `json:"log"`

	exited chan struct{} // closed when a child started by this process exits; nil otherwise
}

// spawn is the one goroutine, locked to its OS thread for the life of the
// process, that starts children which must die with us: Linux delivers
// Pdeathsig when the thread that forked the child exits, so that thread must
// never exit.
var spawn = sync.OnceValue(func() chan func() {
	ch := make(chan func())
	go func() {
		runtime.LockOSThread()
		for f := range ch {
			f()
		}
	}()
	return ch
})

// startProcess starts path with args, its output appended to logFile. With
// dieWithParent the kernel kills it when this process dies; without, it runs
// in a session of its own and outlives the caller.
func startProcess(name, path string, args []string, logFile string, dieWithParent bool) (*Process, error) {
	return StartProcess(ProcessSpec{Name: name, Path: path, Args: args, Log: logFile, DieWithParent: dieWithParent})
}

// ProcessSpec is a program for StartProcess.
type ProcessSpec struct {
	Name, Path string
	Args       []string
	// Log is the file its output is appended to.
	Log string
	// DieWithParent makes the kernel kill it when the caller dies;
	// otherwise it runs in a session of its own and outlives the caller.
	DieWithParent bool
	// NetNS names a network namespace (ip netns, /run/netns/<name>) it
	// starts in; empty means the caller's.
	NetNS string
	// Env is added to the caller's environment.
	Env []string
}

// StartProcess starts a program the way the plane starts its components,
// for other local platforms (the cluster's node) to record and stop alike.
func StartProcess(s ProcessSpec) (*Process, error) {
	log, err := os.OpenFile(s.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer log.Close()
	name, path, args := s.Name, s.Path, s.Args
	cmd := exec.Command(path, args...)
	cmd.Stdout, cmd.Stderr = log, log
	if len(s.Env) > 0 {
		cmd.Env = append(os.Environ(), s.Env...)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if s.DieWithParent {
		cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	}
	errc := make(chan error, 1)
	spawn() <- func() { errc <- inNetNS(s.NetNS, cmd.Start) }
	if err := <-errc; err != nil {
		return nil, fmt.Errorf("starting %s (%s): %w", name, path, err)
	}
	p := &Process{Name: name, PID: cmd.Process.Pid, Path: path, Args: args, Log: s.Log, exited: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.exited) }() // reap, so a stopped child does not linger as a zombie
	return p, nil
}

// inNetNS runs start with the calling OS thread (the spawn goroutine's,
// locked) in the named network namespace, so the child forked there is
// born in it, and moves the thread back afterwards.
func inNetNS(name string, start func() error) error {
	if name == "" {
		return start()
	}
	target, err := os.Open(filepath.Join("/run/netns", name))
	if err != nil {
		return fmt.Errorf("network namespace %s: %w", name, err)
	}
	defer target.Close()
	self, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", syscall.Gettid()))
	if err != nil {
		return err
	}
	defer self.Close()
	if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
		return fmt.Errorf("entering network namespace %s: %w", name, err)
	}
	err = start()
	if berr := unix.Setns(int(self.Fd()), unix.CLONE_NEWNET); berr != nil {
		panic(fmt.Sprintf("the spawn thread cannot return to its network namespace: %v", berr)) // every later child would start in the wrong one
	}
	return err
}

// Alive reports whether the process still runs the binary that was started.
func (p *Process) Alive() bool { return p.alive() }

// Stop sends SIGTERM, waits up to grace, then SIGKILLs; nothing happens to
// a PID that no longer runs the binary.
func (p *Process) Stop(grace time.Duration) error { return p.stop(grace) }

// RSSBytes is the process's resident set size, 0 if it is gone.
func (p *Process) RSSBytes() int64 { return p.rssBytes() }

// LogTail returns the last lines of the process's log.
func (p *Process) LogTail(lines int) string { return logTail(p.Log, lines) }

// alive reports whether p.PID still runs the binary that was started, so a
// PID the system has since given to another program is never taken for ours.
func (p *Process) alive() bool {
	if p.exited != nil { // our own child: Wait knows exactly
		select {
		case <-p.exited:
			return false
		default:
			return true
		}
	}
	if proc.Dead(p.PID) {
		return false
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", p.PID))
	if err != nil {
		return false
	}
	if len(cmdline) == 0 { // a process on its way out has released its memory, argv included
		return true
	}
	argv0, _, _ := bytes.Cut(cmdline, []byte{0})
	return string(argv0) == p.Path
}

// stop sends SIGTERM, waits up to grace, then SIGKILLs. It does nothing to a
// PID that no longer runs our binary.
func (p *Process) stop(grace time.Duration) error {
	if !p.alive() {
		return nil
	}
	if err := syscall.Kill(p.PID, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("stopping %s (pid %d): %w", p.Name, p.PID, err)
	}
	deadline := time.Now().Add(grace)
	for time.Now().Before(deadline) {
		if !p.alive() {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	_ = syscall.Kill(p.PID, syscall.SIGKILL)
	for i := 0; i < 100 && p.alive(); i++ {
		time.Sleep(20 * time.Millisecond)
	}
	if p.alive() {
		return fmt.Errorf("%s (pid %d) did not stop after SIGKILL", p.Name, p.PID)
	}
	return nil
}

// rssBytes reads the resident set size of p from /proc, 0 if it is gone.
func (p *Process) rssBytes() int64 {
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.PID))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			var kb int64
			fmt.Sscanf(strings.TrimSpace(v), "%d", &kb)
			return kb * 1024
		}
	}
	return 0
}

// logTail returns the last lines of a component's log, for error messages.
func logTail(file string, lines int) string {
	b, err := os.ReadFile(file)
	if err != nil {
		return ""
	}
	all := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return "    " + strings.Join(all, "\n    ")
}
