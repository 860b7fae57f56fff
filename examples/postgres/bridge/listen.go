package main

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// eventTriggerSQL installs, in a managed database, the function and the two
// event triggers that NOTIFY the bridge of extension DDL. Event triggers
// need a superuser; they do not fire for roles or databases (shared
// objects), which the catalog comparison covers.
var eventTriggerSQL = []string{
	// ddl_command_end fires for CREATE, ALTER and DROP EXTENSION; sql_drop
	// adds the extensions another command dropped (DROP SCHEMA ... CASCADE).
	`CREATE OR REPLACE FUNCTION public.opzero_bridge_notify() RETURNS event_trigger LANGUAGE plpgsql AS $$
BEGIN
	IF (tg_event = 'ddl_command_end' AND tg_tag LIKE '% EXTENSION')
		OR (tg_event = 'sql_drop' AND tg_tag <> 'DROP EXTENSION'
			AND EXISTS (SELECT FROM pg_event_trigger_dropped_objects() WHERE object_type = 'extension')) THEN
		PERFORM pg_notify('` + channel + `', json_build_object('database', current_database(), 'event', tg_event, 'tag', tg_tag)::text);
	END IF;
END $$`,
	`DO $$ BEGIN
	IF NOT EXISTS (SELECT FROM pg_event_trigger WHERE evtname = 'opzero_bridge_ddl') THEN
		CREATE EVENT TRIGGER opzero_bridge_ddl ON ddl_command_end EXECUTE FUNCTION public.opzero_bridge_notify();
	END IF;
	IF NOT EXISTS (SELECT FROM pg_event_trigger WHERE evtname = 'opzero_bridge_drop') THEN
		CREATE EVENT TRIGGER opzero_bridge_drop ON sql_drop EXECUTE FUNCTION public.opzero_bridge_notify();
	END IF;
END $$`,
}

// syncListeners starts a listener for each managed database in the
// reading and stops those of databases no longer in it.
func (b *bridge) syncListeners(ctx context.Context, now map[string]entry) {
	b.mu.Lock()
	defer b.mu.Unlock()
	want := map[string]bool{}
	for key := range now {
		if len(key) > len("database/") && key[:len("database/")] == "database/" {
			want[key[len("database/"):]] = true
		}
	}
	for db, cancel := range b.listeners {
		if !want[db] {
			cancel()
			delete(b.listeners, db)
		}
	}
	for db := range want {
		if _, ok := b.listeners[db]; ok {
			continue
		}
		lctx, cancel := context.WithCancel(ctx)
		b.listeners[db] = cancel
		b.wg.Add(1)
		go func() {
			defer b.wg.Done()
			b.listen(lctx, db)
		}()
	}
}

// listen keeps a connection to database db that has the event trigger and
// LISTENs on its channel, reconnecting after errors until ctx ends (the
// database left the reading).
func (b *bridge) listen(ctx context.Context, db string) {
	cfg := b.admin.Copy()
	cfg.Database = db
	for delay := 100 * time.Millisecond; ctx.Err() == nil; delay = min(2*delay, 5*time.Second) {
		if err := b.listenOnce(ctx, cfg); err != nil && ctx.Err() == nil {
			b.log.Info("listener for database ended; reconnecting", "database", db, "err", err)
			select {
			case <-ctx.Done():
			case <-time.After(delay):
			}
		}
	}
}

func (b *bridge) listenOnce(ctx context.Context, cfg *pgx.ConnConfig) error {
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	for _, sql := range eventTriggerSQL {
		if _, err := conn.Exec(ctx, sql); err != nil {
			return err
		}
	}
	if _, err := conn.Exec(ctx, "LISTEN "+channel); err != nil {
		return err
	}
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		c, err := parseNotification(n.Payload)
		if err != nil {
			b.log.Info("ignored", "err", err)
			continue
		}
		b.send(ctx, c)
	}
}
