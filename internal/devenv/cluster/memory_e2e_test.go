package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/opzero/opzero/internal/manifests"
	"github.com/opzero/opzero/internal/testkit"
)

// podMemory is one pod's memory from kubelet's /stats/summary (what
// `kubectl top` reads): the working set (cgroup usage less inactive file
// pages) and the usage (memory.usage_in_bytes), summed over its
// containers.
type podMemory struct {
	NS, Name          string
	WorkingSet, Usage uint64
}

// memory reads kubelet's /stats/summary through the API server's node
// proxy and returns the pods of the namespaces given whose name starts
// with one of prefixes ("" takes all).
func (e *e2e) memory(t *testing.T, want map[string][]string) []podMemory {
	t.Helper()
	raw, err := e.cs.CoreV1().RESTClient().Get().AbsPath("/api/v1/nodes/" + NodeName + "/proxy/stats/summary").DoRaw(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var summary struct {
		Pods []struct {
			PodRef struct {
				Name, Namespace string
			} `json:"podRef"`
			Containers []struct {
				Memory struct {
					WorkingSetBytes uint64 `json:"workingSetBytes"`
					UsageBytes      uint64 `json:"usageBytes"`
				} `json:"memory"`
			} `json:"containers"`
		} `json:"pods"`
	}
	if err := json.Unmarshal(raw, &summary); err != nil {
		t.Fatal(err)
	}
	var out []podMemory
	for _, p := range summary.Pods {
		prefixes, ok := want[p.PodRef.Namespace]
		if !ok {
			continue
		}
		for _, pre := range prefixes {
			if strings.HasPrefix(p.PodRef.Name, pre) {
				m := podMemory{NS: p.PodRef.Namespace, Name: p.PodRef.Name}
				for _, c := range p.Containers {
					m.WorkingSet += c.Memory.WorkingSetBytes
					m.Usage += c.Memory.UsageBytes
				}
				out = append(out, m)
				break
			}
		}
	}
	return out
}

// logMemory logs pods' memory under a title, with the total.
func (e *e2e) logMemory(t *testing.T, title string, pods []podMemory) {
	t.Helper()
	var b strings.Builder
	var ws, usage uint64
	for _, p := range pods {
		fmt.Fprintf(&b, "\n    %-20s %-64s working set %6.1f MiB  usage %6.1f MiB", p.NS, p.Name, mib(p.WorkingSet), mib(p.Usage))
		ws, usage = ws+p.WorkingSet, usage+p.Usage
	}
	e.figure(t, "always-on memory at 10k ConfigMaps, %s: working set %.1f MiB, usage %.1f MiB in %d pods%s", title, mib(ws), mib(usage), len(pods), b.String())
}

func mib(b uint64) float64 { return float64(b) / (1 << 20) }

// configMaps creates n ConfigMaps of size bytes each in a new namespace
// (base and the run's suffix), 8 at a time.
func (e *e2e) configMaps(t *testing.T, base string, n, size int) {
	t.Helper()
	ns := e.namespace(t, base)
	// client-go's default of 5 requests a second would take 33 minutes.
	cfg := rest.CopyConfig(e.c.Config)
	cfg.QPS, cfg.Burst = 1000, 1000
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	data := strings.Repeat("x", size)
	next := make(chan int)
	errs := make(chan error, 8)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("load-%05d", i)}, Data: map[string]string{"data": data}}
				if _, err := cs.CoreV1().ConfigMaps(ns).Create(context.Background(), cm, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
					select {
					case errs <- err:
					default:
					}
				}
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	select {
	case err := <-errs:
		t.Fatal(err)
	default:
	}
	t.Logf("%d ConfigMaps of %d bytes created in %s in %s", n, size, ns, time.Since(t0).Round(time.Millisecond))
}

// settled waits d for memory to settle after a change (a relist, a burst
// of events), then a little for stats: kubelet's cadvisor refreshes every
// 10-15 s.
func settled(d time.Duration) { time.Sleep(d) }

// waitAvailable waits for Deployment ns/name to have an available replica.
func (e *e2e) waitAvailable(t *testing.T, ns, name string) {
	t.Helper()
	testkit.Eventually(t, 3*time.Minute, "deployment "+ns+"/"+name+" available", func(ctx context.Context) (bool, error) {
		d, err := e.cs.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
		return err == nil && d.Status.AvailableReplicas >= 1, err
	})
}

// alwaysOn measures what stays on while the operators are at zero, with
// 10,000 ConfigMaps of 1 KiB in the cluster (the kind the ConfigWatcher
// example watches): the Knative wiring of ns, deployed with
// --source=knative (its two ApiServerSource adapters and the wakeup
// source; Knative's PingSource adapter, shared by every PingSource,
// apart), then the same operator with the default wiring, the hub (the
// cluster's one opzero-hub), then --mode=classic (its Deployment, built
// with -tags opzero_classic as its main package asks).
func (e *e2e) alwaysOn(t *testing.T, ns, svc string) {
	e.configMaps(t, "e2e-load", 10000, 1024)
	// Every ConfigMap created is an event to the operator (Reference
	// mode): it starts, takes them and goes back to zero.
	e.waitZero(t, ns, svc)
	settled(45 * time.Second)
	e.logMemory(t, "Knative wiring, --source=knative (its 2 ApiServerSource adapters, its wakeup source)", e.memory(t, map[string][]string{ns: {"apiserversource-", svc + "-wakeup-source"}}))
	e.logMemory(t, "Knative wiring: Knative's PingSource adapter (one for every PingSource)", e.memory(t, map[string][]string{"knative-eventing": {"pingsource-mt-adapter"}}))

	hubNS := e.namespace(t, "e2e-hub")
	e.deploy(t, hubNS, append([]string{"--operator", "./examples/configwatcher", "--idle", "6s"}, hubWiring.flags...)...)
	e.ready(t, hubNS, gvrKsvc, 1)
	e.wired(t, hubWiring, hubNS, svc, 0)
	e.waitZero(t, hubNS, svc)
	settled(45 * time.Second)
	e.logMemory(t, "hub wiring, the default (opzero-hub, one for every operator)", e.memory(t, map[string][]string{manifests.HubNamespace: {manifests.HubName}}))

	classicNS := e.namespace(t, "e2e-classic")
	t.Setenv("GOFLAGS", "-tags=opzero_classic")
	e.deploy(t, classicNS, "--operator", "./examples/configwatcher", "--mode=classic")
	e.waitAvailable(t, classicNS, svc)
	settled(45 * time.Second)
	e.logMemory(t, "classic Deployment", e.memory(t, map[string][]string{classicNS: {svc}}))
}
