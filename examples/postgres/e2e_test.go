package main_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	corev1 "k8s.io/api/core/v1"
	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/opzero/opzero/examples/postgres/api/v1alpha1"
	"github.com/opzero/opzero/examples/postgres/controller"
	"github.com/opzero/opzero/examples/postgres/internal/pgtest"
	"github.com/opzero/opzero/internal/devenv/dev"
	"github.com/opzero/opzero/internal/devenv/devtest"
	"github.com/opzero/opzero/internal/manifests"
	"github.com/opzero/opzero/internal/testkit"
	"github.com/opzero/opzero/testenv"
)

var pg *pgtest.Server

func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		os.Exit(m.Run())
	}
	var err error
	if pg, err = pgtest.Start(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	_ = v1alpha1.AddToScheme(scheme)
	_ = apiextv1.AddToScheme(scheme)
	code := testenv.Main(m, testenv.Options{KnativeCRDs: true, Scheme: scheme})
	pg.Stop()
	os.Exit(code)
}

// events collects opzero dev's event stream.
type events struct {
	mu  sync.Mutex
	all []dev.Event
}

func (e *events) Write(b []byte) (int, error) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		var ev dev.Event
		if json.Unmarshal(sc.Bytes(), &ev) == nil {
			e.mu.Lock()
			e.all = append(e.all, ev)
			e.mu.Unlock()
		}
	}
	return len(b), nil
}

// since returns the events after t of the given kind.
func (e *events) since(t time.Time, kind string) []dev.Event {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []dev.Event
	for _, ev := range e.all {
		if !ev.Time.Before(t) && ev.Event == kind {
			out = append(out, ev)
		}
	}
	return out
}

func adminConn(t *testing.T, db string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), pg.AdminDSN(db))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

func scalar[T any](t *testing.T, conn *pgx.Conn, sql string, args ...any) T {
	t.Helper()
	var v T
	if err := conn.QueryRow(context.Background(), sql, args...).Scan(&v); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return v
}

func serverState(t *testing.T, conn *pgx.Conn) string {
	return scalar[string](t, conn, `SELECT string_agg(x, E'\n' ORDER BY x) FROM (
		SELECT 'db ' || datname || ' ' || datdba || ' ' || datconnlimit AS x FROM pg_database
		UNION ALL SELECT 'role ' || rolname || ' ' || rolcanlogin || ' ' || coalesce(rolpassword, '') FROM pg_authid) s`)
}

// TestDatabaseThroughDev is the proof: the operator, deployed by
// `opzero manifests` and played by `opzero dev` (Knative Service, the
// ApiServerSources, the Broker and its Trigger), and the bridge, against
// a real PostgreSQL: create, change, drift made by hand while the operator
// is at zero instances healed through bridge -> Broker -> Trigger (the
// time from the change to healed is logged), an event naming no database
// answered 400, drift with the bridge stopped healed by the full sweep, a
// bad name refused, delete. Passwords appear in no log, Event or status.
func TestDatabaseThroughDev(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the operator through opzero dev against PostgreSQL and a control plane")
	}
	env := testenv.Get(t)
	ns := env.Namespace(t)
	ctx := context.Background()
	c := env.Client
	wd, _ := os.Getwd()

	admin := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "postgres-admin"},
		StringData: map[string]string{"dsn": pg.AdminDSN("postgres")}}
	if err := c.Create(ctx, admin); err != nil {
		t.Fatal(err)
	}
	objs, err := manifests.Build(ctx, wd, ".", manifests.Options{Namespace: ns, Source: manifests.SourceKnative, NoDurableTime: true})
	if err != nil {
		t.Fatal(err)
	}
	stream, err := manifests.Stream(objs)
	if err != nil {
		t.Fatal(err)
	}
	us, err := dev.ReadManifests("-", bytes.NewReader(stream))
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, u := range us {
		kinds = append(kinds, u.GetKind())
		if u.GetKind() == "PingSource" { // no sweep during the test: the wake-ups are the bridge's
			_ = unstructured.SetNestedField(u.Object, "0 0 1 1 *", "spec", "schedule")
		}
	}
	if k := strings.Join(kinds, ","); !strings.Contains(k, "Broker,Trigger") {
		t.Fatalf("the manifests have %s: want a Broker and a Trigger (WatchesEvents)", k)
	}
	evs := &events{}
	devDir := t.TempDir()
	p := devtest.Start(t, ctx, dev.Options{Kubeconfig: env.Kubeconfig, Objects: us, Dir: devDir, CacheDir: t.TempDir(),
		BuildDir: wd, Idle: time.Second, Events: dev.NewEventWriter(evs)})
	svc := p.Services[0]
	atZero := func(step string) {
		testkit.Eventually(t, 90*time.Second, "scaled to zero after "+step, func(context.Context) (bool, error) { return svc.Activator.Instances() == 0, nil })
	}

	// The bridge, posting to the Broker's address.
	var brokers unstructured.UnstructuredList
	brokers.SetAPIVersion("eventing.knative.dev/v1")
	brokers.SetKind("BrokerList")
	if err := c.List(ctx, &brokers, client.InNamespace(ns)); err != nil || len(brokers.Items) != 1 {
		t.Fatalf("Brokers in %s: %d, %v; want 1", ns, len(brokers.Items), err)
	}
	sink, _, _ := unstructured.NestedString(brokers.Items[0].Object, "status", "address", "url")
	bridgeBin := filepath.Join(t.TempDir(), "bridge")
	if out, err := exec.Command("go", "build", "-o", bridgeBin, "./bridge").CombinedOutput(); err != nil {
		t.Fatalf("building the bridge: %v\n%s", err, out)
	}
	bridge, err := testkit.StartChild(t, exec.Command(bridgeBin, "--dsn", pg.AdminDSN("postgres"), "--sink", sink, "--interval", "100ms"), "", time.Minute)
	if err != nil {
		t.Fatal(err)
	}

	// Create.
	db := &v1alpha1.Database{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "orders"},
		Spec: v1alpha1.DatabaseSpec{ConnectionLimit: -1, Extensions: []string{"citext"}}}
	if err := c.Create(ctx, db); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(db)
	isReady := func(ctx context.Context) (bool, error) {
		if err := c.Get(ctx, key, db); err != nil {
			return false, err
		}
		cond := meta.FindStatusCondition(db.Status.Conditions, "Ready")
		return cond != nil && cond.Status == metav1.ConditionTrue && db.Status.ObservedGeneration == db.Generation, nil
	}
	testkit.Eventually(t, 90*time.Second, "Database orders Ready", isReady)
	sec := &corev1.Secret{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "orders-credentials"}, sec); err != nil {
		t.Fatal(err)
	}
	password := string(sec.Data["password"])
	uri := string(sec.Data["uri"]) + "?sslmode=disable"
	app, err := pgx.Connect(ctx, uri)
	if err != nil {
		t.Fatalf("the Secret's credentials: %v", err)
	}
	app.Close(ctx)
	conn := adminConn(t, "postgres")
	if n := scalar[int](t, conn, "SELECT count(*) FROM pg_database WHERE datname = 'orders' AND pg_get_userbyid(datdba) = 'orders'"); n != 1 {
		t.Fatal("no database orders owned by role orders")
	}
	atZero("create")

	// Change.
	db.Spec.ConnectionLimit = 5
	db.Spec.Extensions = []string{"citext", "hstore"}
	if err := c.Update(ctx, db); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 90*time.Second, "connection limit 5 and hstore", func(ctx context.Context) (bool, error) {
		ok, err := isReady(ctx)
		return ok && scalar[int32](t, conn, "SELECT datconnlimit FROM pg_database WHERE datname = 'orders'") == 5 &&
			len(db.Status.Extensions) == 2, err
	})
	atZero("change")

	// Drift, by hand, with the operator at zero: the bridge's event through
	// the Broker and the Trigger wakes it.
	orders := adminConn(t, "orders") // one connection: the database's limit counts the admin's too
	drift := func(what string, healed func() bool, sql ...string) {
		t.Helper()
		atZero("the step before " + what)
		heals := db.Status.Heals
		dconn := conn
		if strings.Contains(what, "extension") {
			dconn = orders
		}
		start := time.Now()
		for _, s := range sql {
			if _, err := dconn.Exec(ctx, s); err != nil {
				t.Fatalf("%s: %v", s, err)
			}
		}
		testkit.Eventually(t, 90*time.Second, what+" healed", func(context.Context) (bool, error) { return healed(), nil })
		took := time.Since(start)
		t.Logf("drift %q: out-of-band change -> healed in PostgreSQL in %s (operator at zero instances before)", what, took.Round(time.Millisecond))
		// The delivery is reported once the operator has answered, after the heal.
		testkit.Eventually(t, 30*time.Second, "the bridge's event delivered (2xx) to an operator instance started after the change", func(context.Context) (bool, error) {
			woke := false
			for _, ev := range evs.since(start, dev.EventDelivery) {
				if ev.Type == controller.ChangedEventType && ev.Code/100 == 2 {
					woke = true
				}
			}
			return woke && len(evs.since(start, dev.EventProcessStarted)) > 0, nil
		})
		testkit.Eventually(t, 30*time.Second, "heals counted", func(ctx context.Context) (bool, error) {
			err := c.Get(ctx, key, db)
			return db.Status.Heals > heals, err
		})
	}
	drift("connection limit altered", func() bool {
		return scalar[int32](t, conn, "SELECT datconnlimit FROM pg_database WHERE datname = 'orders'") == 5
	}, "ALTER DATABASE orders CONNECTION LIMIT 1")
	drift("role dropped", func() bool {
		return scalar[int](t, conn, "SELECT count(*) FROM pg_database WHERE datname = 'orders' AND pg_get_userbyid(datdba) = 'orders'") == 1
	}, "ALTER DATABASE orders OWNER TO postgres", "DROP ROLE orders")
	drift("extension dropped", func() bool {
		return scalar[int](t, orders, "SELECT count(*) FROM pg_extension WHERE extname = 'hstore'") == 1
	}, "DROP EXTENSION hstore")
	if app, err = pgx.Connect(ctx, uri); err != nil {
		t.Fatalf("the Secret's credentials after the heals: %v", err)
	}
	app.Close(ctx)
	orders.Close(ctx)

	// An event of the bridge's type that names no database is bad input:
	// the operator answers 400 (the Broker does not retry it) and reconciles nothing.
	atZero("the heals") // their trailing no-op reconciles (the heal's own bridge events) are over
	mark := time.Now()
	req, _ := http.NewRequest(http.MethodPost, sink, strings.NewReader(`{"note":"no database"}`))
	for k, v := range map[string]string{"Ce-Specversion": "1.0", "Ce-Id": "bad-1", "Ce-Type": controller.ChangedEventType,
		"Ce-Source": "/e2e", "Content-Type": "application/json"} {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusAccepted {
		t.Fatalf("the Broker's ingress: %v %v, want 202", resp, err)
	}
	resp.Body.Close()
	testkit.Eventually(t, 90*time.Second, "the event without pgdatabase answered 400", func(context.Context) (bool, error) {
		for _, ev := range evs.since(mark, dev.EventDelivery) {
			if ev.Type == controller.ChangedEventType && ev.Code == http.StatusBadRequest {
				return true, nil
			}
		}
		return false, nil
	})
	if n := len(evs.since(mark, dev.EventReconciled)); n != 0 {
		t.Errorf("%d reconciles after an event naming no database, want 0", n)
	}

	// Drift the bridge does not report (it is stopped) waits for the full
	// sweep: its PingSource, moved from once a year to every minute, heals it.
	if err := bridge.Interrupt(); err != nil {
		t.Fatal(err)
	}
	atZero("the bridge stopped")
	start := time.Now()
	if _, err := conn.Exec(ctx, "ALTER DATABASE orders CONNECTION LIMIT 2"); err != nil {
		t.Fatal(err)
	}
	ps := &unstructured.Unstructured{}
	ps.SetAPIVersion("sources.knative.dev/v1")
	ps.SetKind("PingSource")
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "postgres-full-sweep"}, ps); err != nil {
		t.Fatal(err)
	}
	_ = unstructured.SetNestedField(ps.Object, "* * * * *", "spec", "schedule")
	if err := c.Update(ctx, ps); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 150*time.Second, "the full sweep heals the connection limit", func(context.Context) (bool, error) {
		return scalar[int32](t, conn, "SELECT datconnlimit FROM pg_database WHERE datname = 'orders'") == 5, nil
	})
	t.Logf("drift with the bridge stopped: healed by the full sweep (every minute here) in %s", time.Since(start).Round(time.Millisecond))
	testkit.Eventually(t, 30*time.Second, "the PingSource's tick delivered (reported once answered)", func(context.Context) (bool, error) {
		for _, ev := range evs.since(start, dev.EventDelivery) {
			if ev.Type == "dev.knative.sources.ping" && ev.Code == http.StatusOK {
				return true, nil
			}
		}
		return false, nil
	})
	if err := c.Get(ctx, client.ObjectKeyFromObject(ps), ps); err == nil { // back to once a year
		_ = unstructured.SetNestedField(ps.Object, "0 0 1 1 *", "spec", "schedule")
		_ = c.Update(ctx, ps)
	}

	// A name PostgreSQL would refuse: a condition, an Event, nothing in the server.
	before := serverState(t, conn)
	bad := &v1alpha1.Database{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "bad"}, Spec: v1alpha1.DatabaseSpec{DatabaseName: "Bad-Name"}}
	if err := c.Create(ctx, bad); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 90*time.Second, "Database bad: Ready=False InvalidName and a Warning Event", func(ctx context.Context) (bool, error) {
		if err := c.Get(ctx, client.ObjectKeyFromObject(bad), bad); err != nil {
			return false, err
		}
		cond := meta.FindStatusCondition(bad.Status.Conditions, "Ready")
		return cond != nil && cond.Status == metav1.ConditionFalse && cond.Reason == "InvalidName" && hasEvent(ctx, t, c, ns, "bad", "InvalidName"), nil
	})
	if after := serverState(t, conn); after != before {
		t.Errorf("a refused Database changed the server:\nbefore:\n%s\nafter:\n%s", before, after)
	}

	// Delete.
	if err := c.Delete(ctx, db); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 90*time.Second, "database and role dropped, Database and Secret gone", func(ctx context.Context) (bool, error) {
		gone := apierrors.IsNotFound(c.Get(ctx, key, &v1alpha1.Database{})) && apierrors.IsNotFound(c.Get(ctx, client.ObjectKeyFromObject(sec), &corev1.Secret{}))
		return gone && scalar[int](t, conn, "SELECT count(*) FROM pg_database WHERE datname = 'orders'")+
			scalar[int](t, conn, "SELECT count(*) FROM pg_roles WHERE rolname = 'orders'") == 0, nil
	})
	if !hasEvent(ctx, t, c, ns, "orders", "Dropped") {
		t.Error("no Dropped Event")
	}

	// The password is in no log (opzero dev's, the operator's, the
	// bridge's, PostgreSQL's), no Event, no status.
	logs, _ := filepath.Glob(filepath.Join(devDir, "*"))
	logs = append(logs, bridge.Log, pg.LogPath())
	for _, f := range logs {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		if bytes.Contains(b, []byte(password)) {
			t.Errorf("the password is in %s", f)
		}
	}
	var evl corev1.EventList
	_ = c.List(ctx, &evl, client.InNamespace(ns))
	var dbl v1alpha1.DatabaseList
	_ = c.List(ctx, &dbl, client.InNamespace(ns))
	for what, v := range map[string]any{"an Event": evl.Items, "a status": dbl.Items} {
		if b, _ := json.Marshal(v); bytes.Contains(b, []byte(password)) {
			t.Errorf("the password is in %s", what)
		}
	}
}

func hasEvent(ctx context.Context, t *testing.T, c client.Client, ns, name, reason string) bool {
	var evs corev1.EventList
	if err := c.List(ctx, &evs, client.InNamespace(ns)); err != nil {
		t.Logf("listing Events: %v", err)
		return false
	}
	for _, e := range evs.Items {
		if e.Reason == reason && e.InvolvedObject.Name == name {
			return true
		}
	}
	return false
}
