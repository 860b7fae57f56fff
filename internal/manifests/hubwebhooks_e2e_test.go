package manifests_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opzero/opzero/internal/description"
	"github.com/opzero/opzero/internal/devenv/dev"
	"github.com/opzero/opzero/internal/devenv/devtest"
	"github.com/opzero/opzero/internal/manifests"
	"github.com/opzero/opzero/internal/proc"
	"github.com/opzero/opzero/internal/testkit"
	"github.com/opzero/opzero/testenv"
)

// project is one operator's manifests in a dev session.
type project struct {
	pkg string
	o   manifests.Options
	// edit, if set, changes its objects before they are applied.
	edit func(*unstructured.Unstructured)
}

// manifestsFor generates the projects' manifests for one opzero dev
// session: objects the projects share (the hub, the Wakeup and
// Subscription CRDs) once, sweeps that never tick during the test.
func manifestsFor(t *testing.T, ns string, projects ...project) []*unstructured.Unstructured {
	t.Helper()
	seen := map[string]bool{}
	var out []*unstructured.Unstructured
	for _, pr := range projects {
		pr.o.Namespace = ns
		objs, err := manifests.Build(context.Background(), ".", pr.pkg, pr.o)
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
			k := u.GetAPIVersion() + "/" + u.GetKind() + "/" + u.GetNamespace() + "/" + u.GetName()
			if seen[k] {
				continue
			}
			seen[k] = true
			if u.GetKind() == "PingSource" {
				_ = unstructured.SetNestedField(u.Object, "0 0 1 1 *", "spec", "schedule")
			}
			if u.GetKind() == "Subscription" {
				if sw, ok, _ := unstructured.NestedSlice(u.Object, "spec", "sweeps"); ok {
					for _, s := range sw {
						s.(map[string]any)["schedule"] = "0 0 1 1 *"
					}
					_ = unstructured.SetNestedSlice(u.Object, sw, "spec", "sweeps")
				}
			}
			if pr.edit != nil {
				pr.edit(u)
			}
			out = append(out, u)
		}
	}
	return out
}

// service is the Knative Service name dev plays.
func service(t *testing.T, p *dev.Platform, name string) *dev.Service {
	t.Helper()
	for _, s := range p.Services {
		if s.Name == name {
			return s
		}
	}
	t.Fatalf("dev plays no Knative Service %s", name)
	return nil
}

func atZero(t *testing.T, s *dev.Service) {
	t.Helper()
	testkit.Eventually(t, 90*time.Second, s.Name+" at zero", func(context.Context) (bool, error) {
		return s.Activator.Instances() == 0, nil
	})
}

// widget is a Widget of testdata/widgets.
func widget(ns, name string, size int64) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"size": size}}}
	u.SetAPIVersion("widgets.opzero.dev/v1")
	u.SetKind("Widget")
	u.SetNamespace(ns)
	u.SetName(name)
	return u
}

// webhookTimeout sets timeoutSeconds of every webhook of a configuration.
func webhookTimeout(seconds int64) func(*unstructured.Unstructured) {
	return func(u *unstructured.Unstructured) {
		if u.GetKind() != "MutatingWebhookConfiguration" && u.GetKind() != "ValidatingWebhookConfiguration" {
			return
		}
		ws, _, _ := unstructured.NestedSlice(u.Object, "webhooks")
		for _, w := range ws {
			w.(map[string]any)["timeoutSeconds"] = seconds
		}
		_ = unstructured.SetNestedSlice(u.Object, ws, "webhooks")
	}
}

// TestWebhooksAtZeroThroughTheHub: `opzero manifests` (--source=hub, the
// webhooks through the hub by default) of two adopted projects, gadgets
// and widgets, run by `opzero dev` on a real API server. With gadgets at 0
// instances, a create is defaulted by its webhook and an invalid one is
// refused by its validating webhook: the hub woke it inside each call.
// Forged calls to the hub (a wrong token, another operator's kind on
// gadgets' path) and to the operator directly (no token) are refused,
// admit nothing and wake nothing. Widgets' webhook hangs (its env makes it
// so): while three of its creates wait in it, gadgets' admissions are
// answered; the widgets creates end refused (failurePolicy Fail, the
// hub's reason), none is stored.
func TestWebhooksAtZeroThroughTheHub(t *testing.T) {
	if testing.Short() {
		t.Skip("builds two adopted projects and the hub and runs them through opzero dev on a control plane")
	}
	env := testenv.Get(t)
	ns := env.Namespace(t)
	ctx := context.Background()
	us := manifestsFor(t, ns,
		project{pkg: "./testdata/gadgets", o: manifests.Options{Source: manifests.SourceHub}},
		project{pkg: "./testdata/widgets", o: manifests.Options{Source: manifests.SourceHub, Env: []description.EnvVar{{Name: "WIDGETS_WEBHOOK_HANG", Value: "1"}}},
			edit: webhookTimeout(30)})
	p := devtest.Start(t, ctx, dev.Options{Kubeconfig: env.Kubeconfig, Objects: us, Dir: t.TempDir(), CacheDir: t.TempDir(),
		BuildDir: ".", Namespace: ns, Idle: time.Second})
	gadgets, widgets := service(t, p, "gadgets"), service(t, p, "widgets")
	g := gadgetChecks{t: t, c: env.Client, ns: ns}

	// The webhooks in force: the first write waits for the hub to have
	// read them (and the API server to have loaded them).
	testkit.Eventually(t, 60*time.Second, "gadgets' validating webhook in force", func(ctx context.Context) (bool, error) {
		err := env.Client.Create(ctx, gadget(ns, "probe", "v2", map[string]any{"length": int64(200)}))
		if err == nil {
			_ = env.Client.Delete(ctx, gadget(ns, "probe", "v2", nil))
		}
		return err != nil && strings.Contains(err.Error(), "length over 100 is not allowed"), nil
	})

	atZero(t, gadgets)
	cold := gadgets.Activator.ColdStarts.Load()
	start := time.Now()
	a := gadget(ns, "a", "v2", map[string]any{"length": int64(5)})
	if err := env.Client.Create(ctx, a); err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	if color, _, _ := unstructured.NestedString(a.Object, "spec", "color"); color != "blue" {
		t.Fatalf("spec.color %q after a create at zero, want blue from the defaulting webhook", color)
	}
	if gadgets.Activator.ColdStarts.Load() == cold {
		t.Fatal("the create at zero did not start the operator: the defaulting webhook was not answered by it")
	}
	t.Logf("a create at zero, defaulted through the hub (cold start inside the admission call): %s", took.Round(time.Millisecond))

	atZero(t, gadgets)
	cold = gadgets.Activator.ColdStarts.Load()
	g.refused("too-long")
	if gadgets.Activator.ColdStarts.Load() == cold {
		t.Fatal("the refused create at zero did not start the operator")
	}

	atZero(t, gadgets)
	forgedCallsRefused(t, env, ns, gadgets)

	// Widgets' webhook hangs: three creates wait in it.
	done := make(chan error, 3)
	for i := range 3 {
		go func() { done <- env.Client.Create(context.Background(), widget(ns, fmt.Sprint("hung-", i), 1)) }()
	}
	testkit.Eventually(t, 60*time.Second, "three widgets creates hanging in its webhook", func(context.Context) (bool, error) {
		return widgets.Activator.InFlight() >= 3, nil
	})
	b := gadget(ns, "b", "v2", map[string]any{"length": int64(6)})
	if err := env.Client.Create(ctx, b); err != nil {
		t.Fatalf("a gadgets create while widgets' webhook hangs: %v", err)
	}
	if color, _, _ := unstructured.NestedString(b.Object, "spec", "color"); color != "blue" {
		t.Fatalf("spec.color %q, want blue from gadgets' defaulting webhook while widgets' hangs", color)
	}
	g.refused("too-long-while-widgets-hang")
	select {
	case err := <-done:
		t.Fatalf("a widgets create ended (%v) before gadgets' admissions were answered: the test shows nothing", err)
	default:
	}
	for range 3 {
		err := <-done
		if err == nil || !strings.Contains(err.Error(), "did not answer within") {
			t.Errorf("a widgets create whose webhook hung: %v, want it refused with the hub's reason (failurePolicy Fail)", err)
		}
	}
	for i := range 3 {
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: fmt.Sprint("hung-", i)}, widget(ns, "", 0)); !apierrors.IsNotFound(err) {
			t.Errorf("widget hung-%d: %v, want not found (nothing admitted)", i, err)
		}
	}
	for _, d := range []string{"opzero-hub", "gadgets-webhooks"} {
		nsd := ns
		if d == "opzero-hub" {
			nsd = manifests.HubNamespace
		}
		if pid := p.DeploymentPID(nsd, d); pid != 0 {
			rss, hwm := proc.Mem(pid)
			t.Logf("always on: Deployment %s/%s RSS %.1f MiB (peak %.1f MiB)", nsd, d, rss, hwm)
		}
	}
}

// forgedCallsRefused posts AdmissionReviews that do not come from the API
// server: to the hub with a wrong token, without one, with another
// operator's kind on gadgets' own path (none reaches gadgets), and straight
// to the operator without a token (refused by it). None admits.
func forgedCallsRefused(t *testing.T, env *testenv.Env, ns string, gadgets *dev.Service) {
	t.Helper()
	ctx := context.Background()
	cfg := &admissionregv1.MutatingWebhookConfiguration{}
	if err := env.Client.Get(ctx, types.NamespacedName{Name: "opzero-" + ns + "-gadgets"}, cfg); err != nil {
		t.Fatal(err)
	}
	cc := cfg.Webhooks[0].ClientConfig
	if cc.URL == nil {
		t.Fatalf("opzero dev left clientConfig %+v without a URL", cc)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(cc.CABundle)
	hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	u, err := url.Parse(*cc.URL)
	if err != nil {
		t.Fatal(err)
	}
	parts := strings.SplitN(strings.TrimPrefix(u.Path, "/admission/"), "/", 4) // ns, operator, token, path
	review := func(resource string) string {
		b, _ := json.Marshal(admissionv1.AdmissionReview{TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
			Request: &admissionv1.AdmissionRequest{UID: "forged", Operation: admissionv1.Create, Namespace: ns,
				Resource: metav1.GroupVersionResource{Group: resource + ".opzero.dev", Version: "v2", Resource: resource},
				Object:   runtimeRaw(`{"apiVersion":"gadgets.opzero.dev/v2","kind":"Gadget","metadata":{"name":"forged"},"spec":{"length":500}}`)}})
		return string(b)
	}
	post := func(what, to, body string, code int) {
		t.Helper()
		c := hc
		if !strings.HasPrefix(to, "https:") {
			c = http.DefaultClient
		}
		resp, err := c.Post(to, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != code || strings.Contains(string(b), `"allowed"`) {
			t.Errorf("a forged AdmissionReview, %s: %d %q, want %d and no verdict", what, resp.StatusCode, b, code)
		}
	}
	events, cold := gadgets.Events.Load(), gadgets.Activator.ColdStarts.Load()
	hub := u.Scheme + "://" + u.Host + "/admission/" + parts[0] + "/" + parts[1] + "/"
	post("to the hub with a wrong token", hub+"guessed/"+parts[3], review("gadgets"), 404)
	post("to the hub without the token", hub+parts[3], review("gadgets"), 404)
	post("to the hub, widgets on gadgets' path", u.String(), review("widgets"), 403)
	if gadgets.Events.Load() != events || gadgets.Activator.ColdStarts.Load() != cold {
		t.Errorf("forged calls to the hub reached gadgets (%d requests, %d cold starts), want none",
			gadgets.Events.Load()-events, gadgets.Activator.ColdStarts.Load()-cold)
	}
	// Straight to the Knative Service (it wakes, as on Knative, and
	// refuses: the caller has no token of the operator's audience).
	post("straight to the operator without a token", strings.TrimSuffix(gadgets.URL, "/")+"/"+parts[3], review("gadgets"), 401)
}

func runtimeRaw(s string) runtime.RawExtension { return runtime.RawExtension{Raw: []byte(s)} }
