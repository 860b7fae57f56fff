package metacontroller

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opzero/opzero/builder"
	v1alpha1 "github.com/opzero/opzero/internal/metacontroller/api/v1alpha1"
	"github.com/opzero/opzero/internal/plan"
	"github.com/opzero/opzero/internal/planner"
	"github.com/opzero/opzero/internal/standin"
	"github.com/opzero/opzero/reconcileutil"
	"github.com/opzero/opzero/testenv"
)

// TestPlanComposite: a plan of the Metacontroller mode with --watched
// finds the parents through the map functions, calls the sync hook and
// lists the child its answer would apply (server-side apply, dry-run) and
// the parent's status; the child is not created.
func TestPlanComposite(t *testing.T) {
	env := testenv.Get(t)
	ns := env.Namespace(t)
	h := &hooks{children: func(req map[string]any) []any {
		return []any{map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
			"metadata": map[string]any{"name": "p-child"}, "data": map[string]any{"who": "World"}}}
	}}
	url := h.serve(t)
	c := &Controller{Kind: "CompositeController", Name: uniqueName("plan"), Object: map[string]any{"kind": "CompositeController"},
		Parents:  []Decorated{{Resource: mustResolve(t, env, "example.com/v1", "helloworlds")}},
		Children: []Child{{Resource: mustResolve(t, env, "v1", "configmaps"), Method: v1alpha1.ChildUpdateInPlace}},
		Sync:     webhook(url + "/sync")}
	helloWorld(t, env, ns, "p")

	pc := planner.NewClient(env.Client)
	cl := standin.NewClient(pc)
	events := planner.NewEvents(cl)
	r := &Reconciler{Client: cl, Config: &Config{Controllers: []*Controller{c}}, Hooks: &HookClient{},
		Recorder: reconcileutil.NewLegacyEventRecorder(events, env.Scheme, "metacontroller")}
	op, err := Describe(builder.New(env.Scheme), r.Config).Build(r)
	if err != nil {
		t.Fatal(err)
	}
	rep := planner.New(planner.Options{Client: cl, Plan: pc, Events: events}).Run(context.Background(), []*builder.Controller{op},
		plan.Request{Namespace: ns, Watched: true, Rounds: 1, Timeout: plan.Duration(30 * time.Second)})

	var o *plan.Object
	for i := range rep.Objects {
		if rep.Objects[i].Name == "composite/"+c.Name+"/p" {
			o = &rep.Objects[i]
		}
	}
	if o == nil {
		t.Fatalf("the parent's sync is not planned: %+v %+v", rep.Controllers, rep.Objects)
	}
	if o.Error != "" {
		t.Fatalf("the parent's sync: %s", o.Error)
	}
	var child *plan.Write
	for i, w := range o.Writes {
		if w.Kind == "ConfigMap" && w.Name == "p-child" {
			child = &o.Writes[i]
		}
	}
	if child == nil || child.Verb != "patch" || child.Error != "" {
		t.Fatalf("writes %+v: want the child's apply", o.Writes)
	}
	found := false
	for _, ch := range child.Changes {
		found = found || ch.Path == "data.who" && string(ch.After) == `"World"`
	}
	if !found || !strings.Contains(o.Why, "mapped from HelloWorld "+ns+"/p") {
		t.Errorf("child changes %+v, why %q: want data.who and the parent's mapping", child.Changes, o.Why)
	}
	if len(h.syncs) == 0 {
		t.Error("the sync hook was not called")
	}
	err = env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "p-child"}, &corev1.ConfigMap{})
	if !apierrors.IsNotFound(err) {
		t.Errorf("the child exists after the plan (%v): it was written", err)
	}
}
