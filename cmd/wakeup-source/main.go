// Command wakeup-source delivers durable wakeups (RequeueAfter, retries) to
// serverless operators when they are due. It is the always-on process that
// `opzero manifests` deploys next to a serverless operator with durable time;
// it links no CLI code, so it stays small. `opzero wakeup-source` runs the
// same code with the same flags.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/opzero/opzero/internal/clihelp"
	"github.com/opzero/opzero/internal/wakeup/sourcecmd"
)

func main() {
	fs := flag.NewFlagSet("wakeup-source", flag.ExitOnError)
	var f sourcecmd.Flags
	f.Bind(fs)
	fs.Usage = clihelp.Usage(fs, clihelp.Wrap(sourcecmd.Short+".", 0, clihelp.Width)+"\n\n"+sourcecmd.Long+"\n\nUsage:\n  wakeup-source [flags]\n\nExample:\n  wakeup-source "+sourcecmd.Example+"\n\n")
	_ = fs.Parse(os.Args[1:])
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "error: unexpected argument %q: wakeup-source takes only flags (see -help)\n", fs.Arg(0))
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := f.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}
