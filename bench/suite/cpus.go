package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
)

// tpSplitCores is OPZERO_BENCH_TP_CPUS=split: the throughput part runs the
// control plane (kube-apiserver, etcd) on CPU 0 and everything else (the
// suite, and the operators, adapters and hub it starts, which inherit its
// CPU) on CPU 1, as a cluster keeps its control plane off the nodes its
// operators run on. Then the figure says whether a wiring keeps up with the
// API server, not how it shares two cores with it.
var tpSplitCores = os.Getenv("OPZERO_BENCH_TP_CPUS") == "split"

// pin sets the CPUs of every thread of process pid (threads it starts
// later inherit them from the thread that starts them).
func pin(pid int, cpus ...int) error {
	var set unix.CPUSet
	for _, c := range cpus {
		set.Set(c)
	}
	tasks, err := os.ReadDir(filepath.Join("/proc", strconv.Itoa(pid), "task"))
	if err != nil {
		return fmt.Errorf("pinning pid %d to CPUs %v: %w", pid, cpus, err)
	}
	for _, t := range tasks {
		tid, _ := strconv.Atoi(t.Name())
		if err := unix.SchedSetaffinity(tid, &set); err != nil && err != unix.ESRCH { // ESRCH: the thread has exited
			return fmt.Errorf("pinning thread %d of pid %d to CPUs %v: %w", tid, pid, cpus, err)
		}
	}
	return nil
}

// splitCores pins the control plane to CPU 0 and this process to CPU 1;
// the returned func gives every one both CPUs again.
func (e *env) splitCores() (func(), error) {
	all := func() {
		for _, pid := range []int{e.planePID["kube-apiserver"], e.planePID["etcd"], os.Getpid()} {
			_ = pin(pid, 0, 1)
		}
	}
	for _, p := range []struct {
		pid int
		cpu int
	}{{e.planePID["kube-apiserver"], 0}, {e.planePID["etcd"], 0}, {os.Getpid(), 1}} {
		if err := pin(p.pid, p.cpu); err != nil {
			all()
			return nil, err
		}
	}
	return all, nil
}
