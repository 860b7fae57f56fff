// Command otlp-receiver is the OpenTelemetry Collector's OTLP receiver
// (go.opentelemetry.io/collector/receiver/otlpreceiver) run on its own: it
// takes OTLP over gRPC and HTTP and appends what arrives, one OTLP/JSON
// export request a line, to traces.jsonl, metrics.jsonl and logs.jsonl in
// --dir. opzero's tests and `opzero dev --otel` read those files.
//
// It prints "ready grpc=<addr> http=<addr>" once both listeners are up, and
// stops on SIGINT or SIGTERM after writing what it had received.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/receiver"
	"go.opentelemetry.io/collector/receiver/otlpreceiver"
	"go.opentelemetry.io/collector/receiver/receivertest"
)

func main() {
	grpcAddr := flag.String("grpc", "127.0.0.1:4317", "OTLP/gRPC listen address")
	httpAddr := flag.String("http", "127.0.0.1:4318", "OTLP/HTTP listen address")
	dir := flag.String("dir", ".", "folder to write traces.jsonl, metrics.jsonl and logs.jsonl into")
	flag.Parse()
	if err := run(*grpcAddr, *httpAddr, *dir); err != nil {
		fmt.Fprintln(os.Stderr, "otlp-receiver:", err)
		os.Exit(1)
	}
}

// sink appends one JSON line per export request to a file.
type sink struct {
	mu sync.Mutex
	f  *os.File
}

func (s *sink) write(b []byte, err error) error {
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	_, err = s.f.Write(append(b, '\n'))
	return err
}

func open(dir, name string) (*sink, error) {
	f, err := os.OpenFile(filepath.Join(dir, name), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	return &sink{f: f}, nil
}

func run(grpcAddr, httpAddr, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	traces, err := open(dir, "traces.jsonl")
	if err != nil {
		return err
	}
	metrics, err := open(dir, "metrics.jsonl")
	if err != nil {
		return err
	}
	logs, err := open(dir, "logs.jsonl")
	if err != nil {
		return err
	}
	tc, _ := consumer.NewTraces(func(_ context.Context, td ptrace.Traces) error {
		return traces.write((&ptrace.JSONMarshaler{}).MarshalTraces(td))
	})
	mc, _ := consumer.NewMetrics(func(_ context.Context, md pmetric.Metrics) error {
		return metrics.write((&pmetric.JSONMarshaler{}).MarshalMetrics(md))
	})
	lc, _ := consumer.NewLogs(func(_ context.Context, ld plog.Logs) error {
		return logs.write((&plog.JSONMarshaler{}).MarshalLogs(ld))
	})

	f := otlpreceiver.NewFactory()
	cfg := f.CreateDefaultConfig().(*otlpreceiver.Config)
	cfg.Protocols.GRPC.GetOrInsertDefault().NetAddr.Endpoint = grpcAddr
	cfg.Protocols.HTTP.GetOrInsertDefault().ServerConfig.NetAddr.Endpoint = httpAddr
	set := receivertest.NewNopSettings(f.Type())
	ctx := context.Background()
	// The three share one receiver (one config): create all, then start,
	// so that its servers serve every signal.
	var started []component.Component
	for _, mk := range []func() (component.Component, error){
		func() (component.Component, error) { return f.CreateTraces(ctx, set, cfg, tc) },
		func() (component.Component, error) { return f.CreateMetrics(ctx, set, cfg, mc) },
		func() (component.Component, error) { return f.CreateLogs(ctx, set, cfg, lc) },
	} {
		r, err := mk()
		if err != nil {
			return err
		}
		started = append(started, r)
	}
	for _, r := range started {
		if err := r.Start(ctx, componenttest.NewNopHost()); err != nil {
			return err
		}
	}
	fmt.Printf("ready grpc=%s http=%s dir=%s\n", grpcAddr, httpAddr, dir)
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	<-sig
	for _, r := range started {
		_ = r.Shutdown(ctx)
	}
	for _, s := range []*sink{traces, metrics, logs} {
		_ = s.f.Close()
	}
	return nil
}

var _ receiver.Factory = otlpreceiver.NewFactory()
