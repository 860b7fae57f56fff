package controller_test

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/opzero/opzero/examples/postgres/api/v1alpha1"
)

func TestLifecycle(t *testing.T) {
	h := newHarness(t)
	db := h.create("orders-db", v1alpha1.DatabaseSpec{ConnectionLimit: -1, Extensions: []string{"citext"}})
	db = h.reconcile(db)
	if c := ready(db); c == nil || c.Status != metav1.ConditionTrue || db.Status.ObservedGeneration != db.Generation {
		t.Fatalf("after create: Ready %+v, observedGeneration %d (generation %d)", c, db.Status.ObservedGeneration, db.Generation)
	}
	if db.Status.DatabaseName != "orders_db" || db.Status.SecretName != "orders-db-credentials" {
		t.Fatalf("status names %q %q, want orders_db and orders-db-credentials", db.Status.DatabaseName, db.Status.SecretName)
	}
	sec := &corev1.Secret{}
	if err := h.env.Client.Get(h.ctx, client.ObjectKey{Namespace: h.ns, Name: "orders-db-credentials"}, sec); err != nil {
		t.Fatal(err)
	}
	if !metav1.IsControlledBy(sec, db) {
		t.Errorf("the Secret is not controlled by the Database: %+v", sec.OwnerReferences)
	}
	password := string(sec.Data["password"])
	if len(password) < 32 || string(sec.Data["user"]) != "orders_db" || string(sec.Data["database"]) != "orders_db" {
		t.Fatalf("Secret data: user %q database %q password of %d bytes", sec.Data["user"], sec.Data["database"], len(password))
	}
	// The credentials work, and the role owns the database.
	conn, err := pgx.Connect(context.Background(), string(sec.Data["uri"])+"?sslmode=disable")
	if err != nil {
		t.Fatalf("connecting with the Secret's uri: %v", err)
	}
	var user, owner string
	if err := conn.QueryRow(context.Background(), "SELECT current_user, pg_get_userbyid(datdba) FROM pg_database WHERE datname = current_database()").Scan(&user, &owner); err != nil {
		t.Fatal(err)
	}
	conn.Close(context.Background())
	if user != "orders_db" || owner != "orders_db" {
		t.Errorf("connected as %q to a database owned by %q, want orders_db for both", user, owner)
	}
	if got := query[int](t, "orders_db", "SELECT count(*) FROM pg_extension WHERE extname = 'citext'"); got != 1 {
		t.Errorf("citext installed %d times, want 1", got)
	}
	if !hasEvent(h.events(db.Name), "Created", "database orders_db created") {
		t.Errorf("no Created Event: %+v", h.events(db.Name))
	}

	// A spec change: connection limit and extensions.
	db.Spec.ConnectionLimit = 7
	db.Spec.Extensions = []string{"hstore"}
	if err := h.env.Client.Update(h.ctx, db); err != nil {
		t.Fatal(err)
	}
	db = h.reconcile(db)
	if got := query[int32](t, "postgres", "SELECT datconnlimit FROM pg_database WHERE datname = 'orders_db'"); got != 7 {
		t.Errorf("connection limit %d after the change, want 7", got)
	}
	if got := query[string](t, "orders_db", "SELECT coalesce(string_agg(extname, ',' ORDER BY extname), '') FROM pg_extension WHERE extname <> 'plpgsql'"); got != "hstore" {
		t.Errorf("extensions %q after the change, want hstore (citext dropped)", got)
	}
	if !hasEvent(h.events(db.Name), "Updated", "connection limit -1 set to 7") || db.Status.Heals != 0 {
		t.Errorf("after a spec change: heals %d, Events %+v; want an Updated Event and no heal", db.Status.Heals, h.events(db.Name))
	}

	// Drift, by hand: the connection limit, LOGIN, an extension, the password.
	admin(t, "postgres", "ALTER DATABASE orders_db CONNECTION LIMIT 1", "ALTER ROLE orders_db NOLOGIN PASSWORD 'changed-by-hand'")
	admin(t, "orders_db", "DROP EXTENSION hstore")
	db = h.reconcile(db)
	if got := query[int32](t, "postgres", "SELECT datconnlimit FROM pg_database WHERE datname = 'orders_db'"); got != 7 {
		t.Errorf("connection limit %d after healing, want 7", got)
	}
	if db.Status.Heals != 1 || !hasEvent(h.events(db.Name), "Healed", "extension hstore created") {
		t.Errorf("after drift: heals %d, Events %+v; want 1 and a Healed Event", db.Status.Heals, h.events(db.Name))
	}
	conn, err = pgx.Connect(context.Background(), string(sec.Data["uri"])+"?sslmode=disable")
	if err != nil {
		t.Fatalf("the Secret's credentials after healing: %v", err)
	}
	conn.Close(context.Background())

	// The role dropped by hand (after giving the database away, which
	// PostgreSQL requires): recreated with the Secret's password, owner back.
	admin(t, "postgres", "ALTER DATABASE orders_db OWNER TO postgres", "DROP ROLE orders_db")
	db = h.reconcile(db)
	if got := query[string](t, "postgres", "SELECT pg_get_userbyid(datdba) FROM pg_database WHERE datname = 'orders_db'"); got != "orders_db" {
		t.Errorf("owner %q after healing a dropped role, want orders_db", got)
	}
	conn, err = pgx.Connect(context.Background(), string(sec.Data["uri"])+"?sslmode=disable")
	if err != nil {
		t.Fatalf("the Secret's credentials after the role was recreated: %v", err)
	}
	conn.Close(context.Background())

	// A rename is refused and changes nothing; setting the name back works.
	db.Spec.DatabaseName = "orders_renamed"
	if err := h.env.Client.Update(h.ctx, db); err != nil {
		t.Fatal(err)
	}
	before := serverState(t)
	db = h.reconcile(db)
	if c := ready(db); c == nil || c.Reason != "NameChanged" || serverState(t) != before {
		t.Fatalf("after a rename: Ready %+v, server changed %v; want NameChanged and no change", c, serverState(t) != before)
	}
	db.Spec.DatabaseName = ""
	if err := h.env.Client.Update(h.ctx, db); err != nil {
		t.Fatal(err)
	}
	if db = h.reconcile(db); ready(db).Status != metav1.ConditionTrue {
		t.Fatalf("after the name was set back: Ready %+v", ready(db))
	}

	// A reconcile with nothing to do changes nothing and says nothing.
	evBefore := len(h.events(db.Name))
	db = h.reconcile(db)
	if after := len(h.events(db.Name)); after != evBefore || db.Status.Heals != 2 {
		t.Errorf("an idle reconcile: Events %d -> %d, heals %d (want 2)", evBefore, after, db.Status.Heals)
	}
	h.checkNoPassword(db, password)

	// Deletion: database and role dropped, finalizer removed.
	if err := h.env.Client.Delete(h.ctx, db); err != nil {
		t.Fatal(err)
	}
	gone := h.reconcile(db)
	if gone.Name != "" {
		t.Errorf("the Database is still there after its finalizer ran: finalizers %v", gone.Finalizers)
	}
	if n := query[int](t, "postgres", "SELECT count(*) FROM pg_database WHERE datname = 'orders_db'") +
		query[int](t, "postgres", "SELECT count(*) FROM pg_roles WHERE rolname = 'orders_db'"); n != 0 {
		t.Errorf("%d of database and role orders_db left after deletion", n)
	}
	if !hasEvent(h.events(db.Name), "Dropped", "orders_db") {
		t.Errorf("no Dropped Event")
	}
}

func TestBadNamesTouchNothing(t *testing.T) {
	h := newHarness(t)
	cases := []struct{ name, dbName, want string }{
		{"upper", "Orders", "not a lower-case PostgreSQL identifier"},
		{"quote", `x"; DROP ROLE postgres; --`, "not a lower-case PostgreSQL identifier"},
		{"long", strings.Repeat("a", 64), "would truncate"},
		{"reserved-prefix", "pg_orders", "reserves"},
		{"theirs", "template1", "PostgreSQL's own"},
	}
	before := serverState(t)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			db := h.reconcile(h.create(c.name, v1alpha1.DatabaseSpec{DatabaseName: c.dbName}))
			cond := ready(db)
			if cond == nil || cond.Status != metav1.ConditionFalse || cond.Reason != "InvalidName" || !strings.Contains(cond.Message, c.want) {
				t.Fatalf("Ready %+v, want False InvalidName saying %q", cond, c.want)
			}
			if !hasEvent(h.events(c.name), "InvalidName", c.want) {
				t.Errorf("no Warning Event InvalidName: %+v", h.events(c.name))
			}
			if len(db.Finalizers) != 0 {
				t.Errorf("finalizers %v on a refused Database", db.Finalizers)
			}
			var secs corev1.SecretList
			_ = h.env.Client.List(h.ctx, &secs, client.InNamespace(h.ns))
			for _, s := range secs.Items {
				if strings.HasPrefix(s.Name, c.name) {
					t.Errorf("Secret %s made for a refused Database", s.Name)
				}
			}
		})
	}
	if after := serverState(t); after != before {
		t.Errorf("the server changed:\nbefore:\n%s\nafter:\n%s", before, after)
	}
}

func TestSecretTakenTouchesNothing(t *testing.T) {
	h := newHarness(t)
	theirs := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: h.ns, Name: "shop-credentials"}, StringData: map[string]string{"password": "theirs"}}
	if err := h.env.Client.Create(h.ctx, theirs); err != nil {
		t.Fatal(err)
	}
	before := serverState(t)
	db := h.reconcile(h.create("shop", v1alpha1.DatabaseSpec{}))
	if c := ready(db); c == nil || c.Reason != "SecretTaken" || len(db.Finalizers) != 0 {
		t.Fatalf("Ready %+v, finalizers %v; want SecretTaken and none", c, db.Finalizers)
	}
	if after := serverState(t); after != before {
		t.Errorf("the server changed:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	got := &corev1.Secret{}
	if err := h.env.Client.Get(h.ctx, client.ObjectKeyFromObject(theirs), got); err != nil || string(got.Data["password"]) != "theirs" {
		t.Errorf("their Secret changed: %v %q", err, got.Data["password"])
	}
}

func TestNameTakenTouchesNothing(t *testing.T) {
	h := newHarness(t)
	admin(t, "postgres", "CREATE DATABASE someone_elses")
	t.Cleanup(func() { admin(t, "postgres", "DROP DATABASE IF EXISTS someone_elses") })
	before := serverState(t)
	db := h.reconcile(h.create("mine", v1alpha1.DatabaseSpec{DatabaseName: "someone_elses"}))
	if c := ready(db); c == nil || c.Reason != "NameTaken" {
		t.Fatalf("Ready %+v, want NameTaken", c)
	}
	if after := serverState(t); after != before {
		t.Errorf("the server changed:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	// Deleting it leaves someone else's database alone.
	if err := h.env.Client.Delete(h.ctx, db); err != nil {
		t.Fatal(err)
	}
	h.reconcile(db)
	if n := query[int](t, "postgres", "SELECT count(*) FROM pg_database WHERE datname = 'someone_elses'"); n != 1 {
		t.Error("deleting a refused Database dropped a database it never made")
	}
}
