package hub

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	metadatafake "k8s.io/client-go/metadata/fake"
	clienttesting "k8s.io/client-go/testing"

	v1alpha1 "github.com/opzero/opzero/api/v1alpha1"
)

// heldChange is a change the watch holds between receiving it and handing
// it out: its first read of the resource version waits for release.
type heldChange struct {
	*metav1.PartialObjectMetadata
	read, release chan struct{}
	once          sync.Once
}

func (c *heldChange) GetResourceVersion() string {
	c.once.Do(func() { close(c.read); <-c.release })
	return c.PartialObjectMetadata.GetResourceVersion()
}

// joinFixture is one shared watch of ConfigMaps on a fake metadata client
// whose watches the test feeds; the subscribers' sends are queued, never
// sent, so that what each was handed can be read from its dispatcher.
type joinFixture struct {
	t       *testing.T
	h       *Hub
	key     watchKey
	from    chan string // the resource version each watch starts at
	watches chan *watch.FakeWatcher
	md      *metadatafake.FakeMetadataClient
}

func newJoinFixture(t *testing.T) *joinFixture {
	sch := runtime.NewScheme()
	metav1.AddMetaToScheme(sch)
	md := metadatafake.NewSimpleMetadataClient(sch)
	f := &joinFixture{t: t, md: md, from: make(chan string, 8), watches: make(chan *watch.FakeWatcher, 8)}
	md.PrependWatchReactor("configmaps", func(a clienttesting.Action) (bool, watch.Interface, error) {
		fw := watch.NewFakeWithChanSize(16, false)
		f.from <- a.(clienttesting.WatchActionImpl).GetWatchRestrictions().ResourceVersion
		f.watches <- fw
		return true, fw, nil
	})
	f.h = &Hub{meta: md, opts: Options{Log: logr.Discard()}, stats: newStats(solo{}), el: solo{}}
	f.key = watchKey{gvr: schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}, ns: "ns"}
	return f
}

func (f *joinFixture) attachment(progress string) *attachment {
	s := &sub{h: f.h, obj: &v1alpha1.Subscription{}, progress: map[string]string{"configmaps": progress}}
	s.disp = newDispatcher(s)
	s.disp.drain(time.Now()) // nothing is sent: what is handed stays queued
	f.t.Cleanup(s.disp.stop)
	return &attachment{sub: s, key: f.key, gvk: schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"},
		mode: v1alpha1.ModeReference, namespaced: true, pkey: "configmaps"}
}

// next is the next watch started: it must start at rv.
func (f *joinFixture) next(rv string) *watch.FakeWatcher {
	f.t.Helper()
	select {
	case got := <-f.from:
		if got != rv {
			f.t.Fatalf("the watch started at %q, want %q", got, rv)
		}
	case <-time.After(10 * time.Second):
		f.t.Fatalf("no watch started at %q", rv)
	}
	return <-f.watches
}

func cmAt(name, rv string) *metav1.PartialObjectMetadata {
	return &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, ResourceVersion: rv}}
}

// queued is what a was handed, as name@rv of each object's newest change.
func queued(a *attachment) []string {
	d := a.sub.disp
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []string
	for k, ks := range d.keys {
		if _, obj, ok := strings.Cut(k, " ns/"); ok && ks.next != nil {
			out = append(out, obj+"@"+ks.next.rv)
		}
	}
	slices.Sort(out)
	return out
}

func waitHanded(t *testing.T, a *attachment, rv string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !a.sent(rv) {
		if time.Now().After(deadline) {
			t.Fatalf("%s never handed; queued %v", rv, queued(a))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestJoinerHandedNothingBeforeRewind: a Subscription joins a running
// shared watch with progress older than the watch's position (its bucket
// just won, as another bucket's Subscriptions are served by that watch)
// while the watch is between receiving a change (or a bookmark) and
// handing it out. The watch goes back to the joiner's progress, and the
// joiner gets every change since: what was handed out as it joined does
// not count, as handed or passed, for the older changes it was never
// given.
func TestJoinerHandedNothingBeforeRewind(t *testing.T) {
	for _, tc := range []struct {
		name       string
		typ        watch.EventType
		wantJoiner string
		wantOther  string
	}{
		{"a change", watch.Modified, "[a@250 b@300 c@310 d@320 p@150]", "[a@250 b@300 c@310 d@320]"},
		{"a bookmark", watch.Bookmark, "[a@250 b@300 d@320 p@150]", "[a@250 b@300 d@320]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newJoinFixture(t)
			x, y := f.attachment("200"), f.attachment("100")
			ctx, cancel := context.WithCancel(context.Background())
			w := f.h.startWatch(ctx, f.key, []*attachment{x})
			t.Cleanup(func() { cancel(); <-w.done })

			fw := f.next("200")
			fw.Modify(cmAt("a", "250"))
			fw.Modify(cmAt("b", "300"))
			waitHanded(t, x, "300")
			c := &heldChange{PartialObjectMetadata: cmAt("c", "310"), read: make(chan struct{}), release: make(chan struct{})}
			fw.Action(tc.typ, c)
			<-c.read
			w.setSubscribers([]*attachment{x, y}) // y's bucket won: it joins at 100
			close(c.release)

			fw = f.next("100") // back to the joiner's progress
			replay := []*metav1.PartialObjectMetadata{cmAt("p", "150"), cmAt("a", "250"), cmAt("b", "300"), cmAt("d", "320")}
			if tc.typ == watch.Modified {
				replay = slices.Insert(replay, 3, cmAt("c", "310"))
			}
			for _, o := range replay {
				fw.Modify(o)
			}
			waitHanded(t, x, "320")
			waitHanded(t, y, "320")
			if got := fmt.Sprint(queued(y)); got != tc.wantJoiner {
				t.Errorf("the joiner (progress 100) was handed %s, want %s", got, tc.wantJoiner)
			}
			if got := fmt.Sprint(queued(x)); got != tc.wantOther {
				t.Errorf("the watch's other subscriber was handed %s, want %s", got, tc.wantOther)
			}
		})
	}
}

// TestJoinDuringRelist: a Subscription joins a shared watch while it
// lists what changed since a 410 Gone, with progress between where the
// watch was and the list's version. The list was read for the
// subscribers it had when it started: the joiner is behind, and the
// watch goes back to it once the relist is done.
func TestJoinDuringRelist(t *testing.T) {
	f := newJoinFixture(t)
	listing, release := make(chan struct{}), make(chan struct{})
	f.md.PrependReactor("list", "configmaps", func(clienttesting.Action) (bool, runtime.Object, error) {
		close(listing)
		<-release
		l := &metav1.List{ListMeta: metav1.ListMeta{ResourceVersion: "400"}}
		for _, o := range []*metav1.PartialObjectMetadata{cmAt("e", "350"), cmAt("f", "380")} {
			l.Items = append(l.Items, runtime.RawExtension{Object: o})
		}
		return true, l, nil
	})
	x, y := f.attachment("300"), f.attachment("320")
	ctx, cancel := context.WithCancel(context.Background())
	w := f.h.startWatch(ctx, f.key, []*attachment{x})
	t.Cleanup(func() { cancel(); <-w.done })

	fw := f.next("300")
	fw.Error(&metav1.Status{Status: metav1.StatusFailure, Code: 410, Reason: metav1.StatusReasonExpired, Message: "too old resource version"})
	<-listing
	w.setSubscribers([]*attachment{x, y}) // y's bucket won: it joins at 320
	close(release)
	waitHanded(t, x, "400")

	f.next("400") // after the relist
	fw = f.next("300")
	for _, o := range []*metav1.PartialObjectMetadata{cmAt("e", "350"), cmAt("f", "380"), cmAt("g", "410")} {
		fw.Modify(o)
	}
	waitHanded(t, x, "410")
	waitHanded(t, y, "410")
	if got, want := fmt.Sprint(queued(y)), "[e@350 f@380 g@410]"; got != want {
		t.Errorf("the joiner (progress 320) was handed %s, want %s", got, want)
	}
	if got, want := fmt.Sprint(queued(x)), "[e@350 f@380 g@410]"; got != want {
		t.Errorf("the watch's other subscriber was handed %s, want %s", got, want)
	}
}
