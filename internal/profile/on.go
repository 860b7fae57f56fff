//go:build opzero_pprof

package profile

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"runtime/trace"
)

// stops finish what init started, in order; Stop runs them.
var stops []func()

func init() {
	if p := os.Getenv("OPZERO_CPUPROFILE"); p != "" {
		f := mustCreate(p)
		if err := pprof.StartCPUProfile(f); err == nil {
			stops = append(stops, func() { pprof.StopCPUProfile(); f.Close() })
		}
	}
	if p := os.Getenv("OPZERO_TRACE"); p != "" {
		f := mustCreate(p)
		if err := trace.Start(f); err == nil {
			stops = append(stops, func() { trace.Stop(); f.Close() })
		}
	}
	if p := os.Getenv("OPZERO_MEMPROFILE"); p != "" {
		stops = append(stops, func() {
			f := mustCreate(p)
			runtime.GC()
			_ = pprof.Lookup("heap").WriteTo(f, 0)
			f.Close()
		})
	}
}

// Stop ends the CPU profile and the trace and writes the heap profile.
func Stop() {
	for _, s := range stops {
		s()
	}
	stops = nil
}

func mustCreate(p string) *os.File {
	f, err := os.Create(p)
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: profile: %v\n", filepath.Base(os.Args[0]), err)
		os.Exit(1)
	}
	return f
}
