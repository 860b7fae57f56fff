package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	"github.com/jackc/pgx/v5"

	"github.com/opzero/opzero/examples/postgres/internal/pgtest"
	"github.com/opzero/opzero/internal/testkit"
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
	code := m.Run()
	pg.Stop()
	os.Exit(code)
}

// sink collects the events posted to it, answering 202 like a Broker.
type sink struct {
	mu     sync.Mutex
	events []cloudevents.Event
	raw    []string
}

func (s *sink) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	r.Body = io.NopCloser(strings.NewReader(string(body)))
	e, err := cloudevents.NewEventFromHTTPRequest(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	s.events = append(s.events, *e)
	s.raw = append(s.raw, fmt.Sprint(r.Header)+string(body))
	s.mu.Unlock()
	w.WriteHeader(http.StatusAccepted)
}

// await waits for an event about database db, object and change.
func (s *sink) await(t *testing.T, db, object, change string) cloudevents.Event {
	t.Helper()
	var found cloudevents.Event
	testkit.Eventually(t, 20*time.Second, fmt.Sprintf("an event: %s %s %s", object, db, change), func(context.Context) (bool, error) {
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, e := range s.events {
			var c Change
			_ = json.Unmarshal(e.Data(), &c)
			if c.Database == db && c.Object == object && c.Change == change {
				found = e
				return true, nil
			}
		}
		return false, nil
	})
	return found
}

func sql(t *testing.T, db string, stmts ...string) {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), pg.AdminDSN(db))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	for _, s := range stmts {
		if _, err := conn.Exec(context.Background(), s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
}

func TestBridgeReportsChangesToManagedObjects(t *testing.T) {
	if testing.Short() {
		t.Skip("needs PostgreSQL")
	}
	const marker = managedPrefix + "ns/app (uid 1)"
	sql(t, "postgres",
		"CREATE ROLE app LOGIN PASSWORD 'app-password-1234'", "COMMENT ON ROLE app IS '"+marker+"'",
		"CREATE DATABASE app OWNER app", "COMMENT ON DATABASE app IS '"+marker+"'",
		"CREATE DATABASE unmanaged")
	s := &sink{}
	srv := httptest.NewServer(s)
	defer srv.Close()
	b, err := newBridge(context.Background(), options{DSN: pg.AdminDSN("postgres"), Sink: srv.URL, Interval: 50 * time.Millisecond},
		slog.New(slog.NewTextHandler(testWriter{t}, nil)))
	if err != nil {
		t.Fatal(err)
	}
	testkit.Background(t, func(ctx context.Context) error {
		if err := b.Run(ctx); err != context.Canceled {
			return err
		}
		return nil
	})

	e := s.await(t, "app", "database", "present")
	if e.Type() != EventType || e.Extensions()[DatabaseExtension] != "app" || !strings.HasPrefix(e.Source(), "//postgres.example.opzero.dev/bridge/127.0.0.1:") {
		t.Errorf("the start event: type %q, %s %v, source %q", e.Type(), DatabaseExtension, e.Extensions()[DatabaseExtension], e.Source())
	}
	sql(t, "postgres", "ALTER DATABASE app CONNECTION LIMIT 3")
	s.await(t, "app", "database", "altered")
	sql(t, "postgres", "ALTER ROLE app NOLOGIN")
	s.await(t, "app", "role", "altered")
	sql(t, "postgres", "ALTER ROLE app PASSWORD 'app-password-5678'")
	testkit.Eventually(t, 20*time.Second, "a second role event (the password)", func(context.Context) (bool, error) {
		n := 0
		s.mu.Lock()
		for _, e := range s.events {
			if e.Subject() == "role/app" {
				n++
			}
		}
		s.mu.Unlock()
		return n >= 2, nil
	})

	// Extensions: the listener installs the event trigger first.
	testkit.Eventually(t, 20*time.Second, "the event trigger in database app", func(ctx context.Context) (bool, error) {
		conn, err := pgx.Connect(ctx, pg.AdminDSN("app"))
		if err != nil {
			return false, err
		}
		defer conn.Close(ctx)
		var n int
		err = conn.QueryRow(ctx, "SELECT count(*) FROM pg_event_trigger WHERE evtname LIKE 'opzero_bridge_%'").Scan(&n)
		return n == 2, err
	})
	sql(t, "app", "CREATE EXTENSION citext")
	s.await(t, "app", "extension", "create extension")
	sql(t, "app", "DROP EXTENSION citext")
	s.await(t, "app", "extension", "drop extension")
	sql(t, "app", "CREATE SCHEMA x", "CREATE EXTENSION hstore SCHEMA x", "DROP SCHEMA x CASCADE")
	s.await(t, "app", "extension", "drop schema")
	s.mu.Lock()
	before := len(s.events)
	s.mu.Unlock()
	sql(t, "app", "CREATE TABLE t (i int)", "DROP TABLE t") // not the operator's business

	sql(t, "postgres", "ALTER DATABASE unmanaged CONNECTION LIMIT 2", "DROP DATABASE unmanaged")
	sql(t, "postgres", "ALTER DATABASE app OWNER TO postgres", "DROP ROLE app")
	s.await(t, "app", "role", "dropped")
	sql(t, "postgres", "DROP DATABASE app WITH (FORCE)")
	s.await(t, "app", "database", "dropped")

	s.mu.Lock()
	for _, e := range s.events[before:] {
		if strings.Contains(strings.ToLower(string(e.Data())), "table") {
			t.Errorf("an event for table DDL, which the operator does not manage: %s", e.Data())
		}
	}
	s.mu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range s.events {
		if e.Extensions()[DatabaseExtension] == "unmanaged" {
			t.Errorf("an event about an unmanaged database: %s", e.Data())
		}
	}
	for _, r := range s.raw {
		if strings.Contains(r, "app-password") || strings.Contains(r, "SCRAM") {
			t.Errorf("an event carries a password or its verifier: %s", r)
		}
	}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(b)))
	return len(b), nil
}
