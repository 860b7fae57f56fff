package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// EventType is the type of every event the bridge sends.
const EventType = "dev.opzero.example.postgres.changed"

// DatabaseExtension is the CloudEvents extension naming the database
// (and role) that changed.
const DatabaseExtension = "pgdatabase"

// managedPrefix starts the comment the operator writes on what it manages.
const managedPrefix = "managed by the Kubernetes Database "

// channel is the LISTEN/NOTIFY channel of the event trigger.
const channel = "opzero_changes"

type options struct {
	DSN, Sink, Source string
	Interval          time.Duration
}

// Change is an event's data.
type Change struct {
	Database string `json:"database"`
	Object   string `json:"object"`           // role, database or extension
	Change   string `json:"change"`           // present (at start), appeared, altered, dropped, or the DDL tag
	Detail   string `json:"detail,omitempty"` // the event trigger's tag and event
}

type bridge struct {
	o      options
	log    *slog.Logger
	admin  *pgx.ConnConfig
	client cloudevents.Client
	source string

	mu        sync.Mutex
	listeners map[string]context.CancelFunc // managed database -> its LISTEN loop
	wg        sync.WaitGroup
}

func newBridge(ctx context.Context, o options, log *slog.Logger) (*bridge, error) {
	cfg, err := pgx.ParseConfig(o.DSN)
	if err != nil {
		return nil, errors.New("the DSN does not parse as a PostgreSQL URL or key=value string") // pgx's error quotes the password
	}
	c, err := cloudevents.NewClientHTTP(cloudevents.WithTarget(o.Sink))
	if err != nil {
		return nil, fmt.Errorf("--sink %q: %w", o.Sink, err)
	}
	b := &bridge{o: o, log: log, admin: cfg, client: c, source: o.Source, listeners: map[string]context.CancelFunc{}}
	if b.source == "" {
		b.source = "//postgres.example.opzero.dev/bridge/" + net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port)))
	}
	return b, nil
}

// Run compares the catalog every interval and keeps a listener on each
// managed database, until ctx ends.
func (b *bridge) Run(ctx context.Context) error {
	defer func() {
		b.mu.Lock()
		for _, cancel := range b.listeners {
			cancel()
		}
		b.mu.Unlock()
		b.wg.Wait()
	}()
	var conn *pgx.Conn
	var last map[string]entry
	tick := time.NewTicker(b.o.Interval)
	defer tick.Stop()
	for {
		if conn == nil {
			var err error
			if conn, err = pgx.ConnectConfig(ctx, b.admin); err != nil {
				b.log.Error("connecting to the server; retrying", "err", err)
				conn = nil
			}
		}
		if conn != nil {
			now, err := readCatalog(ctx, conn, last)
			if err != nil {
				b.log.Error("reading the catalog; reconnecting", "err", err)
				conn.Close(context.WithoutCancel(ctx))
				conn = nil
			} else {
				for _, c := range diff(last, now) {
					b.send(ctx, c)
				}
				last = now
				b.syncListeners(ctx, now)
			}
		}
		select {
		case <-ctx.Done():
			if conn != nil {
				conn.Close(context.WithoutCancel(ctx))
			}
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// entry is one managed role or database as last read: a fingerprint of
// the attributes the operator manages (the password verifier only hashed).
type entry struct{ fingerprint, comment string }

// readCatalog reads the managed roles and databases, and those managed at
// the last reading (a dropped one is then missing; one whose comment was
// changed shows as altered).
func readCatalog(ctx context.Context, conn *pgx.Conn, last map[string]entry) (map[string]entry, error) {
	rows, err := conn.Query(ctx, `
		SELECT 'role/' || rolname, md5(concat_ws('|', rolcanlogin, rolsuper, rolconnlimit, rolvaliduntil, coalesce(rolpassword, ''))),
			coalesce(shobj_description(oid, 'pg_authid'), '') FROM pg_authid
		UNION ALL
		SELECT 'database/' || datname, md5(concat_ws('|', datdba, datconnlimit, datallowconn)),
			coalesce(shobj_description(oid, 'pg_database'), '') FROM pg_database`)
	if err != nil {
		return nil, err
	}
	now := map[string]entry{}
	var key string
	var e entry
	_, err = pgx.ForEachRow(rows, []any{&key, &e.fingerprint, &e.comment}, func() error {
		if _, was := last[key]; was || strings.HasPrefix(e.comment, managedPrefix) {
			now[key] = e
		}
		return nil
	})
	return now, err
}

// diff lists what changed between two readings: managed objects that
// appeared, were altered or were dropped; with no last reading, every
// managed database is reported present once.
func diff(last, now map[string]entry) []Change {
	var out []Change
	for key, e := range now {
		object, name, _ := strings.Cut(key, "/")
		old, was := last[key]
		switch {
		case last == nil && object == "database":
			out = append(out, Change{Database: name, Object: object, Change: "present"})
		case last != nil && !was:
			// Usually the operator's own creation; reported because a change
			// made before this reading would otherwise pass for the initial state.
			out = append(out, Change{Database: name, Object: object, Change: "appeared"})
		case was && old != e:
			out = append(out, Change{Database: name, Object: object, Change: "altered"})
		}
	}
	for key := range last {
		if _, still := now[key]; !still {
			object, name, _ := strings.Cut(key, "/")
			out = append(out, Change{Database: name, Object: object, Change: "dropped"})
		}
	}
	return out
}

// send posts one change to the sink, retrying with backoff (100ms, 200ms,
// ... 5 attempts, each at most 10s) while the Broker does not accept it.
func (b *bridge) send(ctx context.Context, c Change) {
	e := cloudevents.NewEvent()
	e.SetID(uuid.NewString())
	e.SetType(EventType)
	e.SetSource(b.source)
	e.SetSubject(c.Object + "/" + c.Database)
	e.SetTime(time.Now())
	e.SetExtension(DatabaseExtension, c.Database)
	if err := e.SetData(cloudevents.ApplicationJSON, c); err != nil {
		b.log.Error("encoding an event", "err", err)
		return
	}
	delay := 100 * time.Millisecond
	for attempt := 1; ; attempt++ {
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		res := b.client.Send(sctx, e)
		cancel()
		if cloudevents.IsACK(res) {
			b.log.Info("sent", "id", e.ID(), "database", c.Database, "object", c.Object, "change", c.Change)
			return
		}
		if attempt == 5 || ctx.Err() != nil {
			b.log.Error("the sink did not accept an event; dropped it (the operator's sweep will still check the database)",
				"id", e.ID(), "database", c.Database, "attempts", attempt, "err", res)
			return
		}
		select {
		case <-ctx.Done():
		case <-time.After(delay):
		}
		delay *= 2
	}
}

// notification is the event trigger's payload.
type notification struct {
	Database string `json:"database"`
	Event    string `json:"event"`
	Tag      string `json:"tag"`
}

func parseNotification(payload string) (Change, error) {
	var n notification
	if err := json.Unmarshal([]byte(payload), &n); err != nil || n.Database == "" {
		return Change{}, fmt.Errorf("a notification on %s that is not the event trigger's: %q", channel, payload)
	}
	return Change{Database: n.Database, Object: "extension", Change: strings.ToLower(n.Tag), Detail: n.Event}, nil
}
