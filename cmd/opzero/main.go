// Command opzero is the opzero CLI: the local control plane, and (as the
// project grows) scaffolding, manifests and the local serverless platform.
// It stays thin: flags are turned into calls of the library packages.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/opzero/opzero/internal/devenv/mountns"
)

func main() {
	mountns.Main() // a helper re-executed by opzero dev: it execs a hook and never returns
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := newRootCmd().ExecuteContext(ctx); err != nil {
		var code exitCode // opzero plan: 2, something would change (printed)
		if errors.As(err, &code) {
			os.Exit(int(code))
		}
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "opzero",
		Short: "Kubernetes operators that run classic or serverless, scaling to zero on Knative",
		Long: `opzero runs one controller-runtime Reconciler either as a classic
controller (informers, workqueue) or as a serverless operator: an HTTP
CloudEvents receiver deployed as a Knative Service that scales to zero.

This CLI starts a project (init, create api), generates the CRDs, RBAC and
event wiring of an operator (manifests), runs the cluster's opzero hub,
writes its install and serves operators nobody rebuilt at zero through it
(hub), runs operators serverless on a local control plane (controlplane,
dev) or on a real one-node cluster (cluster), says what a new build of an
operator would change in a cluster before it changes anything (plan),
installs the pinned programs these need (install), and runs the wakeup
source of the --source=knative wiring (wakeup-source).`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newControlPlaneCmd(), newClusterCmd(), newInstallCmd(), newWakeupSourceCmd(), newDevCmd(), newManifestsCmd(), newHubCmd(), newInitCmd(), newCreateCmd(), newPlanCmd())
	wrapHelp(root)
	return root
}
