package proc

import (
	"os"
	"os/exec"
	"slices"
	"testing"
	"time"
)

func TestTreeOfThisProcess(t *testing.T) {
	cmd := exec.Command("sleep", "30")
	cmd.Env = append(os.Environ(), "PROC_TEST=child")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	if d := Descendants(os.Getpid()); !slices.Contains(d, cmd.Process.Pid) {
		t.Errorf("Descendants(%d) = %v, want the child %d among them", os.Getpid(), d, cmd.Process.Pid)
	}
	// Start returns once exec has begun; the kernel lays out the new
	// command line and environment a moment later (CI read both empty).
	var a []string
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if a = Argv(cmd.Process.Pid); len(a) > 0 {
			break
		}
	}
	if len(a) != 2 || a[1] != "30" {
		t.Errorf("Argv = %q", a)
	}
	if Env(cmd.Process.Pid)["PROC_TEST"] != "child" {
		t.Error("Env misses PROC_TEST")
	}
	if rss, hwm := Mem(os.Getpid()); rss <= 0 || hwm < rss {
		t.Errorf("Mem = %v, %v: want 0 < rss <= hwm", rss, hwm)
	}
	if rss, _ := Mem(1 << 30); rss != 0 {
		t.Errorf("Mem of a missing process = %v", rss)
	}
}
