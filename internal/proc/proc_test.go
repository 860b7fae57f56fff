package proc

import (
	"os"
	"os/exec"
	"testing"
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
