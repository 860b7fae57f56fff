package proc

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Mem is a process's VmRSS and VmHWM (its peak RSS), in MiB; 0 for a
// process that is gone.
func Mem(pid int) (rss, hwm float64) {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	for _, l := range strings.Split(string(b), "\n") {
		for prefix, dst := range map[string]*float64{"VmRSS:": &rss, "VmHWM:": &hwm} {
			if v, ok := strings.CutPrefix(l, prefix); ok {
				var kb float64
				fmt.Sscanf(strings.TrimSpace(v), "%f", &kb)
				*dst = kb / 1024
			}
		}
	}
	return rss, hwm
}

// Descendants are the processes whose chain of parents reaches pid.
func Descendants(pid int) []int {
	parent := map[int]int{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces, so from the last ')'
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) > 1 {
			parent[p], _ = strconv.Atoi(f[1])
		}
	}
	var out []int
	for p := range parent {
		for q := parent[p]; q > 1; q = parent[q] {
			if q == pid {
				out = append(out, p)
				break
			}
		}
	}
	return out
}

// Argv is a process's command line.
func Argv(pid int) []string {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	return strings.FieldsFunc(string(b), func(r rune) bool { return r == 0 })
}

// Env is a process's environment.
func Env(pid int) map[string]string {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	out := map[string]string{}
	for _, kv := range strings.Split(string(b), "\x00") {
		if k, v, ok := strings.Cut(kv, "="); ok {
			out[k] = v
		}
	}
	return out
}
