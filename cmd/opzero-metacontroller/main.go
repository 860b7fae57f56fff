// Command opzero-metacontroller serves Metacontroller's API
// (CompositeController, DecoratorController) with hooks in any language,
// classic or serverless: one operator for every such controller in the
// cluster. It reads them at start and restarts when one changes.
//
//	opzero-metacontroller --mode=serverless --audience=...   # a Knative Service (opzero manifests)
//	opzero-metacontroller --mode=classic                      # a Deployment
//
// `opzero manifests` learns the parent and child resources (for the
// ApiServerSources and RBAC) from the controllers' YAML files named by
// OPZERO_METACONTROLLER_FILES. See examples/metacontroller.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/opzero/opzero/internal/metacontroller"
	_ "github.com/opzero/opzero/operator/classic" // --mode=classic (a Deployment)
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := metacontroller.Run(ctx, os.Args[1:])
	if errors.Is(err, metacontroller.ErrRestart) {
		fmt.Fprintln(os.Stderr, "opzero-metacontroller:", err)
		os.Exit(3)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "opzero-metacontroller:", err)
		os.Exit(1)
	}
}
