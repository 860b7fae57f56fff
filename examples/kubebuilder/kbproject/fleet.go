package kbproject

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opzero/opzero/internal/testkit"
)

// FleetAPIs are the multigroup project's APIs: three kinds in two groups.
var FleetAPIs = []struct{ Group, Kind, Plural string }{
	{"ship", "Frigate", "frigates"},
	{"ship", "Destroyer", "destroyers"},
	{"sea", "Cruiser", "cruisers"},
}

// FleetGenerated generates the project: kubebuilder init, edit
// --multigroup, create api for each of FleetAPIs with its reconciler
// written in, create webhook for Frigate with its logic written in, and
// the deep copies (make generate). It keeps go.mod for KeptVersions and
// returns the project's folder and cmd/main.go as kubebuilder wrote it.
func FleetGenerated(t testing.TB, kb, cg string) (dir string, mainBefore []byte) {
	dir = filepath.Join(t.TempDir(), "fleet")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	Run(t, dir, kb, "init", "--domain", "example.com", "--repo", "example.com/fleet", "--skip-go-version-check")
	Run(t, dir, kb, "edit", "--multigroup=true")
	for _, a := range FleetAPIs {
		Run(t, dir, kb, "create", "api", "--group", a.Group, "--version", "v1", "--kind", a.Kind, "--resource", "--controller", "--make=false")
		ctrlGo := filepath.Join(dir, "internal/controller", a.Group, strings.ToLower(a.Kind)+"_controller.go")
		src, err := os.ReadFile(ctrlGo)
		if err != nil {
			t.Fatal(err)
		}
		m := regexp.MustCompile(`(\w+) "example.com/fleet/api/` + a.Group + `/v1"`).FindSubmatch(src)
		if m == nil {
			t.Fatalf("%s imports no example.com/fleet/api/%s/v1", ctrlGo, a.Group)
		}
		ReplaceIn(t, ctrlGo, "import (\n", "import (\n\t\"strconv\"\n")
		ReplaceIn(t, ctrlGo, "\t// TODO(user): your logic here\n", fmt.Sprintf(`	obj := &%s.%s{}
	if err := r.Get(ctx, req.NamespacedName, obj); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if g := strconv.FormatInt(obj.Generation, 10); obj.Annotations["reconciled"] != g {
		if obj.Annotations == nil {
			obj.Annotations = map[string]string{}
		}
		obj.Annotations["reconciled"] = g
		return ctrl.Result{}, r.Update(ctx, obj)
	}
`, m[1], a.Kind))
	}
	Run(t, dir, kb, "create", "webhook", "--group", "ship", "--version", "v1", "--kind", "Frigate", "--defaulting", "--programmatic-validation", "--make=false")
	frigateWebhook(t, filepath.Join(dir, "internal/webhook/ship/v1"))
	Run(t, dir, cg, "object:headerFile=hack/boilerplate.go.txt", "paths=./...")
	KeepGoMod(t, dir)
	mainBefore, err := os.ReadFile(filepath.Join(dir, "cmd/main.go"))
	if err != nil {
		t.Fatal(err)
	}
	return dir, mainBefore
}

// FleetAdopted generates the multigroup project (FleetGenerated) and
// adopts it as docs/migrating.md says: the same 7 lines of cmd/main.go,
// opzero required (this checkout's, replaced) and go mod tidy, no version
// of its go.mod changed (KeptVersions), then builds it. It returns the
// project's folder and the migration's diff of cmd/main.go (git diff
// --numstat).
func FleetAdopted(t testing.TB, kb, cg string) (dir, numstat string) {
	t.Helper()
	dir, mainBefore := FleetGenerated(t, kb, cg)
	mainGo := filepath.Join(dir, "cmd/main.go")
	ReplaceIn(t, mainGo, "\t\"sigs.k8s.io/controller-runtime/pkg/webhook\"\n",
		"\t\"sigs.k8s.io/controller-runtime/pkg/webhook\"\n\n\t\"github.com/opzero/opzero/operator\"\n\t\"github.com/opzero/opzero/operator/classic\"\n")
	ReplaceIn(t, mainGo, "\topts := zap.Options{", "\tvar serverless operator.Options // --mode=serverless|classic, --audience, ... (opzero)\n\tserverless.BindFlags(flag.CommandLine)\n\topts := zap.Options{")
	ReplaceIn(t, mainGo, "ctrl.NewManager(ctrl.GetConfigOrDie(), ctrl.Options{", "classic.NewManager(serverless, ctrl.GetConfigOrDie(), ctrl.Options{")
	orig := filepath.Join(t.TempDir(), "main.go")
	if err := os.WriteFile(orig, mainBefore, 0o644); err != nil {
		t.Fatal(err)
	}
	out, _ := exec.Command("git", "diff", "--no-index", "--numstat", orig, mainGo).Output() // exit 1: the files differ
	Run(t, dir, "go", "mod", "edit", "-replace", "github.com/opzero/opzero="+CheckoutRoot(t))
	Run(t, dir, "go", "mod", "tidy")
	KeptVersions(t, dir)
	Run(t, dir, "go", "build", "./...")
	return dir, strings.TrimSpace(string(out))
}

// frigateWebhook writes the user's logic into the webhook kubebuilder
// scaffolded in dir: the defaulter gives a Frigate without a class label
// the class "frigate", the validator refuses to create one of class
// "battleship" (the object's variable is the scaffold's: frigate for
// runtime.Object webhooks, obj for typed ones); and the user's tests of
// them into the webhook's envtest suite, which creates through its API
// server (the scaffolded suite has no spec but examples in comments, and
// Ginkgo skips the suite's envtest when no spec runs).
func frigateWebhook(t testing.TB, dir string) {
	testGo := filepath.Join(dir, "frigate_webhook_test.go")
	ReplaceIn(t, testGo, "// TODO (user): Add logic for defaulting webhooks\n", `// TODO (user): Add logic for defaulting webhooks
		It("labels a Frigate without a class, called by the API server", func() {
			obj.Name, obj.Namespace = "defaulted", "default"
			Expect(k8sClient.Create(ctx, obj)).To(Succeed())
			Expect(obj.Labels).To(HaveKeyWithValue("class", "frigate"))
		})
`)
	ReplaceIn(t, testGo, "// TODO (user): Add logic for validating webhooks\n", `// TODO (user): Add logic for validating webhooks
		It("refuses a battleship, called by the API server", func() {
			obj.Name, obj.Namespace = "battleship", "default"
			obj.Labels = map[string]string{"class": "battleship"}
			Expect(k8sClient.Create(ctx, obj)).To(MatchError(ContainSubstring("a Frigate cannot be of class battleship")))
		})
`)
	hookGo := filepath.Join(dir, "frigate_webhook.go")
	src, err := os.ReadFile(hookGo)
	if err != nil {
		t.Fatal(err)
	}
	object := func(step string) string {
		m := regexp.MustCompile(`frigatelog\.Info\("` + step + `", "name", (\w+)\.GetName\(\)\)`).FindSubmatch(src)
		if m == nil {
			t.Fatalf("%s logs no %q (kubebuilder %s scaffolds differently?)", hookGo, step, Version)
		}
		return string(m[1])
	}
	ReplaceIn(t, hookGo, "\t\"context\"\n", "\t\"context\"\n\t\"errors\"\n")
	ReplaceIn(t, hookGo, "\t// TODO(user): fill in your defaulting logic.\n", fmt.Sprintf(`	if _, ok := %[1]s.Labels["class"]; !ok {
		if %[1]s.Labels == nil {
			%[1]s.Labels = map[string]string{}
		}
		%[1]s.Labels["class"] = "frigate"
	}
`, object("Defaulting for Frigate")))
	ReplaceIn(t, hookGo, "\t// TODO(user): fill in your validation logic upon object creation.\n", fmt.Sprintf(`	if %s.Labels["class"] == "battleship" {
		return nil, errors.New("a Frigate cannot be of class battleship")
	}
`, object("Validation for Frigate upon creation")))
}

// FleetExercise creates, updates and deletes one object of each kind,
// waiting for each to be reconciled and idle (serverless: scale to zero)
// after each step; the validating webhook refuses a battleship before and
// after, and the defaulting webhook labels the Frigate.
func FleetExercise(t testing.TB, c client.Client, ns string, idle func(step string)) {
	ctx := context.Background()
	refused := func(name string) {
		t.Helper()
		o := FleetObject(FleetAPIs[0].Group, FleetAPIs[0].Kind, ns, name)
		o.SetLabels(map[string]string{"class": "battleship"})
		err := c.Create(ctx, o)
		if err == nil || !strings.Contains(err.Error(), `admission webhook "vfrigate-v1.kb.io" denied the request: a Frigate cannot be of class battleship`) {
			t.Fatalf("creating a Frigate of class battleship: %v, want the validating webhook's refusal", err)
		}
		t.Logf("the apiserver called the validating webhook: %v", err)
	}
	refused("battleship")
	for _, a := range FleetAPIs {
		obj := FleetObject(a.Group, a.Kind, ns, "one")
		if err := c.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
		if a.Kind == "Frigate" && obj.GetLabels()["class"] != "frigate" {
			t.Fatalf("Frigate created with labels %v, want class=frigate from the defaulting webhook", obj.GetLabels())
		}
		marked := func(gen string) func(context.Context) (bool, error) {
			return func(ctx context.Context) (bool, error) {
				if err := c.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
					return false, err
				}
				return obj.GetAnnotations()["reconciled"] == gen, nil
			}
		}
		testkit.Eventually(t, 60*time.Second, a.Kind+" reconciled at generation 1", marked("1"))
		idle(a.Kind + " created")
		_ = unstructured.SetNestedField(obj.Object, "b", "spec", "foo")
		if err := c.Update(ctx, obj); err != nil {
			t.Fatal(err)
		}
		testkit.Eventually(t, 60*time.Second, a.Kind+" reconciled at generation 2", marked("2"))
		idle(a.Kind + " updated")
		if err := c.Delete(ctx, obj); err != nil {
			t.Fatal(err)
		}
		testkit.Eventually(t, 60*time.Second, a.Kind+" gone", func(ctx context.Context) (bool, error) {
			err := c.Get(ctx, client.ObjectKeyFromObject(obj), obj)
			return err != nil, client.IgnoreNotFound(err)
		})
	}
	idle("deletes")
	refused("battleship-later")
}

// FleetObject is an object of one of FleetAPIs with spec.foo "a".
func FleetObject(group, kind, ns, name string) *unstructured.Unstructured {
	obj := &unstructured.Unstructured{}
	obj.SetAPIVersion(group + ".example.com/v1")
	obj.SetKind(kind)
	obj.SetNamespace(ns)
	obj.SetName(name)
	_ = unstructured.SetNestedField(obj.Object, "a", "spec", "foo")
	return obj
}
