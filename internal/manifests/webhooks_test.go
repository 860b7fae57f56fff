package manifests_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opzero/opzero/internal/description"
	"github.com/opzero/opzero/internal/manifests"
	"github.com/opzero/opzero/testenv"
)

var (
	gadgetsOnce   sync.Once
	gadgetsTarget *manifests.Target
	gadgetsErr    error
)

// gadgets describes testdata/gadgets once per test binary: an adopted
// project with a defaulting, a validating and a conversion webhook.
func gadgets(t *testing.T) *manifests.Target {
	t.Helper()
	gadgetsOnce.Do(func() {
		gadgetsTarget, gadgetsErr = manifests.Describe(context.Background(), ".", "./testdata/gadgets")
	})
	if gadgetsErr != nil {
		t.Fatal(gadgetsErr)
	}
	return gadgetsTarget
}

// fixedCert is a certificate of gadgets-webhooks in namespace default
// (testdata/webhookcert, made by opzero manifests; valid until 2036), so
// that the golden files stay the same.
func fixedCert(t *testing.T) *manifests.WebhookCert {
	t.Helper()
	read := func(f string) []byte {
		b, err := os.ReadFile(filepath.Join("testdata", "webhookcert", f))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	return &manifests.WebhookCert{CA: read("ca.crt"), Cert: read("tls.crt"), Key: read("tls.key")}
}

// goldenToken is the webhooks' hub path token of the golden files.
const goldenToken = "g0ldentokenfortestsonly"

func generateGadgets(t *testing.T, o manifests.Options) []manifests.Object {
	t.Helper()
	return generateFor(t, gadgets(t), o)
}

// TestWebhooksDescribed: the binary's webhooks as described (the
// serverless run's controllers, the first run's webhooks).
func TestWebhooksDescribed(t *testing.T) {
	w := gadgets(t).Desc.Webhooks
	if w == nil {
		t.Fatal("no webhooks described")
	}
	want := []string{"/mutate-gadgets-opzero-dev-v2-gadget", "/validate-gadgets-opzero-dev-v2-gadget"}
	if !slices.Equal(w.Paths, want) || w.Port != 9443 {
		t.Errorf("paths %v port %d, want %v 9443", w.Paths, w.Port, want)
	}
	if len(w.Conversion) != 1 || w.Conversion[0].Kind != "Gadget" || len(w.Conversion[0].Versions) != 2 {
		t.Errorf("conversion %+v, want Gadget in v1 and v2", w.Conversion)
	}
}

// TestWebhooksGolden compares the manifests of testdata/gadgets with
// testdata/golden/<case>/ (-update rewrites them).
func TestWebhooksGolden(t *testing.T) {
	for name, o := range map[string]manifests.Options{
		"webhooks-serverless":   {WebhookCert: fixedCert(t), WebhookToken: goldenToken},
		"webhooks-always-on":    {Webhooks: manifests.WebhooksAlwaysOn, WebhookCert: fixedCert(t)},
		"webhooks-cert-manager": {WebhookCerts: manifests.CertsCertManager, WebhookToken: goldenToken},
		"webhooks-classic":      {Mode: manifests.Classic, WebhookCert: fixedCert(t)},
	} {
		t.Run(name, func(t *testing.T) {
			files, err := manifests.Files(generateGadgets(t, o))
			if err != nil {
				t.Fatal(err)
			}
			compareGolden(t, name, files)
		})
	}
}

// container is the first container of the pod template of a Deployment
// or Knative Service.
func container(t *testing.T, objs []manifests.Object, kind, name string) map[string]any {
	t.Helper()
	for _, o := range objs {
		if o.Kind() == kind && o.Name() == name {
			cs, _, _ := unstructured.NestedSlice(o.Obj, "spec", "template", "spec", "containers")
			return cs[0].(map[string]any)
		}
	}
	t.Fatalf("no %s %s", kind, name)
	return nil
}

func envPairs(c map[string]any) []string {
	var out []string
	for _, e := range c["env"].([]any) {
		out = append(out, e.(map[string]any)["name"].(string)+"="+fmtValue(e.(map[string]any)["value"]))
	}
	return out
}

func fmtValue(v any) string { s, _ := v.(string); return s }

// TestWebhooksEnv: with --webhooks=always-on the serverless Service leaves
// the webhooks out (ENABLE_WEBHOOKS=false, once even when --env gives it
// too); through the hub (the default) it serves them, so it is not given
// ENABLE_WEBHOOKS=false and --env may not give it. The webhooks Deployment
// (gadgets converts: it serves /convert either way) never gets it.
func TestWebhooksEnv(t *testing.T) {
	for _, env := range [][]description.EnvVar{nil, {{Name: "ENABLE_WEBHOOKS", Value: "false"}, {Name: "LOG_LEVEL", Value: "debug"}}} {
		objs := generateGadgets(t, manifests.Options{Env: env, Webhooks: manifests.WebhooksAlwaysOn})
		svc := envPairs(container(t, objs, "Service", "gadgets"))
		if n := len(slices.DeleteFunc(slices.Clone(svc), func(s string) bool { return s != "ENABLE_WEBHOOKS=false" })); n != 1 {
			t.Errorf("--env %v: the Knative Service's env %v has ENABLE_WEBHOOKS=false %d times, want once", env, svc, n)
		}
		wh := envPairs(container(t, objs, "Deployment", "gadgets-webhooks"))
		if slices.ContainsFunc(wh, func(s string) bool { return strings.HasPrefix(s, "ENABLE_WEBHOOKS=") }) {
			t.Errorf("--env %v: the webhooks Deployment's env %v turns them off", env, wh)
		}
	}
	objs := generateGadgets(t, manifests.Options{})
	for _, kind := range []string{"Service", "Deployment"} {
		name := map[string]string{"Service": "gadgets", "Deployment": "gadgets-webhooks"}[kind]
		if env := envPairs(container(t, objs, kind, name)); slices.ContainsFunc(env, func(s string) bool { return strings.HasPrefix(s, "ENABLE_WEBHOOKS=") }) {
			t.Errorf("--webhooks=hub: the %s's env %v turns the webhooks off", kind, env)
		}
	}
}

// TestWebhooksServerSideDryRun: the webhooks' objects pass a server-side
// apply in dry-run with strict field validation (cert-manager's kinds
// have no CRD there).
func TestWebhooksServerSideDryRun(t *testing.T) {
	env := testenv.Get(t)
	for _, mode := range []string{manifests.Serverless, manifests.Classic} {
		objs := generateGadgets(t, manifests.Options{Mode: mode, Namespace: env.Namespace(t)})
		n := 0
		for _, o := range objs {
			if o.File != manifests.FileWebhooks && o.Kind() != "CustomResourceDefinition" && o.Kind() != "Deployment" {
				continue
			}
			u, err := unstructuredOf(o)
			if err != nil {
				t.Fatal(err)
			}
			if o.Kind() == "CustomResourceDefinition" {
				// TestWebhooksThroughDev may have made it, with opzero dev's url
				// clientConfig: applying a service one too would set both
				ex := &unstructured.Unstructured{}
				ex.SetGroupVersionKind(u.GroupVersionKind())
				if env.Client.Get(context.Background(), client.ObjectKeyFromObject(u), ex) == nil {
					continue
				}
			}
			if err := dryRunApply(context.Background(), env.Client, u); err != nil {
				t.Errorf("%s: %s %s/%s: %v", mode, u.GetKind(), u.GetNamespace(), u.GetName(), err)
			}
			n++
		}
		t.Logf("%s: %d objects applied (dry run)", mode, n)
	}
}

// TestWebhooksBadInput: what does not add up is refused, saying what to do.
func TestWebhooksBadInput(t *testing.T) {
	base, err := manifests.Prepare(context.Background(), gadgets(t), manifests.Options{})
	if err != nil {
		t.Fatal(err)
	}
	clone := func() manifests.Input {
		in := base
		w := *base.Webhooks
		in.Webhooks = &w
		in.Mutating = slices.Clone(base.Mutating)
		in.Validating = slices.Clone(base.Validating)
		in.CRDs = slices.Clone(base.CRDs)
		return in
	}
	for _, tc := range []struct {
		name string
		in   func() manifests.Input
		o    manifests.Options
		want string
	}{
		{"registered, no marker", func() manifests.Input { in := clone(); in.Validating = nil; return in }, manifests.Options{},
			"the binary registers the webhook /validate-gadgets-opzero-dev-v2-gadget (registered in testdata/gadgets/main.go), and no +kubebuilder:webhook marker in its packages names path=/validate-gadgets-opzero-dev-v2-gadget, so its path cannot be discovered"},
		{"marker in a declaration's doc comment", func() manifests.Input {
			in := clone()
			in.Validating = nil // controller-gen ignored it
			in.WebhookSources.Attached = map[string]string{"/validate-gadgets-opzero-dev-v2-gadget": "testdata/gadgets/main.go:40"}
			return in
		}, manifests.Options{}, "the +kubebuilder:webhook marker naming path=/validate-gadgets-opzero-dev-v2-gadget at testdata/gadgets/main.go:40 is in the doc comment of the declaration below it (no blank line between them)"},
		{"marker, not registered", func() manifests.Input {
			in := clone()
			in.Webhooks.Paths = in.Webhooks.Paths[:1]
			return in
		}, manifests.Options{}, "marker vgadget-v2.opzero.dev (in testdata/gadgets/main.go) names path=/validate-gadgets-opzero-dev-v2-gadget, which the binary does not register"},
		{"marker with url", func() manifests.Input {
			in := clone()
			u := "https://example.com/validate"
			in.Validating[0].ClientConfig.Service, in.Validating[0].ClientConfig.URL = nil, &u
			return in
		}, manifests.Options{}, "marker vgadget-v2.opzero.dev (in testdata/gadgets/main.go) has url= and no path"},
		{"env turns them on", clone, manifests.Options{Webhooks: manifests.WebhooksAlwaysOn, Env: []description.EnvVar{{Name: "ENABLE_WEBHOOKS", Value: "true"}}},
			"--env ENABLE_WEBHOOKS=true: the binary registers webhooks, which the serverless Service must leave out with --webhooks=always-on"},
		{"env turns them off through the hub", clone, manifests.Options{Env: []description.EnvVar{{Name: "ENABLE_WEBHOOKS", Value: "false"}}},
			"--env ENABLE_WEBHOOKS=false: the serverless Service serves the binary's webhooks"},
		{"unknown webhooks choice", clone, manifests.Options{Webhooks: "sidecar"}, `--webhooks="sidecar": want hub or always-on`},
		{"hub with classic", clone, manifests.Options{Mode: manifests.Classic, Webhooks: manifests.WebhooksHub}, "--webhooks=hub: a classic operator serves its webhooks itself"},
		{"env turns them off classic", clone, manifests.Options{Mode: manifests.Classic, Env: []description.EnvVar{{Name: "ENABLE_WEBHOOKS", Value: "false"}}},
			"--env ENABLE_WEBHOOKS=false: the classic operator serves the binary's webhooks itself"},
		{"unknown cert source", clone, manifests.Options{WebhookCerts: "vault"}, `--webhook-certs="vault": want secret or cert-manager`},
		{"one version of a converted kind", func() manifests.Input {
			in := clone()
			for i, c := range in.CRDs {
				if c.CRD.Spec.Names.Kind == "Gadget" {
					c.CRD = *c.CRD.DeepCopy()
					c.CRD.Spec.Versions = c.CRD.Spec.Versions[1:]
					in.CRDs[i] = c
				}
			}
			return in
		}, manifests.Options{}, "the binary's /convert webhook converts its kind, but controller-gen found 1 version(s) of it"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := manifests.Generate(tc.in(), tc.o)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one saying %q", err, tc.want)
			}
		})
	}
	t.Run("registered even with ENABLE_WEBHOOKS=false", func(t *testing.T) {
		tg, err := manifests.Describe(context.Background(), ".", "./testdata/stubborn")
		if err != nil {
			t.Fatal(err)
		}
		_, err = manifests.Prepare(context.Background(), tg, manifests.Options{Webhooks: manifests.WebhooksAlwaysOn})
		want := "registers its webhooks (/validate-v1-configmap) even with ENABLE_WEBHOOKS=false, so its serverless Service would refuse to start"
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("error %v, want one saying %q", err, want)
		}
		// classic, the operator serves them itself; through the hub, the
		// serverless Service does: nothing to refuse
		for _, o := range []manifests.Options{{Mode: manifests.Classic}, {}} {
			if _, err := manifests.Prepare(context.Background(), tg, o); err != nil && strings.Contains(err.Error(), "ENABLE_WEBHOOKS") {
				t.Fatalf("%+v: %v", o, err)
			}
		}
	})
}
