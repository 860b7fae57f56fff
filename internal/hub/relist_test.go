package hub

import (
	"context"
	"errors"
	"testing"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	metadatafake "k8s.io/client-go/metadata/fake"
	clienttesting "k8s.io/client-go/testing"

	v1alpha1 "github.com/opzero/opzero/api/v1alpha1"
)

// TestFailedRelistLeavesNoMark: a relist whose list fails (the API server
// or etcd away right after the 410) leaves nothing pending behind it: the
// next change moves the progress, and no mark waits at the head of the
// attachment's sends (one there would freeze status.progress and keep
// every later change's mark in memory until the hub restarts).
func TestFailedRelistLeavesNoMark(t *testing.T) {
	sch := runtime.NewScheme()
	metav1.AddMetaToScheme(sch)
	md := metadatafake.NewSimpleMetadataClient(sch)
	md.PrependReactor("list", "configmaps", func(clienttesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("etcdserver: request timed out")
	})
	h := &Hub{meta: md, opts: Options{Log: logr.Discard()}, stats: newStats(solo{}), el: solo{}}
	s := &sub{h: h, obj: &v1alpha1.Subscription{}, progress: map[string]string{"configmaps": "100"}}
	s.disp = newDispatcher(s)
	defer s.disp.stop()
	a := &attachment{sub: s, key: watchKey{gvr: schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}}, pkey: "configmaps"}
	a.start()
	w := &sharedWatch{h: h, key: a.key, subs: []*attachment{a}}

	if _, err := w.relist(context.Background(), "100"); err == nil {
		t.Fatal("relist: want the list's error")
	}
	a.pass("200") // the watch back, the next change filtered out or a bookmark
	if got, _ := s.getProgress("configmaps"); got != "200" {
		t.Errorf("progress after a failed relist and a change at 200: %q, want 200", got)
	}
	a.mu.Lock()
	n := len(a.seq)
	a.mu.Unlock()
	if n != 0 {
		t.Errorf("%d marks left pending after a failed relist", n)
	}
}
