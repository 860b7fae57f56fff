package main

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/opzero/opzero/internal/cloudevent"
	"github.com/opzero/opzero/internal/devenv/otelcol"
	"github.com/opzero/opzero/internal/devenv/pinned"
)

// telemetryCost measures what OTLP export costs a serverless operator:
// the same binary with the OTEL_* environment unset (export off, the
// default) and set (traces and metrics to a real collector, the
// Collector's OTLP receiver), alternating within this run: exec -> first
// event reconciled, RSS after it, and the time per event of a warm
// instance (a PingSource event naming one key: one reconcile with its API
// calls each).
func (e *env) telemetryCost(ctx context.Context, r *report, runs int) error {
	bin, err := pinned.Resolver{}.FindOne(ctx, pinned.OTLPReceiver)
	if err != nil {
		return err
	}
	col, err := otelcol.Start(ctx, bin, filepath.Join(e.dir, "otel"), os.Stderr)
	if err != nil {
		return err
	}
	defer col.Stop()
	if err := e.ensureConfigMaps(ctx, 0); err != nil {
		return err
	}
	on := append(col.Env(10*time.Second), "OTEL_SERVICE_NAME=bench")
	set := func(enabled bool) {
		for _, kv := range on {
			k, v, _ := strings.Cut(kv, "=")
			if enabled {
				os.Setenv(k, v)
			} else {
				os.Unsetenv(k)
			}
		}
	}
	defer set(false)
	k := max(runs, 5)
	var first, perEvent [2][]time.Duration
	var mem [2][]float64
	for i := 0; i < k; i++ {
		for m, enabled := range []bool{false, true} {
			set(enabled)
			sm, err := e.once(ctx, "opzero-notrim", false)
			f, rss := sm.first, sm.mem
			if err != nil {
				return fmt.Errorf("cold start, telemetry %v: %w", enabled, err)
			}
			first[m], mem[m] = append(first[m], f), append(mem[m], rss.total)
			d, err := e.warmEvents(enabled, 300)
			if err != nil {
				return fmt.Errorf("warm events, telemetry %v: %w", enabled, err)
			}
			perEvent[m] = append(perEvent[m], d)
		}
	}
	set(false)
	var b strings.Builder
	fmt.Fprintf(&b, "`go run ./bench/suite -only telemetry`: the ConfigWatcher example's default (serverless-only) build with the trim off (`OPZERO_TRIM=off`: the RSS is read 0.5 s after the first reconcile), with the OTEL_* environment unset (export off, the default) and set (OTLP over HTTP to a local collector, the Collector's OTLP receiver; metrics pushed every 10 s and on drain, every span exported). Alternating, median (min-max) of %d runs each, 0 ConfigMaps. The collector runs on the same cores, and writes every span it gets as JSON.\n\n", k)
	fmt.Fprintf(&b, "| telemetry | exec -> first event reconciled | RSS after it, MiB | per event, warm (300 sequential reconciles) |\n|---|---|---|---|\n")
	for m, name := range []string{"off", "on (OTLP)"} {
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", name, stats(first[m]), fstats(mem[m]), stats(perEvent[m]))
	}
	fmt.Fprintf(&b, "\nOn / off within this run: cold start **%.2fx**, per event **%.2fx**, RSS %+.1f MiB.\n",
		float64(median(first[1]))/float64(median(first[0])), float64(median(perEvent[1]))/float64(median(perEvent[0])), fmedian(mem[1])-fmedian(mem[0]))
	r.add("Telemetry cost", b.String())
	return nil
}

// warmEvents starts the operator, reconciles one key once (warm-up), then
// sends n PingSource events naming that key one after another and returns
// the median time from send to answer. The operator is stopped with
// SIGTERM (with telemetry on, it pushes on drain).
func (e *env) warmEvents(enabled bool, n int) (time.Duration, error) {
	port, err := freePort()
	if err != nil {
		return 0, err
	}
	cmd := exec.Command(filepath.Join(e.dir, "opzero"), "--mode=serverless", "--insecure-no-auth")
	cmd.Env = append(os.Environ(), "KUBECONFIG="+e.kubeconfig, fmt.Sprintf("PORT=%d", port), "OPZERO_TRIM=off")
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	defer func() { _ = cmd.Process.Signal(syscall.SIGTERM); _ = cmd.Wait() }()
	go func() {
		s := bufio.NewScanner(stdout)
		for s.Scan() {
		}
	}()
	for t0 := time.Now(); ; time.Sleep(time.Millisecond) {
		if c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port)); err == nil {
			c.Close()
			break
		}
		if time.Since(t0) > 30*time.Second {
			return 0, fmt.Errorf("the operator did not listen within 30s")
		}
	}
	url := fmt.Sprintf("http://127.0.0.1:%d/", port)
	data := []byte(fmt.Sprintf(`{"namespace":%q,"name":"target"}`, ns))
	send := func() (time.Duration, error) {
		req, err := cloudevent.NewRequest(context.Background(), url, cloudevent.NewPing("/bench/telemetry", data), false)
		if err != nil {
			return 0, err
		}
		t0 := time.Now()
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return 0, fmt.Errorf("answer %s (telemetry %v)", resp.Status, enabled)
		}
		return time.Since(t0), nil
	}
	for range 20 {
		if _, err := send(); err != nil {
			return 0, err
		}
	}
	ds := make([]time.Duration, 0, n)
	for range n {
		d, err := send()
		if err != nil {
			return 0, err
		}
		ds = append(ds, d)
	}
	return median(ds), nil
}
