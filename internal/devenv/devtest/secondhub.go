package devtest

import (
	"fmt"
	"os"
	"os/exec"
	"slices"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/opzero/opzero/internal/proc"
)

// SecondHub starts the hub Deployment's second replica beside the one
// opzero dev runs (pid hub; dev runs one process per Deployment), as its
// second pod: the same binary, flags and environment (kubeconfig of the
// hub's service account, POD_NAMESPACE: the bucket Leases), its own
// POD_NAME and ports (SecondReplica), its output in logPath. It starts
// later, so bucket 0 is held by dev's replica and it stands by, as after
// a rolling update or a replica restarted after the other left it. stop
// ends it with SIGTERM (it hands nothing over: it holds no bucket).
func SecondHub(hub int, logPath string) (pid int, stop func(), err error) {
	if hub == 0 {
		return 0, nil, fmt.Errorf("no hub process under opzero dev to start a second replica of")
	}
	argv, env := SecondReplica(proc.Argv(hub), proc.Env(hub))
	if len(argv) == 0 {
		return 0, nil, fmt.Errorf("hub process %d: no command line (gone?)", hub)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = env
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	logf, err := os.Create(logPath)
	if err != nil {
		return 0, nil, err
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return 0, nil, fmt.Errorf("starting the hub's second replica: %w", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); logf.Close(); close(done) }()
	stop = func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	}
	return cmd.Process.Pid, stop, nil
}

// SecondReplica is the command line and environment of the hub's second
// replica, from the first one's: its own POD_NAME (its name in the
// Leases) and free ports for its health and admission endpoints.
func SecondReplica(argv []string, env map[string]string) ([]string, []string) {
	argv = slices.Clone(argv)
	for i, a := range argv {
		switch {
		case i == 0:
		case strings.HasPrefix(a, "--health-addr="):
			argv[i] = "--health-addr=127.0.0.1:0"
		case strings.HasPrefix(a, "--webhook-addr="):
			argv[i] = "--webhook-addr=127.0.0.1:0"
		}
	}
	var out []string
	for k, v := range env {
		switch k {
		case "POD_NAME":
			v += "-2"
		case "OPZERO_WEBHOOK_PORT":
			v = "0"
		}
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return argv, out
}
