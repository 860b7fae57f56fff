package main_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	v1alpha1 "github.com/opzero/opzero/examples/postgres/api/v1alpha1"
	"github.com/opzero/opzero/internal/testkit"
	"github.com/opzero/opzero/testenv"
)

// TestDatabaseClassic: the same binary as a classic controller-runtime
// manager. Broker events arrive on --events-addr; here the bridge posts to
// it directly (no Broker), and a drift made by hand is healed by that
// event alone (a classic manager has no sweep).
func TestDatabaseClassic(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the operator against PostgreSQL and a control plane")
	}
	env := testenv.Get(t)
	ns := env.Namespace(t)
	ctx := context.Background()
	c := env.Client
	installCRD(t, c)

	dir := t.TempDir()
	bin := filepath.Join(dir, "postgres-operator")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("building the operator: %v\n%s", err, out)
	}
	port := testkit.FreePort(t)
	op := exec.Command(bin, "--mode=classic", "--disable-leader-election", "--health-addr=0", "--metrics-addr=0",
		"--events-addr=127.0.0.1:"+strconv.Itoa(port), "--insecure-no-auth")
	op.Env = append(os.Environ(), "KUBECONFIG="+env.Kubeconfig, "PG_ADMIN_DSN="+pg.AdminDSN("postgres"))
	opChild, err := testkit.StartChild(t, op, "", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	bridgeBin := filepath.Join(dir, "bridge")
	if out, err := exec.Command("go", "build", "-o", bridgeBin, "./bridge").CombinedOutput(); err != nil {
		t.Fatalf("building the bridge: %v\n%s", err, out)
	}
	if _, err = testkit.StartChild(t, exec.Command(bridgeBin, "--dsn", pg.AdminDSN("postgres"),
		"--sink", "http://127.0.0.1:"+strconv.Itoa(port)+"/", "--interval", "100ms"), "", time.Minute); err != nil {
		t.Fatal(err)
	}

	db := &v1alpha1.Database{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "inventory"}, Spec: v1alpha1.DatabaseSpec{ConnectionLimit: 10}}
	if err := c.Create(ctx, db); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(db)
	testkit.Eventually(t, 90*time.Second, "Database inventory Ready", func(ctx context.Context) (bool, error) {
		if err := c.Get(ctx, key, db); err != nil {
			return false, err
		}
		return meta.IsStatusConditionTrue(db.Status.Conditions, "Ready"), nil
	})
	conn := adminConn(t, "postgres")
	// The bridge has read the database as managed once its event trigger is there.
	testkit.Eventually(t, 30*time.Second, "the bridge's event trigger in database inventory", func(context.Context) (bool, error) {
		return scalar[int](t, adminConn(t, "inventory"), "SELECT count(*) FROM pg_event_trigger WHERE evtname LIKE 'opzero_bridge_%'") == 2, nil
	})
	start := time.Now()
	if _, err := conn.Exec(ctx, "ALTER DATABASE inventory CONNECTION LIMIT 1"); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 60*time.Second, "the connection limit healed by the bridge's event", func(context.Context) (bool, error) {
		return scalar[int32](t, conn, "SELECT datconnlimit FROM pg_database WHERE datname = 'inventory'") == 10, nil
	})
	t.Logf("classic: out-of-band change -> healed in PostgreSQL in %s (bridge -> --events-addr)", time.Since(start).Round(time.Millisecond))

	if err := c.Delete(ctx, db); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 60*time.Second, "database and role dropped, Database gone", func(ctx context.Context) (bool, error) {
		return apierrors.IsNotFound(c.Get(ctx, key, &v1alpha1.Database{})) &&
			scalar[int](t, conn, "SELECT count(*) FROM pg_database WHERE datname = 'inventory'")+
				scalar[int](t, conn, "SELECT count(*) FROM pg_roles WHERE rolname = 'inventory'") == 0, nil
	})
	if err := opChild.Interrupt(); err != nil {
		t.Errorf("the classic operator after SIGINT: %v", err)
	}
}

// installCRD creates the Database CRD unless there (opzero dev applies it
// in the serverless test; a classic run alone needs it too).
func installCRD(t *testing.T, c client.Client) {
	t.Helper()
	b, err := os.ReadFile("config/crd/postgres.example.opzero.dev_databases.yaml")
	if err != nil {
		t.Fatal(err)
	}
	crd := &unstructured.Unstructured{}
	if err := yaml.Unmarshal(b, &crd.Object); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(context.Background(), crd); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	testkit.Eventually(t, 30*time.Second, "CRD established", func(ctx context.Context) (bool, error) {
		got := &apiextv1.CustomResourceDefinition{}
		if err := c.Get(ctx, client.ObjectKey{Name: crd.GetName()}, got); err != nil {
			return false, err
		}
		for _, cond := range got.Status.Conditions {
			if cond.Type == apiextv1.Established && cond.Status == apiextv1.ConditionTrue {
				return true, nil
			}
		}
		return false, nil
	})
}
