package dev_test

import (
	"context"
	"fmt"
	"os"
	"os/signal"

	"github.com/opzero/opzero/internal/devenv/dev"
)

// Start plays Knative's part for the manifests until Ctrl-C.
func ExampleStart() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	objs, err := dev.ReadManifests("deploy/", os.Stdin) // from `opzero manifests -o deploy/`
	if err != nil {
		fmt.Println(err)
		return
	}
	p, err := dev.Start(ctx, dev.Options{Kubeconfig: os.Getenv("KUBECONFIG"), Objects: objs, Dir: os.TempDir(), Out: os.Stdout})
	if err != nil {
		fmt.Println(err)
		return
	}
	go p.WatchStatus(ctx, os.Stdout, false)
	<-p.Done() // Start stops everything when ctx ends
	fmt.Println(p.StatusLine())
}
