package metacontroller

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"sort"
	"strings"
	"testing"

	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/tools/record"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/opzero/opzero/internal/metacontroller/api/v1alpha1"
	"github.com/opzero/opzero/testenv"
)

// everyField is our controllers that set every field of upstream
// Metacontroller's CompositeController and DecoratorController.
const everyField = "../../examples/metacontroller/testdata/metacontroller-objects.yaml"

// unsupportedInEveryField is what opzero must report of them: every field
// set there that it does not implement, and no other.
var unsupportedInEveryField = map[string][]string{
	"catset-controller": {
		"spec.generateSelector", "spec.parentResource.revisionHistory", "spec.parentResource.ignoreStatusChanges",
		"spec.childResources[0].updateStrategy.method", "spec.childResources[0].updateStrategy.statusChecks",
		"spec.hooks.sync.webhook.etag",
		"spec.hooks.preUpdateChild", "spec.hooks.postUpdateChild",
	},
	"pod-name-label": {
		"spec.resources[0].ignoreStatusChanges", "spec.attachments[0].updateStrategy.method",
	},
}

// TestUnsupportedFieldsAreReported: the controllers that set every
// upstream field are accepted by the real API server with strict field
// validation; at start (ReportUnsupported, as Run calls it in both modes)
// each gets FieldsSupported=False naming exactly the fields opzero does not
// implement, and one Warning Event per field; a second start with nothing
// changed writes and sends nothing.
func TestUnsupportedFieldsAreReported(t *testing.T) {
	env := testenv.Get(t)
	ctx := context.Background()
	for _, o := range decodeFile(t, everyField) {
		if err := env.Client.Create(ctx, o, client.FieldValidation("Strict")); err != nil {
			t.Fatalf("%s %s: %v", o.GetKind(), o.GetName(), err)
		}
		t.Cleanup(func() { _ = env.Client.Delete(context.Background(), o) })
	}
	load := func() *Config {
		var ccs v1alpha1.CompositeControllerList
		var dcs v1alpha1.DecoratorControllerList
		if err := env.Client.List(ctx, &ccs); err != nil {
			t.Fatal(err)
		}
		if err := env.Client.List(ctx, &dcs); err != nil {
			t.Fatal(err)
		}
		catsets := apiextv1.CustomResourceDefinition{Spec: apiextv1.CustomResourceDefinitionSpec{Group: "ctl.enisoc.com",
			Names: apiextv1.CustomResourceDefinitionNames{Kind: "CatSet", Plural: "catsets", Singular: "catset"}, Scope: apiextv1.NamespaceScoped,
			Versions: []apiextv1.CustomResourceDefinitionVersion{{Name: "v1"}}}}
		cfg, err := resolve(ccs.Items, dcs.Items, newFileMapper([]apiextv1.CustomResourceDefinition{catsets}))
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	cfg := load()
	rec := record.NewFakeRecorder(100)
	if err := ReportUnsupported(ctx, env.Client, rec, cfg); err != nil {
		t.Fatal(err)
	}
	events := drain(rec)
	for _, c := range cfg.Controllers {
		want := unsupportedInEveryField[c.Name]
		var got []string
		for _, u := range c.Unsupported {
			got = append(got, u.Field)
		}
		sort.Strings(got)
		sort.Strings(want)
		if !equal(got, want) {
			t.Errorf("%s %s: unsupported fields\n got %v\nwant %v", c.Kind, c.Name, got, want)
		}
		obj, _, _ := statusOf(c.Object)
		fresh := obj.DeepCopyObject().(client.Object)
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(obj), fresh); err != nil {
			t.Fatal(err)
		}
		_, conds, _ := statusOf(fresh)
		cond := meta.FindStatusCondition(*conds, SupportedCondition)
		if cond == nil || cond.Status != metav1.ConditionFalse || cond.Reason != "UnsupportedFields" || cond.ObservedGeneration != fresh.GetGeneration() {
			t.Fatalf("%s %s: condition %+v, want %s=False UnsupportedFields", c.Kind, c.Name, cond, SupportedCondition)
		}
		for _, f := range want {
			if !strings.Contains(cond.Message, f+": ") {
				t.Errorf("%s %s: the condition does not name %s: %s", c.Kind, c.Name, f, cond.Message)
			}
			if !containsPrefix(events, "Warning "+UnsupportedFieldReason+" "+f+": ") {
				t.Errorf("%s %s: no Warning Event names %s (events: %v)", c.Kind, c.Name, f, events)
			}
		}
	}
	if n := len(unsupportedInEveryField["catset-controller"]) + len(unsupportedInEveryField["pod-name-label"]); len(events) != n {
		t.Errorf("%d Events, want %d (one per field): %v", len(events), n, events)
	}
	// A restart (or a cold start) with nothing changed: nothing written or sent.
	cfg = load()
	if err := ReportUnsupported(ctx, failingStatus{env.Client}, rec, cfg); err != nil {
		t.Fatalf("the condition was written again: %v", err)
	}
	if again := drain(rec); len(again) != 0 {
		t.Fatalf("Events sent again at a second start: %v", again)
	}
}

// TestSupportedControllerGetsTrue: a controller that sets only what opzero
// implements (the HelloWorld example) is reported as such.
func TestSupportedControllerGetsTrue(t *testing.T) {
	cfg, err := LoadFiles([]string{"../../examples/metacontroller/helloworld", "../../examples/metacontroller/service-per-pod"})
	if err != nil {
		t.Fatal(err)
	}
	if w := cfg.Warnings(); len(w) != 0 {
		t.Fatalf("the examples set fields reported unsupported: %v", w)
	}
}

// failingStatus fails every status write.
type failingStatus struct{ client.Client }

func (f failingStatus) Status() client.SubResourceWriter { return failingWriter{} }

type failingWriter struct{ client.SubResourceWriter }

func (failingWriter) Patch(context.Context, client.Object, client.Patch, ...client.SubResourcePatchOption) error {
	return errors.New("a status write")
}

func drain(rec *record.FakeRecorder) []string {
	var out []string
	for {
		select {
		case e := <-rec.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

func containsPrefix(list []string, p string) bool {
	for _, s := range list {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}

func decodeFile(t *testing.T, path string) []*unstructured.Unstructured {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(b), 4096)
	var out []*unstructured.Unstructured
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); err != nil {
			if errors.Is(err, io.EOF) {
				return out
			}
			t.Fatal(err)
		}
		if len(u.Object) > 0 {
			out = append(out, u)
		}
	}
}
