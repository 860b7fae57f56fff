package spanlog_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/opzero/opzero/internal/spanlog"
)

func TestOverlaps(t *testing.T) {
	at := func(ms int) time.Time { return time.Unix(0, 0).Add(time.Duration(ms) * time.Millisecond) }
	span := func(pid, start, end int) *spanlog.Span {
		return &spanlog.Span{PID: pid, Start: at(start), End: at(end)}
	}
	for _, tc := range []struct {
		name string
		runs []*spanlog.Span
		want int
	}{
		{"one after the other", []*spanlog.Span{span(1, 0, 10), span(2, 10, 20), span(1, 30, 40)}, 0},
		{"the next starts before the end", []*spanlog.Span{span(1, 0, 10), span(2, 5, 20)}, 1},
		{"a long run spans two later ones", []*spanlog.Span{span(1, 0, 100), span(2, 10, 20), span(3, 30, 40)}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := spanlog.Overlaps(map[string][]*spanlog.Span{"ns/x": tc.runs}, t.Logf); got != tc.want {
				t.Fatalf("Overlaps = %d, want %d", got, tc.want)
			}
		})
	}
}

// TestReadEndsARunAtItsProcessDeath: a reconcile without an end lasts
// until its process was killed, and overlaps a run another process started
// meanwhile.
func TestReadEndsARunAtItsProcessDeath(t *testing.T) {
	file := filepath.Join(t.TempDir(), "spans")
	lines := "start ns/x 11 1000\nstart ns/x 12 3000\nend ns/x 12 4000\n"
	if err := os.WriteFile(file, []byte(lines), 0o644); err != nil {
		t.Fatal(err)
	}
	runs, err := spanlog.Read(file, map[int]time.Time{11: time.Unix(0, 2000)})
	if err != nil {
		t.Fatal(err)
	}
	if rs := runs["ns/x"]; len(rs) != 2 || !rs[0].End.Equal(time.Unix(0, 2000)) || rs[0].PID != 11 {
		t.Fatalf("runs %+v: want pid 11's run to end at its death", rs)
	}
	if o := spanlog.Overlaps(runs, t.Logf); o != 0 {
		t.Fatalf("%d overlaps: pid 12 started after pid 11 died", o)
	}
	runs, _ = spanlog.Read(file, map[int]time.Time{11: time.Unix(0, 3500)})
	if o := spanlog.Overlaps(runs, t.Logf); o != 1 {
		t.Fatalf("%d overlaps: pid 12 started before pid 11 died", o)
	}
}
