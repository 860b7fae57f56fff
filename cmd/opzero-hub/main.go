// Command opzero-hub is the opzero hub: one always-on process per cluster
// that delivers every serverless operator's Kubernetes events, sweeps and
// wakeups, as its Subscription (opzero.dev/v1alpha1) asks, in place of
// per-operator Knative ApiServerSource adapters, PingSources and wakeup
// sources. `opzero manifests --source=hub` deploys it and writes the
// Subscriptions; see internal/hub for what it guarantees. Its flags and
// code are package hubcmd's, which `opzero hub run` runs too; it links no
// CLI code, so it stays small.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/opzero/opzero/internal/clihelp"
	"github.com/opzero/opzero/internal/hub/hubcmd"
	"github.com/opzero/opzero/internal/profile"
)

func main() {
	fs := flag.NewFlagSet("opzero-hub", flag.ExitOnError)
	var f hubcmd.Flags
	f.Bind(fs)
	fs.Usage = clihelp.Usage(fs, clihelp.Wrap(hubcmd.Short+".", 0, clihelp.Width)+"\n\n"+hubcmd.Long+"\n\nUsage:\n  opzero-hub [flags]\n\nExample:\n  opzero-hub "+hubcmd.Example+"\n\n")
	_ = fs.Parse(os.Args[1:])
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "error: unexpected argument %q: opzero-hub takes only flags (see -help)\n", fs.Arg(0))
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := f.Run(ctx)
	profile.Stop() // a benchmark build (-tags opzero_pprof) writes its profiles
	if err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}
