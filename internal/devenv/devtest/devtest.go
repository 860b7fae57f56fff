// Package devtest is `opzero dev` for a test (dev + test; internal/testkit
// is what every test shares, devsession drives `opzero dev` as a child for
// the demos): it starts `opzero dev`'s platform (package dev) for an
// end-to-end test: its output goes to the test's log, it stops when the test
// ends, and when the test failed the tails of the logs of the processes it
// ran (operators, adapters, hooks) are logged, so a failure shows where the
// events stopped.
package devtest

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/opzero/opzero/internal/devenv/dev"
	"github.com/opzero/opzero/internal/manifests"
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

// HubAndAdopted is what `opzero dev` applies for operators served unchanged
// by the hub: the hub's default install (manifests.HubInstall) and what
// `opzero hub adopt` wrote (unchanged.Result.Objects), read as dev reads a
// stream.
func HubAndAdopted(t testing.TB, adopted []map[string]any) []*unstructured.Unstructured {
	t.Helper()
	hubObjs, err := manifests.HubInstall(manifests.DefaultHubImage)
	if err != nil {
		t.Fatal(err)
	}
	stream, err := manifests.Stream(hubObjs)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range adopted {
		y, err := yaml.Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		stream = append(append(stream, "---\n"...), y...)
	}
	objs, err := dev.ReadManifests("-", bytes.NewReader(stream))
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

// SubscribedKinds lists the kinds a Subscription (as `opzero hub adopt`
// writes it) subscribes to, sorted and comma-separated, each owner-filtered
// one as Kind(owner OwnerKind).
func SubscribedKinds(sub map[string]any) string {
	var kinds []string
	spec, _ := sub["spec"].(map[string]any)
	res, _ := spec["resources"].([]any)
	for _, r := range res {
		m, _ := r.(map[string]any)
		k, _ := m["kind"].(string)
		if o, ok := m["owner"].(map[string]any); ok {
			k += "(owner " + fmt.Sprint(o["kind"]) + ")"
		}
		kinds = append(kinds, k)
	}
	slices.Sort(kinds)
	return strings.Join(kinds, ",")
}
