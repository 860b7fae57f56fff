package operator_test

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/opzero/opzero/builder"
	v1 "github.com/opzero/opzero/examples/configwatcher/api/v1"
	"github.com/opzero/opzero/internal/plan"
	"github.com/opzero/opzero/operator"
	"github.com/opzero/opzero/testenv"
)

// audit records every request that leaves the operator's process for the
// API server (it wraps the transport the Runtime is given, under all of
// opzero's own).
type audit struct {
	mu       sync.Mutex
	requests []string // "METHOD path?dryRun"
	writes   []string // mutating requests without dryRun=All: must stay empty
}

func (a *audit) config(cfg *rest.Config) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripper(func(r *http.Request) (*http.Response, error) {
			a.mu.Lock()
			line := r.Method + " " + r.URL.Path
			dry := r.URL.Query().Get("dryRun") == "All"
			if dry {
				line += " dryRun=All"
			}
			a.requests = append(a.requests, line)
			if r.Method != http.MethodGet && !dry {
				a.writes = append(a.writes, line)
			}
			a.mu.Unlock()
			return rt.RoundTrip(r)
		})
	})
	return c
}

// check fails t unless every request was a GET (get, list) or a dry-run
// write.
func (a *audit) check(t *testing.T) {
	t.Helper()
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.writes) > 0 {
		t.Errorf("%d write(s) that were not dry-run left the process: %v", len(a.writes), a.writes)
	}
	if len(a.requests) == 0 {
		t.Error("no request reached the API server: the audit saw nothing")
	}
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// runPlan plans with the controllers register adds, in-process as a
// binary started with OPZERO_PLAN would, and returns the report.
func runPlan(t *testing.T, cfg *rest.Config, req plan.Request, concurrency int, register func(rt *operator.Runtime)) *plan.Report {
	t.Helper()
	req.Out = filepath.Join(t.TempDir(), "plan.json")
	b, _ := json.Marshal(req)
	t.Setenv(plan.Env, string(b))
	rt, err := operator.New(operator.Options{Scheme: scheme, Config: cfg, MaxConcurrentReconciles: concurrency})
	if err != nil {
		t.Fatal(err)
	}
	if rt.Mode() != operator.Plan {
		t.Fatalf("mode %s with %s set, want plan", rt.Mode(), plan.Env)
	}
	register(rt)
	if err := rt.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(req.Out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rep, err := plan.Read(f)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// annotations of the upgrade test: version 1 writes the ConfigMap's
// name on each selected pod, version 2 its namespace/name.
const podAnnotation = "configwatcher.opzero.dev/configmap"

// annotator is a ConfigWatcher reconciler of one version: it annotates
// the pods a ConfigWatcher selects and writes observedGeneration.
type annotator struct {
	client.Client
	value func(cw *v1.ConfigWatcher) string
}

func (r *annotator) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	cw := &v1.ConfigWatcher{}
	if err := r.Get(ctx, req.NamespacedName, cw); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	pods := &corev1.PodList{}
	if err := r.List(ctx, pods, client.InNamespace(cw.Namespace), client.MatchingLabels(cw.Spec.PodSelector)); err != nil {
		return reconcile.Result{}, err
	}
	want := r.value(cw)
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.Annotations[podAnnotation] == want {
			continue
		}
		base := client.MergeFrom(p.DeepCopy())
		if p.Annotations == nil {
			p.Annotations = map[string]string{}
		}
		p.Annotations[podAnnotation] = want
		if err := r.Patch(ctx, p, base); err != nil {
			return reconcile.Result{}, err
		}
	}
	if cw.Status.ObservedGeneration == cw.Generation {
		return reconcile.Result{}, nil
	}
	cw.Status.ObservedGeneration = cw.Generation
	return reconcile.Result{}, r.Status().Update(ctx, cw)
}

var (
	annotateV1 = func(cw *v1.ConfigWatcher) string { return cw.Spec.ConfigMap }
	annotateV2 = func(cw *v1.ConfigWatcher) string { return cw.Namespace + "/" + cw.Spec.ConfigMap }
)

// upgradeFixture makes n ConfigWatchers in ns, each selecting two pods,
// converged by version 1 for real.
func upgradeFixture(t *testing.T, env *testenv.Env, ns string, n int) {
	t.Helper()
	ctx := context.Background()
	ensureDefaultServiceAccount(t, env, ns)
	v1r := &annotator{Client: env.Client, value: annotateV1}
	for i := range n {
		name := "cw-" + string(rune('a'+i))
		cw := &v1.ConfigWatcher{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: v1.ConfigWatcherSpec{ConfigMap: "config-" + name, PodSelector: map[string]string{"app": name}}}
		if err := env.Client.Create(ctx, cw); err != nil {
			t.Fatal(err)
		}
		for j := range 2 {
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name + "-pod-" + string(rune('0'+j)), Namespace: ns, Labels: map[string]string{"app": name}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.invalid/app:1"}}}}
			if err := env.Client.Create(ctx, pod); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := v1r.Reconcile(ctx, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(cw)}); err != nil {
			t.Fatal(err)
		}
	}
}

// ensureDefaultServiceAccount creates ns's default ServiceAccount if the
// controller manager has not yet: pods need it.
func ensureDefaultServiceAccount(t *testing.T, env *testenv.Env, ns string) {
	t.Helper()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: ns}}
	if err := env.Client.Create(context.Background(), sa); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

// snapshot is every ConfigWatcher and Pod of ns by kind/name, with its
// resourceVersion: a plan must leave it as it was.
func snapshot(t *testing.T, env *testenv.Env, ns string) map[string]string {
	t.Helper()
	out := map[string]string{}
	cws := &v1.ConfigWatcherList{}
	pods := &corev1.PodList{}
	cms := &corev1.ConfigMapList{}
	evs := &corev1.EventList{}
	for _, l := range []client.ObjectList{cws, pods, cms, evs} {
		if err := env.Client.List(context.Background(), l, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
	}
	for _, o := range cws.Items {
		out["cw/"+o.Name] = o.ResourceVersion
	}
	for _, o := range pods.Items {
		out["pod/"+o.Name] = o.ResourceVersion
	}
	for _, o := range cms.Items {
		out["cm/"+o.Name] = o.ResourceVersion
	}
	for _, o := range evs.Items {
		out["event/"+o.Name] = o.ResourceVersion
	}
	return out
}

func sameSnapshot(t *testing.T, before, after map[string]string) {
	t.Helper()
	if len(before) != len(after) {
		t.Errorf("the plan changed the namespace: %d objects before, %d after (%v -> %v)", len(before), len(after), before, after)
		return
	}
	for k, v := range before {
		if after[k] != v {
			t.Errorf("%s: resourceVersion %s before the plan, %s after: it was written", k, v, after[k])
		}
	}
}

func forAnnotator(value func(*v1.ConfigWatcher) string) func(rt *operator.Runtime) {
	return func(rt *operator.Runtime) {
		r := &annotator{Client: rt.GetClient(), value: value}
		if err := builder.ControllerManagedBy(rt).Named("annotator").For(&v1.ConfigWatcher{}).Complete(r); err != nil {
			panic(err)
		}
	}
}

// TestPlanOfAConvergedOperatorChangesNothing: the version that converged
// the namespace, planned, would change nothing: exit 0, and only GETs,
// LISTs and dry-run writes left the process; every object keeps its
// resourceVersion.
func TestPlanOfAConvergedOperatorChangesNothing(t *testing.T) {
	env := testenv.Get(t)
	ns := env.Namespace(t)
	upgradeFixture(t, env, ns, 3)
	before := snapshot(t, env, ns)
	var a audit
	rep := runPlan(t, a.config(env.Config), plan.Request{Namespace: ns}, 0, forAnnotator(annotateV1))
	if rep.ExitCode() != 0 {
		var b strings.Builder
		_ = plan.PrintText(&b, rep)
		t.Errorf("exit code %d, want 0 (nothing would change):\n%s", rep.ExitCode(), b.String())
	}
	if got := len(rep.Objects); got != 3 {
		t.Errorf("%d objects planned, want 3", got)
	}
	a.check(t)
	sameSnapshot(t, before, snapshot(t, env, ns))
}

// TestPlanOfAnUpgradeShowsTheOneField: version 2 writes another value
// of the pod annotation: the plan lists, for each ConfigWatcher, a patch
// of each of its two pods with exactly that field, before and after;
// nothing is written.
func TestPlanOfAnUpgradeShowsTheOneField(t *testing.T) {
	env := testenv.Get(t)
	ns := env.Namespace(t)
	upgradeFixture(t, env, ns, 3)
	before := snapshot(t, env, ns)
	var a audit
	rep := runPlan(t, a.config(env.Config), plan.Request{Namespace: ns}, 0, forAnnotator(annotateV2))
	if rep.ExitCode() != 2 {
		t.Errorf("exit code %d, want 2 (something would change)", rep.ExitCode())
	}
	if len(rep.Objects) != 3 {
		t.Fatalf("%d objects planned, want 3", len(rep.Objects))
	}
	for _, o := range rep.Objects {
		if len(o.Writes) != 2 {
			t.Errorf("%s: %d writes, want the 2 pod patches: %+v", o.Ref, len(o.Writes), o.Writes)
			continue
		}
		for _, w := range o.Writes {
			wantBefore, _ := json.Marshal("config-" + o.Name)
			wantAfter, _ := json.Marshal(ns + "/config-" + o.Name)
			if w.Verb != "patch" || w.Kind != "Pod" || !strings.HasPrefix(w.Name, o.Name+"-pod-") {
				t.Errorf("%s: write %s %s, want a patch of one of its pods", o.Ref, w.Verb, w.Ref)
			}
			if len(w.Changes) != 1 {
				t.Errorf("%s: %s: %d changes, want exactly the annotation: %+v", o.Ref, w.Ref, len(w.Changes), w.Changes)
				continue
			}
			c := w.Changes[0]
			if c.Path != "metadata.annotations."+podAnnotation || string(c.Before) != string(wantBefore) || string(c.After) != string(wantAfter) {
				t.Errorf("%s: %s: change %s: %s -> %s, want metadata.annotations.%s: %s -> %s", o.Ref, w.Ref, c.Path, c.Before, c.After, podAnnotation, wantBefore, wantAfter)
			}
		}
	}
	var b strings.Builder
	if err := plan.PrintDiff(&b, rep); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(b.String(), "+metadata.annotations."+podAnnotation+": "); n != 6 {
		t.Errorf("-o diff has %d added annotation lines, want 6:\n%s", n, b.String())
	}
	a.check(t)
	sameSnapshot(t, before, snapshot(t, env, ns))
}
