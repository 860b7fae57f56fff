package operator_test

import (
	"context"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/opzero/opzero/builder"
	v1 "github.com/opzero/opzero/examples/configwatcher/api/v1"
	"github.com/opzero/opzero/internal/plan"
	"github.com/opzero/opzero/operator"
	"github.com/opzero/opzero/operator/classic"
	"github.com/opzero/opzero/testenv"
)

// TestPlanAdoptedManager: a controller-runtime project adopted with
// classic.NewManager, started with --mode=classic and its own probe
// address, is planned when OPZERO_PLAN is set: no manager, no cache, no
// probe server; its SetupWithManager controller's writes are in the plan
// (the owned child's create and the status, then the owner's second
// round), and nothing is written.
func TestPlanAdoptedManager(t *testing.T) {
	env := testenv.Get(t)
	ns := env.Namespace(t)
	createWatchers(t, env, ns, "adopted")
	before := snapshot(t, env, ns)
	out := filepath.Join(t.TempDir(), "plan.json")
	b, _ := json.Marshal(plan.Request{Namespace: ns, Out: out})
	t.Setenv(plan.Env, string(b))
	var a audit
	mgr, err := classic.NewManager(operator.Options{Mode: operator.Classic}, a.config(env.Config),
		manager.Options{Scheme: scheme, Metrics: metricsOff, HealthProbeBindAddress: "127.0.0.1:0", LeaderElection: true, LeaderElectionID: "plan-test"})
	if err != nil {
		t.Fatal(err)
	}
	if err := ctrl.NewControllerManagedBy(mgr).Named("plan-adopted").For(&v1.ConfigWatcher{}).Owns(&corev1.ConfigMap{}).Complete(&parent{mgr.GetClient()}); err != nil {
		t.Fatal(err)
	}
	if err := mgr.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rep, err := plan.Read(f)
	if err != nil {
		t.Fatal(err)
	}
	o := objectOf(t, rep, "adopted", 1)
	if o.Error != "" || len(o.Writes) != 2 || o.Writes[0].Verb != "create" || o.Writes[0].Name != "child-adopted" || o.Writes[1].Subresource != "status" {
		t.Errorf("round 1: error %q, writes %+v: want the child's create and the status", o.Error, o.Writes)
	}
	if rep.Rounds != 2 || rep.ExitCode() != 2 {
		t.Errorf("%d rounds, exit %d: want 2 rounds (the child brings its owner), exit 2", rep.Rounds, rep.ExitCode())
	}
	a.check(t)
	sameSnapshot(t, before, snapshot(t, env, ns))
}

// TestPlanModeFlag: --mode=plan plans without a request (every object,
// the text form on standard output), writing nothing.
func TestPlanModeFlag(t *testing.T) {
	env := testenv.Get(t)
	ns := env.Namespace(t)
	createWatchers(t, env, ns, "flagged")
	before := snapshot(t, env, ns)
	opts := operator.Options{Scheme: scheme}
	fs := flag.NewFlagSet("operator", flag.ContinueOnError)
	opts.BindFlags(fs)
	if err := fs.Parse([]string{"--mode=plan"}); err != nil {
		t.Fatal(err)
	}
	var a audit
	opts.Config = a.config(env.Config)
	rt, err := operator.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	if rt.Mode() != operator.Plan {
		t.Fatalf("mode %s, want plan", rt.Mode())
	}
	if err := builder.ControllerManagedBy(rt).Named("flagged").For(&v1.ConfigWatcher{}).Complete(&parent{rt.GetClient()}); err != nil {
		t.Fatal(err)
	}
	if err := rt.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	a.check(t)
	sameSnapshot(t, before, snapshot(t, env, ns))
}
