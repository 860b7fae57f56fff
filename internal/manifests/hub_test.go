package manifests_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/opzero/opzero/internal/description"
	"github.com/opzero/opzero/internal/manifests"
)

// hubCase generates the ConfigWatcher's manifests with --source=hub,
// optionally changing its description first.
func hubCase(t *testing.T, o manifests.Options, edit func(*description.Controller)) []manifests.Object {
	t.Helper()
	o.Mode, o.Source = manifests.Serverless, manifests.SourceHub
	in, err := manifests.Prepare(context.Background(), configWatcher(t), o)
	if err != nil {
		t.Fatal(err)
	}
	if edit != nil {
		edit(&in.Operator)
	}
	objs, err := manifests.Generate(in, o)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

// byKey indexes objects by "Kind namespace/name".
func byKey(objs []manifests.Object) map[string]manifests.Object {
	out := map[string]manifests.Object{}
	for _, obj := range objs {
		out[obj.Kind()+" "+obj.Namespace()+"/"+obj.Name()] = obj
	}
	return out
}

// TestHubReplacesTheKnativeSources: with --source=hub there is no
// ApiServerSource, PingSource nor wakeup source (nor their service
// accounts); the operator accepts the hub and keeps its Triggers'
// identities; the Subscription carries what the sources did.
func TestHubReplacesTheKnativeSources(t *testing.T) {
	objs := byKey(hubCase(t, manifests.Options{Namespace: "ops"}, func(op *description.Controller) {
		op.Events = eventWatches
		op.Owned = []description.Kind{{Group: "apps", Version: "v1", Kind: "Deployment", Resource: "deployments"}}
		op.Primary.Selector = "team=a"
		op.Deploy.Sweep = "CRON_TZ=Europe/Paris 0 3 * * *"
	}))
	for key := range objs {
		for _, gone := range []string{"ApiServerSource ", "PingSource ", "-wakeup-source", "ServiceAccount ops/configwatcher-"} {
			if strings.Contains(key, gone) {
				t.Errorf("%s generated with --source=hub", key)
			}
		}
	}
	for _, want := range []string{"Namespace /opzero-system", "ServiceAccount opzero-system/opzero-hub", "Deployment opzero-system/opzero-hub",
		"ClusterRole /opzero-hub", "ClusterRole /opzero-hub-base", "ClusterRoleBinding /opzero-hub", "Role opzero-system/opzero-hub",
		"RoleBinding opzero-system/opzero-hub", "ClusterRole /opzero-hub:ops:configwatcher", "Subscription ops/configwatcher",
		"Broker ops/configwatcher", "Trigger ops/configwatcher-hook", "Trigger ops/configwatcher-drift",
		"PodDisruptionBudget opzero-system/opzero-hub"} {
		if _, ok := objs[want]; !ok {
			t.Errorf("no %s", want)
		}
	}

	args, _, _ := unstructured.NestedSlice(objs["Service ops/configwatcher"].Obj, "spec", "template", "spec", "containers")
	var senders, sink string
	for _, a := range args[0].(map[string]any)["args"].([]any) {
		if v, ok := strings.CutPrefix(a.(string), "--allowed-senders="); ok {
			senders = v
		}
		if v, ok := strings.CutPrefix(a.(string), "--wakeup-sink="); ok {
			sink = v
		}
	}
	got := strings.Split(senders, ",")
	if len(got) != 3 || !strings.Contains(senders, "system:serviceaccount:opzero-system:opzero-hub") ||
		!strings.Contains(senders, "configwatcher-hook") || !strings.Contains(senders, "configwatcher-drift") {
		t.Errorf("--allowed-senders=%s, want the hub and the two Triggers", senders)
	}
	if sink != "http://configwatcher.ops.svc.cluster.local" {
		t.Errorf("--wakeup-sink=%q", sink)
	}

	spec := objs["Subscription ops/configwatcher"].Obj["spec"].(map[string]any)
	res := spec["resources"].([]any)
	if len(res) != 3 {
		t.Fatalf("resources %v, want primary, owned, watched", res)
	}
	primary, owned := res[0].(map[string]any), res[1].(map[string]any)
	if primary["mode"] != "Resource" || primary["labelSelector"] != "team=a" || primary["owner"] != nil {
		t.Errorf("primary %v", primary)
	}
	if owned["mode"] != "Resource" || owned["kind"] != "Deployment" || owned["apiVersion"] != "apps/v1" ||
		owned["owner"].(map[string]any)["kind"] != "ConfigWatcher" || owned["referencedBy"] != nil {
		t.Errorf("owned %v", owned)
	}
	sweeps := spec["sweeps"].([]any)
	if s := sweeps[0].(map[string]any); s["name"] != "configwatcher-sweep" || s["schedule"] != "CRON_TZ=Europe/Paris 0 3 * * *" {
		t.Errorf("sweep %v: the schedule goes as declared, CRON_TZ included", s)
	}
	rules, _, _ := unstructured.NestedSlice(objs["ClusterRole /opzero-hub:ops:configwatcher"].Obj, "rules")
	if len(rules) != 3 {
		t.Errorf("the hub reads %v, want configmaps, deployments, configwatchers", rules)
	}
}

// TestHubWithoutDurableTime: no wakeups asked for, no Wakeup CRD; the
// Subscription CRD is there.
func TestHubWithoutDurableTime(t *testing.T) {
	o := manifests.Options{Mode: manifests.Serverless, Source: manifests.SourceHub, NoDurableTime: true}
	objs := generate(t, o)
	var crds []string
	for _, obj := range objs {
		switch obj.Kind() {
		case "CustomResourceDefinition":
			crds = append(crds, obj.Name())
		case "Subscription":
			if w, ok := obj.Obj["spec"].(map[string]any)["wakeups"]; ok {
				t.Errorf("wakeups: %v without durable time", w)
			}
		}
	}
	if strings.Join(crds, ",") != "configwatchers.k8spatterns.io,subscriptions.opzero.dev" {
		t.Errorf("CRDs %v", crds)
	}
}

// TestHubObjectsAreShared: the hub's own objects are byte for byte the same
// in every operator's manifests (so applying them all changes nothing), and
// --hub-image changes only the image.
func TestHubObjectsAreShared(t *testing.T) {
	hubFile := func(o manifests.Options, name string) string {
		objs := hubCase(t, o, func(op *description.Controller) { op.Name = name })
		var list []manifests.Object
		for _, obj := range objs {
			if obj.File == manifests.FileHub {
				list = append(list, obj)
			}
		}
		files, err := manifests.Files(list)
		if err != nil {
			t.Fatal(err)
		}
		return string(files[manifests.FileHub])
	}
	a := hubFile(manifests.Options{Namespace: "a"}, "one")
	if b := hubFile(manifests.Options{Namespace: "b"}, "two"); a != b {
		t.Errorf("hub.yaml differs between operators:\n%s", diffLines(a, b))
	}
	c := hubFile(manifests.Options{HubImage: "registry.example/hub:v1"}, "one")
	if !strings.Contains(c, "image: registry.example/hub:v1") ||
		strings.ReplaceAll(c, "registry.example/hub:v1", manifests.DefaultHubImage) != a {
		t.Errorf("--hub-image: want only the image changed:\n%s", diffLines(a, c))
	}
}

// TestHubEvents: --hub-events sets the events of the kinds it names in
// the Subscription (Kind or group/Kind; each type once, in the order
// created, updated, deleted), and none on the others. A kind the
// operator does not watch, a bare Kind two groups have, another type, no
// type, or another source than the hub is an error naming --hub-events
// and what it accepts.
func TestHubEvents(t *testing.T) {
	owned := func(op *description.Controller) {
		op.Owned = []description.Kind{{Group: "apps", Version: "v1", Kind: "Deployment", Resource: "deployments"}}
	}
	objs := byKey(hubCase(t, manifests.Options{Namespace: "ops", HubEvents: map[string][]string{
		"ConfigMap": {"deleted", "created", "deleted"}, "k8spatterns.io/ConfigWatcher": {"updated"}}}, owned))
	got := map[string]any{}
	for _, r := range objs["Subscription ops/configwatcher"].Obj["spec"].(map[string]any)["resources"].([]any) {
		r := r.(map[string]any)
		got[r["kind"].(string)] = r["events"]
	}
	want := map[string]any{"ConfigWatcher": []any{"updated"}, "Deployment": nil, "ConfigMap": []any{"created", "deleted"}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("events by kind %v, want %v", got, want)
	}

	fail := func(o manifests.Options, edit func(*description.Controller), want string) {
		t.Helper()
		in, err := manifests.Prepare(context.Background(), configWatcher(t), manifests.Options{Mode: o.Mode, Source: o.Source})
		if err != nil {
			t.Fatal(err)
		}
		if edit != nil {
			edit(&in.Operator)
		}
		if _, err := manifests.Generate(in, o); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("--hub-events %v: %v, want an error containing %q", o.HubEvents, err, want)
		}
	}
	hub := func(m map[string][]string) manifests.Options {
		return manifests.Options{Mode: manifests.Serverless, Source: manifests.SourceHub, HubEvents: m}
	}
	fail(hub(map[string][]string{"Secret": {"created"}}), owned,
		"--hub-events Secret=...: the operator watches no Secret (it watches ConfigMap, ConfigWatcher, Deployment); want Kind=created,updated,deleted")
	fail(hub(map[string][]string{"ConfigMap": {"created", "patched"}}), nil,
		`--hub-events ConfigMap=created,patched: "patched" is no type of change; want created, updated, deleted`)
	fail(hub(map[string][]string{"ConfigMap": nil}), nil, "--hub-events ConfigMap=: name the types of change")
	fail(hub(map[string][]string{"Deployment": {"created"}}), func(op *description.Controller) {
		op.Owned = []description.Kind{{Group: "apps", Version: "v1", Kind: "Deployment", Resource: "deployments"},
			{Group: "example.com", Version: "v1", Kind: "Deployment", Resource: "deployments"}}
	}, "--hub-events Deployment=...: the operator watches Deployment of 2 groups: write group/Kind (apps/Deployment, example.com/Deployment)")
	knative := hub(map[string][]string{"ConfigMap": {"created"}})
	knative.Source = manifests.SourceKnative
	fail(knative, nil, "--hub-events: the hub drops the changes it names, and with --source=knative")
	classic := hub(map[string][]string{"ConfigMap": {"created"}})
	classic.Mode, classic.Source = manifests.Classic, ""
	fail(classic, nil, "with --mode=classic the operator gets its events another way")
}
