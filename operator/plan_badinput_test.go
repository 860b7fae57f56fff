package operator_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/opzero/opzero/builder"
	v1 "github.com/opzero/opzero/examples/configwatcher/api/v1"
	"github.com/opzero/opzero/internal/plan"
	"github.com/opzero/opzero/operator"
	"github.com/opzero/opzero/reconcileutil"
	"github.com/opzero/opzero/testenv"
)

func createWatchers(t *testing.T, env *testenv.Env, ns string, names ...string) {
	t.Helper()
	for _, n := range names {
		cw := &v1.ConfigWatcher{ObjectMeta: metav1.ObjectMeta{Name: n, Namespace: ns},
			Spec: v1.ConfigWatcherSpec{ConfigMap: "config", PodSelector: map[string]string{"app": n}}}
		if err := env.Client.Create(context.Background(), cw); err != nil {
			t.Fatal(err)
		}
	}
}

func objectOf(t *testing.T, rep *plan.Report, name string, round int) plan.Object {
	t.Helper()
	for _, o := range rep.Objects {
		if o.Name == name && o.Round == round {
			return o
		}
	}
	t.Fatalf("no planned reconcile of %s in round %d: %+v", name, round, rep.Objects)
	return plan.Object{}
}

// scripted misbehaves by name: a-deleter deletes zz-gone for real (as
// someone else would, during the plan), b-hang blocks ignoring its
// context, c-panic panics; the others write their status.
type scripted struct {
	client.Client
	admin   client.Client
	release chan struct{}
}

func (r *scripted) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	switch req.Name {
	case "b-hang":
		<-r.release
		return reconcile.Result{}, nil
	case "c-panic":
		panic("c-panic's reconciler panics")
	}
	cw := &v1.ConfigWatcher{}
	if err := r.Get(ctx, req.NamespacedName, cw); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if req.Name == "a-deleter" {
		gone := &v1.ConfigWatcher{ObjectMeta: metav1.ObjectMeta{Namespace: req.Namespace, Name: "zz-gone"}}
		if err := r.admin.Delete(context.Background(), gone); err != nil {
			return reconcile.Result{}, err
		}
	}
	cw.Status.ConfigMapVersion = "seen"
	return reconcile.Result{}, r.Status().Update(ctx, cw)
}

// TestPlanBadInputIsPerObject: a reconciler that hangs on one object, one
// that panics on another, and an object deleted during the plan are each
// reported on their own object; the others are planned; nothing is
// written; the exit code is 1.
func TestPlanBadInputIsPerObject(t *testing.T) {
	env := testenv.Get(t)
	ns := env.Namespace(t)
	createWatchers(t, env, ns, "a-deleter", "b-hang", "c-panic", "d-ok", "zz-gone")
	before := snapshot(t, env, ns)
	delete(before, "cw/zz-gone") // a-deleter's real delete, not the plan's
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	var a audit
	rep := runPlan(t, a.config(env.Config), plan.Request{Namespace: ns, Timeout: plan.Duration(time.Second)}, 1, func(rt *operator.Runtime) {
		r := &scripted{Client: rt.GetClient(), admin: env.Client, release: release}
		if err := builder.ControllerManagedBy(rt).Named("scripted").For(&v1.ConfigWatcher{}).Complete(r); err != nil {
			t.Fatal(err)
		}
	})
	if got := rep.ExitCode(); got != 1 {
		t.Errorf("exit code %d, want 1 (some objects failed)", got)
	}
	if o := objectOf(t, rep, "b-hang", 1); !strings.Contains(o.Error, "did not return within 1s") {
		t.Errorf("b-hang: error %q, want it said to have hung", o.Error)
	}
	if o := objectOf(t, rep, "c-panic", 1); !strings.Contains(o.Error, "panic: c-panic's reconciler panics") {
		t.Errorf("c-panic: error %q, want the panic", o.Error)
	}
	if o := objectOf(t, rep, "zz-gone", 1); !o.Gone || o.Error != "" || len(o.Writes) != 0 {
		t.Errorf("zz-gone: gone %v, error %q, writes %v: want it said to be gone, nothing else", o.Gone, o.Error, o.Writes)
	}
	for _, n := range []string{"a-deleter", "d-ok"} {
		o := objectOf(t, rep, n, 1)
		if o.Error != "" || len(o.Writes) != 1 || o.Writes[0].Subresource != "status" || len(o.Writes[0].Changes) != 1 ||
			o.Writes[0].Changes[0].Path != "status.configMapVersion" {
			t.Errorf("%s: want one status write of status.configMapVersion, got error %q, writes %+v", n, o.Error, o.Writes)
		}
	}
	a.check(t)
	sameSnapshot(t, before, snapshot(t, env, ns))
}

// TestPlanForbiddenReads: an identity that may list ConfigWatchers but
// not Pods has each object's reconcile fail forbidden, reported per
// object; one that may not even list them has the controller's list
// fail. Both exit 1 and write nothing.
func TestPlanForbiddenReads(t *testing.T) {
	env := testenv.Get(t)
	ns := env.Namespace(t)
	upgradeFixture(t, env, ns, 2)
	ctx := context.Background()
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "watchers-only", Namespace: ns},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{"k8spatterns.io"}, Resources: []string{"configwatchers", "configwatchers/status"}, Verbs: []string{"get", "list", "update"}}}}
	binding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "watchers-only", Namespace: ns},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: role.Name},
		Subjects: []rbacv1.Subject{{Kind: "User", Name: "planner-watchers-only"}}}
	for _, o := range []client.Object{role, binding} {
		if err := env.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	before := snapshot(t, env, ns)
	for _, tc := range []struct{ user, want string }{
		{"planner-watchers-only", "per object"},
		{"planner-nothing", "controller"},
	} {
		t.Run(tc.user, func(t *testing.T) {
			cfg := rest.CopyConfig(env.Config)
			cfg.Impersonate = rest.ImpersonationConfig{UserName: tc.user}
			var a audit
			var rep *plan.Report
			// RBAC takes effect once the authorizer's informers have it.
			for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(200 * time.Millisecond) {
				rep = runPlan(t, a.config(cfg), plan.Request{Namespace: ns}, 0, forAnnotator(annotateV2))
				if tc.want == "controller" || rep.Controllers[0].Error == "" || time.Now().After(deadline) {
					break
				}
			}
			if got := rep.ExitCode(); got != 1 {
				t.Errorf("exit code %d, want 1", got)
			}
			switch tc.want {
			case "controller":
				if c := rep.Controllers[0]; !strings.Contains(c.Error, "forbidden") || len(rep.Objects) != 0 {
					t.Errorf("controller error %q, %d objects: want the list forbidden, nothing planned", c.Error, len(rep.Objects))
				}
			default:
				if len(rep.Objects) != 2 {
					t.Fatalf("%d objects planned, want 2: %+v", len(rep.Objects), rep.Controllers)
				}
				for _, o := range rep.Objects {
					if !strings.Contains(o.Error, "forbidden") {
						t.Errorf("%s: error %q, want forbidden (pods)", o.Ref, o.Error)
					}
				}
			}
			a.check(t)
			sameSnapshot(t, before, snapshot(t, env, ns))
		})
	}
}

// parent makes one child ConfigMap per ConfigWatcher, owned by it, and
// records observedGeneration.
type parent struct{ client.Client }

func (r *parent) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	cw := &v1.ConfigWatcher{}
	if err := r.Get(ctx, req.NamespacedName, cw); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	child := &corev1.ConfigMap{}
	err := r.Get(ctx, client.ObjectKey{Namespace: cw.Namespace, Name: "child-" + cw.Name}, child)
	if apierrors.IsNotFound(err) {
		child = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: cw.Namespace, Name: "child-" + cw.Name}, Data: map[string]string{"owner": cw.Name}}
		if err := controllerutil.SetControllerReference(cw, child, r.Scheme()); err != nil {
			return reconcile.Result{}, err
		}
		err = r.Create(ctx, child)
	}
	if err != nil {
		return reconcile.Result{}, err
	}
	if cw.Status.ObservedGeneration == cw.Generation {
		return reconcile.Result{}, nil
	}
	cw.Status.ObservedGeneration = cw.Generation
	return reconcile.Result{}, r.Status().Update(ctx, cw)
}

// TestPlanRoundsFollowOnEffects: a created child brings its owner's
// reconcile in round 2, which reads the child the plan would have made
// (said: inexact) and writes nothing more; with --rounds 1 the owner is
// pending instead.
func TestPlanRoundsFollowOnEffects(t *testing.T) {
	env := testenv.Get(t)
	ns := env.Namespace(t)
	createWatchers(t, env, ns, "p")
	before := snapshot(t, env, ns)
	register := func(rt *operator.Runtime) {
		if err := builder.ControllerManagedBy(rt).Named("parent").For(&v1.ConfigWatcher{}).Owns(&corev1.ConfigMap{}).Complete(&parent{rt.GetClient()}); err != nil {
			t.Fatal(err)
		}
	}
	var a audit
	rep := runPlan(t, a.config(env.Config), plan.Request{Namespace: ns, Rounds: 3}, 0, register)
	if rep.Rounds != 2 || len(rep.Pending) != 0 {
		t.Errorf("%d rounds, pending %v: want 2 rounds, the second converging", rep.Rounds, rep.Pending)
	}
	first := objectOf(t, rep, "p", 1)
	if len(first.Writes) != 2 || first.Writes[0].Verb != "create" || first.Writes[0].Kind != "ConfigMap" || first.Writes[1].Subresource != "status" {
		t.Errorf("round 1: writes %+v, want the child's create and the status", first.Writes)
	}
	second := objectOf(t, rep, "p", 2)
	if second.Changed() || !strings.Contains(second.Why, "ConfigMap "+ns+"/child-p would be created in round 1") {
		t.Errorf("round 2: changed %v, why %q: want nothing more, brought by the child's create", second.Changed(), second.Why)
	}
	if !strings.Contains(strings.Join(second.Inexact, "\n"), "read ConfigMap "+ns+"/child-p as the plan would have written it in round 1") {
		t.Errorf("round 2: inexact %v, want the read of the planned child said", second.Inexact)
	}
	one := runPlan(t, a.config(env.Config), plan.Request{Namespace: ns, Rounds: 1}, 0, register)
	if one.Rounds != 1 || len(one.Pending) != 1 || one.Pending[0].Name != "p" {
		t.Errorf("--rounds 1: %d rounds, pending %v: want p pending", one.Rounds, one.Pending)
	}
	a.check(t)
	sameSnapshot(t, before, snapshot(t, env, ns))
}

// outsider records an Event, writes through a clientset built from
// rt.GetConfig(), asks operator.Planning and calls an HTTP service.
type outsider struct {
	client.Client
	cs       kubernetes.Interface
	recorder reconcileutil.Recorder
	url      string
	skipped  *int
}

func (r *outsider) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	cw := &v1.ConfigWatcher{}
	if err := r.Get(ctx, req.NamespacedName, cw); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	r.recorder.Eventf(cw, nil, corev1.EventTypeNormal, "Seen", "Plan", "saw %s", cw.Name)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "foreign-" + cw.Name}}
	if _, err := r.cs.CoreV1().ConfigMaps(cw.Namespace).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		return reconcile.Result{}, fmt.Errorf("through rt.GetConfig(): %w", err)
	}
	hr, _ := http.NewRequestWithContext(ctx, http.MethodGet, r.url, nil)
	resp, err := http.DefaultClient.Do(hr)
	if err != nil {
		return reconcile.Result{}, err
	}
	resp.Body.Close()
	if operator.Planning(ctx) {
		*r.skipped++
	}
	return reconcile.Result{RequeueAfter: time.Hour}, nil
}

// TestPlanEventsExternalCallsAndPlanning: the Event is in the plan and not
// in the cluster; the clientset's create is dry-run (no ConfigMap) and
// said, as is the HTTP call; operator.Planning is true and said; the
// RequeueAfter is listed.
func TestPlanEventsExternalCallsAndPlanning(t *testing.T) {
	env := testenv.Get(t)
	ns := env.Namespace(t)
	createWatchers(t, env, ns, "x")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer srv.Close()
	before := snapshot(t, env, ns)
	skipped := 0
	var a audit
	rep := runPlan(t, a.config(env.Config), plan.Request{Namespace: ns}, 0, func(rt *operator.Runtime) {
		cs, err := kubernetes.NewForConfig(rt.GetConfig())
		if err != nil {
			t.Fatal(err)
		}
		r := &outsider{Client: rt.GetClient(), cs: cs, recorder: rt.GetEventRecorder("outsider"), url: srv.URL, skipped: &skipped}
		if err := builder.ControllerManagedBy(rt).Named("outsider").For(&v1.ConfigWatcher{}).Complete(r); err != nil {
			t.Fatal(err)
		}
	})
	o := objectOf(t, rep, "x", 1)
	if o.Error != "" {
		t.Fatalf("error: %s", o.Error)
	}
	if len(o.Events) != 1 || o.Events[0].Reason != "Seen" || o.Events[0].Note != "saw x" {
		t.Errorf("events %+v, want the one Seen", o.Events)
	}
	ext := strings.Join(o.External, "\n")
	if !strings.Contains(ext, "POST /api/v1/namespaces/"+ns+"/configmaps through a client built from rt.GetConfig() (sent as dry-run") ||
		!strings.Contains(ext, "GET "+srv.URL+": an external call") {
		t.Errorf("external %v, want the clientset's create and the HTTP call", o.External)
	}
	if !o.Planning || skipped != 1 {
		t.Errorf("planning %v, asked %d: want operator.Planning true and said", o.Planning, skipped)
	}
	if !strings.Contains(o.Requeue, "requeue after 1h0m0s") {
		t.Errorf("requeue %q, want after 1h", o.Requeue)
	}
	if rep.ExitCode() != 2 {
		t.Errorf("exit code %d, want 2 (an Event would be recorded)", rep.ExitCode())
	}
	a.check(t)
	sameSnapshot(t, before, snapshot(t, env, ns))
}

// TestPlanOfNoSuchObject: a plan of one object that is not there (a typo,
// with or without its kind) is an error naming it and exits 1, not "nothing
// would change"; one that is there plans it alone.
func TestPlanOfNoSuchObject(t *testing.T) {
	env := testenv.Get(t)
	ns := env.Namespace(t)
	createWatchers(t, env, ns, "d-ok")
	register := func(rt *operator.Runtime) {
		r := &scripted{Client: rt.GetClient(), admin: env.Client}
		if err := builder.ControllerManagedBy(rt).Named("scripted").For(&v1.ConfigWatcher{}).Complete(r); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"d-okk", "ConfigWatcher/d-okk"} {
		rep := runPlan(t, env.Config, plan.Request{Namespace: ns, Name: name}, 0, register)
		if got := rep.ExitCode(); got != 1 || len(rep.Controllers) != 1 || !strings.Contains(rep.Controllers[0].Error, `no ConfigWatcher named "d-okk" in namespace `+ns) {
			t.Errorf("plan of %s: exit code %d, controllers %+v; want 1 and an error naming it", name, got, rep.Controllers)
		}
	}
	rep := runPlan(t, env.Config, plan.Request{Namespace: ns, Name: "ConfigWatcher/d-ok"}, 0, register)
	if got := rep.ExitCode(); got != 2 || len(rep.Objects) == 0 || rep.Controllers[0].Error != "" {
		t.Errorf("plan of ConfigWatcher/d-ok: exit code %d, controllers %+v, objects %+v; want 2 and d-ok planned", got, rep.Controllers, rep.Objects)
	}
	for _, o := range rep.Objects {
		if o.Name != "d-ok" {
			t.Errorf("plan of ConfigWatcher/d-ok planned %s too (round %d)", o.Name, o.Round)
		}
	}
}
