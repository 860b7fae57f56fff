package main_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/opzero/opzero/examples/configwatcher/api/v1"
	"github.com/opzero/opzero/internal/devenv/controlplane"
	"github.com/opzero/opzero/internal/devenv/dev"
	"github.com/opzero/opzero/internal/devenv/devtest"
	"github.com/opzero/opzero/internal/devenv/prune"
	"github.com/opzero/opzero/internal/manifests"
	"github.com/opzero/opzero/internal/testkit"
	"github.com/opzero/opzero/testenv"
)

// TestSwitchingWiring: the ConfigWatcher in one namespace, wired one way
// after another (--source=knative, then the hub, then --mode=classic,
// then the hub again), as a user switches under `opzero dev`: stop the
// session and start a new one with the other wiring's manifests (dev
// applies a session's manifests once, at its start; a running session is
// not re-applied). Each session is a dev.Start on the same API server.
//
// After each switch, before anything is changed, nothing of an earlier
// wiring is left:
//   - no process: none of the processes an earlier session ran is alive,
//     and every process this session runs is for an object of this
//     wiring (no ApiServerSource adapter, mtping or wakeup source after
//     leaving knative, no classic Deployment's process after leaving
//     classic, no Knative Service's activator in classic);
//   - no object in the API: every object an earlier wiring's manifests
//     hold and this one's do not is gone (ApiServerSources, PingSources,
//     the wakeup source's and the classic Deployment, the Knative
//     Service, the Subscription, their RBAC), and so are the ReplicaSets
//     and pods of a Deployment this wiring has not. What prune keeps by
//     design stays: CRDs, Namespaces, Secrets and the hub's own install
//     (docs/manifests.md).
//
// Then one ConfigMap change is reconciled exactly once: the ConfigWatcher
// restarts its pods once (status.restarts one more, one Restarted Event
// naming the change's resourceVersion), and serverless the change is
// delivered to the operator once (dev's delivery events; an earlier
// wiring's adapters still sending would deliver it twice). Classic has no
// delivery: its own informers see the change.
func TestSwitchingWiring(t *testing.T) {
	if testing.Short() {
		t.Skip("runs four opzero dev sessions")
	}
	t.Setenv("GOFLAGS", strings.TrimSpace(os.Getenv("GOFLAGS")+" -tags=opzero_classic")) // classic mode is linked with the tag (classic.go)
	env := testenv.Get(t)
	ns := env.Namespace(t)
	root, err := controlplane.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	createWebapp(t, env.Client, ns)
	cw := &v1.ConfigWatcher{}
	cw.Name, cw.Namespace = "webapp-config-watcher", ns
	cw.Spec = v1.ConfigWatcherSpec{ConfigMap: "webapp-config", PodSelector: map[string]string{"app": "webapp"}}
	cacheDir := t.TempDir() // the images dev builds, shared by the sessions

	earlier := map[string]*unstructured.Unstructured{} // what earlier wirings' manifests hold, by objectID
	var earlierProcs []proc                            // what earlier sessions ran
	for i, w := range []struct {
		name string
		o    manifests.Options
	}{
		{"knative", manifests.Options{Source: manifests.SourceKnative}},
		{"hub", manifests.Options{}},
		{"classic", manifests.Options{Mode: manifests.Classic}},
		{"hub again", manifests.Options{}},
	} {
		ok := t.Run(w.name, func(t *testing.T) {
			w.o.Namespace = ns
			objs, err := manifests.Build(ctx, root, "./examples/configwatcher", w.o)
			if err != nil {
				t.Fatal(err)
			}
			stream, err := manifests.Stream(objs)
			if err != nil {
				t.Fatal(err)
			}
			us, err := dev.ReadManifests("-", bytes.NewReader(stream))
			if err != nil {
				t.Fatal(err)
			}
			now := map[string]*unstructured.Unstructured{}
			for _, u := range us {
				now[objectID(u)] = u
			}
			events := filepath.Join(t.TempDir(), "events.jsonl")
			f, err := os.Create(events)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { f.Close() }) // after the session's stop
			p := devtest.Start(t, ctx, dev.Options{Kubeconfig: env.Kubeconfig, Objects: us, Dir: t.TempDir(), CacheDir: cacheDir, BuildDir: root,
				Idle: time.Second, Events: dev.NewEventWriter(f)})

			// Nothing of an earlier wiring left, before the change.
			left := alive(earlierProcs)
			left = append(left, foreignProcesses(p, now)...)
			left = append(left, leftInAPI(t, env, earlier, now)...)
			left = append(left, leftPods(t, env, ns, now)...)
			if len(left) > 0 {
				t.Errorf("left of an earlier wiring after the switch to %s:\n  %s", w.name, strings.Join(left, "\n  "))
			}
			procs := running(p)

			if i == 0 { // created once the first wiring runs: Knative's adapter sends no event for what exists when it starts
				if err := env.Client.Create(ctx, cw); err != nil {
					t.Fatal(err)
				}
			}
			// The first session's start reconciles the new ConfigWatcher (it
			// records the ConfigMap, restarts nothing); the change is made
			// once that has settled.
			testkit.Eventually(t, 60*time.Second, "the ConfigWatcher reconciled", func(ctx context.Context) (bool, error) {
				err := env.Client.Get(ctx, client.ObjectKeyFromObject(cw), cw)
				return err == nil && cw.Status.ConfigMapVersion != "", err
			})
			time.Sleep(3 * time.Second) // past the start's own deliveries
			restarts := cw.Status.Restarts
			changed := time.Now()
			cm := &corev1.ConfigMap{}
			if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "webapp-config"}, cm); err != nil {
				t.Fatal(err)
			}
			cm.Data["message"] = fmt.Sprintf("after switch %d to %s", i, w.name)
			if err := env.Client.Update(ctx, cm); err != nil {
				t.Fatal(err)
			}
			testkit.Eventually(t, 60*time.Second, "the change reconciled", func(ctx context.Context) (bool, error) {
				err := env.Client.Get(ctx, client.ObjectKeyFromObject(cw), cw)
				return err == nil && cw.Status.ConfigMapVersion == cm.ResourceVersion && restartedEvents(t, env, cw, cm.ResourceVersion) > 0, err
			})
			time.Sleep(3 * time.Second) // a second delivery or reconcile of it would be here by now
			procs = append(procs, running(p)...)
			left = append(foreignProcesses(p, now), leftInAPI(t, env, earlier, now)...)
			p.Stop() // the switch to the next wiring: the session ends
			if a := alive(procs); len(a) > 0 {
				t.Errorf("still running after the %s session stopped: %s", w.name, strings.Join(a, "; "))
			}
			earlierProcs = append(earlierProcs, procs...)

			if err := env.Client.Get(ctx, client.ObjectKeyFromObject(cw), cw); err != nil {
				t.Fatal(err)
			}
			n := restartedEvents(t, env, cw, cm.ResourceVersion)
			deliveries := configMapDeliveries(t, events, changed)
			want := 1
			if w.o.Mode == manifests.Classic {
				want = 0 // its own informers: no delivery
			}
			t.Logf("the change: %d restart(s), %d Restarted Event(s), delivered %d time(s) (want 1, 1, %d); left of earlier wirings during the session: %v",
				cw.Status.Restarts-restarts, n, deliveries, want, left)
			if cw.Status.Restarts != restarts+1 || n != 1 {
				t.Errorf("the ConfigMap change restarted the pods %d times with %d Restarted Events, want once", cw.Status.Restarts-restarts, n)
			}
			if deliveries != want {
				t.Errorf("the ConfigMap change delivered %d times, want %d", deliveries, want)
			}
			if len(left) > 0 {
				t.Errorf("left of an earlier wiring during the %s session:\n  %s", w.name, strings.Join(left, "\n  "))
			}
			for id, u := range now {
				earlier[id] = u
			}
		})
		if !ok {
			return // the next switch would start from a state the test does not know
		}
	}
}

// objectID is how the test names an object: "Kind.group namespace/name"
// ("Kind.group name" cluster-scoped).
func objectID(u *unstructured.Unstructured) string {
	if u.GetNamespace() == "" {
		return u.GroupVersionKind().GroupKind().String() + " " + u.GetName()
	}
	return u.GroupVersionKind().GroupKind().String() + " " + u.GetNamespace() + "/" + u.GetName()
}

// kept is what prune leaves by design when a wiring is switched
// (docs/manifests.md): CRDs, Namespaces, Secrets and the hub's install,
// which other operators share.
func kept(u *unstructured.Unstructured) bool {
	switch u.GetKind() {
	case "CustomResourceDefinition", "Namespace", "Secret":
		return true
	}
	return u.GetLabels()["app.kubernetes.io/name"] == "opzero-hub"
}

// leftInAPI is what of earlier (the manifests of earlier wirings) the API
// still holds that now (this wiring's) does not.
func leftInAPI(t *testing.T, env *testenv.Env, earlier, now map[string]*unstructured.Unstructured) []string {
	t.Helper()
	dyn, mapper, err := prune.Clients(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, id := range slices.Sorted(maps.Keys(earlier)) {
		u := earlier[id]
		if now[id] != nil || kept(u) {
			continue
		}
		gvk := u.GroupVersionKind()
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			t.Fatalf("%s: %v", id, err)
		}
		got, err := dyn.Resource(m.Resource).Namespace(u.GetNamespace()).Get(context.Background(), u.GetName(), metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", id, err)
		}
		if got.GetDeletionTimestamp() != nil {
			id += " (terminating)"
		}
		left = append(left, id)
	}
	return left
}

// leftPods is the ReplicaSets and pods in ns of a Deployment that now
// (the wiring's objects) has not, besides the webapp's: what the garbage
// collector removes after a pruned Deployment (waited for).
func leftPods(t *testing.T, env *testenv.Env, ns string, now map[string]*unstructured.Unstructured) []string {
	t.Helper()
	ours := func(deployment string) bool {
		return deployment == "webapp" || now["Deployment.apps "+ns+"/"+deployment] != nil
	}
	var left []string
	_ = testkit.Poll(context.Background(), 30*time.Second, func(ctx context.Context) (bool, error) {
		left = nil
		rss := &appsv1.ReplicaSetList{}
		pods := &corev1.PodList{}
		if err := env.Client.List(ctx, rss, client.InNamespace(ns)); err != nil {
			return false, err
		}
		if err := env.Client.List(ctx, pods, client.InNamespace(ns)); err != nil {
			return false, err
		}
		for _, rs := range rss.Items {
			if d := strings.TrimSuffix(rs.Name, "-"+rs.Labels["pod-template-hash"]); !ours(d) {
				left = append(left, "ReplicaSet "+rs.Name+" of Deployment "+d)
			}
		}
		for _, pod := range pods.Items {
			if hash := pod.Labels["pod-template-hash"]; hash != "" {
				if d, _, _ := strings.Cut(pod.Name, "-"+hash+"-"); !ours(d) {
					left = append(left, "Pod "+pod.Name+" of Deployment "+d)
				}
			}
		}
		return len(left) == 0, nil
	})
	return left
}

// foreignProcesses is what session p runs that is not for an object of
// now (the wiring's objects).
func foreignProcesses(p *dev.Platform, now map[string]*unstructured.Unstructured) []string {
	var left []string
	for what, pid := range p.SourcePIDs() {
		kind, name, _ := strings.Cut(what, " ")
		var ok bool
		switch kind {
		case "ApiServerSource":
			ok = now["ApiServerSource.sources.knative.dev "+name] != nil
		case "Deployment":
			ok = now["Deployment.apps "+name] != nil
		case "mtping": // Knative's PingSource adapter
			for id := range now {
				ok = ok || strings.HasPrefix(id, "PingSource.sources.knative.dev ")
			}
		}
		if !ok && pid != 0 {
			left = append(left, fmt.Sprintf("%s (pid %d)", what, pid))
		}
	}
	for _, s := range p.Services {
		if now["Service.serving.knative.dev "+s.Namespace+"/"+s.Name] == nil {
			left = append(left, fmt.Sprintf("Knative Service %s/%s's activator (instances %v)", s.Namespace, s.Name, s.Activator.PIDs()))
		}
	}
	return left
}

// A proc is a process a session ran, told from a later one with its pid
// by its start time.
type proc struct {
	pid   int
	start string
}

// running is every process session p runs now (adapters, always-on
// processes, operator instances).
func running(p *dev.Platform) []proc {
	var out []proc
	for _, pid := range p.PIDs() {
		if s := startTime(pid); pid != 0 && s != "" {
			out = append(out, proc{pid, s})
		}
	}
	return out
}

// alive is those of procs still running.
func alive(procs []proc) []string {
	var out []string
	for _, pr := range procs {
		if startTime(pr.pid) == pr.start {
			cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pr.pid))
			out = append(out, fmt.Sprintf("pid %d (%s)", pr.pid, strings.ReplaceAll(strings.TrimRight(string(cmd), "\x00"), "\x00", " ")))
		}
	}
	return out
}

// startTime is field 22 of /proc/pid/stat ("" when pid is gone or a
// zombie).
func startTime(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	i := bytes.LastIndexByte(b, ')') // the command may hold spaces
	if i < 0 {
		return ""
	}
	f := strings.Fields(string(b[i+1:])) // from field 3, the state
	if len(f) < 20 || f[0] == "Z" {
		return ""
	}
	return f[19]
}

// restartedEvents counts the ConfigWatcher's Restarted Events for the
// ConfigMap's resourceVersion rv (a repeat of one Event counted by its
// series).
func restartedEvents(t *testing.T, env *testenv.Env, cw *v1.ConfigWatcher, rv string) int {
	t.Helper()
	l := &eventsv1.EventList{}
	if err := env.Client.List(context.Background(), l, client.InNamespace(cw.Namespace)); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range l.Items {
		if e.Reason != "Restarted" || e.Regarding.Name != cw.Name || !strings.Contains(e.Note, "(resourceVersion "+rv+")") {
			continue
		}
		if e.Series != nil {
			n += int(e.Series.Count)
		} else {
			n++
		}
	}
	return n
}

// configMapDeliveries counts the deliveries of ConfigMap changes to the
// operator in the events file since t0.
func configMapDeliveries(t *testing.T, file string, t0 time.Time) int {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var e dev.Event
		if json.Unmarshal(sc.Bytes(), &e) != nil || e.Event != dev.EventDelivery || e.Time.Before(t0) {
			continue
		}
		t.Logf("delivery since the change: %s %s %s %s -> %d %s", e.Service, e.Type, e.Kind, e.Key, e.Code, e.Result)
		if e.Kind == "ConfigMap" {
			n++
		}
	}
	return n
}
