package pgtest_test

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/opzero/opzero/examples/postgres/internal/pgtest"
)

func TestStartConnectStop(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL")
	}
	ctx := context.Background()
	s, err := pgtest.Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			s.Stop()
		}
	})
	conn, err := pgx.Connect(ctx, s.AdminDSN("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	var v string
	if err := conn.QueryRow(ctx, "SHOW server_version").Scan(&v); err != nil {
		t.Fatal(err)
	}
	t.Logf("PostgreSQL %s on port %d", v, s.Port)
	if !strings.HasPrefix(v, s.Version) {
		t.Errorf("server_version %q, want the data folder's version %s", v, s.Version)
	}
	conn.Close(ctx)

	wrong := strings.Replace(s.AdminDSN("postgres"), s.Password, "wrong", 1)
	if c, err := pgx.Connect(ctx, wrong); err == nil {
		c.Close(ctx)
		t.Fatal("a wrong password connected: TCP must need the password")
	}

	s.Stop()
	stopped = true
	if _, err := os.Stat(s.Dir); !os.IsNotExist(err) {
		t.Errorf("after Stop, %s: %v, want gone", s.Dir, err)
	}
	if c, err := pgx.Connect(ctx, s.AdminDSN("postgres")); err == nil {
		c.Close(ctx)
		t.Error("the server still answers after Stop")
	}
}
