// Package proc answers questions about processes from /proc (Linux).
package proc

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"syscall"
)

// Dead reports whether pid no longer runs: it does not exist, or it is a
// zombie (Z) or dying (X) process waiting to be reaped.
func Dead(pid int) bool {
	if errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) {
		return true
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	// The state follows the parenthesised command name.
	i := bytes.LastIndexByte(stat, ')')
	return i > 0 && len(stat) > i+2 && (stat[i+2] == 'Z' || stat[i+2] == 'X')
}
