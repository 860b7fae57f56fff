// Package profile writes the profiles of a benchmarked operator binary: a
// main calls Stop once, as it exits (after its run returned, before
// os.Exit), and nothing else.
//
// Built with -tags opzero_pprof (bench/suite -pprof DIR builds its operators
// so), the binary writes the profiles these variables name:
//
//	OPZERO_CPUPROFILE  CPU profile from start to Stop
//	OPZERO_MEMPROFILE  heap profile (in use and allocated) at Stop, after a GC
//	OPZERO_TRACE       execution trace from start to Stop (go tool trace)
//
// Profiling starts in this package's init, so before the importing main's
// own init and flag parsing. Without the tag Stop does nothing and the
// binary links none of runtime/pprof (internal/depcheck checks it): the
// measured binaries are built without it.
//
// Caveat: a process that is killed (SIGKILL) or exits without calling Stop
// leaves a truncated CPU profile and trace and no heap profile; stop
// profiled instances with SIGTERM and wait for them.
package profile
