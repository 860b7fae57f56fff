package operator_test

import (
	"context"
	"strings"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/opzero/opzero/builder"
	v1 "github.com/opzero/opzero/examples/configwatcher/api/v1"
	"github.com/opzero/opzero/internal/plan"
	"github.com/opzero/opzero/operator"
	"github.com/opzero/opzero/testenv"
)

const twoWritesFinalizer = "plan.opzero.dev/two-writes"

// finalizerThenStatus adds its finalizer to a ConfigWatcher and writes
// its status in the same reconcile, as most operators' first reconcile
// does: "patch-*" adds it with a merge patch, "update-*" with an update;
// "status-first" writes the status first, then patches the finalizer.
type finalizerThenStatus struct{ client.Client }

func (r *finalizerThenStatus) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	cw := &v1.ConfigWatcher{}
	if err := r.Get(ctx, req.NamespacedName, cw); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	status := func() error {
		if cw.Status.ConfigMapVersion == "seen" {
			return nil
		}
		cw.Status.ConfigMapVersion = "seen"
		return r.Status().Update(ctx, cw)
	}
	if req.Name == "status-first" {
		if err := status(); err != nil {
			return reconcile.Result{}, err
		}
	}
	if !controllerutil.ContainsFinalizer(cw, twoWritesFinalizer) {
		base := client.MergeFromWithOptions(cw.DeepCopy(), client.MergeFromWithOptimisticLock{})
		controllerutil.AddFinalizer(cw, twoWritesFinalizer)
		var err error
		if strings.HasPrefix(req.Name, "update-") {
			err = r.Update(ctx, cw)
		} else {
			err = r.Patch(ctx, cw, base)
		}
		if err != nil {
			return reconcile.Result{}, err
		}
	}
	return reconcile.Result{}, status()
}

// TestPlanComposesWritesOfOneObject: a reconcile that adds its finalizer
// (a patch, an update) and writes its status plans both, and the second
// write is composed with the first: the status update lists the status
// only (not the finalizer as removed), a finalizer patch after the status
// does not remove the status, and the plan converges (round 2, the
// finalizer's own wake-up, writes nothing) instead of patching the
// finalizer again each round until --rounds.
func TestPlanComposesWritesOfOneObject(t *testing.T) {
	env := testenv.Get(t)
	ns := env.Namespace(t)
	createWatchers(t, env, ns, "patch-a", "update-b", "status-first")
	before := snapshot(t, env, ns)
	var a audit
	rep := runPlan(t, a.config(env.Config), plan.Request{Namespace: ns, Rounds: 3}, 0, func(rt *operator.Runtime) {
		if err := builder.ControllerManagedBy(rt).Named("twowrites").For(&v1.ConfigWatcher{}).Complete(&finalizerThenStatus{Client: rt.GetClient()}); err != nil {
			panic(err)
		}
	})
	var text strings.Builder
	_ = plan.PrintText(&text, rep)
	t.Logf("plan:\n%s", text.String())

	if rep.Rounds > 2 || len(rep.Pending) > 0 || strings.Contains(text.String(), "would reconcile again") {
		t.Errorf("the plan ran %d rounds, %v pending: a reconcile's own finalizer and status writes should converge by round 2", rep.Rounds, rep.Pending)
	}
	for _, name := range []string{"patch-a", "update-b", "status-first"} {
		o := objectOf(t, rep, name, 1)
		if o.Error != "" {
			t.Errorf("%s: %s", name, o.Error)
		}
		var fin, st *plan.Write
		for i := range o.Writes {
			w := &o.Writes[i]
			if w.Error != "" {
				t.Errorf("%s: %s %s: %s", name, w.Verb, w.Ref, w.Error)
			}
			if w.Subresource == "status" {
				st = w
			} else {
				fin = w
			}
		}
		if fin == nil || st == nil || len(o.Writes) != 2 {
			t.Errorf("%s: writes %+v, want the finalizer's and the status's", name, o.Writes)
			continue
		}
		if paths(fin) != "metadata.finalizers" {
			t.Errorf("%s: %s changes %s, want metadata.finalizers only", name, fin.Verb, paths(fin))
		}
		if paths(st) != "status.configMapVersion" {
			t.Errorf("%s: status update changes %s, want status.configMapVersion only", name, paths(st))
		}
		for _, o := range rep.Objects {
			if o.Name != name || o.Round < 2 {
				continue
			}
			for _, w := range o.Writes {
				if w.Effective() {
					t.Errorf("%s round %d: %s %s changes %s: the plan's own writes are not what it read", name, o.Round, w.Verb, w.Ref, paths(&w))
				}
			}
		}
	}
	a.check(t)
	sameSnapshot(t, before, snapshot(t, env, ns))
}

func paths(w *plan.Write) string {
	var ps []string
	for _, c := range w.Changes {
		ps = append(ps, c.Path)
	}
	return strings.Join(ps, ",")
}
