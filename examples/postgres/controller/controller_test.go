package controller_test

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/go-logr/logr"
	"github.com/jackc/pgx/v5"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1alpha1 "github.com/opzero/opzero/examples/postgres/api/v1alpha1"
	"github.com/opzero/opzero/examples/postgres/controller"
	"github.com/opzero/opzero/examples/postgres/internal/pgtest"
	"github.com/opzero/opzero/reconcileutil"
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
	code := testenv.Main(m, testenv.Options{CRDDirs: []string{"../config/crd"}, Scheme: scheme, NoControllerManager: true})
	pg.Stop()
	os.Exit(code)
}

// harness is a reconciler on the test's control plane and PostgreSQL, with
// its log captured to check that no password leaks.
type harness struct {
	t   *testing.T
	env *testenv.Env
	ns  string
	r   *controller.DatabaseReconciler
	ctx context.Context
	mu  sync.Mutex
	log bytes.Buffer
}

func newHarness(t *testing.T) *harness {
	env := testenv.Get(t)
	h := &harness{t: t, env: env, ns: env.Namespace(t)}
	server, err := controller.NewServer(context.Background(), pg.AdminDSN("postgres"), "", 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(server.Close)
	h.r = &controller.DatabaseReconciler{Client: env.Client, Recorder: reconcileutil.NewEventRecorder(env.Client, env.Scheme, "test"), Server: server}
	h.ctx = log.IntoContext(context.Background(), logr.FromSlogHandler(slog.NewJSONHandler(lockedWriter{h}, nil)))
	return h
}

type lockedWriter struct{ h *harness }

func (w lockedWriter) Write(b []byte) (int, error) {
	w.h.mu.Lock()
	defer w.h.mu.Unlock()
	return w.h.log.Write(b)
}

func (h *harness) create(name string, spec v1alpha1.DatabaseSpec) *v1alpha1.Database {
	h.t.Helper()
	db := &v1alpha1.Database{ObjectMeta: metav1.ObjectMeta{Namespace: h.ns, Name: name}, Spec: spec}
	if err := h.env.Client.Create(h.ctx, db); err != nil {
		h.t.Fatal(err)
	}
	return db
}

func (h *harness) reconcile(db *v1alpha1.Database) *v1alpha1.Database {
	h.t.Helper()
	key := client.ObjectKeyFromObject(db)
	if _, err := h.r.Reconcile(h.ctx, reconcile.Request{NamespacedName: key}); err != nil {
		h.t.Fatalf("reconcile %s: %v", key, err)
	}
	got := &v1alpha1.Database{}
	if err := h.env.Client.Get(h.ctx, key, got); err != nil && !apierrors.IsNotFound(err) {
		h.t.Fatal(err)
	}
	return got
}

func (h *harness) events(name string) []corev1.Event {
	h.t.Helper()
	var evs corev1.EventList
	if err := h.env.Client.List(h.ctx, &evs, client.InNamespace(h.ns)); err != nil {
		h.t.Fatal(err)
	}
	var out []corev1.Event
	for _, e := range evs.Items {
		if e.InvolvedObject.Name == name {
			out = append(out, e)
		}
	}
	return out
}

func hasEvent(evs []corev1.Event, reason, contains string) bool {
	for _, e := range evs {
		if e.Reason == reason && strings.Contains(e.Message, contains) {
			return true
		}
	}
	return false
}

// admin runs SQL as the superuser, out of band.
func admin(t *testing.T, db string, sql ...string) {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), pg.AdminDSN(db))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	for _, s := range sql {
		if _, err := conn.Exec(context.Background(), s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
}

func query[T any](t *testing.T, db, sql string, args ...any) T {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), pg.AdminDSN(db))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var v T
	if err := conn.QueryRow(context.Background(), sql, args...).Scan(&v); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return v
}

// serverState is every database and role with its attributes and comment,
// to show that a refused Database changed nothing.
func serverState(t *testing.T) string {
	return query[string](t, "postgres", `SELECT string_agg(x, E'\n' ORDER BY x) FROM (
		SELECT 'db ' || datname || ' ' || datdba || ' ' || datconnlimit || ' ' || coalesce(shobj_description(oid, 'pg_database'), '') AS x FROM pg_database
		UNION ALL SELECT 'role ' || rolname || ' ' || rolcanlogin || ' ' || coalesce(rolpassword, '') FROM pg_authid) s`)
}

func ready(db *v1alpha1.Database) *metav1.Condition {
	return meta.FindStatusCondition(db.Status.Conditions, "Ready")
}

// checkNoPassword fails if password is in the captured log, the Events or
// the status.
func (h *harness) checkNoPassword(db *v1alpha1.Database, password string) {
	h.t.Helper()
	h.mu.Lock()
	logs := h.log.String()
	h.mu.Unlock()
	if strings.Contains(logs, password) {
		h.t.Error("the password is in the reconciler's log")
	}
	evs, _ := json.Marshal(h.events(db.Name))
	if strings.Contains(string(evs), password) {
		h.t.Error("the password is in an Event")
	}
	st, _ := json.Marshal(db.Status)
	if strings.Contains(string(st), password) {
		h.t.Error("the password is in the status")
	}
	if !strings.Contains(logs, `"database"`) {
		h.t.Errorf("the log has no line about a database; the check would prove nothing:\n%s", logs)
	}
}
