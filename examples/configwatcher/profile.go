//go:build opzero_pprof

package main

import (
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"runtime/trace"
)

// With -tags opzero_pprof (bench/suite -pprof DIR builds it so), the
// operator writes the profiles these variables name; the measured binaries
// are built without the tag and link none of this.
//
//	OPZERO_CPUPROFILE  CPU profile from start to exit
//	OPZERO_MEMPROFILE  heap profile (in use and allocated) at exit, after a GC
//	OPZERO_TRACE       execution trace from start to exit (go tool trace)
func init() {
	var stops []func()
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
	stopProfiles = func() {
		for _, s := range stops {
			s()
		}
	}
}

func mustCreate(p string) *os.File {
	f, err := os.Create(p)
	if err != nil {
		fmt.Fprintln(os.Stderr, "configwatcher: profile:", err)
		os.Exit(1)
	}
	return f
}
