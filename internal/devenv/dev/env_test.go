package dev_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/opzero/opzero/internal/testkit"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opzero/opzero/internal/description"
	"github.com/opzero/opzero/internal/devenv/controlplane"
	"github.com/opzero/opzero/internal/devenv/dev"
	"github.com/opzero/opzero/internal/manifests"
	"github.com/opzero/opzero/testenv"
)

// envopManifests is `opzero manifests` of the envop fixture with o, without
// its sources (the test talks to the operator directly).
func envopManifests(t *testing.T, o manifests.Options) []*unstructured.Unstructured {
	t.Helper()
	root, err := controlplane.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	if o.Mode != manifests.Classic {
		o.Source = manifests.SourceKnative // its sources are dropped below: no events here
	}
	objs, err := manifests.Build(context.Background(), root, "./internal/devenv/dev/testdata/envop", o)
	if err != nil {
		t.Fatal(err)
	}
	stream, err := manifests.Stream(objs)
	if err != nil {
		t.Fatal(err)
	}
	all, err := dev.ReadManifests("-", bytes.NewReader(stream))
	if err != nil {
		t.Fatal(err)
	}
	var out []*unstructured.Unstructured
	for _, u := range all {
		if k := u.GetKind(); k != "ApiServerSource" && k != "PingSource" {
			out = append(out, u)
		}
	}
	return out
}

// envMap reads envop's report: a JSON list of NAME=VALUE.
func envMap(t *testing.T, b []byte) map[string]string {
	t.Helper()
	var list []string
	if err := json.Unmarshal(b, &list); err != nil {
		t.Fatalf("envop's report %q: %v", b, err)
	}
	m := map[string]string{}
	for _, kv := range list {
		k, v, _ := strings.Cut(kv, "=")
		m[k] = v
	}
	return m
}

// checkEnv: got has exactly the names of want, with want's values ("*":
// any value).
func checkEnv(t *testing.T, got, want map[string]string) {
	t.Helper()
	var names []string
	for k := range got {
		names = append(names, k)
	}
	sort.Strings(names)
	for k, w := range want {
		if v, ok := got[k]; !ok {
			t.Errorf("%s is not set; the process has %v", k, names)
		} else if w != "*" && v != w {
			t.Errorf("%s=%q, want %q", k, v, w)
		}
	}
	for k, v := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("%s=%q is set but not in the pod template nor set by the platform", k, v)
		}
	}
}

// TestProcessEnvIsThePodTemplates: opzero dev runs the operator (as a
// Knative Service, and as a classic Deployment) with its pod template's env
// resolved from the cluster (a Secret of builder.WithSecretEnv, a ConfigMap
// of --env-from-configmap, fieldRef), plus what Knative injects and
// KUBECONFIG, and nothing of its own environment: GREETING set in dev's
// environment but missing from the manifests is missing in the operator,
// as on a cluster; --env GREETING=... sets it.
func TestProcessEnvIsThePodTemplates(t *testing.T) {
	if testing.Short() {
		t.Skip("needs a control plane")
	}
	env := testenv.Get(t)
	ns := env.Namespace(t)
	ctx := context.Background()
	t.Setenv("GREETING", "from opzero dev's own environment")
	t.Setenv("OPZERO_DEV_ONLY", "x")
	mustCreate(t, env, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "envop", Namespace: ns}, StringData: map[string]string{"token": "s3cret"}})
	mustCreate(t, env, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "envop-settings", Namespace: ns},
		Data: map[string]string{"COLOR": "blue", "1NOT_A_NAME": "skipped, as kubelet does"}})
	settings := []manifests.EnvFrom{{Kind: "ConfigMap", Name: "envop-settings"}}
	serverless := map[string]string{"PATH": "*", "KUBECONFIG": "*", "HTTP_PROXY": "*", "HTTPS_PROXY": "*", "NO_PROXY": "127.0.0.1,localhost,::1,[::1]", "PORT": "*", "OPZERO_ADVERTISE_ADDRESS": "*", "K_SERVICE": "envop", "K_CONFIGURATION": "envop",
		"K_REVISION": "envop-00001", "OPZERO_MAX_SCALE": "3", "POD_NAMESPACE": ns, "API_TOKEN": "s3cret", "COLOR": "blue"}

	for _, tc := range []struct {
		name     string
		env      []description.EnvVar
		greeting bool
	}{{"not in the manifests", nil, false}, {"with --env", []description.EnvVar{{Name: "GREETING", Value: "hi $(COLOR)"}}, true}} {
		t.Run("serverless "+tc.name, func(t *testing.T) {
			objs := envopManifests(t, manifests.Options{Namespace: ns, NoDurableTime: true, Env: tc.env, EnvFrom: settings})
			p := start(t, env, objs, 0)
			resp, err := http.Get(p.Services[0].URL + "/")
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			want := maps.Clone(serverless)
			if tc.greeting {
				want["GREETING"] = "hi blue" // $(COLOR) from envFrom, expanded as kubelet does
			}
			checkEnv(t, envMap(t, b), want)
		})
	}

	t.Run("classic Deployment", func(t *testing.T) {
		reportDir := t.TempDir()
		report := filepath.Join(reportDir, "env.json")
		objs := envopManifests(t, manifests.Options{Mode: manifests.Classic, Namespace: ns, EnvFrom: settings,
			Env:  []description.EnvVar{{Name: "GREETING", Value: "hi"}, {Name: "REPORT_DIR", Value: reportDir}},
			Args: []string{"--report=$(REPORT_DIR)/env.json"}}) // expanded from the env, as kubelet does
		start(t, env, objs, 0)
		var b []byte
		testkit.Eventually(t, 30*time.Second, "envop's report", func(context.Context) (bool, error) {
			var err error
			b, err = os.ReadFile(report)
			return err == nil, nil
		})
		checkEnv(t, envMap(t, b), map[string]string{"PATH": "*", "KUBECONFIG": "*", "HTTP_PROXY": "*", "HTTPS_PROXY": "*", "NO_PROXY": "127.0.0.1,localhost,::1,[::1]", "POD_NAMESPACE": ns, // fieldRef metadata.namespace
			"API_TOKEN": "s3cret", "COLOR": "blue", "GREETING": "hi", "REPORT_DIR": reportDir})
	})

	t.Run("missing Secret", func(t *testing.T) {
		other := env.Namespace(t) // no Secret envop here
		objs := envopManifests(t, manifests.Options{Namespace: other, NoDurableTime: true})
		root, _ := controlplane.RepoRoot()
		p, err := dev.Start(ctx, dev.Options{Kubeconfig: env.Kubeconfig, Objects: objs, Dir: t.TempDir(),
			CacheDir: cacheDir, BuildDir: root, Out: testkit.LogWriter(t)})
		if err == nil {
			p.Stop()
			t.Fatal("started without the Secret the operator's env needs")
		}
		for _, w := range []string{"env API_TOKEN", "Secret " + other + "/envop", "would not start"} {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("error %q does not say %q", err, w)
			}
		}
	})
}

func mustCreate(t *testing.T, env *testenv.Env, obj client.Object) {
	t.Helper()
	if err := env.Client.Create(context.Background(), obj); err != nil {
		t.Fatal(err)
	}
}
