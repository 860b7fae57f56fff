package wakeup_test

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/opzero/opzero/examples/configwatcher/api/v1"
	"github.com/opzero/opzero/internal/testkit"
	"github.com/opzero/opzero/testenv"
)

// TestKilledAfterAnswering is the default wiring's guarantee, end to end:
// an event the operator answered is never lost if its instance dies right
// after answering. The opzero hub delivers ConfigWatcher changes to the
// operator as `opzero manifests` runs it (the answer after the reconcile,
// --event-cache, max-scale 3: one instance runs alone under the sole
// Lease) through a proxy that, after every 80th object event answered,
// SIGKILLs the instance right after passing the 2xx answer to the hub,
// and starts it again (a new identity: it waits for the dead one's sole
// Lease, 2 s, to expire, answering 503 meanwhile). 300 objects are
// created and each is updated once; no sweep is ever sent. Every object
// converges (observedGeneration == generation): what was answered had
// been reconciled, and what was not answered was sent again by the hub.
// No two reconciles of a key overlap.
//
// $CHAOS_ANSWER=admitted runs the same with --answer=admitted, where it is
// expected to fail: an event answered at admission is reconciled after
// the answer, and the kill loses it until a sweep (docs/hub.md).
func TestKilledAfterAnswering(t *testing.T) {
	if testing.Short() {
		t.Skip("processes")
	}
	const n = 300
	answer := cmp.Or(os.Getenv("CHAOS_ANSWER"), "reconciled")
	env := testenv.Get(t)
	ns := env.Namespace(t)
	f := newFleet(t, env, ns, chaosConfig{answer: answer, instances: 1})
	f.args = append(f.args, "--event-cache", "--lease-duration=2s")
	f.vars = append(f.vars, "OPZERO_MAX_SCALE=3")
	f.startAll()

	// Every killEvery-th object event answered, the instance is killed:
	// at least one answer per object, so at least n/killEvery kills.
	const killEvery = 80
	var answered, objects, killed, refused atomic.Int32
	var mu sync.Mutex // one kill at a time
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		req, err := http.NewRequestWithContext(r.Context(), r.Method, f.urls[0]+r.URL.RequestURI(), r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		req.Header = r.Header.Clone()
		resp, err := http.DefaultTransport.RoundTrip(req)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway) // the hub sends it again
			return
		}
		defer resp.Body.Close()
		for k, vs := range resp.Header {
			w.Header()[k] = vs
		}
		w.WriteHeader(resp.StatusCode)
		_, _ = io.Copy(w, resp.Body)
		if resp.StatusCode/100 != 2 {
			refused.Add(1)
			return
		}
		answered.Add(1)
		if !strings.HasPrefix(r.Header.Get("Ce-Type"), "dev.knative.apiserver.") {
			return
		}
		w.(http.Flusher).Flush() // the hub has its answer
		if objects.Add(1)%killEvery != 0 {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		f.restart(0) // SIGKILL, then a new process on the same port
		killed.Add(1)
	}))
	t.Cleanup(proxy.Close)
	stopHub := startHub(t, env, ns, proxy.URL)
	defer stopHub()

	create := func(name string) {
		cw := &v1.ConfigWatcher{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: v1.ConfigWatcherSpec{ConfigMap: "converge", PodSelector: map[string]string{"a": "b"}}}
		if err := env.Client.Create(context.Background(), cw); err != nil {
			t.Fatal(err)
		}
	}
	update := func(name string) { // a new generation
		cw := &v1.ConfigWatcher{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
		if err := env.Client.Patch(context.Background(), cw, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"podSelector":{"a":"c"}}}`))); err != nil {
			t.Fatal(err)
		}
	}
	for i := range n {
		create(fmt.Sprintf("c%03d", i))
		if i >= 5 {
			update(fmt.Sprintf("c%03d", i-5))
		}
		time.Sleep(20 * time.Millisecond) // pacing: spread the changes over the kills
	}
	for i := n - 5; i < n; i++ {
		update(fmt.Sprintf("c%03d", i))
	}
	err := testkit.Poll(context.Background(), 3*time.Minute, func(ctx context.Context) (bool, error) {
		left, total, err := behind(ctx, env, ns)
		return err == nil && total == n && left == 0, err
	})
	left, total, _ := behind(context.Background(), env, ns)
	t.Logf("--answer=%s: %d objects, %d answers passed to the hub (%d refused), %d instances killed right after an answer; %d not converged",
		answer, total, answered.Load(), refused.Load(), killed.Load(), left)
	if err != nil || left != 0 {
		t.Fatalf("%d of %d objects not converged without a sweep: %v", left, total, err)
	}
	if killed.Load() < 3 {
		t.Fatalf("only %d kills after an answer: the test proves little", killed.Load())
	}
	if o := f.overlaps(); o != 0 {
		t.Fatalf("%d overlapping reconciles of one key", o)
	}
}
