package proc

import (
	"os"
	"os/exec"
	"testing"
	"time"
)

func TestDead(t *testing.T) {
	if Dead(os.Getpid()) {
		t.Fatal("this process is reported dead")
	}
	cmd := exec.Command("true")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	// Not reaped yet: a zombie once it has exited.
	for i := 0; i < 500 && !Dead(pid); i++ {
		exec.Command("sleep", "0.01").Run()
	}
	if !Dead(pid) {
		t.Fatal("an exited, unreaped child (zombie) is reported alive")
	}
	_ = cmd.Wait()
	if !Dead(pid) {
		t.Fatal("a reaped child is reported alive")
	}
}

func TestCPU(t *testing.T) {
	before, err := CPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	// Burn CPU until the kernel's tick counter moves (at least 10 ms).
	deadline := time.Now().Add(5 * time.Second)
	x := 0
	for time.Now().Before(deadline) {
		for i := 0; i < 1e6; i++ {
			x += i
		}
		if now, _ := CPU(os.Getpid()); now >= before+20*time.Millisecond {
			return
		}
	}
	t.Fatalf("CPU did not grow by 20ms in 5s of spinning (x=%d)", x)
}

func TestCPUOfMissingProcess(t *testing.T) {
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	if _, err := CPU(cmd.Process.Pid); err == nil {
		t.Fatal("CPU of a reaped process gave no error")
	}
}
