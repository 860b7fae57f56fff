package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/opzero/opzero/internal/devenv/otelcol"
	"github.com/opzero/opzero/internal/devenv/pinned"
)

// startOtel starts the local collector of `opzero dev --otel` and returns
// the environment that points processes at it (nil without --otel).
func (f *devFlags) startOtel(ctx context.Context, bins pinned.Resolver, logDir string, w io.Writer) ([]string, func(), error) {
	if !f.otel {
		return nil, func() {}, nil
	}
	bin, err := bins.FindOne(ctx, pinned.OTLPReceiver)
	if err != nil {
		return nil, nil, err
	}
	log, err := os.Create(filepath.Join(logDir, "otel-collector.log"))
	if err != nil {
		return nil, nil, err
	}
	dir := filepath.Join(logDir, "otel")
	c, err := otelcol.Start(ctx, bin, dir, log)
	if err != nil {
		log.Close()
		return nil, nil, err
	}
	fmt.Fprintf(w, "opzero dev: OpenTelemetry collector (OTLP receiver) at %s (gRPC %s); operators push traces and metrics there every 5s and when they scale to zero\n", c.Endpoint(), c.GRPC)
	fmt.Fprintf(w, "opzero dev: what arrives: %s and %s (OTLP/JSON, one export a line)\n", c.Path("traces"), c.Path("metrics"))
	return c.Env(5 * time.Second), func() { c.Stop(); log.Close() }, nil
}
