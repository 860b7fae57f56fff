package main

import (
	"fmt"
	"os"
	"path/filepath"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/opzero/opzero/internal/devenv/controlplane"
	"github.com/opzero/opzero/internal/devenv/pinned"
)

func defaultStateDir() string {
	if d := os.Getenv("OPZERO_STATE_DIR"); d != "" {
		return d
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return ".opzero/controlplane"
	}
	return filepath.Join(home, ".opzero", "controlplane")
}

func newControlPlaneCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "controlplane",
		Aliases: []string{"cp"},
		Short:   "Run a local Kubernetes control plane (etcd, kube-apiserver, kube-controller-manager)",
		Long: `controlplane runs a real Kubernetes control plane as local processes: opzero's
pinned builds of etcd, kube-apiserver and kube-controller-manager (Kubernetes
v1.34.3). They are found in --bin-dir, else $OPZERO_BIN_DIR, else
$KUBEBUILDER_ASSETS (etcd, kube-apiserver), else opzero's cache, where they are
built on first use ('opzero install' does it ahead of time). No Docker, no
cluster, no opzero checkout needed.

There is no scheduler and no kubelet: Pods are created and stay Pending, which
is all an operator needs to be tested against.`,
	}
	dir := defaultStateDir()
	cmd.PersistentFlags().StringVar(&dir, "dir", dir, "keep the plane's state here: logs, etcd data, kubeconfig (env OPZERO_STATE_DIR)")
	cmd.AddCommand(newUpCmd(&dir), newDownCmd(&dir), newStatusCmd(&dir))
	return cmd
}

func newUpCmd(dir *string) *cobra.Command {
	var (
		opts        controlplane.Options
		knativeCRDs bool
		crds        []string
	)
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Start the control plane and write a kubeconfig",
		Example: `  opzero controlplane up --knative-crds
  export KUBECONFIG=~/.opzero/controlplane/kubeconfig
  kubectl get ns`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			out := cmd.OutOrStdout()
			opts.Dir, opts.Progress = *dir, out
			// Find (or build) the binaries and Knative's CRDs first: a
			// failure should not leave a plane behind.
			bins := pinned.Resolver{Dir: opts.BinDir, Progress: out}
			names := []string{pinned.Etcd, pinned.KubeAPIServer}
			if !opts.NoControllerManager {
				names = append(names, pinned.KubeControllerManager)
			}
			if _, err := bins.Find(ctx, names...); err != nil {
				return err
			}
			paths := crds
			if knativeCRDs {
				kn, err := bins.CRDs(ctx)
				if err != nil {
					return err
				}
				paths = append(paths, kn...)
			}
			fmt.Fprintf(out, "Starting the local control plane in %s\n", *dir)
			t0 := time.Now()
			p, err := controlplane.Up(ctx, opts)
			if err != nil {
				return err
			}
			if len(paths) > 0 {
				names, err := controlplane.InstallCRDs(ctx, p.Config, paths...)
				if err != nil {
					_ = p.Stop(false)
					return fmt.Errorf("%w (the control plane was stopped again)", err)
				}
				fmt.Fprintf(out, "  installed %d CRDs\n", len(names))
			}
			fmt.Fprintf(out, "Control plane ready in %.1fs: %s\n\nUse it with:\nexport KUBECONFIG=%s\n", time.Since(t0).Seconds(), p.Server, p.Kubeconfig)
			return nil
		},
	}
	f := cmd.Flags()
	f.IntVar(&opts.APIServerPort, "port", 16443, "serve kube-apiserver on this port of 127.0.0.1 (0 picks a free one)")
	f.StringVar(&opts.BinDir, "bin-dir", "", "take etcd, kube-apiserver and kube-controller-manager from this folder (default $OPZERO_BIN_DIR, else opzero's cache; see 'opzero install')")
	f.BoolVar(&opts.NoControllerManager, "no-controller-manager", false, "skip kube-controller-manager: no garbage collection, ReplicaSets or default ServiceAccounts")
	f.BoolVar(&knativeCRDs, "knative-crds", false, "also install Knative's Service, ApiServerSource, PingSource, Broker and Trigger CRDs (v0.50.0)")
	f.StringSliceVar(&crds, "crds", nil, "install the CRDs in these files or folders after the start")
	return cmd
}

func newDownCmd(dir *string) *cobra.Command {
	var keep bool
	cmd := &cobra.Command{
		Use:   "down",
		Short: "Stop exactly the processes 'up' started and remove the state folder",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			p, err := controlplane.Down(*dir, keep)
			if err != nil {
				return err
			}
			for _, pr := range p.Processes {
				fmt.Fprintf(cmd.OutOrStdout(), "  stopped %s (pid %d)\n", pr.Name, pr.PID)
			}
			if keep {
				fmt.Fprintf(cmd.OutOrStdout(), "Control plane stopped; state kept in %s (logs under logs/)\n", *dir)
			} else {
				fmt.Fprintf(cmd.OutOrStdout(), "Control plane stopped and %s removed\n", *dir)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&keep, "keep", false, "keep the state folder (logs, etcd data) for inspection")
	return cmd
}

func newStatusCmd(dir *string) *cobra.Command {
	return &cobra.Command{
		Use:   "status",
		Short: "Say what runs where, with each component's memory",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			p, err := controlplane.Load(*dir)
			if os.IsNotExist(err) {
				fmt.Fprintf(cmd.OutOrStdout(), "No control plane in %s. Start one with: opzero controlplane up\n", *dir)
				return nil
			}
			if err != nil {
				return err
			}
			w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintf(w, "COMPONENT\tPID\tSTATE\tRSS\tLOG\n")
			var total int64
			running := 0
			for _, s := range p.Status() {
				state := "stopped"
				if s.Running {
					state, running = "running", running+1
				}
				total += s.RSSBytes
				fmt.Fprintf(w, "%s\t%d\t%s\t%.0f MiB\t%s\n", s.Name, s.PID, state, float64(s.RSSBytes)/(1<<20), s.Log)
			}
			w.Flush()
			fmt.Fprintf(cmd.OutOrStdout(), "\nAPI server %s, up since %s, %d/%d running, %.0f MiB in all\nexport KUBECONFIG=%s\n",
				p.Server, p.StartedAt.Format(time.RFC3339), running, len(p.Processes), float64(total)/(1<<20), p.Kubeconfig)
			if running < len(p.Processes) {
				fmt.Fprintf(cmd.OutOrStdout(), "Some components are not running: see their logs, then `opzero controlplane down` and `up` again.\n")
			}
			return nil
		},
	}
}
