package manifests_test

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opzero/opzero/internal/devenv/dev"
	"github.com/opzero/opzero/internal/devenv/devtest"
	"github.com/opzero/opzero/internal/manifests"
	"github.com/opzero/opzero/internal/proc"
	"github.com/opzero/opzero/internal/testkit"
	"github.com/opzero/opzero/testenv"
)

// gadget is a Gadget of testdata/gadgets in apiVersion version.
func gadget(ns, name, version string, spec map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"spec": spec}}
	u.SetAPIVersion("gadgets.opzero.dev/" + version)
	u.SetKind("Gadget")
	u.SetNamespace(ns)
	u.SetName(name)
	return u
}

// TestWebhooksThroughDev: `opzero manifests ./testdata/gadgets | opzero dev
// -f -` on an adopted project with a defaulting, a validating and a
// conversion webhook (v1 spec.size, v2 spec.length, the hub). Serverless
// (the default --source=knative and --webhooks=hub), the API server calls
// the opzero hub dev runs for the admission webhooks, which wakes the
// operator, and the --mode=webhooks process dev runs from the generated
// Deployment for /convert: a create the validating webhook refuses is
// refused, the defaulting webhook's color is set, an object written as v1
// reads as v2 and back; the controller runs serverless and scales to zero
// while the webhooks stay served; the conversion process's memory is
// logged. Classic (--mode=classic), the operator's Deployment serves them.
func TestWebhooksThroughDev(t *testing.T) {
	if testing.Short() {
		t.Skip("builds an adopted project and runs it through opzero dev on a control plane")
	}
	env := testenv.Get(t)
	for _, mode := range []string{manifests.Serverless, manifests.Classic} {
		t.Run(mode, func(t *testing.T) {
			ns := env.Namespace(t)
			ctx := context.Background()
			objs, err := manifests.Build(ctx, ".", "./testdata/gadgets", manifests.Options{Namespace: ns, Mode: mode, Source: manifests.SourceKnative})
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
			for _, o := range us {
				if o.GetKind() == "PingSource" {
					_ = unstructured.SetNestedField(o.Object, "0 0 1 1 *", "spec", "schedule") // no sweep tick during the test
				}
			}
			p := devtest.Start(t, ctx, dev.Options{Kubeconfig: env.Kubeconfig, Objects: us, Dir: t.TempDir(), CacheDir: t.TempDir(),
				BuildDir: ".", Namespace: ns, Idle: time.Second})
			g := gadgetChecks{t: t, c: env.Client, ns: ns}
			g.refused("too-long")
			a := gadget(ns, "a", "v2", map[string]any{"length": int64(5)})
			if err := g.c.Create(ctx, a); err != nil {
				t.Fatal(err)
			}
			if color, _, _ := unstructured.NestedString(a.Object, "spec", "color"); color != "blue" {
				t.Fatalf("spec.color %q after create, want blue from the defaulting webhook", color)
			}
			// Written as v1 (spec.size), read as v2 (spec.length), and back.
			if err := g.c.Create(ctx, gadget(ns, "b", "v1", map[string]any{"size": int64(7)})); err != nil {
				t.Fatal(err)
			}
			g.converted("b", "v2", "length", 7)
			g.converted("a", "v1", "size", 5)
			for _, name := range []string{"a", "b"} {
				testkit.Eventually(t, 60*time.Second, "the ConfigMap of Gadget "+name, func(ctx context.Context) (bool, error) {
					err := g.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name + "-gadget"}, &corev1.ConfigMap{})
					return err == nil, client.IgnoreNotFound(err)
				})
			}
			server := "gadgets-webhooks"
			if mode == manifests.Classic {
				server = "gadgets"
			} else {
				testkit.Eventually(t, 60*time.Second, "the operator scaled to zero", func(context.Context) (bool, error) {
					return p.Services[0].Activator.Instances() == 0, nil
				})
			}
			pid := p.DeploymentPID(ns, server)
			if pid == 0 {
				t.Fatalf("no process runs the %s Deployment", server)
			}
			// Serverless, the operator is at zero: the webhooks still answer.
			g.refused("too-long-later")
			g.converted("b", "v1", "size", 7)
			rss, hwm := proc.Mem(pid)
			t.Logf("%s: the process serving the webhooks (Deployment %s, always on, pid %d): RSS %.1f MiB (peak %.1f MiB)", mode, server, pid, rss, hwm)
		})
	}
}

// gadgetChecks asks the API server what the webhooks decide.
type gadgetChecks struct {
	t  *testing.T
	c  client.Client
	ns string
}

// refused creates a Gadget the validating webhook refuses.
func (g gadgetChecks) refused(name string) {
	g.t.Helper()
	err := g.c.Create(context.Background(), gadget(g.ns, name, "v2", map[string]any{"length": int64(200)}))
	if err == nil || !strings.Contains(err.Error(), "length over 100 is not allowed") {
		g.t.Fatalf("creating a Gadget of length 200: %v, want the validating webhook's refusal", err)
	}
}

// converted reads Gadget name as version and checks spec.field.
func (g gadgetChecks) converted(name, version, field string, want int64) {
	g.t.Helper()
	u := gadget(g.ns, name, version, nil)
	if err := g.c.Get(context.Background(), client.ObjectKeyFromObject(u), u); err != nil {
		g.t.Fatalf("reading Gadget %s as %s: %v", name, version, err)
	}
	if got, _, _ := unstructured.NestedInt64(u.Object, "spec", field); got != want {
		g.t.Fatalf("Gadget %s read as %s: spec.%s = %d, want %d (converted by the webhook): %v", name, version, field, got, want, u.Object["spec"])
	}
}
