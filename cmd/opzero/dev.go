package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"
	apiextclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/opzero/opzero/internal/devenv/controlplane"
	"github.com/opzero/opzero/internal/devenv/dev"
	"github.com/opzero/opzero/internal/devenv/pinned"
)

func newDevCmd() *cobra.Command {
	f := &devFlags{}
	cmd := &cobra.Command{
		Use:   "dev -f <manifests> | -k <kustomization folder>",
		Short: "Run serverless operators locally: apply their manifests and play Knative's part",
		Long: `dev is a local serverless platform. It server-side applies the manifests
(normally from 'opzero manifests'; -k, or -f of a folder with a
kustomization.yaml, renders a kustomization with kustomize's library as
kubectl apply -k does) on a local control plane with Knative's CRDs, then
plays Knative's part for the objects it reads back:

  Knative Service   an activator at a local URL (written to status.url): the
                    first request starts the operator process (ko:// image,
                    built once with go build, or the command of a
                    dev.opzero.dev/command annotation; its args and env; PORT
                    set) and is buffered meanwhile; more instances up to
                    max-scale when all are busy at containerConcurrency; scale
                    to zero after
                    the autoscaling.knative.dev/window annotation, else 60s
                    (Knative's stable window), plus the
                    scale-to-zero-pod-retention-period annotation, as real
                    Knative counts it (--idle overrides both)
  ApiServerSource   Knative's real adapter (knative.dev/eventing v0.50.0), its
                    RBAC checked with SubjectAccessReviews, OIDC tokens for
                    sink.audience; status Ready with sinkUri
  PingSource        Knative's real mtping; status Ready with sinkUri
  Broker, Trigger   one in-memory ingress; each Trigger's filter, retries,
                    backoff and dead-letter sink as Knative has them
  Deployment        one always-on process if its image is ko:// (the opzero
                    hub, the wakeup source) or it is annotated
                    dev.opzero.dev/command (that local command runs, as for a
                    Knative Service), or its image is python or node running
                    a script from a ConfigMap (the local python3, python2 for
                    a 2.x tag, or node, on the ConfigMap's files, as
                    Metacontroller publishes hooks); other Deployments are
                    only applied, with a line saying so
  webhooks          configurations naming a Service of a Deployment run here
                    are pointed at its local process, with a local certificate

Each process gets exactly its container's environment, as kubelet builds it
(env and envFrom, Secrets and ConfigMaps read from the cluster), plus what
Knative injects (PORT, K_SERVICE, K_CONFIGURATION, K_REVISION), KUBECONFIG
(its service account's token, standing in for in-cluster config) and PATH;
nothing of dev's own environment, so a variable missing from the manifests
is missing here as on a cluster (add it with opzero manifests --env).

opzero's own images (ko://github.com/opzero/opzero/cmd/opzero and
.../cmd/wakeup-source, the wakeup source) run from this CLI itself, so your
module needs no dependency for them. Knative's adapters and CRDs and the
control plane come from --bin-dir, else $OPZERO_BIN_DIR, else opzero's cache
(built there on first use; 'opzero install' does it ahead of time).

A status line shows, for each Service, its instances, the events it answered
(failed ones), the reconciles the operator's answers report (failed ones,
also those answered 200 because durable time recorded the retry), the cold
starts, and the last error with its time. Retries that an operator without
durable time runs on its own, between deliveries, are not seen. -v adds one
line per delivery. --timeline draws the session as an SVG picture when it
stops ('opzero dev timeline' draws one from an events file).

Without --kubeconfig or $KUBECONFIG it uses the control plane of
'opzero controlplane up' if one runs, else starts one for this session
(stopped on exit). Knative's CRDs are installed where they are missing; a
cluster that runs Knative itself is refused. Ctrl-C stops every process it
started; on exit the Knative Services and sources it made Ready turn
Ready=False (reason DevSessionEnded) and lose its local URLs.`,
		Example: `  opzero manifests ./examples/configwatcher | opzero dev -f -
  opzero manifests ./cmd -o config/serverless && opzero dev -k config/serverless
  opzero dev -f internal/devenv/dev/testdata/configwatcher.yaml --idle 3s -v --timeline session.svg`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return f.run(cmd) },
	}
	fs := cmd.Flags()
	fs.StringVarP(&f.file, "filename", "f", "", "manifests: a YAML/JSON file, a folder of them (rendered as with -k when it holds a kustomization.yaml), or - for standard input")
	fs.StringVarP(&f.kustomize, "kustomize", "k", "", "a folder with a kustomization.yaml, rendered with kustomize's library as kubectl apply -k does (e.g. config/serverless, which opzero manifests -o config/serverless writes)")
	fs.StringVar(&f.kubeconfig, "kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig of the API server to use (default $KUBECONFIG, else the plane that opzero controlplane up started, else a new one)")
	fs.StringVar(&f.binDir, "bin-dir", "", "take the control plane's binaries and Knative's adapters and CRDs from this folder (default $OPZERO_BIN_DIR, else opzero's cache; see 'opzero install')")
	fs.StringVarP(&f.namespace, "namespace", "n", "default", "namespace of namespaced objects that name none")
	fs.IntVar(&f.port, "port", 0, "local port of the first Knative Service's URL, the next one gets port+1 (0: free ports)")
	fs.DurationVar(&f.idle, "idle", 0, "scale-to-zero period for every Service, overriding its annotations")
	fs.DurationVar(&f.coldStartDelay, "cold-start-delay", 0, "hold each cold start until this long after the operator's process started, as a pod on a node takes seconds where a local process takes milliseconds (e.g. 1s, about when the operator listens in a pod on a node, which the hub's early delivery waits for; docs/dev.md; 0: the local process start, a floor)")
	fs.StringVar(&f.cacheDir, "cache-dir", dev.DefaultCacheDir(), "where binaries built from ko:// images are kept")
	fs.StringVar(&f.buildDir, "build-dir", "", "folder of the Go module that resolves ko:// import paths (default the working directory)")
	fs.StringVar(&f.logDir, "log-dir", "", "folder for the processes' logs (default a new temporary folder)")
	fs.BoolVar(&f.noStatus, "no-status", false, "do not print the live status line")
	fs.BoolVar(&f.otel, "otel", false, "start a local OpenTelemetry collector (the Collector's OTLP receiver; see 'opzero install otelcol') and point the operators and the wakeup source at it with the OTEL_* variables: their traces and metrics land as OTLP/JSON lines in the log folder's otel/")
	fs.StringVar(&f.events, "events", "", "also write what happens as machine-readable events: json writes one JSON object per line (session ready, process started/ready/stopped, delivery, reconciled, reconcile failed, scaled to zero, error, stopped) to standard output, and the human log to standard error")
	fs.StringVar(&f.eventsFile, "events-file", "-", "where --events go: a file, /dev/fd/N for an inherited descriptor, or - for standard output")
	fs.BoolVarP(&f.verbose, "verbose", "v", false, "print one line per delivery: its time, the Service, why the operator was woken (create, update or delete of a kind, sweep, wakeup, external), the instance that took it and whether it waited for a cold start, the HTTP code, the latency and the operator's answer (Opzero-Result, or the error)")
	fs.StringVar(&f.timeline, "timeline", "", "when the session stops, draw it as an SVG timeline to this file (as 'opzero dev timeline' draws a recorded event stream)")
	cmd.AddCommand(newDevTimelineCmd())
	return cmd
}

// devFlags are the flags of opzero dev.
type devFlags struct {
	file, kustomize, kubeconfig, cacheDir, buildDir, logDir, namespace, binDir string
	port                                                                       int
	idle, coldStartDelay                                                       time.Duration
	noStatus, verbose, otel                                                    bool
	events, eventsFile, timeline                                               string
}

func (f *devFlags) run(cmd *cobra.Command) (err error) {
	if err := fileOrKustomization(f.file, f.kustomize, "a manifests file, a folder of them, or - for standard input"); err != nil {
		return err
	}
	ctx := cmd.Context()
	if err := checkTimelinePath(f.timeline); err != nil {
		return err
	}
	var recorded *bytes.Buffer // the events, for --timeline
	if f.timeline != "" {
		recorded = &bytes.Buffer{}
	}
	events, out, closeEvents, err := f.openEvents(cmd, recorded)
	if err != nil {
		return err
	}
	defer closeEvents()
	defer func() {
		if err != nil {
			events.Write(dev.Event{Event: dev.EventError, Message: err.Error()})
		}
	}()
	terminal := !f.noStatus && isTerminal(out)
	lines := &lineWriter{w: out, clear: terminal}
	objs, err := f.read(cmd)
	if err != nil {
		return err
	}
	// Knative's adapters are found (or built, with progress) before the
	// cluster is touched.
	bins := pinned.Resolver{Dir: f.binDir, Progress: lines}
	if _, err := bins.Find(ctx, adaptersFor(objs)...); err != nil {
		return err
	}
	kc, stopPlane, err := devPlane(ctx, f.kubeconfig, bins, lines)
	if err != nil {
		return err
	}
	defer stopPlane()
	logDir := f.logDir
	if logDir == "" {
		if logDir, err = os.MkdirTemp("", "opzero-dev-"); err != nil {
			return err
		}
	} else if err := os.MkdirAll(logDir, 0o755); err != nil {
		return err
	}
	otelEnv, stopOtel, err := f.startOtel(ctx, bins, logDir, lines)
	if err != nil {
		return err
	}
	defer stopOtel()
	p, err := dev.Start(ctx, dev.Options{Kubeconfig: kc, Objects: objs, Namespace: f.namespace, Dir: logDir, CacheDir: f.cacheDir,
		BuildDir: f.buildDir, Port: f.port, Idle: f.idle, ColdStartDelay: f.coldStartDelay, Out: lines, Events: events, BinDir: f.binDir, Prebuilt: ownImage, Verbose: f.verbose, Env: otelEnv})
	if err != nil {
		return err
	}
	fmt.Fprintf(lines, "opzero dev: ready; logs in %s; Ctrl-C stops everything\n", logDir)
	f.serve(ctx, p, lines, terminal)
	fmt.Fprintln(out, "opzero dev: stopping the sources, the operators and the processes it started")
	p.Stop()
	fmt.Fprintln(out, p.StatusLine())
	events.Write(dev.Event{Event: dev.EventStopped})
	if recorded != nil {
		writeTimeline(f.timeline, recorded, out)
	}
	return nil
}

// read reads the objects of -f or -k.
func (f *devFlags) read(cmd *cobra.Command) ([]*unstructured.Unstructured, error) {
	if f.kustomize != "" {
		return dev.ReadKustomization(f.kustomize)
	}
	return dev.ReadManifests(f.file, cmd.InOrStdin())
}

// serve shows the status line until Ctrl-C (or the platform stops).
func (f *devFlags) serve(ctx context.Context, p *dev.Platform, w io.Writer, terminal bool) {
	sctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if !f.noStatus {
			p.WatchStatus(sctx, w, terminal)
		}
	}()
	select {
	case <-ctx.Done():
	case <-p.Done():
	}
	cancel()
	<-done
}

// adaptersFor lists Knative's adapters the manifests need.
func adaptersFor(objs []*unstructured.Unstructured) []string {
	var need []string
	for _, o := range objs {
		a := map[string]string{"ApiServerSource": pinned.ApiServerSourceAdapter, "PingSource": pinned.PingAdapter}[o.GetKind()]
		if a != "" && o.GroupVersionKind().Group == "sources.knative.dev" && !slices.Contains(need, a) {
			need = append(need, a)
		}
	}
	return need
}

// ownImage gives the command of opzero's own images when this process is
// the opzero CLI, so the user's module needs no dependency for them:
// ko://github.com/opzero/opzero/cmd/opzero is this executable, and
// ko://github.com/opzero/opzero/cmd/wakeup-source its wakeup-source command.
func ownImage(pkg string) ([]string, bool) {
	bi, ok := debug.ReadBuildInfo()
	if !ok || bi.Path != controlplane.ModulePath+"/cmd/opzero" {
		return nil, false // a test binary, say: build the image
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, false
	}
	switch pkg {
	case controlplane.ModulePath + "/cmd/opzero":
		return []string{exe}, true
	case controlplane.ModulePath + "/cmd/wakeup-source":
		return []string{exe, "wakeup-source"}, true
	}
	return nil, false
}

// devPlane returns the kubeconfig to use, with Knative's CRDs installed,
// and a func that stops the control plane if devPlane started one.
func devPlane(ctx context.Context, kubeconfig string, bins pinned.Resolver, out io.Writer) (string, func(), error) {
	nop := func() {}
	if kubeconfig == "" {
		if p, err := controlplane.Load(defaultStateDir()); err == nil && len(p.Status()) > 0 && p.Status()[0].Running {
			kubeconfig = p.Kubeconfig
			fmt.Fprintf(out, "using the control plane of `opzero controlplane up` at %s\n", p.Server)
		}
	}
	if kubeconfig == "" {
		if _, err := bins.Find(ctx, pinned.Etcd, pinned.KubeAPIServer, pinned.KubeControllerManager); err != nil {
			return "", nop, err
		}
		dir, err := os.MkdirTemp("", "opzero-dev-plane-")
		if err != nil {
			return "", nop, err
		}
		fmt.Fprintf(out, "no KUBECONFIG and no `opzero controlplane up`: starting a control plane for this session in %s\n", dir)
		t := time.Now()
		p, err := controlplane.Up(ctx, controlplane.Options{Dir: filepath.Join(dir, "plane"), DieWithParent: true, BinDir: bins.Dir})
		if err != nil {
			os.RemoveAll(dir)
			return "", nop, err
		}
		stop := func() { _ = p.Stop(false); os.RemoveAll(dir) }
		if err := installKnativeCRDs(ctx, bins, p.Config); err != nil {
			stop()
			return "", nop, err
		}
		fmt.Fprintf(out, "control plane ready in %s at %s with Knative's CRDs (export KUBECONFIG=%s to use it meanwhile)\n",
			time.Since(t).Round(time.Millisecond), p.Server, p.Kubeconfig)
		return p.Kubeconfig, stop, nil
	}
	cfg, err := restConfig(kubeconfig)
	if err != nil {
		return "", nop, err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return "", nop, err
	}
	// A cluster that runs Knative itself would fight over the statuses.
	if _, err := cs.AppsV1().Deployments("knative-serving").Get(ctx, "controller", metav1.GetOptions{}); err == nil {
		return "", nop, fmt.Errorf("%s runs Knative Serving (deployment knative-serving/controller): opzero dev plays Knative's part on a local control plane; "+
			"there, apply the manifests with kubectl instead", cfg.Host)
	}
	// Knative's CRDs are installed only where they are missing: never
	// replaced on a cluster that has its own.
	present, err := crdPresent(ctx, cfg, "services.serving.knative.dev")
	if err != nil {
		return "", nop, fmt.Errorf("reaching the API server at %s (kubeconfig %s): %w", cfg.Host, kubeconfig, err)
	}
	if !present {
		if err := installKnativeCRDs(ctx, bins, cfg); err != nil {
			return "", nop, fmt.Errorf("installing Knative's CRDs on %s: %w", cfg.Host, err)
		}
		fmt.Fprintf(out, "installed Knative's CRDs on %s\n", cfg.Host)
	}
	return kubeconfig, nop, nil
}

// installKnativeCRDs installs Knative's CRDs in the pinned versions (from
// --bin-dir, $OPZERO_BIN_DIR or opzero's cache, fetched there the first
// time).
func installKnativeCRDs(ctx context.Context, bins pinned.Resolver, cfg *rest.Config) error {
	crds, err := bins.CRDs(ctx)
	if err != nil {
		return err
	}
	_, err = controlplane.InstallCRDs(ctx, cfg, crds...)
	return err
}

func crdPresent(ctx context.Context, cfg *rest.Config, name string) (bool, error) {
	cs, err := apiextclient.NewForConfig(cfg)
	if err != nil {
		return false, err
	}
	_, err = cs.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	return err == nil, err
}

// lineWriter writes whole lines; on a terminal it first clears the status
// line being rewritten in place.
type lineWriter struct {
	mu    sync.Mutex
	w     io.Writer
	clear bool
}

func (l *lineWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.clear && !strings.HasPrefix(string(b), "\r") {
		_, _ = io.WriteString(l.w, "\r\033[K")
	}
	return l.w.Write(b)
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

func restConfig(kubeconfig string) (*rest.Config, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("reading kubeconfig %s: %w", kubeconfig, err)
	}
	return cfg, nil
}

// fileOrKustomization checks that exactly one of -f (file: what it takes)
// and -k is given, as kubectl takes them.
func fileOrKustomization(file, kdir, takes string) error {
	switch {
	case file != "" && kdir != "":
		return errors.New("-f and -k: give one (as kubectl takes them)")
	case file == "" && kdir == "":
		return fmt.Errorf("-f or -k is required: %s; or a kustomization's folder", takes)
	}
	return nil
}
