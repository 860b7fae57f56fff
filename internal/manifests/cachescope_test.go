package manifests_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/opzero/opzero/internal/manifests"
)

// TestCacheScopeReachesTheHub: an adopted project whose manager cache is
// restricted (cache.Options: two DefaultNamespaces, its ConfigMaps by a
// label selector, Secrets by a field selector) gets a Subscription that
// asks the hub for no more than that cache holds: each kind in those two
// namespaces, the ConfigMaps by the same selector; the field selector,
// which the hub cannot apply, is warned of by name.
func TestCacheScopeReachesTheHub(t *testing.T) {
	t.Setenv("WIDGETS_CACHE_SCOPE", "1")
	var warnings bytes.Buffer
	objs, err := manifests.Build(context.Background(), ".", "./testdata/widgets", manifests.Options{Namespace: "widgets", Warnings: &warnings})
	if err != nil {
		t.Fatal(err)
	}
	var sub *manifests.Object
	for i, o := range objs {
		if o.Kind() == "Subscription" {
			sub = &objs[i]
		}
	}
	if sub == nil {
		t.Fatal("no Subscription written (the hub is the default wiring)")
	}
	got := map[string]string{}
	for _, r := range sub.Obj["spec"].(map[string]any)["resources"].([]any) {
		m := r.(map[string]any)
		got[m["kind"].(string)] = fmt.Sprintf("namespaces %v, labelSelector %v", m["namespaces"], m["labelSelector"])
	}
	want := map[string]string{
		"Widget":    "namespaces [team-a team-b], labelSelector <nil>",
		"ConfigMap": "namespaces [team-a team-b], labelSelector app.kubernetes.io/managed-by=widgets",
	}
	for k, w := range want {
		if got[k] != w {
			t.Errorf("the Subscription's %s: %s; want %s (as the project's cache holds it)", k, got[k], w)
		}
	}
	if w := warnings.String(); !strings.Contains(w, `Secret: the field selector "metadata.name=widgets-token"`) {
		t.Errorf("warnings:\n%s\nwant one naming the Secrets' field selector the hub cannot apply", w)
	}
}

// TestUnrestrictedCacheAsksForAll: the same project with its cache as
// kubebuilder writes it asks the hub for every namespace.
func TestUnrestrictedCacheAsksForAll(t *testing.T) {
	objs, err := manifests.Generate(mustPrepare(t), manifests.Options{Namespace: "widgets"})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		if o.Kind() != "Subscription" {
			continue
		}
		for _, r := range o.Obj["spec"].(map[string]any)["resources"].([]any) {
			if m := r.(map[string]any); m["namespaces"] != nil {
				t.Errorf("%s restricted to %v with no cache option saying so", m["kind"], m["namespaces"])
			}
		}
		return
	}
	t.Fatal("no Subscription written")
}

func mustPrepare(t *testing.T) manifests.Input {
	t.Helper()
	in, err := manifests.Prepare(context.Background(), widgets(t), manifests.Options{Namespace: "widgets"})
	if err != nil {
		t.Fatal(err)
	}
	return in
}

// TestPredicatesReachTheHub: an adopted project whose For has
// GenerationChangedPredicate gets a Subscription whose Widgets are sent
// only for a new generation (updatedWhen), so the echo of its own status
// write does not wake it; its ConfigMaps, filtered by an Or of a label
// change and a function of its own, get no such filter (the function may
// pass anything), and the function is warned of by name; its Secrets,
// filtered by a predicate.Funcs whose only function, UpdateFunc, returns
// false, get the events that drop their updates in the hub (read from the
// source), with a note naming the function, not the warning.
func TestPredicatesReachTheHub(t *testing.T) {
	t.Setenv("WIDGETS_PREDICATES", "1")
	var warnings bytes.Buffer
	objs, err := manifests.Build(context.Background(), ".", "./testdata/widgets", manifests.Options{Namespace: "widgets", Warnings: &warnings})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, o := range objs {
		if o.Kind() != "Subscription" {
			continue
		}
		for _, r := range o.Obj["spec"].(map[string]any)["resources"].([]any) {
			m := r.(map[string]any)
			got[m["kind"].(string)] = fmt.Sprint(m["updatedWhen"])
			got[m["kind"].(string)+" events"] = fmt.Sprint(m["events"])
		}
	}
	if got["Widget"] != "[generation]" || got["ConfigMap"] != "<nil>" {
		t.Errorf("updatedWhen of Widget %s, ConfigMap %s; want [generation] and none", got["Widget"], got["ConfigMap"])
	}
	if w := warnings.String(); !strings.Contains(w, "ConfigMap: its predicate predicate.Funcs") || strings.Contains(w, "Widget: its predicate") {
		t.Errorf("warnings:\n%s\nwant one naming the ConfigMaps' predicate function, none for Widgets", w)
	}
	if w := warnings.String(); !strings.Contains(w, "note: widgets: Secret: its predicates drop every change of type updated (the functions at testdata/widgets/controller/controller.go:57 return false), "+
		"so the hub drops them before the wake: only created, deleted wakes it") || strings.Contains(w, "Secret: its predicate predicate.Funcs") {
		t.Errorf("warnings:\n%s\nwant a note that the Secrets' updates are dropped by the hub, read from controller.go:57, and no warning of their predicate.Funcs", w)
	}
	if got["Secret events"] != "[created deleted]" || got["ConfigMap events"] != "<nil>" || got["Widget events"] != "<nil>" {
		t.Errorf("events of Secret %s, ConfigMap %s, Widget %s; want [created deleted], none, none", got["Secret events"], got["ConfigMap events"], got["Widget events"])
	}
	if w := warnings.String(); !strings.Contains(w, "warning: widgets: controller widgets: its source.Channel watches no kind") {
		t.Errorf("warnings:\n%s\nwant one saying that nothing feeds its source.Channel at zero", w)
	}
}

// TestProbesWhereTheProjectServes: an adopted project whose probe address
// comes from a flag of its own (--readiness-probe-port, default 9440) is
// probed in classic mode where it serves, with no opzero probe flag passed
// (which it would ignore); kubebuilder's flag is set to :8081 as before.
func TestProbesWhereTheProjectServes(t *testing.T) {
	for _, tc := range []struct {
		env, port, args string
	}{{"1", "9440", "[--mode=classic --leader-elect --webhook-cert-path"}, {"", "8081", "[--mode=classic --leader-elect --health-probe-bind-address=:8081 --webhook-cert-path"}} {
		t.Setenv("WIDGETS_READINESS_PORT", tc.env)
		objs, err := manifests.Build(context.Background(), ".", "./testdata/widgets", manifests.Options{Namespace: "widgets", Mode: "classic"})
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, o := range objs {
			if o.Kind() != "Deployment" || o.Obj["metadata"].(map[string]any)["name"] != "widgets" {
				continue
			}
			found = true
			c := o.Obj["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)["containers"].([]any)[0].(map[string]any)
			ports := fmt.Sprint(c["ports"])
			if !strings.Contains(ports, "containerPort:"+tc.port) || !strings.HasPrefix(fmt.Sprint(c["args"]), tc.args) || c["readinessProbe"] == nil {
				t.Errorf("WIDGETS_READINESS_PORT=%q: ports %s, args %v, readinessProbe %v; want port %s, args %s, probed", tc.env, ports, c["args"], c["readinessProbe"], tc.port, tc.args)
			}
		}
		if !found {
			t.Fatalf("no Deployment widgets in classic mode")
		}
		// Serverless: the checks are on the serving port; the project's own
		// address is not bound (instances side by side under opzero dev),
		// by kubebuilder's flag where the project has it, else by opzero's
		// environment variable.
		objs, err = manifests.Build(context.Background(), ".", "./testdata/widgets", manifests.Options{Namespace: "widgets"})
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range objs {
			if o.Kind() != "Service" || o.Obj["apiVersion"] != "serving.knative.dev/v1" {
				continue
			}
			c := o.Obj["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)["containers"].([]any)[0].(map[string]any)
			env, args := fmt.Sprint(c["env"]), fmt.Sprint(c["args"])
			byEnv, byFlag := strings.Contains(env, "name:OPZERO_HEALTH_PROBE_BIND_ADDRESS value:0"), strings.Contains(args, "--health-probe-bind-address=0")
			if want := tc.env != ""; byEnv != want || byFlag == want {
				t.Errorf("WIDGETS_READINESS_PORT=%q serverless: env %s, args %s; want the probe address off by env %v, by flag %v", tc.env, env, args, want, !want)
			}
		}
	}
}
