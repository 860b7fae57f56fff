// Package devtest starts `opzero dev`'s platform (package dev) for an
// end-to-end test: its output goes to the test's log, it stops when the test
// ends, and when the test failed the tails of the logs of the processes it
// ran (operators, adapters, hooks) are logged, so a failure shows where the
// events stopped.
package devtest

import (
	"context"
	"testing"

	"github.com/opzero/opzero/internal/devenv/dev"
	"github.com/opzero/opzero/internal/testkit"
)

// TailLines is how many lines of each process's log a failed test shows.
const TailLines = 60

// Start starts the platform with o until the test ends (or ctx does), with
// o.Out set to the test's log unless given; it fails the test if the
// platform does not start. Cleanups the caller registers after Start run
// before the platform stops.
func Start(t testing.TB, ctx context.Context, o dev.Options) *dev.Platform {
	t.Helper()
	if o.Out == nil {
		o.Out = testkit.LogWriter(t)
	}
	ctx, cancel := context.WithCancel(ctx)
	p, err := dev.Start(ctx, o)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		p.Stop()
		if t.Failed() {
			testkit.LogTails(t, TailLines, p.LogPath("*"))
		}
	})
	return p
}
