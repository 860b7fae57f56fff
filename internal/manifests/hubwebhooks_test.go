package manifests_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	admissionregv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/opzero/opzero/internal/hub/admission"
	"github.com/opzero/opzero/internal/manifests"
)

var (
	widgetsOnce   sync.Once
	widgetsTarget *manifests.Target
	widgetsErr    error
)

// widgets describes testdata/widgets once per test binary: an adopted
// project with a defaulting and a validating webhook, no conversion.
func widgets(t *testing.T) *manifests.Target {
	t.Helper()
	widgetsOnce.Do(func() {
		widgetsTarget, widgetsErr = manifests.Describe(context.Background(), ".", "./testdata/widgets")
	})
	if widgetsErr != nil {
		t.Fatal(widgetsErr)
	}
	return widgetsTarget
}

// find is the object of kind and name, nil if none.
func find(objs []manifests.Object, kind, name string) *manifests.Object {
	for i, o := range objs {
		if o.Kind() == kind && o.Name() == name {
			return &objs[i]
		}
	}
	return nil
}

func webhooksOf[T any](t *testing.T, o *manifests.Object) []T {
	t.Helper()
	b, err := json.Marshal(o.Obj["webhooks"])
	if err != nil {
		t.Fatal(err)
	}
	var out []T
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestWebhooksThroughTheHub: by default the markers' webhooks call the
// hub's Service at a path of the operator and the install's token, with
// the markers' failurePolicy, sideEffects, rules and matchPolicy, the API
// server's default timeoutSeconds written out where the marker left it
// empty, no caBundle (the hub writes its own), labelled and annotated for
// the hub; the hub is deployed with its admission endpoint and is an
// allowed sender; the Knative Service serves the webhooks. A project
// without conversion has no always-on webhooks Deployment, Service or
// certificate; gadgets keeps them for /convert only.
func TestWebhooksThroughTheHub(t *testing.T) {
	in, err := manifests.Prepare(context.Background(), widgets(t), manifests.Options{})
	if err != nil {
		t.Fatal(err)
	}
	objs, err := manifests.Generate(in, manifests.Options{Namespace: "shop", WebhookToken: "tok3n"})
	if err != nil {
		t.Fatal(err)
	}
	mut := find(objs, "MutatingWebhookConfiguration", "opzero-shop-widgets")
	val := find(objs, "ValidatingWebhookConfiguration", "opzero-shop-widgets")
	if mut == nil || val == nil {
		t.Fatal("no webhook configurations")
	}
	for _, o := range []*manifests.Object{mut, val} {
		u := unstructured.Unstructured{Object: o.Obj}
		if u.GetLabels()[admission.LabelViaHub] != "true" || u.GetAnnotations()[admission.AnnotationOperator] != "shop/widgets" ||
			u.GetAnnotations()[admission.AnnotationAudience] != "opzero:shop:widgets" {
			t.Errorf("%s: labels %v annotations %v, want the hub's label and the operator", o.Kind(), u.GetLabels(), u.GetAnnotations())
		}
	}
	m := webhooksOf[admissionregv1.MutatingWebhook](t, mut)[0]
	marker := in.Mutating[0]
	if cc := m.ClientConfig; cc.Service == nil || cc.Service.Namespace != manifests.HubNamespace || cc.Service.Name != manifests.HubName ||
		*cc.Service.Path != "/admission/shop/widgets/tok3n/mutate-widgets-opzero-dev-v1-widget" || len(cc.CABundle) != 0 || cc.URL != nil {
		t.Errorf("clientConfig %+v (path %v), want the hub's Service at /admission/shop/widgets/tok3n/mutate-widgets-opzero-dev-v1-widget, no caBundle", cc, *cc.Service.Path)
	}
	if *m.FailurePolicy != *marker.FailurePolicy || *m.SideEffects != *marker.SideEffects || m.Name != marker.Name ||
		!slices.Equal(m.AdmissionReviewVersions, marker.AdmissionReviewVersions) || len(m.Rules) != 1 || m.Rules[0].Resources[0] != "widgets" {
		t.Errorf("webhook %+v differs from its marker %+v", m, marker)
	}
	if marker.TimeoutSeconds != nil || m.TimeoutSeconds == nil || *m.TimeoutSeconds != 10 {
		t.Errorf("timeoutSeconds %v (marker %v), want 10, the API server's default, written out", m.TimeoutSeconds, marker.TimeoutSeconds)
	}
	for _, kind := range []string{"Deployment", "Service", "Secret"} {
		if find(objs, kind, "widgets-webhooks") != nil || find(objs, kind, "widgets-webhooks-cert") != nil {
			t.Errorf("a %s of an always-on webhook server, want none", kind)
		}
	}
	dep := find(objs, "Deployment", manifests.HubName)
	if dep == nil || find(objs, "Service", manifests.HubName) == nil {
		t.Fatal("the hub and its Service are not deployed")
	}
	c := container(t, objs, "Deployment", manifests.HubName)
	if !slices.Contains(c["args"].([]any), any("--webhook-addr=:8443")) {
		t.Errorf("the hub's args %v, want --webhook-addr=:8443", c["args"])
	}
	svc := container(t, objs, "Service", "widgets")
	args := strings.Join(anyStrings(svc["args"]), " ")
	if !strings.Contains(args, "system:serviceaccount:opzero-system:opzero-hub") {
		t.Errorf("the operator's args %s: the hub may not send", args)
	}
	if env := envPairs(svc); slices.Contains(env, "ENABLE_WEBHOOKS=false") {
		t.Errorf("the Knative Service's env %v leaves the webhooks out", env)
	}

	g := generateGadgets(t, manifests.Options{})
	if find(g, "Deployment", "gadgets-webhooks") == nil || find(g, "Service", "gadgets-webhooks") == nil {
		t.Error("gadgets converts: its always-on webhooks Deployment and Service must serve /convert")
	}
	for _, o := range g {
		if o.Kind() == "CustomResourceDefinition" && o.Name() == "gadgets.gadgets.opzero.dev" {
			svc, _, _ := unstructured.NestedString(o.Obj, "spec", "conversion", "webhook", "clientConfig", "service", "name")
			if svc != "gadgets-webhooks" {
				t.Errorf("conversion calls %q, want gadgets-webhooks (always on)", svc)
			}
		}
	}
	if mw := webhooksOf[admissionregv1.MutatingWebhook](t, find(g, "MutatingWebhookConfiguration", "opzero-default-gadgets")); mw[0].ClientConfig.Service.Name != manifests.HubName {
		t.Errorf("gadgets' admission webhooks call %s, want the hub", mw[0].ClientConfig.Service.Name)
	}
}

func anyStrings(v any) []string {
	var out []string
	for _, a := range v.([]any) {
		out = append(out, a.(string))
	}
	return out
}

// TestWebhookTimeoutWarning: a marker's timeoutSeconds shorter than a cold
// start's budget is written as is, with a warning saying what to do.
func TestWebhookTimeoutWarning(t *testing.T) {
	in, err := manifests.Prepare(context.Background(), widgets(t), manifests.Options{})
	if err != nil {
		t.Fatal(err)
	}
	two := int32(2)
	in.Validating = slices.Clone(in.Validating)
	in.Validating[0].TimeoutSeconds = &two
	var warn strings.Builder
	objs, err := manifests.Generate(in, manifests.Options{Warnings: &warn})
	if err != nil {
		t.Fatal(err)
	}
	if v := webhooksOf[admissionregv1.ValidatingWebhook](t, find(objs, "ValidatingWebhookConfiguration", "opzero-default-widgets")); *v[0].TimeoutSeconds != 2 {
		t.Errorf("timeoutSeconds %d, want the marker's 2", *v[0].TimeoutSeconds)
	}
	if !strings.Contains(warn.String(), "webhook vwidget-v1.opzero.dev has timeoutSeconds=2") || !strings.Contains(warn.String(), "--webhooks=always-on") {
		t.Errorf("warnings %q, want one about vwidget-v1.opzero.dev's timeoutSeconds=2", warn.String())
	}
}

// TestWebhookTokenKept: regenerating into a folder keeps the token of its
// webhook configurations' paths.
func TestWebhookTokenKept(t *testing.T) {
	dir := t.TempDir()
	if tok, err := manifests.ReadWebhookToken(dir); err != nil || tok != "" {
		t.Fatalf("an empty folder: %q %v", tok, err)
	}
	in, err := manifests.Prepare(context.Background(), widgets(t), manifests.Options{})
	if err != nil {
		t.Fatal(err)
	}
	objs, err := manifests.Generate(in, manifests.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := manifests.WriteDir(dir, objs); err != nil {
		t.Fatal(err)
	}
	tok, err := manifests.ReadWebhookToken(dir)
	if err != nil || len(tok) < 20 {
		t.Fatalf("token %q %v, want the random one written", tok, err)
	}
	b, _ := os.ReadFile(filepath.Join(dir, manifests.FileWebhooks))
	if !strings.Contains(string(b), "/admission/default/widgets/"+tok+"/") {
		t.Fatalf("%s does not hold token %s", manifests.FileWebhooks, tok)
	}
}

// TestWebhookBadInputNamesTheFile: markers whose webhooks the binary does
// not register, and a kind in two versions with other schemas and no
// conversion, are refused naming the file to fix; nothing is generated.
func TestWebhookBadInputNamesTheFile(t *testing.T) {
	for _, tc := range []struct {
		env  string
		want []string
	}{
		{"WIDGETS_NO_WEBHOOKS", []string{"testdata/widgets/main.go: path=/mutate-widgets-opzero-dev-v1-widget", "registered none", "nothing written"}},
		{"WIDGETS_OLD_VERSION", []string{"CRD widgets.widgets.opzero.dev has versions whose schemas differ", "v1 in testdata/widgets/api/v1/types.go",
			"v1alpha1 in testdata/widgets/api/v1alpha1/types.go", "converts none of them", "nothing written"}},
	} {
		t.Run(tc.env, func(t *testing.T) {
			t.Setenv(tc.env, "1") // the described binary inherits it
			objs, err := manifests.Build(context.Background(), ".", "./testdata/widgets", manifests.Options{})
			if err == nil || objs != nil {
				t.Fatalf("generated %d objects, error %v; want none and an error", len(objs), err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
}
