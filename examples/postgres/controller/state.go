package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"
)

// role is what PostgreSQL has for a role.
type role struct {
	exists, canLogin, superuser bool
	verifier                    string // pg_authid.rolpassword
	comment                     string
}

// database is what PostgreSQL has for a database.
type database struct {
	exists    bool
	owner     string
	connLimit int32
	comment   string
}

func (s *Server) readRole(ctx context.Context, name string) (role, error) {
	r := role{exists: true}
	err := s.pool.QueryRow(ctx, `SELECT rolcanlogin, rolsuper, coalesce(rolpassword, ''), coalesce(shobj_description(oid, 'pg_authid'), '')
		FROM pg_authid WHERE rolname = $1`, name).Scan(&r.canLogin, &r.superuser, &r.verifier, &r.comment)
	if errors.Is(err, pgx.ErrNoRows) {
		return role{}, nil
	}
	if err != nil {
		return role{}, fmt.Errorf("reading role %s: %w", name, err)
	}
	return r, nil
}

func (s *Server) readDatabase(ctx context.Context, name string) (database, error) {
	d := database{exists: true}
	err := s.pool.QueryRow(ctx, `SELECT pg_get_userbyid(datdba), datconnlimit, coalesce(shobj_description(oid, 'pg_database'), '')
		FROM pg_database WHERE datname = $1`, name).Scan(&d.owner, &d.connLimit, &d.comment)
	if errors.Is(err, pgx.ErrNoRows) {
		return database{}, nil
	}
	if err != nil {
		return database{}, fmt.Errorf("reading database %s: %w", name, err)
	}
	return d, nil
}

// inDatabase runs f on a connection to database name as the admin.
func (s *Server) inDatabase(ctx context.Context, name string, f func(*pgx.Conn) error) error {
	cfg := s.admin.Copy()
	cfg.Database = name
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return fmt.Errorf("connecting to database %s: %w", name, err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	return f(conn)
}

// extensions lists the extensions installed in the database (plpgsql, which
// every database has, left out) and which of want the server can install.
func extensions(ctx context.Context, conn *pgx.Conn, want []string) (installed, unavailable []string, err error) {
	rows, _ := conn.Query(ctx, `SELECT extname FROM pg_extension WHERE extname <> 'plpgsql' ORDER BY 1`)
	if installed, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
		return nil, nil, fmt.Errorf("listing extensions: %w", err)
	}
	rows, _ = conn.Query(ctx, `SELECT name FROM pg_available_extensions WHERE name = ANY($1)`, want)
	avail, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, nil, fmt.Errorf("listing available extensions: %w", err)
	}
	for _, w := range want {
		if !slices.Contains(avail, w) {
			unavailable = append(unavailable, w)
		}
	}
	return installed, unavailable, nil
}
