// Package otelcol runs a real OTLP endpoint, the OpenTelemetry Collector's
// OTLP receiver (package pinned's otlp-receiver, built from
// go.opentelemetry.io/collector/receiver/otlpreceiver), and reads back what
// arrived. `opzero dev --otel` and the telemetry tests use it.
//
// # Guarantees
//
//   - Start returns once the receiver listens on free loopback ports, gRPC
//     and HTTP; Env points an operator's OpenTelemetry SDK at it (OTLP over
//     HTTP, the OTEL_* variables every SDK reads).
//   - Every export request that the receiver acknowledged is a line of
//     traces.jsonl or metrics.jsonl in Dir (OTLP/JSON), written before the
//     acknowledgement; Read parses them.
//
// # Caveats
//
// Only what the receiver decodes is kept: no processors, no batching, no
// exporters. The files grow without bound; a dev session's are small.
package otelcol

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/opzero/opzero/internal/localport"
)

// Collector is a running OTLP receiver.
type Collector struct {
	// Dir holds traces.jsonl, metrics.jsonl and logs.jsonl.
	Dir string
	// GRPC and HTTP are its listen addresses (host:port).
	GRPC, HTTP string
	cmd        *exec.Cmd
	done       chan struct{}
}

// Start runs the receiver binary bin writing into dir, its own output
// (and errors) to log, on free loopback ports.
func Start(ctx context.Context, bin, dir string, log io.Writer) (*Collector, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var last error
	for range 3 { // a port taken between finding and binding it: try others
		c, err := start(ctx, bin, dir, log)
		if err == nil {
			return c, nil
		}
		last = err
	}
	return nil, last
}

func start(ctx context.Context, bin, dir string, log io.Writer) (*Collector, error) {
	g, err := freePort()
	if err != nil {
		return nil, err
	}
	h, err := freePort()
	if err != nil {
		return nil, err
	}
	c := &Collector{Dir: dir, GRPC: "127.0.0.1:" + strconv.Itoa(g), HTTP: "127.0.0.1:" + strconv.Itoa(h), done: make(chan struct{})}
	c.cmd = exec.Command(bin, "--grpc", c.GRPC, "--http", c.HTTP, "--dir", dir)
	c.cmd.Stderr = log
	out, err := c.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := c.cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting the OTLP receiver %s: %w (`opzero install otelcol` builds it)", bin, err)
	}
	ready := make(chan bool, 1)
	go func() {
		s := bufio.NewScanner(out)
		said := false
		for s.Scan() {
			if !said && strings.HasPrefix(s.Text(), "ready ") {
				said = true
				ready <- true
			}
			fmt.Fprintln(log, s.Text())
		}
		if !said {
			ready <- false
		}
	}()
	go func() { _ = c.cmd.Wait(); close(c.done) }()
	select {
	case ok := <-ready:
		if ok {
			return c, nil
		}
		<-c.done
		return nil, fmt.Errorf("the OTLP receiver %s exited before it was ready (its errors are in the log)", bin)
	case <-time.After(30 * time.Second):
	case <-ctx.Done():
	}
	_ = c.cmd.Process.Kill()
	<-c.done
	return nil, errors.New("the OTLP receiver did not say it was ready within 30s")
}

// freePort is a port for the receiver to bind once started, outside the
// kernel's ephemeral range (internal/localport).
func freePort() (int, error) { return localport.Free() }

// Endpoint is the OTLP/HTTP endpoint URL.
func (c *Collector) Endpoint() string { return "http://" + c.HTTP }

// Env is the environment that points an OpenTelemetry SDK at c: OTLP over
// HTTP to its endpoint, metrics pushed every interval (and on drain).
func (c *Collector) Env(interval time.Duration) []string {
	return []string{"OTEL_EXPORTER_OTLP_ENDPOINT=" + c.Endpoint(), "OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf",
		"OTEL_METRIC_EXPORT_INTERVAL=" + strconv.FormatInt(interval.Milliseconds(), 10)}
}

// Stop ends the receiver (SIGTERM, then SIGKILL after 10 s); what it
// acknowledged is in its files.
func (c *Collector) Stop() {
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.done:
	case <-time.After(10 * time.Second):
		_ = c.cmd.Process.Kill()
		<-c.done
	}
}

// Path is the file of one signal: "traces", "metrics" or "logs".
func (c *Collector) Path(signal string) string { return filepath.Join(c.Dir, signal+".jsonl") }
