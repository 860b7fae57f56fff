package main

import (
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/opzero/opzero/internal/devenv/cluster"
)

func newClusterCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "cluster",
		Short: "Run a real one-node Kubernetes cluster on this machine (root): kubelet, containerd, CNI, kube-proxy, CoreDNS",
		Long: `cluster runs a real one-node Kubernetes cluster, as root: the local control
plane (Kubernetes v1.34.3) plus kube-scheduler, kubelet and kube-proxy (iptables
mode) of the same version, Debian's containerd, runc and CNI plugins (bridge,
host-local, loopback, portmap), and CoreDNS as a pod. Every image is built here
from pinned Go modules (a static binary on an empty base) and imported into
containerd: nothing is pulled, and the cluster reaches nothing outside this
machine (the node is a network namespace with no default route; pod and
Service addresses are blackholed beyond it; CoreDNS has no forwarder).
With --knative it adds Knative Serving and Eventing v0.50.0 from their own
release YAMLs (images rewritten to ones built here) and Traefik v3.6.12 (its
Knative provider) as Serving's ingress.

'opzero install cluster' builds the binaries ahead of time and installs the
Debian packages ('opzero install knative-cluster' Knative's and Traefik's);
'up' does both on first use. 'down' removes everything 'up'
made: pods, processes, mounts, cgroups, the namespace, links, routes, iptables
rules, kernel settings, the state folder.`,
	}
	dir := cluster.DefaultDir
	cmd.PersistentFlags().StringVar(&dir, "dir", dir, "keep the cluster's state here: logs, containerd's and kubelet's data, kubeconfig")
	cmd.AddCommand(newClusterUpCmd(&dir), newClusterDownCmd(&dir), newClusterStatusCmd(&dir), newClusterApplyCmd(&dir))
	return cmd
}

func newClusterUpCmd(dir *string) *cobra.Command {
	opts := cluster.Options{}
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Start the cluster and write a kubeconfig",
		Example: `  sudo opzero cluster up
  export KUBECONFIG=/var/lib/opzero/cluster/controlplane/kubeconfig
  kubectl get pods -A`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			out := cmd.OutOrStdout()
			opts.Dir, opts.Progress = *dir, out
			if err := cluster.Check(); err != nil && !errors.Is(err, cluster.ErrUnsupported) {
				if err := cluster.InstallDeps(cmd.Context(), out); err != nil {
					return err
				}
			}
			fmt.Fprintf(out, "Starting a one-node cluster in %s\n", *dir)
			t0 := time.Now()
			c, err := cluster.Up(cmd.Context(), opts)
			if err != nil {
				return err
			}
			fmt.Fprintf(out, "Cluster ready in %.1fs: API server %s, node %s (%s)\n\nUse it with:\nexport KUBECONFIG=%s\n",
				time.Since(t0).Seconds(), c.Server, cluster.NodeName, cluster.NodeIP, c.Kubeconfig)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.BinDir, "bin-dir", "", "take the pinned binaries from this folder (default $OPZERO_BIN_DIR, else opzero's cache; see 'opzero install cluster')")
	f.BoolVar(&opts.Knative, "knative", false, "also install Knative Serving and Eventing v0.50.0 (their release YAMLs, images built here: the first time, it builds the knative-cluster set: about 15 minutes on 2 cores; 'opzero install knative-cluster' does it ahead)")
	f.BoolVar(&opts.KeepOnFailure, "keep-on-failure", false, "leave what a failed 'up' made running, to look at ('down' removes it)")
	f.DurationVar(&opts.Timeout, "timeout", 3*time.Minute, "how long to wait for each component, the node and CoreDNS")
	return cmd
}

func newClusterDownCmd(dir *string) *cobra.Command {
	return &cobra.Command{
		Use:   "down",
		Short: "Remove the cluster and everything 'up' made",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := cluster.Down(*dir, cmd.OutOrStdout()); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "Cluster removed.\n")
			return nil
		},
	}
}

func newClusterStatusCmd(dir *string) *cobra.Command {
	return &cobra.Command{
		Use:   "status",
		Short: "Say what runs, with each process's memory, and how long each step of 'up' took",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			out := cmd.OutOrStdout()
			c, err := cluster.Load(*dir)
			if os.IsNotExist(err) {
				fmt.Fprintf(out, "No cluster in %s. Start one with: opzero cluster up\n", *dir)
				return nil
			}
			if err != nil {
				return err
			}
			w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
			fmt.Fprintf(w, "COMPONENT\tPID\tSTATE\tRSS\tLOG\n")
			running, all := 0, c.Status()
			var total int64
			for _, s := range all {
				state := "stopped"
				if s.Running {
					state, running = "running", running+1
				}
				total += s.RSSBytes
				fmt.Fprintf(w, "%s\t%d\t%s\t%.0f MiB\t%s\n", s.Name, s.PID, state, float64(s.RSSBytes)/(1<<20), s.Log)
			}
			w.Flush()
			steps := make([]string, 0, len(c.Timings))
			for s := range c.Timings {
				steps = append(steps, s)
			}
			sort.Slice(steps, func(i, j int) bool { return c.Timings[steps[i]] > c.Timings[steps[j]] })
			fmt.Fprintf(out, "\nAPI server %s, node %s (%s), up since %s, %d/%d running, %.0f MiB in all\n",
				c.Server, cluster.NodeName, cluster.NodeIP, c.StartedAt.Format(time.RFC3339), running, len(all), float64(total)/(1<<20))
			for _, s := range steps {
				fmt.Fprintf(out, "  up: %-30s %.1fs\n", s, c.Timings[s])
			}
			fmt.Fprintf(out, "Images: ")
			for _, n := range []string{"pause", "coredns", "netcheck"} {
				fmt.Fprintf(out, "%s ", c.Images[n])
			}
			fmt.Fprintf(out, "\nexport KUBECONFIG=%s\n", c.Kubeconfig)
			return nil
		},
	}
}

func newClusterApplyCmd(dir *string) *cobra.Command {
	var file, kdir, buildDir string
	cmd := &cobra.Command{
		Use:   "apply -f MANIFESTS | -k KUSTOMIZATION",
		Short: "Build the ko:// images manifests name, load them into the node and kubectl apply the manifests",
		Long: `apply does what 'ko apply' does, without a registry: every ko://<import path>
image in the manifests (a file or a folder, e.g. what 'opzero manifests'
wrote, or with -k a kustomization rendered with kustomize's library as kubectl
apply -k does) is built with 'go build' in --build-dir as a static binary, put
on an empty base, imported into the node's containerd as opzero.local/<import
path>:<digest> and the reference replaced; the manifests are then applied
server-side with the pinned kubectl (field manager opzero-cluster-apply),
otherwise unchanged. What an earlier 'opzero cluster apply' wrote for another
wiring of the same operators (an ApiServerSource after a switch to the hub, a
Knative Service after a switch to classic) is deleted, and said; the hub,
CRDs, Namespaces and Secrets never are.

A Knative Service or Deployment annotated dev.opzero.dev/command (what 'opzero
dev' runs as a local process, e.g. a hook in Python or JavaScript) gets that
command's image, built here as the node pulls nothing: the program (Debian's
/usr/bin one first), the shared libraries ldd lists, Python's standard library
for python3, and the files of the script's folder at /app/<path from
--build-dir>, run in /app as user 65532; it replaces the first container's
image (imported as opzero.local/command/<name>:<hash>).
A Deployment without it whose image is python or node running a script from
a ConfigMap (as Metacontroller publishes its hooks) gets the image of that
local interpreter alone (the pod mounts the ConfigMap as published), run as
root as the public image is, and its command names the program in it.`,
		Example: `  opzero manifests --operator ./examples/configwatcher --namespace demo -o out/
  kubectl create namespace demo
  sudo opzero cluster apply -f out/`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var manifest string
			var err error
			if err := fileOrKustomization(file, kdir, "the manifests (a YAML file or a folder of them)"); err != nil {
				return err
			}
			if kdir != "" {
				manifest, err = cluster.ReadKustomization(kdir)
			} else {
				manifest, err = cluster.ReadManifests(file)
			}
			if err != nil {
				return err
			}
			c, err := cluster.Load(*dir)
			if err != nil {
				return fmt.Errorf("no cluster in %s: %w", *dir, err)
			}
			resolved, refs, err := c.ResolveKo(cmd.Context(), buildDir, manifest)
			if err != nil {
				return err
			}
			for pkg, ref := range refs {
				fmt.Fprintf(cmd.ErrOrStderr(), "ko://%s -> %s\n", pkg, ref)
			}
			resolved, refs, err = c.ResolveCommands(cmd.Context(), buildDir, resolved)
			if err != nil {
				return err
			}
			for obj, ref := range refs {
				fmt.Fprintf(cmd.ErrOrStderr(), "%s (%s) -> %s\n", obj, cluster.CommandAnnotation, ref)
			}
			out, pruned, err := c.ApplyPruning(cmd.Context(), resolved)
			fmt.Fprint(cmd.OutOrStdout(), out)
			if len(pruned) > 0 {
				fmt.Fprintf(cmd.ErrOrStderr(), "deleted %d objects an earlier apply wrote for another wiring of these operators: %s\n", len(pruned), strings.Join(pruned, ", "))
			}
			return err
		},
	}
	cmd.Flags().StringVarP(&file, "filename", "f", "", "the manifests: a YAML file or a folder of them (rendered as with -k when it holds a kustomization.yaml)")
	cmd.Flags().StringVarP(&kdir, "kustomize", "k", "", "a folder with a kustomization.yaml, rendered with kustomize's library as kubectl apply -k does (e.g. config/serverless)")
	cmd.Flags().StringVar(&buildDir, "build-dir", ".", "run 'go build' here (the module that resolves the ko:// import paths); dev.opzero.dev/command's relative paths are from here")
	return cmd
}
