package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/opzero/opzero/internal/clihelp"
	"github.com/opzero/opzero/internal/hub/hubcmd"
	"github.com/opzero/opzero/internal/manifests"
)

func newHubCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "hub",
		Short: "The cluster's opzero hub, which feeds every serverless operator",
		Long: `The opzero hub (cmd/opzero-hub) is one always-on Deployment per cluster,
in namespace opzero-system, that watches what every serverless operator
subscribes to and wakes each one only for its own changes, sweeps and
Wakeups. ` + "`opzero manifests`" + ` writes it into every operator's hub.yaml
(applying it again is harmless); a platform team that installs it once
uses ` + "`opzero hub manifests`" + ` and generates the operators with
--install-hub=false. ` + "`opzero hub run`" + ` runs a hub in this shell.

The hub also serves operators nobody rebuilt: ` + "`opzero hub adopt`" + ` reads an
operator's release YAML and writes the Subscription that keeps its own
Deployment at zero replicas until something it watches changes.`,
	}
	cmd.AddCommand(newHubRunCmd(), newHubManifestsCmd(), newHubAdoptCmd())
	return cmd
}

// newHubRunCmd is cmd/opzero-hub inside the CLI: the same flags and code
// path (package hubcmd), to run a hub against any cluster from a shell.
func newHubRunCmd() *cobra.Command {
	var f hubcmd.Flags
	cmd := &cobra.Command{
		Use:   "run",
		Short: hubcmd.Short,
		Long: hubcmd.Long + `

The generated manifests run the same code as its own small binary,
github.com/opzero/opzero/cmd/opzero-hub, as a Deployment in opzero-system.
Run in a shell, it serves the cluster of $KUBECONFIG: every Subscription
(outside a pod --lease-namespace is empty: one replica), its deliveries
sent to the sinks' addresses, which must be reachable from this machine,
and without --service-account no tokens.`,
		Example: "  opzero hub run " + hubcmd.Example,
		Args:    cobra.NoArgs,
		RunE:    func(cmd *cobra.Command, _ []string) error { return f.Run(cmd.Context()) },
	}
	fs := flag.NewFlagSet("hub run", flag.ContinueOnError)
	f.Bind(fs)
	cmd.Flags().AddFlagSet(clihelp.PFlags(fs))
	return cmd
}

func newHubManifestsCmd() *cobra.Command {
	var out, image string
	cmd := &cobra.Command{
		Use:   "manifests [-o <dir>|-]",
		Short: "Write the hub's install: the Subscription and Wakeup CRDs and the hub",
		Long: `manifests writes what installs the hub once per cluster: the CRDs of
Subscriptions and Wakeups as this opzero carries them (crds.yaml), and the
hub's Namespace, ServiceAccount, RBAC and Deployment (hub.yaml), the same
objects ` + "`opzero manifests`" + ` writes into every operator's hub.yaml.

A Subscription written by a newer opzero than the hub's, with fields this
hub does not know, is refused with the condition Valid=False, reason
HubOutdated, that names them: apply the newer opzero's hub manifests. Older
Subscriptions are served as they are.`,
		Example: `  opzero hub manifests | kubectl apply --server-side -f -
  opzero hub manifests -o deploy/hub/`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			objs, err := manifests.HubInstall(image)
			if err != nil {
				return err
			}
			if out == "-" {
				b, err := manifests.Stream(objs)
				if err != nil {
					return err
				}
				_, err = cmd.OutOrStdout().Write(b)
				return err
			}
			for _, f := range []string{manifests.FileOperator, manifests.FileRBAC, manifests.FileSources} {
				if _, err := os.Stat(filepath.Join(out, f)); err == nil {
					return fmt.Errorf("%s holds an operator's manifests (%s), which writing the hub's there would remove: give the hub a folder of its own, e.g. -o %s",
						out, f, filepath.Join(filepath.Dir(filepath.Clean(out)), "opzero-hub"))
				}
			}
			if err := manifests.WriteDir(out, objs); err != nil {
				return err
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "wrote %d objects to %s\n", len(objs), out)
			return nil
		},
	}
	cmd.Flags().StringVarP(&out, "output", "o", "-", "folder to write crds.yaml and hub.yaml into, or - for one YAML stream on stdout")
	cmd.Flags().StringVar(&image, "hub-image", manifests.DefaultHubImage, "image of the hub; its entrypoint takes the hub's flags, as cmd/opzero-hub does")
	return cmd
}
