// Package spanlog is the reconcile span log the multi-process tests share:
// each reconcile of internal/testop appends "start|end <key> <pid>
// <unix-nanos>" to one file, and the tests read it back to prove that no two
// reconciles of a key overlapped, across processes.
package spanlog

import (
	"bufio"
	"fmt"
	"os"
	"sort"
	"time"
)

// Append adds one line (what is "start" or "end") to file. Lines are short
// enough for an O_APPEND write to stay whole with several writers.
func Append(file, what, key string) {
	fd, err := os.OpenFile(file, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return
	}
	defer fd.Close()
	fmt.Fprintf(fd, "%s %s %d %d\n", what, key, os.Getpid(), time.Now().UnixNano())
}

// Span is one reconcile.
type Span struct {
	PID        int
	Start, End time.Time
}

// Read returns, per key, its reconciles ordered by start. A reconcile with
// no end lasts until its process died (deaths, by PID), else until now.
func Read(file string, deaths map[int]time.Time) (map[string][]*Span, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	open := map[string]map[int]*Span{}
	runs := map[string][]*Span{}
	s := bufio.NewScanner(f)
	for s.Scan() {
		var what, key string
		var pid int
		var nanos int64
		if _, err := fmt.Sscanf(s.Text(), "%s %s %d %d", &what, &key, &pid, &nanos); err != nil {
			continue
		}
		at := time.Unix(0, nanos)
		if open[key] == nil {
			open[key] = map[int]*Span{}
		}
		if what == "start" {
			r := &Span{PID: pid, Start: at}
			open[key][pid] = r
			runs[key] = append(runs[key], r)
		} else if r := open[key][pid]; r != nil {
			r.End = at
			delete(open[key], pid)
		}
	}
	for _, rs := range runs {
		for _, r := range rs {
			if r.End.IsZero() {
				if r.End = deaths[r.PID]; r.End.IsZero() {
					r.End = time.Now()
				}
			}
		}
		sort.Slice(rs, func(i, j int) bool { return rs[i].Start.Before(rs[j].Start) })
	}
	return runs, s.Err()
}

// Overlaps counts reconciles of one key that started before an earlier one
// ended (not only the one just before: a long reconcile, such as one whose
// process was killed, may span several), describing each with logf.
func Overlaps(runs map[string][]*Span, logf func(format string, args ...any)) int {
	bad := 0
	for key, rs := range runs {
		for i, last := 1, 0; i < len(rs); i++ { // last: the earlier run that ends last
			if rs[i].Start.Before(rs[last].End) {
				bad++
				logf("overlap on %s: pid %d [%s, %s] and pid %d from %s", key, rs[last].PID,
					rs[last].Start.Format(time.StampMicro), rs[last].End.Format(time.StampMicro), rs[i].PID, rs[i].Start.Format(time.StampMicro))
			}
			if rs[i].End.After(rs[last].End) {
				last = i
			}
		}
	}
	return bad
}
