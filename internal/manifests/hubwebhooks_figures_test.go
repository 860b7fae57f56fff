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
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opzero/opzero/internal/devenv/dev"
	"github.com/opzero/opzero/internal/devenv/devtest"
	"github.com/opzero/opzero/internal/manifests"
	"github.com/opzero/opzero/internal/proc"
	"github.com/opzero/opzero/internal/testkit"
	"github.com/opzero/opzero/testenv"
)

// benchRuns is how many admissions and events at zero the figures take.
const benchRuns = 10

// TestWebhooksAtZeroFigures measures issue 38's figures in one run, on
// testdata/widgets (a defaulting and a validating webhook) through opzero
// dev (--source=hub), printing a table:
//
//   - admission at zero: a Widget create with the operator at 0 instances,
//     end to end (the API server calls the hub, which wakes the operator),
//     and that call's time at the activator, against the operator's own
//     event at zero (its owned ConfigMap deleted: the hub's delivery, a cold
//     start at the activator), benchRuns of each, p50 and max;
//   - a warm admission (creates while the operator runs) through the hub,
//     next to the same creates with --webhooks=always-on;
//   - what runs always at zero: the hub (its admission endpoint serving
//     the webhooks), against the --webhooks=always-on wiring (hub and the
//     webhooks Deployment) and the same project classic (controller-runtime).
//
// Run it with
//
//	OPZERO_BENCH_WEBHOOKS=1 go test -count=1 -run TestWebhooksAtZeroFigures -v ./internal/manifests/
func TestWebhooksAtZeroFigures(t *testing.T) {
	if os.Getenv("OPZERO_BENCH_WEBHOOKS") == "" {
		t.Skip("a measurement (minutes): OPZERO_BENCH_WEBHOOKS=1 runs it")
	}
	env := testenv.Get(t)
	cache := t.TempDir() // one build of each binary for the three sessions
	var rep []string
	say := func(format string, args ...any) { rep = append(rep, fmt.Sprintf(format, args...)) }

	// 1. Through the hub (the default).
	var directHub, directAO []time.Duration
	ns := env.Namespace(t)
	hubRSS, admitE2E, admitAct, eventAct, eventE2E, warmHub := func() (float64, []time.Duration, []time.Duration, []time.Duration, []time.Duration, []time.Duration) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		p := startWidgets(t, ctx, env, ns, cache, manifests.Options{Source: manifests.SourceHub})
		w := service(t, p, "widgets")
		inForce(t, env, ns)
		var admitE2E, admitAct, eventAct, eventE2E []time.Duration
		for i := range benchRuns {
			atZero(t, w)
			n := len(w.Deliveries())
			start := time.Now()
			x := widget(ns, fmt.Sprint("w-", i), 1)
			if err := env.Client.Create(context.Background(), x); err != nil {
				t.Fatal(err)
			}
			admitE2E = append(admitE2E, time.Since(start))
			if c, _, _ := unstructured.NestedString(x.Object, "spec", "color"); c != "green" {
				t.Fatalf("color %q, want green: not defaulted", c)
			}
			admitAct = append(admitAct, firstCold(t, w, n, true))
			waitConfigMap(t, env, ns, fmt.Sprint("w-", i, "-widget"))

			cm := &corev1.ConfigMap{}
			if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: fmt.Sprint("w-", i, "-widget")}, cm); err != nil {
				t.Fatal(err)
			}
			atZero(t, w)
			n = len(w.Deliveries())
			start = time.Now()
			if err := env.Client.Delete(context.Background(), cm); err != nil {
				t.Fatal(err)
			}
			waitConfigMapRecreated(t, env, ns, cm.Name, cm)
			eventE2E = append(eventE2E, time.Since(start))
			eventAct = append(eventAct, firstCold(t, w, n, false))
		}
		warm := warmAdmissions(t, env, ns, "hub")
		directHub = directAdmissions(t, env, ns)
		atZero(t, w)
		time.Sleep(75 * time.Second) // the hub gives back what the work left resident (internal/trim, each minute it worked)
		rss, _ := proc.Mem(p.DeploymentPID(manifests.HubNamespace, manifests.HubName))
		return rss, admitE2E, admitAct, eventAct, eventE2E, warm
	}()

	// 2. --webhooks=always-on.
	ns2 := env.Namespace(t)
	aoRSS, warmAO := func() (float64, []time.Duration) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		p := startWidgets(t, ctx, env, ns2, cache, manifests.Options{Source: manifests.SourceHub, Webhooks: manifests.WebhooksAlwaysOn})
		inForce(t, env, ns2)
		warm := warmAdmissions(t, env, ns2, "always-on")
		directAO = directAdmissions(t, env, ns2)
		atZero(t, service(t, p, "widgets"))
		time.Sleep(75 * time.Second)
		hub, _ := proc.Mem(p.DeploymentPID(manifests.HubNamespace, manifests.HubName))
		wh, _ := proc.Mem(p.DeploymentPID(ns2, "widgets-webhooks"))
		say("| --webhooks=always-on at zero: hub %.1f MiB + webhooks Deployment %.1f MiB | %.1f MiB |", hub, wh, hub+wh)
		return hub + wh, warm
	}()

	// 3. Classic: controller-runtime's manager serves controller and webhooks.
	ns3 := env.Namespace(t)
	classicRSS := func() float64 {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		p := startWidgets(t, ctx, env, ns3, cache, manifests.Options{Mode: manifests.Classic})
		inForce(t, env, ns3)
		_ = warmAdmissions(t, env, ns3, "classic")
		time.Sleep(30 * time.Second)
		rss, _ := proc.Mem(p.DeploymentPID(ns3, "widgets"))
		return rss
	}()

	dep := &appsv1.Deployment{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: manifests.HubNamespace, Name: manifests.HubName}, dep); err != nil {
		t.Fatal(err)
	}
	hubReplicas := int32(1)
	if dep.Spec.Replicas != nil {
		hubReplicas = *dep.Spec.Replicas
	}

	// 4. Conversion: how often the API server calls gadgets' /convert.
	conv := conversionCalls(t, env, cache)

	p50 := func(ds []time.Duration) time.Duration { return pct(ds, 50) }
	ms := func(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000) }
	out := []string{
		"| figure | value |", "|---|---|",
		fmt.Sprintf("| always on at zero, through the hub (the hub alone) | %.1f MiB |", hubRSS),
		fmt.Sprintf("| the same project classic (controller-runtime, serving its webhooks) | %.1f MiB |", classicRSS),
		fmt.Sprintf("| **ratio hub / classic** (goal <= 0.3x) | **%.2fx** |", hubRSS/classicRSS),
		fmt.Sprintf("| the hub as deployed: %d replicas (opzero dev runs one) / classic | %.2fx |", hubReplicas, float64(hubReplicas)*hubRSS/classicRSS),
	}
	out = append(out, rep...)
	out = append(out,
		fmt.Sprintf("| --webhooks=always-on / classic | %.2fx |", aoRSS/classicRSS),
		fmt.Sprintf("| admission at zero, end to end (create -> answered), %d runs: p50 / max | %s / %s |", benchRuns, ms(p50(admitE2E)), ms(slices.Max(admitE2E))),
		fmt.Sprintf("| admission at zero, at the activator (cold start + webhook): p50 / max | %s / %s |", ms(p50(admitAct)), ms(slices.Max(admitAct))),
		fmt.Sprintf("| the operator's event at zero, at the activator (cold start + reconcile): p50 / max | %s / %s |", ms(p50(eventAct)), ms(slices.Max(eventAct))),
		fmt.Sprintf("| the operator's event at zero, end to end (delete -> re-made): p50 | %s |", ms(p50(eventE2E))),
		fmt.Sprintf("| **ratio admission end to end p50 / event at zero p50** (goal <= 1.5x) | **%.2fx** |", float64(p50(admitE2E))/float64(p50(eventAct))),
		fmt.Sprintf("| max admission at zero vs timeoutSeconds (10 s) | %s < 10 s: %v |", ms(slices.Max(admitE2E)), slices.Max(admitE2E) < 10*time.Second),
		fmt.Sprintf("| warm admission (create, both webhooks), through the hub: p50 | %s |", ms(p50(warmHub))),
		fmt.Sprintf("| warm admission, --webhooks=always-on: p50 | %s |", ms(p50(warmAO))),
		fmt.Sprintf("| warm webhook call alone (an AdmissionReview POSTed as the API server does, 50 times), hub -> operator: p50 / p90 | %s / %s |", ms(p50(directHub)), ms(pct(directHub, 90))),
		fmt.Sprintf("| the same, to the always-on webhook server: p50 / p90 | %s / %s |", ms(p50(directAO)), ms(pct(directAO, 90))),
	)
	out = append(out, conv...)
	t.Logf("issue 38 figures (load %s):\n%s\nruns: admission e2e %v\nadmission at activator %v\nevent at activator %v",
		loadAvg(), strings.Join(out, "\n"), admitE2E, admitAct, eventAct)
}

func startWidgets(t *testing.T, ctx context.Context, env *testenv.Env, ns, cache string, o manifests.Options) *dev.Platform {
	t.Helper()
	us := manifestsFor(t, ns, project{pkg: "./testdata/widgets", o: o})
	return devtest.Start(t, ctx, dev.Options{Kubeconfig: env.Kubeconfig, Objects: us, Dir: t.TempDir(), CacheDir: cache,
		BuildDir: ".", Namespace: ns, Idle: time.Second})
}

// inForce waits until widgets' validating webhook refuses.
func inForce(t *testing.T, env *testenv.Env, ns string) {
	t.Helper()
	testkit.Eventually(t, 60*time.Second, "widgets' validating webhook in force", func(ctx context.Context) (bool, error) {
		err := env.Client.Create(ctx, widget(ns, "probe", 500))
		if err == nil {
			_ = env.Client.Delete(ctx, widget(ns, "probe", 0))
		}
		return err != nil && strings.Contains(err.Error(), "size over 100 is not allowed"), nil
	})
}

// firstCold is the time at the activator of the first cold delivery after
// the n-th: an admission call (no CloudEvent type) or an event.
func firstCold(t *testing.T, s *dev.Service, n int, admission bool) time.Duration {
	t.Helper()
	var got time.Duration
	testkit.Eventually(t, 30*time.Second, "the cold delivery recorded", func(context.Context) (bool, error) {
		for _, d := range s.Deliveries()[n:] {
			if d.Cold && (d.Type == "") == admission {
				got = d.Took
				return true, nil
			}
		}
		return false, nil
	})
	return got
}

func waitConfigMap(t *testing.T, env *testenv.Env, ns, name string) {
	t.Helper()
	testkit.Eventually(t, 60*time.Second, "ConfigMap "+name, func(ctx context.Context) (bool, error) {
		err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &corev1.ConfigMap{})
		return err == nil, client.IgnoreNotFound(err)
	})
}

// waitConfigMapRecreated waits for a ConfigMap of name other than old.
func waitConfigMapRecreated(t *testing.T, env *testenv.Env, ns, name string, old *corev1.ConfigMap) {
	t.Helper()
	testkit.Eventually(t, 60*time.Second, "ConfigMap "+name+" made again", func(ctx context.Context) (bool, error) {
		cm := &corev1.ConfigMap{}
		err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, cm)
		return err == nil && cm.UID != old.UID, client.IgnoreNotFound(err)
	})
}

// warmAdmissions times 20 Widget creates after one that wakes the operator.
func warmAdmissions(t *testing.T, env *testenv.Env, ns, tag string) []time.Duration {
	t.Helper()
	if err := env.Client.Create(context.Background(), widget(ns, tag+"-wake", 1)); err != nil {
		t.Fatal(err)
	}
	var out []time.Duration
	for i := range 20 {
		start := time.Now()
		if err := env.Client.Create(context.Background(), widget(ns, fmt.Sprint(tag, "-warm-", i), 1)); err != nil {
			t.Fatal(err)
		}
		out = append(out, time.Since(start))
	}
	return out
}

func pct(ds []time.Duration, p int) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[(len(s)-1)*p/100]
}

func loadAvg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	return strings.TrimSpace(string(b))
}

// conversionCalls counts the API server's calls of gadgets' conversion
// webhook (apiserver_conversion_webhook_request_total): with 10 Gadgets
// stored (v2, the storage version) and the hub, kube-controller-manager
// and the operator reading v2, over a minute idle; for one list at v1;
// and for 20 updates at v2 while one client watches v1. Each call would
// wake an operator at zero, on the read path of every client of v1.
func conversionCalls(t *testing.T, env *testenv.Env, cache string) []string {
	t.Helper()
	ns := env.Namespace(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	us := manifestsFor(t, ns, project{pkg: "./testdata/gadgets", o: manifests.Options{Source: manifests.SourceHub}})
	devtest.Start(t, ctx, dev.Options{Kubeconfig: env.Kubeconfig, Objects: us, Dir: t.TempDir(), CacheDir: cache, BuildDir: ".", Namespace: ns, Idle: time.Second})
	testkit.Eventually(t, 60*time.Second, "gadgets' webhooks in force", func(ctx context.Context) (bool, error) {
		err := env.Client.Create(ctx, gadget(ns, "probe", "v2", map[string]any{"length": int64(200)}))
		return err != nil && strings.Contains(err.Error(), "length over 100"), nil
	})
	for i := range 10 {
		if err := env.Client.Create(ctx, gadget(ns, fmt.Sprint("g-", i), "v2", map[string]any{"length": int64(i)})); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(5 * time.Second)
	c0 := conversionRequests(t, env)
	var windows []string
	last := c0
	for range 6 {
		time.Sleep(10 * time.Second)
		c := conversionRequests(t, env)
		windows = append(windows, fmt.Sprint(c-last))
		last = c
	}
	c1 := conversionRequests(t, env)
	for i := range 20 { // writes at v2, no client of v1
		g := gadget(ns, "g-1", "v2", nil)
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(g), g); err != nil {
			t.Fatal(err)
		}
		_ = unstructured.SetNestedField(g.Object, int64(i+1), "spec", "length")
		if err := env.Client.Update(ctx, g); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(3 * time.Second)
	c1w := conversionRequests(t, env)
	c1 = c1w
	list := &unstructured.UnstructuredList{}
	list.SetAPIVersion("gadgets.opzero.dev/v1")
	list.SetKind("GadgetList")
	if err := env.Client.List(ctx, list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	c2 := conversionRequests(t, env)
	dyn, err := dynamicFor(env)
	if err != nil {
		t.Fatal(err)
	}
	w, err := dyn.Resource(gadgetsV1).Namespace(ns).Watch(ctx, metav1ListOptions())
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	go func() {
		for range w.ResultChan() { // a client of v1, reading what it is sent
		}
	}()
	for i := range 20 {
		g := gadget(ns, "g-0", "v2", nil)
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(g), g); err != nil {
			t.Fatal(err)
		}
		_ = unstructured.SetNestedField(g.Object, int64(i+1), "spec", "length")
		if err := env.Client.Update(ctx, g); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(3 * time.Second)
	c3 := conversionRequests(t, env)
	return []string{
		fmt.Sprintf("| conversion calls, 10 Gadgets stored at v2, a minute idle (hub, kube-controller-manager, operator read v2; per 10 s: %s) | %.0f |", strings.Join(windows, ", "), last-c0),
		fmt.Sprintf("| conversion calls for 20 updates at v2, no client of v1 | %.0f |", c1w-last),
		fmt.Sprintf("| conversion calls for one list of the 10 at v1 | %.0f |", c2-c1),
		fmt.Sprintf("| conversion calls for 20 updates at v2 while one client watches v1 | %.0f |", c3-c2),
	}
}

var gadgetsV1 = schema.GroupVersionResource{Group: "gadgets.opzero.dev", Version: "v1", Resource: "gadgets"}

func metav1ListOptions() metav1.ListOptions { return metav1.ListOptions{} }

func dynamicFor(env *testenv.Env) (dynamic.Interface, error) { return dynamic.NewForConfig(env.Config) }

// conversionRequests is the API server's count of conversion webhook
// calls (every result).
func conversionRequests(t *testing.T, env *testenv.Env) float64 {
	t.Helper()
	hc, err := rest.HTTPClientFor(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := hc.Get(strings.TrimSuffix(env.Config.Host, "/") + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	total := 0.0
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "apiserver_conversion_webhook_request_total{") {
			f := strings.Fields(line)
			v, _ := strconv.ParseFloat(f[len(f)-1], 64)
			total += v
		}
	}
	return total
}

// TestConversionCallsFigures is the conversion part of
// TestWebhooksAtZeroFigures alone:
//
//	OPZERO_BENCH_WEBHOOKS=1 go test -count=1 -run TestConversionCallsFigures -v ./internal/manifests/
func TestConversionCallsFigures(t *testing.T) {
	if os.Getenv("OPZERO_BENCH_WEBHOOKS") == "" {
		t.Skip("a measurement (minutes): OPZERO_BENCH_WEBHOOKS=1 runs it")
	}
	t.Logf("conversion webhook calls (load %s):\n%s", loadAvg(), strings.Join(conversionCalls(t, testenv.Get(t), t.TempDir()), "\n"))
}

// directAdmissions POSTs 50 AdmissionReviews of a Widget create to the URL
// the API server calls for widgets' mutating webhook (the hub, or the
// always-on server; opzero dev wrote the URL and caBundle) and times each.
func directAdmissions(t *testing.T, env *testenv.Env, ns string) []time.Duration {
	t.Helper()
	cfg := &admissionregv1.MutatingWebhookConfiguration{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Name: "opzero-" + ns + "-widgets"}, cfg); err != nil {
		t.Fatal(err)
	}
	cc := cfg.Webhooks[0].ClientConfig
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(cc.CABundle)
	hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	var out []time.Duration
	for i := range 50 {
		b, _ := json.Marshal(admissionv1.AdmissionReview{TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
			Request: &admissionv1.AdmissionRequest{UID: types.UID(fmt.Sprint("direct-", i)), Operation: admissionv1.Create, Namespace: ns, Name: "direct",
				Kind:     metav1.GroupVersionKind{Group: "widgets.opzero.dev", Version: "v1", Kind: "Widget"},
				Resource: metav1.GroupVersionResource{Group: "widgets.opzero.dev", Version: "v1", Resource: "widgets"},
				Object:   runtimeRaw(`{"apiVersion":"widgets.opzero.dev/v1","kind":"Widget","metadata":{"name":"direct","namespace":"` + ns + `"},"spec":{"size":1}}`)}})
		start := time.Now()
		resp, err := hc.Post(*cc.URL, "application/json", bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		out = append(out, time.Since(start))
		if resp.StatusCode != 200 || !strings.Contains(string(body), `"allowed":true`) {
			t.Fatalf("a direct AdmissionReview: %d %s", resp.StatusCode, body)
		}
	}
	return out
}
