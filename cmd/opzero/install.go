package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/opzero/opzero/internal/devenv/cluster"
	"github.com/opzero/opzero/internal/devenv/pinned"
)

func newInstallCmd() *cobra.Command {
	var (
		r        pinned.Resolver
		printDir bool
	)
	cmd := &cobra.Command{
		Use:   "install [" + strings.Join(pinned.Sets, "|") + "]...",
		Short: "Build the pinned programs opzero runs (control plane, Knative's adapters and CRDs) ahead of first use",
		Long: `install makes the programs opzero runs ready: the local control plane (etcd,
kube-apiserver, kube-controller-manager and kubectl of Kubernetes v1.34.3) and
Knative's ApiServerSource and PingSource adapters and CRDs (v0.50.0); name one
set to install only that one. The otelcol set, installed only when named, is
the OpenTelemetry Collector's OTLP receiver (v0.160.0) that 'opzero dev
--otel' and the tests send telemetry to. The cluster set, installed only when
named, is what 'opzero cluster up' runs besides the control plane: kubelet,
kube-proxy and kube-scheduler (v1.34.3), CoreDNS (v1.13.1), the programs of
the cluster's own images (pause, netcheck) and imagebuild, which writes the
images (go-containerregistry, in a module of its own); as root it also
installs Debian's containerd, runc, CNI plugins and iptables, and python3 and
nodejs (the interpreters of hooks' images, opzero cluster apply), when they
are missing.
The knative-cluster set, installed only when named, is what 'opzero cluster up
--knative' adds: Knative Serving's and Eventing's components (v0.50.0) and
Traefik (v3.6.12), static, for images (the first 'cluster up --knative' builds
them itself when they are missing). They are built from the pinned Go modules
this CLI carries, into a cache folder named after the pins
($XDG_CACHE_HOME/opzero/<pins>, by default ~/.cache/opzero/<pins>), or into
--bin-dir / $OPZERO_BIN_DIR. What is there is kept, so a second run takes a
moment.

The first build on 2 cores takes about 9 minutes for the control plane, 3 for
Knative's adapters, 2 for otelcol, 8 for the cluster set and 15 for
knative-cluster (less on more cores; a minute or two when Go's build cache holds
them). It needs Go and the Go module proxy.

Every command that runs these programs looks for them in --bin-dir, else
$OPZERO_BIN_DIR, else $KUBEBUILDER_ASSETS (etcd, kube-apiserver, kubectl), else
the cache, and builds what the cache lacks on first use: install does it ahead
of time, like setup-envtest.

The pinned kubectl is also linked beside this CLI (kubectl in the folder of
opzero, the one go install writes to and the README puts on PATH), so that
'kubectl' as the docs type it is the control plane's version; a kubectl
already there that is not opzero's is left alone, and said.`,
		Example: `  opzero install
  export KUBEBUILDER_ASSETS=$(opzero install --print-dir controlplane)   # envtest can use them too
  opzero install --bin-dir ./bin knative`,
		ValidArgs: pinned.Sets,
		Args:      cobra.OnlyValidArgs,
		RunE: func(cmd *cobra.Command, sets []string) error {
			out := cmd.OutOrStdout()
			r.Progress = out
			if printDir {
				r.Progress = cmd.ErrOrStderr()
			}
			if slices.Contains(sets, "cluster") && os.Geteuid() == 0 {
				if err := cluster.InstallDeps(cmd.Context(), r.Progress); err != nil {
					return err
				}
			}
			dir, err := r.Install(cmd.Context(), sets...)
			if err != nil {
				return err
			}
			if printDir {
				fmt.Fprintln(out, dir)
				return nil
			}
			if len(sets) == 0 {
				sets = []string{"controlplane", "knative"}
			}
			if slices.Contains(sets, "cluster") {
				sets = append(sets, "controlplane")
			}
			w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
			for _, n := range pinned.Names() {
				if p := filepath.Join(dir, n); inSets(n, sets) {
					fmt.Fprintf(w, "  %s\t%s\n", n, p)
				}
			}
			if inSets(pinned.PingAdapter, sets) {
				fmt.Fprintf(w, "  Knative's CRDs\t%s\n", filepath.Join(dir, pinned.CRDFolder))
			}
			w.Flush()
			fmt.Fprintf(out, "Ready in %s (pins %s).\n", dir, pinned.Version())
			if exe, err := os.Executable(); err == nil && filepath.Base(exe) == "opzero" && inSets(pinned.Kubectl, sets) {
				linkKubectl(out, filepath.Dir(exe), dir)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&r.Dir, "bin-dir", "", "install into this folder instead of opzero's cache (default $OPZERO_BIN_DIR, else the cache)")
	f.StringSliceVar(&r.From, "from", nil, "take the binaries of these folders instead of building them, where their stamps show the same pins (a bin/ built by an older 'make bins')")
	f.BoolVar(&printDir, "print-dir", false, "print only the folder, for scripts; progress goes to standard error")
	return cmd
}

// inSets reports whether binary belongs to one of the named sets.
func inSets(binary string, sets []string) bool {
	return slices.Contains(sets, pinned.SetOf(binary))
}
