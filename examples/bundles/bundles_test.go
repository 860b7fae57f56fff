package bundles_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opzero/opzero/internal/devenv/dev"
	"github.com/opzero/opzero/internal/devenv/devtest"
	"github.com/opzero/opzero/internal/manifests"
	"github.com/opzero/opzero/internal/testkit"
	"github.com/opzero/opzero/testenv"
)

func TestMain(m *testing.M) {
	os.Exit(testenv.Main(m, testenv.Options{KnativeCRDs: true}))
}

// TestOnlyMainChanged: adopting the project changed cmd/main.go alone,
// by these lines (the classic main is testdata/classic_main.go.txt), and
// no other file of the project names opzero.
func TestOnlyMainChanged(t *testing.T) {
	classic, err := os.ReadFile("testdata/classic_main.go.txt")
	if err != nil {
		t.Fatal(err)
	}
	adopted, err := os.ReadFile("cmd/main.go")
	if err != nil {
		t.Fatal(err)
	}
	added, removed := lineDiff(string(classic), string(adopted))
	wantAdded := []string{
		``,
		`"github.com/opzero/opzero/operator"`,
		`"github.com/opzero/opzero/operator/classic"`,
		`var serverless operator.Options // --mode=serverless|classic, --audience, ... (opzero)`,
		`return run(cmd.Context(), f, serverless)`,
		`serverless.BindPFlags(fs)`,
		`func run(ctx context.Context, f flags, serverless operator.Options) error {`,
		`mgr, err := classic.NewManager(serverless, cfg, ctrl.Options{`,
	}
	wantRemoved := []string{
		`return run(cmd.Context(), f)`,
		`func run(ctx context.Context, f flags) error {`,
		`mgr, err := ctrl.NewManager(cfg, ctrl.Options{`,
	}
	if !slices.Equal(added, wantAdded) || !slices.Equal(removed, wantRemoved) {
		t.Fatalf("adoption's lines: +%q -%q; want +%q -%q", added, removed, wantAdded, wantRemoved)
	}
	t.Logf("adoption: cmd/main.go, %d lines added, %d changed", len(added)-len(removed), len(removed))
	err = filepath.WalkDir(".", func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") || p == "cmd/main.go" {
			return err
		}
		b, err := os.ReadFile(p)
		if err == nil && bytes.Contains(b, []byte("github.com/opzero/opzero/operator")) {
			t.Errorf("%s imports opzero: adoption changes only cmd/main.go", p)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// lineDiff: the trimmed lines of b not in a and of a not in b, in order
// (a multiset difference: enough for a few changed lines).
func lineDiff(a, b string) (added, removed []string) {
	count := func(s string) map[string]int {
		m := map[string]int{}
		for _, l := range strings.Split(s, "\n") {
			m[strings.TrimSpace(l)]++
		}
		return m
	}
	ca, cb := count(a), count(b)
	for _, l := range strings.Split(b, "\n") {
		if l = strings.TrimSpace(l); cb[l] > ca[l] {
			added = append(added, l)
			cb[l]--
		}
	}
	ca, cb = count(a), count(b)
	for _, l := range strings.Split(a, "\n") {
		if l = strings.TrimSpace(l); ca[l] > cb[l] {
			removed = append(removed, l)
			ca[l]--
		}
	}
	return added, removed
}

// TestManifests: `opzero manifests` (manifests.Build) on the project
// describes it (the project's own cache is never connected to: a describe
// that waited on it would fail Build with the describe timeout; the time,
// build included, is only logged; a note names the source moved off it),
// its Subscription asks for its Bundles by generation, the ConfigMaps of
// every namespace (its targets' cache watches them all, wider than the
// manager cache's trust namespace) and the Namespaces; its YAML webhook
// is configured through the hub; the generated role grants all the
// project's config/rbac/role.yaml does (no warning), and the warning
// fires for a rule it would not grant.
func TestManifests(t *testing.T) {
	wd, _ := os.Getwd()
	var warnings bytes.Buffer
	start := time.Now()
	objs, err := manifests.Build(context.Background(), wd, "./cmd", manifests.Options{Namespace: "bundles-system", Warnings: &warnings})
	took := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("manifests.Build: %s; warnings:\n%s", took.Round(time.Millisecond), warnings.String())
	if !strings.Contains(warnings.String(), "note: bundle: Namespace: its predicates drop every change of type updated, deleted (the functions at controller/bundle.go:120, controller/bundle.go:121 return false)") ||
		strings.Contains(warnings.String(), "predicate.Funcs with only") {
		t.Errorf("warnings:\n%s\nwant a note that the hub drops Namespace updates and deletes, read from controller/bundle.go, and no warning of its predicate.Funcs", warnings.String())
	}
	if !strings.Contains(warnings.String(), "note: bundle: controller bundle: its source of ConfigMap on a cache the project built (cache.New) is served as the manager cache's are") {
		t.Errorf("warnings:\n%s\nwant a note naming the ConfigMap source on the project's own cache, served as the manager cache's are", warnings.String())
	}
	if strings.Contains(warnings.String(), "config/rbac/role.yaml") {
		t.Errorf("a role-gap warning for the project's own role:\n%s", warnings.String())
	}
	if !strings.Contains(warnings.String(), "the project's own config/crd/bundles.opzero.dev_bundles.yaml is used") {
		t.Errorf("warnings:\n%s\nwant one saying the project's own CRD is used (its api package has no +groupName)", warnings.String())
	}
	var resources, crds []string
	var validating []string
	var rules []rbacv1.PolicyRule
	for _, o := range objs {
		switch o.Kind() {
		case "CustomResourceDefinition":
			crds = append(crds, o.Obj["metadata"].(map[string]any)["name"].(string))
		case "Subscription":
			for _, r := range o.Obj["spec"].(map[string]any)["resources"].([]any) {
				m := r.(map[string]any)
				resources = append(resources, fmt.Sprintf("%s ns=%v owner=%v updatedWhen=%v events=%v", m["kind"], m["namespaces"], m["owner"], m["updatedWhen"], m["events"]))
			}
		case "ValidatingWebhookConfiguration":
			for _, w := range o.Obj["webhooks"].([]any) {
				cc := w.(map[string]any)["clientConfig"].(map[string]any)["service"].(map[string]any)
				validating = append(validating, fmt.Sprint(cc["name"], " ", cc["path"]))
			}
		case "ClusterRole":
			if o.Obj["metadata"].(map[string]any)["name"] == "opzero:bundles-system:bundle" {
				for _, r := range o.Obj["rules"].([]any) {
					m := r.(map[string]any)
					rules = append(rules, rbacv1.PolicyRule{APIGroups: strs(m["apiGroups"]), Resources: strs(m["resources"]), Verbs: strs(m["verbs"])})
				}
			}
		}
	}
	want := []string{
		"Bundle ns=<nil> owner=<nil> updatedWhen=[generation] events=<nil>",
		// its targets, owned by a Bundle, everywhere (its own cache); its
		// sources in the trust namespace (the manager's cache)
		"ConfigMap ns=<nil> owner=map[apiVersion:bundles.opzero.dev/v1alpha1 kind:Bundle] updatedWhen=<nil> events=<nil>",
		"ConfigMap ns=[bundles-system] owner=<nil> updatedWhen=<nil> events=<nil>",
		// its predicate.Funcs returns false for updates and deletes
		"Namespace ns=<nil> owner=<nil> updatedWhen=<nil> events=[created]",
	}
	if !slices.Equal(resources, want) {
		t.Errorf("Subscription resources\n%s\nwant\n%s", strings.Join(resources, "\n"), strings.Join(want, "\n"))
	}
	if !slices.Contains(crds, "bundles.bundles.opzero.dev") {
		t.Errorf("CRDs %v: want the project's Bundle CRD among them", crds)
	}
	if len(validating) != 1 || !strings.HasPrefix(validating[0], "opzero-hub /admission/bundles-system/bundle/") || !strings.HasSuffix(validating[0], "/validate-bundle") {
		t.Errorf("validating webhooks %q, want config/webhook's one through the hub", validating)
	}
	if len(rules) == 0 {
		t.Fatal("no operator ClusterRole opzero:bundles-system:bundle")
	}
	var w bytes.Buffer
	pr := manifests.ReadProjectRole(wd, wd)
	manifests.WarnRoleGaps(&w, "bundle", pr, rules)
	if w.Len() != 0 {
		t.Errorf("the project's role compared with the generated one: %s", w.String())
	}
	pr.Rules = append(pr.Rules, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"delete"}})
	manifests.WarnRoleGaps(&w, "bundle", pr, rules)
	if !strings.Contains(w.String(), "grants delete secrets") {
		t.Errorf("a project role granting delete secrets: warning %q, want one naming it", w.String())
	}
	// What the generated role grants beyond the project's: the warning
	// compares only the other way (a grant the operator would miss).
	var wider bytes.Buffer
	manifests.WarnRoleGaps(&wider, "bundle", &manifests.ProjectRole{File: "generated", Rules: rules}, manifests.ReadProjectRole(wd, wd).Rules)
	var extra []string
	for _, l := range strings.Split(strings.TrimSpace(wider.String()), "\n") {
		if i, j := strings.Index(l, " grants "), strings.Index(l, ", which"); i > 0 && j > i {
			extra = append(extra, l[i+len(" grants "):j])
		}
	}
	t.Logf("the generated ClusterRole grants beyond config/rbac/role.yaml: %s", strings.Join(extra, "; "))
	wantExtra := []string{ // opzero's own alone: tokenreviews (deliveries' tokens), wakeups (durable time), events
		"create tokenreviews.authentication.k8s.io", "create,delete,get,list,update wakeups.opzero.dev", "create,patch events",
		"create,patch events.events.k8s.io"}
	if !slices.Equal(extra, wantExtra) {
		t.Errorf("the generated role beyond the project's: %q, want %q", extra, wantExtra)
	}
}

func strs(v any) []string {
	var out []string
	for _, s := range v.([]any) {
		out = append(out, s.(string))
	}
	return out
}

// TestBundlesAtZero: the project serverless through opzero dev and the
// hub on a real API server. A Bundle created at zero is reconciled by a
// woken instance: its target in every namespace. An invalid Bundle is
// refused by the project's YAML webhook at zero. Unrelated ConfigMap
// changes in another namespace deliver nothing to the operator. A target
// deleted at zero is restored (timed, beside the Bundle's first cold
// start), and a new namespace gets its target.
func TestBundlesAtZero(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the project and the hub through opzero dev on a control plane")
	}
	env := testenv.Get(t)
	ns := env.Namespace(t)
	ctx := context.Background()
	c := env.Client
	wd, _ := os.Getwd()

	objs, err := manifests.Build(ctx, wd, "./cmd", manifests.Options{Namespace: ns, Args: []string{"--trust-namespace=" + ns}})
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
	for _, u := range us {
		if u.GetKind() == "Subscription" { // no sweep during the test
			if sw, ok, _ := unstructured.NestedSlice(u.Object, "spec", "sweeps"); ok {
				for _, s := range sw {
					s.(map[string]any)["schedule"] = "0 0 1 1 *"
				}
				_ = unstructured.SetNestedSlice(u.Object, sw, "spec", "sweeps")
			}
		}
	}
	other := make([]string, 2)
	for i := range other {
		other[i] = namespace(t, c, fmt.Sprintf("%s-other-%d", ns, i))
	}
	src := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "ca-source"}, Data: map[string]string{"ca.crt": "ROOT-1"}}
	if err := c.Create(ctx, src); err != nil {
		t.Fatal(err)
	}
	logs := os.Getenv("BUNDLES_LOG_DIR") // the processes' logs, kept there (else removed with the test)
	if logs == "" {
		logs = t.TempDir()
	}
	p := devtest.Start(t, ctx, dev.Options{Kubeconfig: env.Kubeconfig, Objects: us, Dir: logs, CacheDir: t.TempDir(),
		BuildDir: wd, Namespace: ns, Idle: time.Second})
	var svc *dev.Service
	for _, s := range p.Services {
		if s.Name == "bundle" {
			svc = s
		}
	}
	if svc == nil {
		t.Fatal("dev plays no Knative Service bundle")
	}
	atZero := func(step string) {
		testkit.Eventually(t, 90*time.Second, "at zero after "+step, func(context.Context) (bool, error) { return svc.Activator.Instances() == 0, nil })
	}

	// The webhook in force (through the hub, the operator woken for it).
	var refused error
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the last create of an invalid Bundle: %v", refused)
		}
	})
	testkit.Eventually(t, 60*time.Second, "the project's validating webhook in force", func(ctx context.Context) (bool, error) {
		refused = c.Create(ctx, bundle("invalid", "", ""))
		if refused == nil {
			_ = c.Delete(ctx, bundle("invalid", "", ""))
		}
		return refused != nil && strings.Contains(refused.Error(), "a Bundle names its source ConfigMap and key"), nil
	})
	atZero("the webhook's calls")
	cold := svc.Activator.ColdStarts.Load()
	start := time.Now()
	if err := c.Create(ctx, bundle("trust", "ca-source", "ca.crt")); err != nil {
		t.Fatal(err)
	}
	for _, n := range append([]string{ns, "default"}, other...) {
		target(t, c, n, "trust", "ROOT-1")
	}
	first := time.Since(start)
	if svc.Activator.ColdStarts.Load() == cold {
		t.Error("the Bundle created at zero did not start the operator")
	}
	t.Logf("a Bundle created at zero: its targets in %d namespaces after %s (a cold start)", len(other)+2, first.Round(time.Millisecond))

	atZero("the Bundle")
	time.Sleep(2 * time.Second) // the hub's echo of the targets' own writes, if any, has gone
	atZero("the Bundle's echoes")
	events, cold := svc.Events.Load(), svc.Activator.ColdStarts.Load()
	for i := range 10 {
		u := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: other[0], Name: fmt.Sprint("unrelated-", i)}, Data: map[string]string{"a": "1"}}
		if err := c.Create(ctx, u); err != nil {
			t.Fatal(err)
		}
		u.Data["a"] = "2"
		if err := c.Update(ctx, u); err != nil {
			t.Fatal(err)
		}
		if err := c.Delete(ctx, u); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(5 * time.Second)
	if d, cs := svc.Events.Load()-events, svc.Activator.ColdStarts.Load()-cold; d != 0 || cs != 0 {
		t.Errorf("30 unrelated ConfigMap changes in %s: %d deliveries to the operator, %d cold starts; want 0", other[0], d, cs)
	} else {
		t.Logf("30 unrelated ConfigMap changes in %s: 0 deliveries to the operator", other[0])
	}

	atZero("the unrelated changes")
	cold = svc.Activator.ColdStarts.Load()
	start = time.Now()
	if err := c.Delete(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: other[1], Name: "trust"}}); err != nil {
		t.Fatal(err)
	}
	target(t, c, other[1], "trust", "ROOT-1")
	restored := time.Since(start)
	t.Logf("a target deleted at zero restored after %s (%d cold starts; the Bundle's first reconcile at zero took %s)",
		restored.Round(time.Millisecond), svc.Activator.ColdStarts.Load()-cold, first.Round(time.Millisecond))

	atZero("the restore")
	n := namespace(t, c, ns+"-new")
	target(t, c, n, "trust", "ROOT-1")
	t.Logf("a namespace created at zero got its target")
}

func bundle(name, cm, key string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"source": map[string]any{"configMap": cm, "key": key}}}}
	u.SetAPIVersion("bundles.opzero.dev/v1alpha1")
	u.SetKind("Bundle")
	u.SetName(name)
	return u
}

// namespace creates a namespace, deleted when the test ends.
func namespace(t *testing.T, c client.Client, name string) string {
	t.Helper()
	n := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := c.Create(context.Background(), n); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Delete(context.Background(), n) })
	return name
}

// target waits for the Bundle's target in ns to hold want.
func target(t *testing.T, c client.Client, ns, name, want string) {
	t.Helper()
	testkit.Eventually(t, 90*time.Second, "target "+ns+"/"+name, func(ctx context.Context) (bool, error) {
		var cm corev1.ConfigMap
		err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &cm)
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return err == nil && cm.Data["ca.crt"] == want && len(cm.OwnerReferences) == 1, err
	})
}
