package kubebuilder_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opzero/opzero/examples/kubebuilder/kbproject"
	"github.com/opzero/opzero/examples/nodeoperator"
	"github.com/opzero/opzero/internal/devenv/dev"
	"github.com/opzero/opzero/internal/devenv/devtest"
	"github.com/opzero/opzero/internal/manifests"
	"github.com/opzero/opzero/internal/proc"
	"github.com/opzero/opzero/internal/testkit"
	"github.com/opzero/opzero/testenv"
)

// fleetBench runs TestFleetOnDev, a benchmark of some minutes.
const fleetBench = "OPZERO_BENCH_FLEET"

// fleetMember is one operator of the fleet: its release as shipped, its
// Deployment, what `opzero hub adopt` is given for it and the command
// opzero dev runs for its Deployment (none: dev builds its image).
type fleetMember struct {
	shape, ns, deployment string
	release               []byte
	adopt                 []string
	command               []string
}

// TestFleetOnDev is the fleet of the real node's `fleet` subtest under
// opzero dev, by RSS: six releases of the kubebuilder project built
// unchanged (not even cmd/main.go), three of the repo's ConfigWatcher
// built with opzero and run classic, and greeting-operator (Node.js,
// unchanged), each installed as released. One dev session runs the ten
// classic (a process each) and reads their RSS once settled; the next
// runs the same releases with the hub serving their Deployments
// (`opzero hub adopt` of each release) and its second replica standing
// by, waits for every Deployment at 0 replicas and no process of theirs,
// and reads the hub's two replicas. A Memcached created at zero then
// wakes its operator, is reconciled (the Deployment it owns) and the
// operator goes back to zero (it logs which others it woke, and why). It logs the
// figure (goal <= 0.1x); it asserts what the figure stands on: ten
// processes classic, none of theirs at zero, the change reconciled.
//
//	OPZERO_BENCH_FLEET=1 go test -count=1 -timeout 40m -v -run TestFleetOnDev ./examples/kubebuilder
func TestFleetOnDev(t *testing.T) {
	if os.Getenv(fleetBench) == "" {
		t.Skipf("a benchmark of ten operators under opzero dev (about 5 minutes): %s=1 go test -count=1 -timeout 40m -v -run TestFleetOnDev ./examples/kubebuilder", fleetBench)
	}
	const memcacheds, configWatchers = 6, 3
	root := checkoutRoot(t)
	env := testenv.Get(t)
	ctx := context.Background()

	dir := kbproject.Scaffolded(t)
	kbproject.ManagerEnv(t, dir, "MEMCACHED_IMAGE", configImage)
	manager := filepath.Join(t.TempDir(), "manager")
	run(t, dir, "go", "build", "-o", manager, "./cmd")
	opzero := filepath.Join(t.TempDir(), "opzero")
	run(t, root, "go", "build", "-o", opzero, "./cmd/opzero")
	node, _ := nodeoperator.Tools(t)
	_, bundle := nodeoperator.Built(t)
	// The ConfigWatchers link classic mode with the tag; dev builds their
	// images (and the hub's) with it.
	t.Setenv("GOFLAGS", "-tags=opzero_classic")

	var fleet []fleetMember
	for i := range memcacheds {
		ns, prefix := fmt.Sprintf("fleet-mc%d", i), fmt.Sprintf("fl%d-", i)
		fleet = append(fleet, fleetMember{shape: "kubebuilder manager (unchanged)", ns: ns, deployment: prefix + "controller-manager",
			release: kbproject.Release(t, dir, ns, prefix),
			adopt:   []string{"--owner", "Deployment=Memcached", "--watch-namespace", ns},
			command: []string{manager}})
	}
	for i := range configWatchers {
		ns := fmt.Sprintf("fleet-cw%d", i)
		fleet = append(fleet, fleetMember{shape: "ConfigWatcher (opzero, classic)", ns: ns, deployment: "configwatcher",
			release: opzeroOut(t, opzero, root, nil, "manifests", "--operator", "./examples/configwatcher", "--mode=classic", "--namespace", ns, "-o", "-")})
	}
	fleet = append(fleet, fleetMember{shape: "greeting-operator (Node.js, unchanged)", ns: nodeoperator.Namespace, deployment: nodeoperator.Deployment,
		release: nodeoperator.Release(t),
		adopt:   []string{"--owner", "ConfigMap=Greeting", "--watch-namespace", nodeoperator.Namespace},
		command: []string{node, bundle}})
	for _, m := range fleet {
		ensureNamespace(t, env.Client, m.ns)
	}

	// Classic: the ten releases as shipped, a process each.
	var classic []*unstructured.Unstructured
	for _, m := range fleet {
		classic = append(classic, m.objects(t, nil)...)
	}
	s := startFleetSession(t, ctx, env, root, classic)
	testkit.Eventually(t, 5*time.Minute, "the ten classic operators running", func(context.Context) (bool, error) {
		return len(s.running(fleet)) == len(fleet), nil
	})
	pids := s.pids(fleet)
	classicRSS := settledRSS(t, func() (map[string]float64, error) {
		for k, pid := range s.pids(fleet) {
			if pid != pids[k] {
				return nil, fmt.Errorf("%s restarted (pid %d, then %d): a classic operator that does not stay up is not measured", k, pids[k], pid)
			}
		}
		return s.rss(fleet)
	})
	s.stop()

	// At zero: the same releases, each adopted, the hub serving them.
	var adopted []map[string]any
	derived := map[string]bool{}
	for _, m := range fleet {
		out := opzeroOut(t, opzero, root, bytes.NewReader(m.release), append([]string{"hub", "adopt", "-f", "-", "--idle-after", "5s"}, m.adopt...)...)
		objs, err := dev.ReadManifests("-", bytes.NewReader(out))
		if err != nil {
			t.Fatal(err)
		}
		for _, u := range objs {
			adopted = append(adopted, u.Object)
			derived[u.GetKind()+" "+u.GetNamespace()+"/"+u.GetName()] = true
		}
	}
	atZero := devtest.HubAndAdopted(t, adopted)
	for _, m := range fleet {
		atZero = append(atZero, m.objects(t, derived)...)
	}
	s = startFleetSession(t, ctx, env, root, atZero)
	defer s.stop()
	allAtZero := func(ctx context.Context) (bool, error) {
		for _, m := range fleet {
			var d appsv1.Deployment
			if err := env.Client.Get(ctx, types.NamespacedName{Namespace: m.ns, Name: m.deployment}, &d); err != nil {
				return false, err
			}
			if d.Spec.Replicas == nil || *d.Spec.Replicas != 0 {
				return false, nil
			}
		}
		return len(s.running(fleet)) == 0, nil
	}
	testkit.Eventually(t, 5*time.Minute, "every Deployment of the fleet at 0 replicas, no process of theirs", allAtZero)
	hub := s.p.DeploymentPID(manifests.HubNamespace, manifests.HubName)
	second, stopSecond, err := devtest.SecondHub(hub, filepath.Join(t.TempDir(), "hub-replica-2.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer stopSecond()
	hubRSS := settledRSS(t, func() (map[string]float64, error) {
		if ok, err := allAtZero(ctx); err != nil || !ok {
			return nil, fmt.Errorf("an operator of the fleet woke while nothing it needs changed (err %v)", err)
		}
		serving, _ := proc.Mem(hub)
		standby, _ := proc.Mem(second)
		if serving == 0 || standby == 0 {
			return nil, fmt.Errorf("a hub replica is gone (serving %.1f MiB, standby %.1f MiB)", serving, standby)
		}
		return map[string]float64{"hub, serving": serving, "hub, standby": standby}, nil
	})

	logFleet(t, "classic, each as released", classicRSS)
	logFleet(t, "at zero: what stays on", hubRSS)
	t.Logf("figure: RSS under opzero dev: a fleet of %d of different shapes (%d kubebuilder managers built unchanged, %d ConfigWatchers built with opzero run classic, 1 Node.js operator unchanged) at zero on the hub (serving + standby) vs classic: %.3fx (%.1f MiB vs %.1f MiB; goal <= 0.1x)",
		len(fleet), memcacheds, configWatchers, sum(hubRSS)/sum(classicRSS), sum(hubRSS), sum(classicRSS))

	// A change at zero wakes its operator alone and is reconciled.
	m := &unstructured.Unstructured{}
	m.SetAPIVersion("cache.example.com/v1alpha1")
	m.SetKind("Memcached")
	m.SetNamespace(fleet[0].ns)
	m.SetName("at-zero")
	_ = unstructured.SetNestedField(m.Object, int64(1), "spec", "size")
	if err := env.Client.Create(ctx, m); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 90*time.Second, "the Memcached created at zero reconciled (its Deployment)", func(ctx context.Context) (bool, error) {
		var d appsv1.Deployment
		err := env.Client.Get(ctx, client.ObjectKey{Namespace: m.GetNamespace(), Name: m.GetName()}, &d)
		return err == nil, client.IgnoreNotFound(err)
	})
	testkit.Eventually(t, 90*time.Second, "the fleet back at zero", allAtZero)
	for _, m := range fleet { // which it woke, and why
		sub := &unstructured.Unstructured{}
		sub.SetAPIVersion("opzero.dev/v1alpha1")
		sub.SetKind("SubscriptionList")
		list := &unstructured.UnstructuredList{Object: sub.Object}
		if err := env.Client.List(ctx, list, client.InNamespace(m.ns)); err != nil {
			t.Fatal(err)
		}
		for _, u := range list.Items {
			wakes, _, _ := unstructured.NestedInt64(u.Object, "status", "target", "wakes")
			reason, _, _ := unstructured.NestedString(u.Object, "status", "target", "lastWakeReason")
			t.Logf("%s: Subscription %s: wakes %d (last: %s)", m.key(), u.GetName(), wakes, reason)
		}
	}
	if err := env.Client.Delete(ctx, m); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 90*time.Second, "the Memcached deleted at zero gone (its finalizer removed by the woken operator)", func(ctx context.Context) (bool, error) {
		err := env.Client.Get(ctx, client.ObjectKeyFromObject(m), m)
		return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
	})
}

// objects is the member's release read as dev reads a stream, but the
// objects derived (by kind and namespace/name) that the adopt output
// replaces, with its Deployment's command for dev when it has one
// (devCommand).
func (m fleetMember) objects(t *testing.T, derived map[string]bool) []*unstructured.Unstructured {
	t.Helper()
	objs, err := dev.ReadManifests("-", bytes.NewReader(m.release))
	if err != nil {
		t.Fatal(err)
	}
	var out []*unstructured.Unstructured
	for _, u := range objs {
		if derived[u.GetKind()+" "+u.GetNamespace()+"/"+u.GetName()] {
			continue
		}
		out = append(out, u)
		if u.GetKind() == "Deployment" && m.command != nil {
			devCommand(u, m.command...)
		}
	}
	return out
}

// fleetSession is one opzero dev session of the fleet.
type fleetSession struct {
	p    *dev.Platform
	stop func()
}

func startFleetSession(t *testing.T, ctx context.Context, env *testenv.Env, root string, objs []*unstructured.Unstructured) *fleetSession {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	p, err := dev.Start(ctx, dev.Options{Kubeconfig: env.Kubeconfig, Objects: objs, Dir: t.TempDir(), CacheDir: t.TempDir(), BuildDir: root, Out: testkit.LogWriter(t)})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	stopped := false
	s := &fleetSession{p: p, stop: func() {
		if stopped {
			return
		}
		stopped = true
		if t.Failed() {
			testkit.LogTails(t, devtest.TailLines, p.LogPath("*"))
		}
		cancel()
		p.Stop()
	}}
	t.Cleanup(s.stop)
	return s
}

// running are the members whose Deployment has a process.
func (s *fleetSession) running(fleet []fleetMember) []fleetMember {
	var up []fleetMember
	for _, m := range fleet {
		if s.p.DeploymentPID(m.ns, m.deployment) != 0 {
			up = append(up, m)
		}
	}
	return up
}

// pids are the members' processes, by shape and namespace/Deployment.
func (s *fleetSession) pids(fleet []fleetMember) map[string]int {
	out := map[string]int{}
	for _, m := range fleet {
		out[m.key()] = s.p.DeploymentPID(m.ns, m.deployment)
	}
	return out
}

// rss reads each member's process (MiB), by shape and namespace/Deployment.
func (s *fleetSession) rss(fleet []fleetMember) (map[string]float64, error) {
	out := map[string]float64{}
	for _, m := range fleet {
		rss, _ := proc.Mem(s.p.DeploymentPID(m.ns, m.deployment))
		if rss == 0 {
			return nil, fmt.Errorf("%s: no process to read", m.key())
		}
		out[m.key()] = rss
	}
	return out, nil
}

func (m fleetMember) key() string { return m.shape + " " + m.ns + "/" + m.deployment }

// settledRSS reads RSS (MiB, by process) 30 s after the processes
// settled, 5 times 5 s apart, and keeps for each the median read; a read
// that fails fails the test.
func settledRSS(t *testing.T, read func() (map[string]float64, error)) map[string]float64 {
	t.Helper()
	time.Sleep(30 * time.Second)
	reads := map[string][]float64{}
	for i := range 5 {
		if i > 0 {
			time.Sleep(5 * time.Second)
		}
		r, err := read()
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range r {
			reads[k] = append(reads[k], v)
		}
	}
	out := map[string]float64{}
	for k, v := range reads {
		slices.Sort(v)
		out[k] = v[len(v)/2]
	}
	return out
}

func logFleet(t *testing.T, title string, rss map[string]float64) {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "%s, RSS under opzero dev: %.1f MiB", title, sum(rss))
	for _, k := range slices.Sorted(func(yield func(string) bool) {
		for k := range rss {
			if !yield(k) {
				return
			}
		}
	}) {
		fmt.Fprintf(&b, "\n  %s: %.1f MiB", k, rss[k])
	}
	t.Log(b.String())
}

func sum(m map[string]float64) float64 {
	var s float64
	for _, v := range m {
		s += v
	}
	return s
}

func ensureNamespace(t *testing.T, c client.Client, ns string) {
	t.Helper()
	err := c.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

// opzeroOut runs the opzero CLI in dir and returns its output.
func opzeroOut(t *testing.T, opzero, dir string, stdin *bytes.Reader, args ...string) []byte {
	t.Helper()
	cmd := exec.Command(opzero, args...)
	cmd.Dir = dir
	if stdin != nil {
		cmd.Stdin = stdin
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("opzero %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return out
}
