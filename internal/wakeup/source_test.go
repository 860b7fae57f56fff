package wakeup_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1alpha1 "github.com/opzero/opzero/api/v1alpha1"
	v1 "github.com/opzero/opzero/examples/configwatcher/api/v1"
	"github.com/opzero/opzero/internal/backoff"
	"github.com/opzero/opzero/internal/testkit"
	"github.com/opzero/opzero/internal/wakeup"
	"github.com/opzero/opzero/testenv"
)

func rssMiB(pid int) float64 {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			var kb float64
			fmt.Sscanf(strings.TrimSpace(v), "%f", &kb)
			return kb / 1024
		}
	}
	return 0
}

// TestSourceKilledWithPending: 10k pending wakeups (OPZERO_WAKEUPS=100000
// for 100k), ten times the source's window; the wakeup source is SIGKILLed
// twice while delivering and restarted: every one fires, in due order (a
// record is never first delivered after one due more than a second later
// was), none before its due time, and every record is deleted.
func TestSourceKilledWithPending(t *testing.T) {
	if testing.Short() {
		t.Skip("creates 10k records")
	}
	n := 10_000
	if v := os.Getenv("OPZERO_WAKEUPS"); v != "" { // e.g. 100000 to measure RSS at 100k pending
		fmt.Sscanf(v, "%d", &n)
	}
	env := testenv.Get(t)
	ns := env.Namespace(t)
	var mu sync.Mutex
	first := map[string]time.Time{}
	early, inversions := 0, 0
	var latest time.Time // the latest due time delivered so far
	due := map[string]time.Time{}
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name, now := r.Header.Get("Ce-Targetname"), time.Now()
		mu.Lock()
		if now.Before(due[name]) {
			early++
		}
		if _, ok := first[name]; !ok {
			first[name] = now
			if due[name].Before(latest.Add(-time.Second)) {
				inversions++
			}
			if due[name].After(latest) {
				latest = due[name]
			}
		}
		mu.Unlock()
	}))
	defer sink.Close()

	// after the records exist and the source has listed them: creating 10k
	// takes ~10 s on 2 idle cores, over 25 s when other test packages run
	base := time.Now().Add(time.Duration(n/10_000) * 45 * time.Second)
	sem := make(chan struct{}, 32)
	errc := make(chan error, n)
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("t%05d", i)
		d := base.Add(time.Duration(i%5000) * time.Millisecond)
		due[name] = d
		sem <- struct{}{}
		go func() {
			defer func() { <-sem }()
			errc <- env.Client.Create(context.Background(), &v1alpha1.Wakeup{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "w-" + name, // labeled as the Store labels
					Labels: map[string]string{wakeup.OperatorLabel: "bench", wakeup.DueBucketLabel: wakeup.DueBucket(d)}},
				Spec: v1alpha1.WakeupSpec{Operator: "bench", Sink: sink.URL, Due: metav1.NewMicroTime(d), Reason: v1alpha1.ReasonRequeueAfter,
					Target: v1alpha1.Target{APIVersion: "k8spatterns.io/v1", Kind: "ConfigWatcher", Namespace: ns, Name: name}},
			})
		}()
	}
	for i := 0; i < n; i++ {
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
	if time.Now().After(base.Add(-5 * time.Second)) { // a busy machine: the source starts with them overdue
		t.Logf("creating %d records took until %s after the first was due", n, time.Since(base).Round(time.Second))
	}
	start := func() *exec.Cmd {
		cmd := exec.Command(opzeroB, "wakeup-source", "--namespace", ns, "--concurrency", "32", "--window", fmt.Sprint(n/10))
		cmd.Env = append(os.Environ(), "KUBECONFIG="+env.Kubeconfig)
		logf, _ := os.Create(filepath.Join(t.TempDir(), "source.log"))
		cmd.Stdout, cmd.Stderr = logf, logf
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _, _ = cmd.Process.Wait() })
		return cmd
	}
	src := start()
	// The one wall-clock wait: the records' due times are real, in another
	// process; measure just before the first falls due (all listed by then).
	time.Sleep(time.Until(base.Add(-2 * time.Second)))
	t.Logf("wakeup source RSS with %d pending: %.1f MiB", n, rssMiB(src.Process.Pid))
	testkit.Eventually(t, max(time.Until(base), 0)+time.Duration(max(1, n/10_000))*time.Minute, "a tenth of the wakeups delivered", func(context.Context) (bool, error) {
		mu.Lock()
		defer mu.Unlock()
		return len(first) >= n/10, nil
	})
	_ = src.Process.Signal(syscall.SIGKILL) // mid-delivery
	_, _ = src.Process.Wait()
	mu.Lock()
	before := len(first)
	mu.Unlock()
	src = start()
	testkit.Eventually(t, time.Duration(max(1, n/10_000))*60*time.Second, "half of the wakeups delivered", func(context.Context) (bool, error) {
		mu.Lock()
		defer mu.Unlock()
		return len(first) >= n/2, nil
	})
	_ = src.Process.Signal(syscall.SIGKILL) // again
	_, _ = src.Process.Wait()
	start()
	deliver := time.Duration(max(1, n/10_000)) * 60 * time.Second // deliveries (POST + DELETE) run at ~1-2k/s here
	testkit.Eventually(t, deliver, "every wakeup delivered", func(context.Context) (bool, error) {
		mu.Lock()
		defer mu.Unlock()
		return len(first) == n, nil
	})
	testkit.Eventually(t, deliver, "every record deleted", func(ctx context.Context) (bool, error) {
		list := &v1alpha1.WakeupList{}
		if err := env.Client.List(ctx, list, client.InNamespace(ns), client.Limit(1)); err != nil {
			return false, err
		}
		return len(list.Items) == 0, nil
	})
	if early != 0 || inversions != 0 {
		t.Fatalf("%d deliveries before their due time, %d out of due order", early, inversions)
	}
	t.Logf("%d delivered before the first SIGKILL, the rest after two restarts; 0 early, 0 out of order", before)
	if before == 0 || before == n {
		t.Fatalf("the kill did not land mid-delivery (%d of %d delivered before it)", before, n)
	}
}

// TestSourceDeliversOnlyItsOperator: with several operators on a cluster,
// each one's source delivers its own Wakeups and leaves the others' alone.
func TestSourceDeliversOnlyItsOperator(t *testing.T) {
	env := testenv.Get(t)
	ns := env.Namespace(t)
	var mu sync.Mutex
	got := map[string]int{}
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got[r.Header.Get("Ce-Operator")]++
		mu.Unlock()
	}))
	defer sink.Close()
	for _, op := range []string{"a", "b"} {
		key := types.NamespacedName{Namespace: ns, Name: "x"}
		s := wakeup.NewStore(env.Client, wakeup.StoreOptions{Operator: op, Target: v1.GroupVersion.WithKind("ConfigWatcher"),
			Sink: sink.URL, Policy: backoff.DefaultPolicy()})
		if err := s.Requeue(context.Background(), reconcile.Request{NamespacedName: key}, 0); err != nil {
			t.Fatal(err)
		}
	}
	runSource(t, env, ns, wakeup.SourceOptions{Operator: "a"})
	testkit.Eventually(t, 10*time.Second, "a's wakeup delivered and deleted", func(ctx context.Context) (bool, error) {
		list := &v1alpha1.WakeupList{}
		err := env.Client.List(ctx, list, client.InNamespace(ns))
		return err == nil && len(list.Items) == 1, err
	})
	fence(t, env, ns, "a", time.Now()) // b's, due earlier, would have been delivered before it
	list := &v1alpha1.WakeupList{}
	if err := env.Client.List(context.Background(), list, client.InNamespace(ns)); err != nil || len(list.Items) != 1 || list.Items[0].Spec.Operator != "b" {
		t.Fatalf("left: %+v %v, want only b's Wakeup", list.Items, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if got["a"] != 1 || got["b"] != 0 {
		t.Fatalf("deliveries by operator %v, want a once and b never", got)
	}
}
