package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	v1 "github.com/opzero/opzero/examples/configwatcher/api/v1"
	"github.com/opzero/opzero/internal/devenv/controlplane"
)

// The worth part ("Is serverless worth it?", issue 26): what a deployment
// keeps running while its operator is at zero, against the same reconciler
// on controller-runtime, and how much instance time unrelated churn costs
// each serverless wiring. It runs on a control plane of its own, so that
// its ConfigMaps are the only ones the watches see.

// Flags of the part (main binds them).
var (
	worthObjects = "0,2000,10000,50000" // -worth-objects
	worthSettle  = 30 * time.Second     // -worth-settle
	worthChurn   = 10 * time.Minute     // -churn
)

const (
	worthOps     = 10              // operators in the many-operators rows
	worthCMNS    = 10              // namespaces the ConfigMaps are spread over (no ConfigWatcher in them)
	worthIdle    = 3 * time.Second // opzero dev --idle, as make demo
	worthChurnHz = 2               // ConfigMap updates per second during the churn
)

// The wirings measured side by side.
const (
	wCR      = "controller-runtime"
	wCRMeta  = "controller-runtime, metadata-only"
	wKnative = "Knative wiring"
	wHub     = "hub wiring"
)

var worthWirings = []string{wCR, wCRMeta, wKnative, wHub}

// worthPart is one run of the part.
type worthPart struct {
	dir, root  string
	kubeconfig string
	c          client.Client
	opzero     string // the CLI, built from this tree
	crbaseline string
	hubNote    string                    // why the hub rows are empty, if they are
	manifests  map[string]map[int]string // wiring -> operators -> manifests file
	cms        int                       // ConfigMaps created so far
	// mem: wiring -> operators -> objects -> the always-on processes
	mem map[string]map[int]map[int][]procMem
	// notes: why a row is missing (wiring -> operators -> objects)
	notes map[string]map[int]map[int]string
	churn map[string]churnResult
	// churnNote: why the hub's churn row is empty, if it is
	churnNote string
	// ownIdle: opzero dev runs without --idle, each Service with its own
	// scale-to-zero period (the manifests': Knative's), not worthIdle
	ownIdle bool
}

// procMem is one always-on process: what it plays, whether it serves every
// operator of the cluster (mtping, the hub) or one, and its VmRSS and
// VmHWM, MiB.
type procMem struct {
	what     string
	shared   bool
	rss, hwm float64
}

func parseCounts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 0 {
			return nil, fmt.Errorf("-worth-objects %q: want counts such as 0,2000,10000", s)
		}
		if len(out) > 0 && n < out[len(out)-1] {
			return nil, fmt.Errorf("-worth-objects %q: counts go up (objects are only added)", s)
		}
		out = append(out, n)
	}
	return out, nil
}

// worth runs the part in dir and adds its section to r.
func worth(ctx context.Context, r *report, dir string) error {
	counts, err := parseCounts(worthObjects)
	if err != nil {
		return err
	}
	root, err := controlplane.RepoRoot()
	if err != nil {
		return err
	}
	w := &worthPart{dir: filepath.Join(dir, "worth"), root: root, manifests: map[string]map[int]string{},
		mem: map[string]map[int]map[int][]procMem{}, notes: map[string]map[int]map[int]string{}, churn: map[string]churnResult{}}
	if err := os.MkdirAll(w.dir, 0o755); err != nil {
		return err
	}
	if err := w.build(ctx); err != nil {
		return err
	}
	stop, err := w.startPlane(ctx, "worth")
	if err != nil {
		return err
	}
	defer stop()
	if err := w.setup(ctx); err != nil {
		return err
	}
	if err := w.writeManifests(ctx); err != nil {
		return err
	}
	for _, n := range counts {
		fmt.Printf("  worth: %d ConfigMaps ...\n", n)
		if err := w.ensureConfigMaps(ctx, n); err != nil {
			return err
		}
		for _, ops := range []int{1, worthOps} {
			for _, wiring := range worthWirings {
				procs, note, err := w.measure(ctx, wiring, ops)
				if err != nil {
					return fmt.Errorf("%s, %d operator(s), %d ConfigMaps: %w", wiring, ops, n, err)
				}
				w.record(wiring, ops, n, procs, note)
			}
		}
	}
	for _, wiring := range []string{wKnative, wHub} {
		if w.manifests[wiring] == nil {
			continue
		}
		fmt.Printf("  worth: %s under unrelated churn for %s ...\n", wiring, worthChurn)
		res, err := w.runChurn(ctx, wiring, worthChurn)
		if err != nil && wiring == wHub {
			fmt.Printf("    hub wiring under churn: %v\n", err)
			w.churnNote = "hub under churn: " + firstLine(err.Error())
			continue
		}
		if err != nil {
			return fmt.Errorf("%s under churn: %w", wiring, err)
		}
		w.churn[wiring] = res
	}
	r.add(worthTitle, w.section(counts))
	r.worthSVG = w.plot(counts)
	return nil
}

// startPlane starts the part's control plane of its own, with the
// ConfigWatcher's CRD, and the part's client of it.
func (w *worthPart) startPlane(ctx context.Context, part string) (stop func(), err error) {
	fmt.Printf("  %s: starting a control plane of its own ...\n", part)
	// With kube-controller-manager: the hub's ClusterRole aggregates the
	// operators' (aggregationRule), which its clusterrole-aggregation
	// controller fills; without it the hub may read nothing.
	plane, err := controlplane.Up(ctx, controlplane.Options{Dir: filepath.Join(w.dir, "plane"), DieWithParent: true})
	if err != nil {
		return nil, err
	}
	stop = func() { plane.Stop(false) }
	w.kubeconfig = plane.Kubeconfig
	ctrllog.SetLogger(logr.Discard()) // as run does: the part's client logs nothing worth its report
	if _, err := controlplane.InstallCRDs(ctx, plane.Config, "examples/configwatcher/config/crd"); err != nil {
		stop()
		return nil, err
	}
	scheme := k8sruntime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	_ = v1.AddToScheme(scheme)
	cfg := *plane.Config
	cfg.QPS, cfg.Burst = 2000, 4000
	if w.c, err = client.New(&cfg, client.Options{Scheme: scheme}); err != nil {
		stop()
		return nil, err
	}
	return stop, nil
}

func (w *worthPart) record(wiring string, ops, n int, procs []procMem, note string) {
	if w.mem[wiring] == nil {
		w.mem[wiring], w.notes[wiring] = map[int]map[int][]procMem{}, map[int]map[int]string{}
	}
	if w.mem[wiring][ops] == nil {
		w.mem[wiring][ops], w.notes[wiring][ops] = map[int][]procMem{}, map[int]string{}
	}
	if note != "" {
		w.notes[wiring][ops][n] = note
		fmt.Printf("    %s, %d operator(s): %s\n", wiring, ops, note)
		return
	}
	w.mem[wiring][ops][n] = procs
	rss, hwm := sumMem(procs, nil)
	fmt.Printf("    %s, %d operator(s): %d processes, RSS %.1f MiB (peak %.1f)\n", wiring, ops, len(procs), rss, hwm)
	if ops == 1 { // each process, for a run without -out
		for _, p := range procs {
			fmt.Printf("      %s: RSS %.1f MiB (peak %.1f)\n", p.what, p.rss, p.hwm)
		}
	}
}

// sumMem adds up RSS and peak of the processes keep selects (nil: all).
func sumMem(procs []procMem, keep func(procMem) bool) (rss, hwm float64) {
	for _, p := range procs {
		if keep == nil || keep(p) {
			rss, hwm = rss+p.rss, hwm+p.hwm
		}
	}
	return rss, hwm
}

// build builds the CLI (opzero dev runs the wiring as a user would), the
// controller-runtime baseline and, if its package exists, the hub (dev
// builds its ko:// image itself; this build says whether it can).
func (w *worthPart) build(ctx context.Context) error {
	fmt.Println("  worth: building opzero, crbaseline, opzero-hub ...")
	w.opzero, w.crbaseline = filepath.Join(w.dir, "opzero"), filepath.Join(w.dir, "crbaseline")
	for bin, pkg := range map[string]string{w.opzero: "./cmd/opzero", w.crbaseline: "./bench/crbaseline"} {
		if out, err := buildCmd("", bin, pkg).CombinedOutput(); err != nil {
			return fmt.Errorf("go build %s: %v\n%s", pkg, err, out)
		}
	}
	if m, _ := filepath.Glob(filepath.Join(w.root, "cmd/opzero-hub/*.go")); len(m) == 0 {
		w.hubNote = "hub: not built (cmd/opzero-hub missing)"
		return nil
	}
	if out, err := buildCmd("", filepath.Join(w.dir, "opzero-hub"), "./cmd/opzero-hub").CombinedOutput(); err != nil {
		w.hubNote = fmt.Sprintf("hub: not built (go build ./cmd/opzero-hub: %s)", firstLine(string(out)))
	}
	return nil
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	return s
}

// Namespaces: wo-NN hold operator NN (its Knative objects, its idle
// ConfigWatcher); wcm-N hold the ConfigMaps, which no ConfigWatcher names.
func opNamespace(i int) string { return fmt.Sprintf("wo-%02d", i+1) }
func cmNamespace(i int) string { return fmt.Sprintf("wcm-%d", i) }

// setup creates the namespaces, one idle ConfigWatcher (and the ConfigMap
// it names) per operator namespace, and the ConfigMaps the churn updates.
func (w *worthPart) setup(ctx context.Context) error {
	for i := range worthOps {
		ns := opNamespace(i)
		for _, o := range []client.Object{
			&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}},
			&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "watched", Namespace: ns}, Data: map[string]string{"v": "1"}},
			&v1.ConfigWatcher{ObjectMeta: metav1.ObjectMeta{Name: "idle", Namespace: ns},
				Spec: v1.ConfigWatcherSpec{ConfigMap: "watched", PodSelector: map[string]string{"app": "none"}}},
		} {
			if err := w.c.Create(ctx, o); err != nil {
				return err
			}
		}
	}
	for i := range worthCMNS {
		if err := w.c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: cmNamespace(i)}}); err != nil {
			return err
		}
		if err := w.c.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "churn", Namespace: cmNamespace(i)}, Data: map[string]string{"n": "0"}}); err != nil {
			return err
		}
	}
	return nil
}

// ensureConfigMaps grows the 1 KiB ConfigMaps, spread over the wcm-N
// namespaces, to total (created 32 at a time).
func (w *worthPart) ensureConfigMaps(ctx context.Context, total int) error {
	payload := strings.Repeat("x", 1024)
	t := time.Now()
	err := forEach(ctx, 32, w.cms, total, func(ctx context.Context, i int) error {
		return w.c.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%05d", i), Namespace: cmNamespace(i % worthCMNS)}, Data: map[string]string{"v": payload}})
	})
	if err != nil {
		return err
	}
	if total > w.cms {
		fmt.Printf("    created %d ConfigMaps in %s\n", total-w.cms, time.Since(t).Round(time.Second))
	}
	w.cms = max(w.cms, total)
	return nil
}

// writeManifests has `opzero manifests` generate each operator's wiring,
// as a user would, and joins operators 1..k into one file per wiring and
// k (objects shared by the operators, the CRDs, written once).
func (w *worthPart) writeManifests(ctx context.Context) error {
	for _, wiring := range []string{wKnative, wHub} {
		if wiring == wHub && w.hubNote != "" {
			continue
		}
		var docs []string
		for i := range worthOps {
			args := []string{"manifests", "--operator", "./examples/configwatcher", "--namespace", opNamespace(i), "-o", "-"}
			if wiring == wKnative {
				args = append(args, "--source=knative") // the hub is the default
			}
			cmd := exec.CommandContext(ctx, w.opzero, args...)
			cmd.Dir = w.root
			var stderr strings.Builder
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			if err != nil {
				if wiring == wHub {
					w.hubNote = fmt.Sprintf("hub: no wiring (opzero manifests: %s)", firstLine(stderr.String()))
					break
				}
				return fmt.Errorf("opzero %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
			}
			docs = append(docs, string(out))
			if i == 0 || i == worthOps-1 {
				f := filepath.Join(w.dir, fmt.Sprintf("%s-%d.yaml", strings.Fields(wiring)[0], i+1))
				if err := os.WriteFile(f, []byte(joinManifests(docs)), 0o644); err != nil {
					return err
				}
				if w.manifests[wiring] == nil {
					w.manifests[wiring] = map[int]string{}
				}
				w.manifests[wiring][i+1] = f
			}
		}
	}
	return nil
}

// joinManifests joins YAML streams, keeping the first of objects that
// appear more than once (same apiVersion, kind, namespace and name).
func joinManifests(streams []string) string {
	seen := map[string]bool{}
	var out []string
	for _, s := range streams {
		for _, doc := range strings.Split(s, "\n---\n") {
			doc = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(doc), "---"))
			if doc == "" {
				continue
			}
			k := objectKey(doc)
			if seen[k] {
				continue
			}
			seen[k] = true
			out = append(out, doc)
		}
	}
	return strings.Join(out, "\n---\n") + "\n"
}

// objectKey is apiVersion/kind/namespace/name read from a manifest's
// top-level and metadata lines.
func objectKey(doc string) string {
	var apiVersion, kind, ns, name string
	inMeta := false
	for _, l := range strings.Split(doc, "\n") {
		switch {
		case strings.HasPrefix(l, "apiVersion:"):
			apiVersion = strings.TrimSpace(strings.TrimPrefix(l, "apiVersion:"))
		case strings.HasPrefix(l, "kind:"):
			kind = strings.TrimSpace(strings.TrimPrefix(l, "kind:"))
		case strings.HasPrefix(l, "metadata:"):
			inMeta = true
		case inMeta && strings.HasPrefix(l, "  name:"):
			name = strings.TrimSpace(strings.TrimPrefix(l, "  name:"))
		case inMeta && strings.HasPrefix(l, "  namespace:"):
			ns = strings.TrimSpace(strings.TrimPrefix(l, "  namespace:"))
		case l != "" && l[0] != ' ' && l[0] != '-':
			inMeta = false
		}
	}
	return strings.Join([]string{apiVersion, kind, ns, name}, "/")
}
