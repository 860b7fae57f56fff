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

// cpuSet is the set of CPUs cpus.
func cpuSet(cpus ...int) *unix.CPUSet {
	var set unix.CPUSet
	for _, c := range cpus {
		set.Set(c)
	}
	return &set
}

// pin sets the CPUs of every thread of process pid (threads it starts
// later inherit them from the thread that starts them).
func pin(pid int, set *unix.CPUSet) error {
	tasks, err := os.ReadDir(filepath.Join("/proc", strconv.Itoa(pid), "task"))
	if err != nil {
		return fmt.Errorf("pinning pid %d: %w", pid, err)
	}
	for _, t := range tasks {
		tid, _ := strconv.Atoi(t.Name())
		if err := unix.SchedSetaffinity(tid, set); err != nil && err != unix.ESRCH { // ESRCH: the thread has exited
			return fmt.Errorf("pinning thread %d of pid %d: %w", tid, pid, err)
		}
	}
	return nil
}

// splitCores pins the control plane to CPU 0 and this process to CPU 1;
// the returned func gives each of them the CPUs this process had before.
func (e *env) splitCores() (func(), error) {
	var before unix.CPUSet
	if err := unix.SchedGetaffinity(0, &before); err != nil {
		return nil, fmt.Errorf("reading this process's CPUs: %w", err)
	}
	pids := []int{e.planePID["kube-apiserver"], e.planePID["etcd"], os.Getpid()}
	restore := func() {
		for _, pid := range pids {
			_ = pin(pid, &before)
		}
	}
	for i, pid := range pids {
		cpu := 0 // the control plane
		if i == len(pids)-1 {
			cpu = 1 // the suite
		}
		if err := pin(pid, cpuSet(cpu)); err != nil {
			restore()
			return nil, fmt.Errorf("OPZERO_BENCH_TP_CPUS=split needs CPUs 0 and 1: %w", err)
		}
	}
	return restore, nil
}
