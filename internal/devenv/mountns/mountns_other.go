//go:build !linux

package mountns

import (
	"errors"
	"os/exec"
)

// Available is nil when a mount namespace can be made here: only on Linux.
func Available() error { return errors.New("mount namespaces are Linux only") }

// Command fails off Linux (Available).
func Command(root string, binds []Bind, dir string, argv, env []string) (*exec.Cmd, error) {
	return nil, Available()
}

// Main returns at once off Linux.
func Main() {}
