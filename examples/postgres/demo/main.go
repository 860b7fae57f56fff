// Command demo is `make demo-postgres`: the Database operator managing a
// real PostgreSQL, serverless through `opzero dev`, woken from zero by an
// external event. It starts a throwaway PostgreSQL (internal/pgtest) and a
// local control plane, generates the operator's manifests with `opzero
// manifests` (a Knative Service, ApiServerSources, the sweeps, a Broker
// and a Trigger), runs `opzero dev --events=json` on them, starts the
// bridge posting to the Broker's address, and then acts as a user and as
// someone changing the server by hand. It knows what happens from opzero
// dev's event stream and from PostgreSQL, never from log lines.
package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opzero/opzero/examples/postgres/controller"
	"github.com/opzero/opzero/examples/postgres/internal/pgtest"
	"github.com/opzero/opzero/internal/devenv/controlplane"
	"github.com/opzero/opzero/internal/devenv/dev"
	"github.com/opzero/opzero/internal/devenv/devsession"
)

const (
	ns   = "demo"
	idle = "2s"
	svc  = ns + "/postgres"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "\ndemo failed:", err)
		os.Exit(1)
	}
}

type demo struct {
	root, example, dir, kubeconfig string
	c                              client.Client
	pg                             *pgtest.Server
	admin                          *pgx.Conn
	t0                             time.Time
	step                           int
	dev                            *devsession.Process
}

func (d *demo) say(format string, args ...any) {
	d.step++
	fmt.Printf("\n[%d] %s\n", d.step, fmt.Sprintf(format, args...))
}

func (d *demo) note(format string, args ...any) { fmt.Printf("    "+format+"\n", args...) }

func run(ctx context.Context) (err error) {
	d := &demo{t0: time.Now()}
	if d.root, err = controlplane.RepoRoot(); err != nil {
		return err
	}
	d.example = filepath.Join(d.root, "examples/postgres")
	if d.dir, err = os.MkdirTemp("", "opzero-demo-postgres-"); err != nil {
		return err
	}
	defer os.RemoveAll(d.dir)
	fmt.Println("opzero demo-postgres: an operator for a real PostgreSQL, serverless through `opzero dev`, woken by the server's own changes")

	d.say("PostgreSQL: a throwaway server (Debian's postgresql package, initdb in a temporary folder)")
	if d.pg, err = pgtest.Start(ctx); err != nil {
		return err
	}
	defer d.pg.Stop()
	if d.admin, err = pgx.Connect(ctx, d.pg.AdminDSN("postgres")); err != nil {
		return err
	}
	defer d.admin.Close(context.Background())
	d.note("PostgreSQL %s on 127.0.0.1:%d", d.pg.Version, d.pg.Port)

	d.say("Local control plane (etcd, kube-apiserver, kube-controller-manager)")
	plane, err := controlplane.Up(ctx, controlplane.Options{Dir: filepath.Join(d.dir, "plane"), DieWithParent: true})
	if err != nil {
		return err
	}
	defer func() {
		fmt.Println("\n[teardown] Ctrl-C to opzero dev and the bridge, then the control plane and PostgreSQL")
		if d.dev != nil {
			d.dev.Stop()
		}
		_ = plane.Stop(false)
	}()
	d.kubeconfig = plane.Kubeconfig
	if d.c, err = client.New(plane.Config, client.Options{}); err != nil {
		return err
	}
	if err := d.kubectl("create", "namespace", ns); err != nil {
		return err
	}
	d.note("Secret postgres-admin (key dsn: the superuser's URL), which the operator's manifests read into PG_ADMIN_DSN")
	if err := d.c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "postgres-admin"},
		StringData: map[string]string{"dsn": d.pg.AdminDSN("postgres")}}); err != nil {
		return err
	}
	if err := d.startDev(ctx); err != nil {
		return err
	}
	stopBridge, err := d.startBridge(ctx)
	if err != nil {
		return err
	}
	defer stopBridge()
	return d.scenario(ctx)
}

func (d *demo) startDev(ctx context.Context) error {
	d.say("The operator's manifests, from its own description (WatchesEvents adds a Broker and a Trigger)")
	opzero := filepath.Join(d.dir, "opzero")
	build := exec.CommandContext(ctx, "go", "build", "-o", opzero, "./cmd/opzero")
	build.Dir = d.root
	if out, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("building opzero: %w\n%s", err, out)
	}
	dir := filepath.Join(d.dir, "manifests")
	gen := []string{"manifests", "--operator", ".", "--namespace", ns, "--idle", idle, "-o", dir}
	fmt.Printf("    (in examples/postgres) $ opzero %s\n", strings.Join(gen, " "))
	cmd := exec.CommandContext(ctx, opzero, gen...)
	cmd.Dir = d.example
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("opzero manifests: %w\n%s", err, out)
	}
	d.say("opzero dev: apply them and play Knative's part (activator, adapters, Broker and Trigger)")
	args := []string{"dev", "-f", dir, "--kubeconfig", d.kubeconfig, "--log-dir", filepath.Join(d.dir, "logs"), "--build-dir", d.example,
		"--events=json", "--no-status"}
	fmt.Printf("    $ opzero %s\n", strings.Join(args, " "))
	p, err := devsession.Start(opzero, svc, args)
	if err != nil {
		return err
	}
	d.dev = p
	ready, err := p.Next(ctx, 0, 5*time.Minute, "ready", func(e dev.Event) bool { return e.Event == dev.EventReady })
	if err != nil {
		return err
	}
	for _, s := range ready.Sources {
		if strings.HasPrefix(s, "Trigger") {
			d.note("event: ready; %s", s)
		}
	}
	return nil
}

// startBridge runs the bridge against the server, posting to the Broker's
// status.address.url.
func (d *demo) startBridge(ctx context.Context) (func(), error) {
	d.say("The bridge: LISTEN/NOTIFY from an event trigger, and the roles and databases compared every 100ms; CloudEvents to the Broker")
	out, err := exec.Command(filepath.Join(d.root, "bin", "kubectl"), "--kubeconfig", d.kubeconfig, "get", "broker", "-n", ns, "postgres",
		"-o", "jsonpath={.status.address.url}").Output()
	if err != nil {
		return nil, fmt.Errorf("reading the Broker's address: %w", err)
	}
	bin := filepath.Join(d.dir, "bridge")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./bridge")
	build.Dir = d.example
	if b, err := build.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("building the bridge: %w\n%s", err, b)
	}
	fmt.Printf("    $ bridge --dsn <the superuser's URL> --sink %s --interval 100ms\n", out)
	cmd := exec.Command(bin, "--sink", string(out), "--interval", "100ms")
	cmd.Env = append(os.Environ(), "PG_ADMIN_DSN="+d.pg.AdminDSN("postgres"))
	logf, err := os.Create(filepath.Join(d.dir, "bridge.log"))
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	return func() { _ = cmd.Process.Signal(os.Interrupt); _ = cmd.Wait(); logf.Close() }, nil
}

func (d *demo) scenario(ctx context.Context) error {
	d.say("kubectl apply a Database: the operator starts from zero and makes the database, its role and a Secret")
	if err := d.dev.WaitZero(ctx); err != nil {
		return err
	}
	mark, t := d.dev.Len(), time.Now()
	if err := d.kubectl("apply", "-n", ns, "-f", filepath.Join(d.example, "config/samples/database.yaml")); err != nil {
		return err
	}
	if _, err := d.dev.Next(ctx, mark, 2*time.Minute, "the Database reconciled", func(e dev.Event) bool {
		return e.Event == dev.EventReconciled && e.Key == ns+"/orders"
	}); err != nil {
		return err
	}
	d.note("reconciled %s after apply%s", since(t), d.dev.ColdNote(mark))
	_ = d.kubectl("get", "-n", ns, "databases")
	_ = d.kubectl("get", "-n", ns, "secret", "orders-credentials", "-o", "go-template={{range $k, $v := .data}}{{$k}} {{end}}")
	fmt.Println()
	d.psql("SELECT datname, pg_get_userbyid(datdba) AS owner, datconnlimit FROM pg_database WHERE datname = 'orders'")

	for _, drift := range []struct{ what, sql, healed string }{
		{"ALTER the connection limit by hand", "ALTER DATABASE orders CONNECTION LIMIT 1",
			"SELECT datconnlimit = 20 FROM pg_database WHERE datname = 'orders'"},
		{"drop the role by hand (after taking the database from it, as PostgreSQL requires)", "ALTER DATABASE orders OWNER TO postgres; DROP ROLE orders",
			"SELECT count(*) = 1 FROM pg_database WHERE datname = 'orders' AND pg_get_userbyid(datdba) = 'orders'"},
	} {
		d.say("With the operator at zero instances, %s", drift.what)
		if err := d.dev.WaitZero(ctx); err != nil {
			return err
		}
		mark, t := d.dev.Len(), time.Now()
		fmt.Printf("    $ psql -c %q\n", drift.sql)
		for _, s := range strings.Split(drift.sql, "; ") {
			if _, err := d.admin.Exec(ctx, s); err != nil {
				return err
			}
		}
		if err := d.waitSQL(ctx, drift.healed); err != nil {
			return err
		}
		d.note("healed in PostgreSQL %s after the change (the bridge's event, the Broker, the Trigger, a cold start, the reconcile)", since(t))
		if _, err := d.dev.Next(ctx, mark, time.Minute, "the bridge's event delivered", func(e dev.Event) bool {
			return e.Event == dev.EventDelivery && e.Type == controller.ChangedEventType
		}); err != nil {
			return err
		}
		d.note("event: delivery of %s%s", controller.ChangedEventType, d.dev.ColdNote(mark))
	}
	fmt.Println()
	_ = d.kubectl("get", "-n", ns, "databases")
	_ = d.kubectl("get", "-n", ns, "events", "--field-selector", "involvedObject.kind=Database", "-o", "custom-columns=REASON:.reason,MESSAGE:.message")

	d.say("kubectl delete the Database: the finalizer drops the database and the role")
	if err := d.dev.WaitZero(ctx); err != nil {
		return err
	}
	if err := d.kubectl("delete", "-n", ns, "database", "orders", "--wait=true", "--timeout=2m"); err != nil {
		return err
	}
	d.psql("SELECT (SELECT count(*) FROM pg_database WHERE datname = 'orders') AS databases, (SELECT count(*) FROM pg_roles WHERE rolname = 'orders') AS roles")
	mark = d.dev.Len()
	if _, err := d.dev.Next(ctx, mark, time.Minute, "scaled to zero after the deletion", func(e dev.Event) bool {
		return e.Event == dev.EventScaledToZero && e.Service == svc
	}); err != nil {
		return err
	}

	d.say("What opzero dev reported, from its event stream")
	d.dev.Summarize(d.t0)
	d.say("Done in %s", since(d.t0))
	return nil
}

// waitSQL polls a boolean query until it is true.
func (d *demo) waitSQL(ctx context.Context, q string) error {
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		var ok bool
		if err := d.admin.QueryRow(ctx, q).Scan(&ok); err == nil && ok {
			return nil
		}
		time.Sleep(5 * time.Millisecond)
	}
	return fmt.Errorf("not healed within 2 minutes: %s", q)
}

// psql prints a query's rows, as psql would.
func (d *demo) psql(q string) {
	fmt.Printf("    $ psql -c %q\n", q)
	rows, err := d.admin.Query(context.Background(), q)
	if err != nil {
		fmt.Println("      " + err.Error())
		return
	}
	defer rows.Close()
	var names []string
	for _, f := range rows.FieldDescriptions() {
		names = append(names, f.Name)
	}
	fmt.Println("      " + strings.Join(names, " | "))
	for rows.Next() {
		vals, _ := rows.Values()
		var s []string
		for _, v := range vals {
			s = append(s, fmt.Sprint(v))
		}
		fmt.Println("      " + strings.Join(s, " | "))
	}
}

func (d *demo) kubectl(args ...string) error {
	fmt.Printf("    $ kubectl %s\n", strings.Join(args, " "))
	cmd := exec.Command(filepath.Join(d.root, "bin", "kubectl"), append([]string{"--kubeconfig", d.kubeconfig}, args...)...)
	out, err := cmd.CombinedOutput()
	for _, line := range strings.Split(strings.TrimRight(string(out), "\n"), "\n") {
		fmt.Println("      " + line)
	}
	if err != nil {
		return fmt.Errorf("kubectl %s: %w", args[0], err)
	}
	return nil
}

func since(t time.Time) string { return time.Since(t).Round(time.Millisecond).String() }
