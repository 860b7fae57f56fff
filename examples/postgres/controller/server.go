package controller

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/opzero/opzero/operator"
)

// Server is the PostgreSQL the operator manages databases in, reached as a
// superuser (CREATEDB and CREATEROLE would do for databases and roles;
// reading pg_authid to compare passwords and creating untrusted extensions
// need a superuser).
type Server struct {
	pool  *pgxpool.Pool
	admin *pgx.ConnConfig
	// Host and Port are what the credentials Secret tells applications.
	Host string
	Port int
}

// NewServer connects lazily to the server at adminDSN (a libpq URL or
// key=value string). publicHost/publicPort, when set, are written to the
// Secrets instead of the DSN's host and port (e.g. a Service's name).
func NewServer(ctx context.Context, adminDSN, publicHost string, publicPort int) (*Server, error) {
	cfg, err := pgxpool.ParseConfig(adminDSN)
	if err != nil {
		// pgx's parse errors quote the DSN, password included: say only what to fix.
		return nil, errors.New("the admin DSN does not parse as a PostgreSQL URL or key=value string (postgres://user:password@host:port/postgres)")
	}
	cfg.MaxConns = 4
	cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeExec
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("admin connection pool: %w", err)
	}
	s := &Server{pool: pool, admin: cfg.ConnConfig, Host: cfg.ConnConfig.Host, Port: int(cfg.ConnConfig.Port)}
	if publicHost != "" {
		s.Host = publicHost
	}
	if publicPort != 0 {
		s.Port = publicPort
	}
	return s, nil
}

// Close closes the admin connections.
func (s *Server) Close() { s.pool.Close() }

// URI is the connection URL an application uses.
func (s *Server) URI(user, password, db string) string {
	return "postgres://" + user + ":" + password + "@" + net.JoinHostPort(s.Host, strconv.Itoa(s.Port)) + "/" + db
}

// exec runs one DDL statement with the simple protocol (CREATE DATABASE
// refuses transaction blocks). Its error names what was done, never the
// statement, which may hold a password. Planned (`opzero plan`), it runs
// nothing: opzero dry-runs the Kubernetes writes, not PostgreSQL's, and
// the plan shows what the reconcile would report (its status and Event).
func exec(ctx context.Context, q execer, what, sql string) error {
	if operator.Planning(ctx) {
		return nil
	}
	if _, err := q.Exec(ctx, sql, pgx.QueryExecModeSimpleProtocol); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

type execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}
