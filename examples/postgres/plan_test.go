package main_test

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/opzero/opzero/examples/postgres/api/v1alpha1"
	"github.com/opzero/opzero/internal/plan"
	"github.com/opzero/opzero/testenv"
)

// TestDatabasePlan: `opzero plan` of the operator (its binary, as the CLI
// runs it) for a new Database against a real PostgreSQL. The reconciler
// asks operator.Planning and skips its SQL writes: the server is as
// before (no role, no database, no extension), the Database keeps its
// resourceVersion and no Secret is made, and the plan lists what the
// reconcile would write to the API server (the finalizer, the Secret, the
// status) and the Event it would record. docs/plan.md shows its text.
func TestDatabasePlan(t *testing.T) {
	if testing.Short() {
		t.Skip("plans the operator against PostgreSQL and a control plane")
	}
	env := testenv.Get(t)
	ns := env.Namespace(t)
	ctx := context.Background()
	c := env.Client
	installCRD(t, c)

	bin := filepath.Join(t.TempDir(), "postgres-operator")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("building the operator: %v\n%s", err, out)
	}
	db := &v1alpha1.Database{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "ledger"},
		Spec: v1alpha1.DatabaseSpec{ConnectionLimit: 20, Extensions: []string{"citext"}}}
	if err := c.Create(ctx, db); err != nil {
		t.Fatal(err)
	}
	conn := adminConn(t, "postgres")
	before := serverState(t, conn)

	rep, err := plan.Run(ctx, plan.RunOptions{Operator: bin,
		Env: []string{"KUBECONFIG=" + env.Kubeconfig, "PG_ADMIN_DSN=" + pg.AdminDSN("postgres")}},
		plan.Request{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	var text strings.Builder
	if err := plan.Print(&text, rep, plan.FormatText); err != nil {
		t.Fatal(err)
	}
	t.Logf("opzero plan -n %s:\n%s", ns, text.String())

	if got := serverState(t, conn); got != before {
		t.Errorf("PostgreSQL changed during the plan:\nbefore\n%s\nafter\n%s", before, got)
	}
	if n := scalar[int](t, conn, "SELECT count(*) FROM pg_database WHERE datname = 'ledger'"); n != 0 {
		t.Errorf("database ledger exists after the plan")
	}
	got := &v1alpha1.Database{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(db), got); err != nil {
		t.Fatal(err)
	}
	if got.ResourceVersion != db.ResourceVersion || len(got.Finalizers) != 0 || len(got.Status.Conditions) != 0 {
		t.Errorf("the Database was written: resourceVersion %s (was %s), finalizers %v, conditions %v",
			got.ResourceVersion, db.ResourceVersion, got.Finalizers, got.Status.Conditions)
	}
	secret := &corev1.Secret{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "ledger-credentials"}, secret); !apierrors.IsNotFound(err) {
		t.Errorf("Secret ledger-credentials after the plan: %v, want not found", err)
	}

	if rep.ExitCode() != 2 {
		t.Errorf("exit code %d, want 2 (something would change)", rep.ExitCode())
	}
	if rep.Refused != 0 {
		t.Errorf("%d writes refused (not dry-run)", rep.Refused)
	}
	var first *plan.Object
	for i := range rep.Objects {
		if o := &rep.Objects[i]; o.Kind == "Database" && o.Name == "ledger" && o.Round == 1 {
			first = o
		}
	}
	if first == nil {
		t.Fatalf("no round-1 plan of Database ledger: %+v", rep.Objects)
	}
	if first.Error != "" {
		t.Errorf("Database ledger: %s", first.Error)
	}
	if !first.Planning {
		t.Error("the reconcile did not ask operator.Planning")
	}
	writes := map[string]bool{}
	for _, w := range first.Writes {
		if w.Error != "" {
			t.Errorf("%s %s: refused by the API server: %s", w.Verb, w.Ref, w.Error)
		}
		writes[w.Verb+" "+w.Kind+"/"+w.Subresource] = true
		for _, c := range w.Changes {
			if w.Subresource == "status" && strings.HasPrefix(c.Path, "metadata.") {
				t.Errorf("the status update lists %s: it is not composed with the finalizer's patch", c.Path)
			}
		}
	}
	if len(rep.Pending) > 0 || rep.Rounds > 2 {
		t.Errorf("%d rounds, %v would reconcile again: the finalizer and status writes should converge by round 2", rep.Rounds, rep.Pending)
	}
	for _, want := range []string{"create Secret/", "update Database/status"} {
		if !writes[want] {
			t.Errorf("no %q among the planned writes %+v", want, first.Writes)
		}
	}
	if len(first.Events) == 0 {
		t.Errorf("no Event planned")
	}
	if strings.Contains(text.String(), pg.Password) {
		t.Error("the plan prints the superuser's password")
	}
}
