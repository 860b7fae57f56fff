// Command bridge reports changes made in a PostgreSQL server to the
// databases and roles the Database operator manages, as CloudEvents posted
// to a Knative Broker, so that the operator (scaled to zero) is woken and
// puts them back at once instead of at the next sweep.
//
//	bridge --dsn postgres://postgres:secret@db:5432/postgres --sink http://broker-ingress/ns/default
//
// What it detects, and how:
//
//   - Extensions created, altered or dropped in a managed database: an
//     event trigger (ddl_command_end for "... EXTENSION" tags; sql_drop for
//     extensions another command dropped, e.g. DROP SCHEMA ... CASCADE)
//     that the bridge installs in each managed database calls pg_notify on
//     the channel opzero_changes; the bridge LISTENs there (a NOTIFY reaches
//     only listeners of its own database, so it keeps one connection per
//     managed database). Latency: the commit.
//   - Roles and databases themselves (DROP ROLE, ALTER ROLE ... NOLOGIN or
//     PASSWORD, ALTER DATABASE ... CONNECTION LIMIT or OWNER, DROP
//     DATABASE): PostgreSQL fires no event trigger for these shared
//     objects, so the bridge reads pg_authid and pg_database every
//     --interval (default 250ms; one small catalog query) and compares.
//     Latency: up to the interval. A role or database that appears is
//     reported too (usually the operator's own creation: one extra
//     reconcile), since a change made before the bridge first saw it would
//     otherwise pass for its initial state. A change undone within one
//     interval is not seen; the operator's sweep still catches anything
//     missed.
//   - Not detected: changes inside a database other than extensions (the
//     operator does not manage them), GRANTs on the database, and anything
//     while the bridge is down (it reports every managed database once when
//     it starts, so the operator checks them all).
//
// Costs: each managed database holds one superuser connection of the
// bridge (it counts towards the database's connection limit, and a DROP
// DATABASE by hand needs WITH (FORCE), as the operator's own drop uses).
//
// "Managed" means the object's comment is the one the operator writes
// ("managed by the Kubernetes Database ..."). Each event has type
// dev.opzero.example.postgres.changed, the database (= role) name in the
// extension pgdatabase and in the data, and what changed; never a
// password (the catalog's password verifier is compared as a hash, not
// sent). A post the Broker does not accept is retried with backoff.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "bridge:", err)
		os.Exit(1)
	}
}

func run() error {
	var o options
	flag.StringVar(&o.DSN, "dsn", os.Getenv("PG_ADMIN_DSN"), "a PostgreSQL superuser's connection URL (event triggers need a superuser); default $PG_ADMIN_DSN")
	flag.StringVar(&o.Sink, "sink", os.Getenv("K_SINK"), "where to post the CloudEvents: the Broker's address (status.address.url); default $K_SINK, as Knative's SinkBinding and ContainerSource set it")
	flag.DurationVar(&o.Interval, "interval", 250*time.Millisecond, "how often to compare the roles and databases with the last reading")
	flag.StringVar(&o.Source, "source", "", "the CloudEvents source attribute; default //postgres.example.opzero.dev/bridge/<host>:<port> of the DSN")
	flag.Parse()
	if o.DSN == "" {
		return errors.New("no server: set --dsn or PG_ADMIN_DSN to a superuser's URL (postgres://postgres:password@host:5432/postgres)")
	}
	if o.Sink == "" {
		return errors.New("no sink: set --sink or K_SINK to the Broker's address (kubectl get broker -o jsonpath='{.status.address.url}')")
	}
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	b, err := newBridge(ctx, o, log)
	if err != nil {
		return err
	}
	log.Info("bridge started", "sink", o.Sink, "interval", o.Interval.String(), "source", b.source)
	err = b.Run(ctx)
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}
