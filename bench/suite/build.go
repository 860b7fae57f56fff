package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// buildCmd is go build as the suite builds the operators: CGO_ENABLED=0,
// as ko builds the images `opzero manifests` deploys.
func buildCmd(tags, out, pkg string) *exec.Cmd {
	cmd := exec.Command("go", "build", "-tags", tags, "-o", out, pkg)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	return cmd
}

// pprofDir is -pprof: where profiled operator instances write their profiles.
var pprofDir string

var profileSeq int

// profiled says whether -pprof builds the binary or variant name with -tags
// opzero_pprof (internal/profile): the opzero operators and testop.
func profiled(name string) bool {
	return strings.HasPrefix(name, "opzero") || strings.HasPrefix(name, "testop")
}

// profileEnv is the environment that makes an operator built with -tags
// opzero_pprof write its profiles as <dir>/<name>-<n>.{cpu,heap}.pprof and
// .trace, n counting every instance of this suite run; nothing without
// -pprof.
func profileEnv(name string) []string {
	if pprofDir == "" || !profiled(name) {
		return nil
	}
	profileSeq++
	base := filepath.Join(pprofDir, fmt.Sprintf("%s-%d", name, profileSeq))
	return []string{"OPZERO_CPUPROFILE=" + base + ".cpu.pprof", "OPZERO_MEMPROFILE=" + base + ".heap.pprof", "OPZERO_TRACE=" + base + ".trace"}
}
