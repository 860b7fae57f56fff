package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/opzero/opzero/internal/devenv/dev"
	"github.com/opzero/opzero/internal/manifests"
)

// The bundles part ("An adopted cache-heavy project at zero", issue 53):
// the in-repo test project examples/bundles (a published operator's shape:
// a For-less controller, a namespace-restricted manager cache, a second
// cache of its own with a metadata-only raw source, a Namespace watch with
// a function predicate) served at zero by the hub, as its default
// manifests deploy it, under opzero dev on a control plane of the part's
// own. It measures what unrelated changes cost at zero (ConfigMaps and
// Secrets of other namespaces, Namespace labels; -churn, a third each)
// and how long an owned child deleted at zero takes to come back, beside
// the cold start of a Bundle created at zero in the same session.

const bundlesTitle = "An adopted cache-heavy project at zero (examples/bundles)"

const (
	bundlesTrust = "bundles-trust" // the trust namespace: the operator's and its Bundles' source
	bundlesReps  = 5               // Bundle cold starts and child restores, medians of
	bundlesLabel = "bundles.opzero.dev/bundle"
	churnLabel   = "bench.opzero.dev/churn" // the label the Namespace churn writes
)

// bundleRep is one repetition: a Bundle created at zero until its targets
// exist in every namespace, then one of its targets deleted at zero until
// restored, with what opzero dev's event stream says of each window.
type bundleRep struct {
	namespaces       int
	cold, restore    time.Duration
	coldEv, restorEv churnResult
}

// churnKind is one kind of unrelated change the part makes.
type churnKind struct {
	what   string
	change func(context.Context, int) error
}

func bundles(ctx context.Context, r *report, dir string) error {
	load0 := loadavg()
	w, stop, err := hubPart(ctx, dir, "bundles") // the wcm-N namespaces and their churn ConfigMaps (and wo-NN)
	if err != nil {
		return err
	}
	defer stop()
	for i := range worthCMNS {
		if err := w.c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "churn", Namespace: cmNamespace(i)}, StringData: map[string]string{"n": "0"}}); err != nil {
			return err
		}
	}
	for _, o := range []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: bundlesTrust}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: bundlesTrust, Name: "ca-source"}, Data: map[string]string{"ca.crt": "ROOT-1"}},
	} {
		if err := w.c.Create(ctx, o); err != nil {
			return err
		}
	}
	project := filepath.Join(w.root, "examples", "bundles")
	file, err := bundlesManifests(ctx, project, w.dir)
	if err != nil {
		return err
	}
	w.root = project // opzero dev builds and runs the project's own module
	fmt.Println("  bundles: opzero dev -f the project's manifests ...")
	s, err := w.startDev(ctx, "bundles", file)
	if err != nil {
		return err
	}
	defer s.stop()
	if err := w.subscriptionsReady(ctx, 1); err != nil {
		return fmt.Errorf("bundles: %w", err)
	}
	var refused error
	if err := wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		refused = w.c.Create(ctx, bundleObject("invalid", ""))
		if refused == nil {
			_ = w.c.Delete(ctx, bundleObject("invalid", ""))
		}
		return refused != nil && strings.Contains(refused.Error(), "a Bundle names its source ConfigMap and key"), nil
	}); err != nil {
		return fmt.Errorf("bundles: the project's validating webhook not in force within 2 minutes (the last create of an invalid Bundle: %v)", refused)
	}
	var reps []bundleRep
	for i := range bundlesReps {
		rep, err := w.bundleRep(ctx, s, fmt.Sprintf("trust-%d", i+1), cmNamespace(i%worthCMNS))
		if err != nil {
			return err
		}
		fmt.Printf("    %d: a Bundle created at zero: its targets in %d namespaces after %s (%d cold starts); a target deleted at zero restored after %s (%d cold starts): %.2fx\n",
			i+1, rep.namespaces, rep.cold.Round(time.Millisecond), rep.coldEv.coldStarts, rep.restore.Round(time.Millisecond), rep.restorEv.coldStarts, rep.restore.Seconds()/rep.cold.Seconds())
		reps = append(reps, rep)
	}
	kinds := []churnKind{
		{"ConfigMaps of other namespaces (not owned by a Bundle)", w.touchConfigMap},
		{"Secrets of other namespaces", w.touchSecret},
		{"Namespace labels (of namespaces the part created)", w.touchNamespace},
	}
	var churns []churnResult
	if worthChurn > 0 {
		for _, k := range kinds {
			if err := atZero(ctx, s); err != nil {
				return fmt.Errorf("before the churn of %s: %w", k.what, err)
			}
			fmt.Printf("  bundles: %d updates/s of %s for %s ...\n", worthChurnHz, k.what, (worthChurn / 3).Round(time.Second))
			res, err := w.churnWith(ctx, s, worthChurn/3, ofServices, k.change)
			if err != nil {
				return err
			}
			fmt.Printf("    %d changes: %d deliveries, %d cold starts, an instance %.2f%% of %s\n", res.updates, res.deliveries, res.coldStarts, 100*res.up.Seconds()/res.window.Seconds(), res.window.Round(time.Second))
			churns = append(churns, res)
		}
	}
	r.add(bundlesTitle, bundlesSection(reps, kinds, churns, load0))
	return nil
}

// bundlesManifests writes the project's default manifests (the hub
// wiring), as its TestBundlesAtZero builds them: operator and trust
// namespace bundles-trust, its Subscription's sweeps moved to once a year
// (a sweep would wake it, and restore a deleted child, on its own).
func bundlesManifests(ctx context.Context, project, dir string) (string, error) {
	fmt.Println("  bundles: opzero manifests of examples/bundles ...")
	objs, err := manifests.Build(ctx, project, "./cmd", manifests.Options{Namespace: bundlesTrust, Args: []string{"--trust-namespace=" + bundlesTrust}})
	if err != nil {
		return "", fmt.Errorf("manifests of examples/bundles: %w", err)
	}
	stream, err := manifests.Stream(objs)
	if err != nil {
		return "", err
	}
	us, err := dev.ReadManifests("-", bytes.NewReader(stream))
	if err != nil {
		return "", err
	}
	var docs []string
	for _, u := range us {
		if u.GetKind() == "Subscription" {
			sw, _, _ := unstructured.NestedSlice(u.Object, "spec", "sweeps")
			for _, x := range sw {
				x.(map[string]any)["schedule"] = "0 0 1 1 *"
			}
			if len(sw) > 0 {
				_ = unstructured.SetNestedSlice(u.Object, sw, "spec", "sweeps")
			}
		}
		b, err := yaml.Marshal(u.Object)
		if err != nil {
			return "", err
		}
		docs = append(docs, string(b))
	}
	file := filepath.Join(dir, "bundles.yaml")
	return file, os.WriteFile(file, []byte(strings.Join(docs, "---\n")), 0o644)
}

func bundleObject(name, source string) *unstructured.Unstructured {
	src := map[string]any{"configMap": source, "key": ""}
	if source != "" {
		src["key"] = "ca.crt"
	}
	u := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"source": src}}}
	u.SetAPIVersion("bundles.opzero.dev/v1alpha1")
	u.SetKind("Bundle")
	u.SetName(name)
	return u
}

// atZero waits (up to 2 minutes) until no operator instance runs and none
// has started or stopped for 2 s (the echoes of its own writes, if the hub
// delivers any, have gone).
func atZero(ctx context.Context, s *devSession) error {
	return wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
		evs, now := readEvents(s.events), time.Now()
		if instances(evs, now, ofServices) != 0 {
			return false, nil
		}
		for _, e := range evs {
			if ofServices(e) && (e.Event == dev.EventProcessStarted || e.Event == dev.EventProcessStopped) && now.Sub(e.Time) < 2*time.Second {
				return false, nil
			}
		}
		return true, nil
	})
}

// bundleRep creates Bundle name at zero and times it until its target
// exists in every namespace, then, at zero again, deletes its target in
// namespace victim and times it until restored.
func (w *worthPart) bundleRep(ctx context.Context, s *devSession, name, victim string) (bundleRep, error) {
	var rep bundleRep
	if err := atZero(ctx, s); err != nil {
		return rep, fmt.Errorf("before Bundle %s: %w", name, err)
	}
	var nss corev1.NamespaceList
	if err := w.c.List(ctx, &nss); err != nil {
		return rep, err
	}
	rep.namespaces = len(nss.Items)
	t0 := time.Now()
	if err := w.c.Create(ctx, bundleObject(name, "ca-source")); err != nil {
		return rep, err
	}
	if err := w.poll(ctx, fmt.Sprintf("Bundle %s's targets in %d namespaces", name, rep.namespaces), func(ctx context.Context) (bool, error) {
		var l corev1.ConfigMapList
		if err := w.c.List(ctx, &l, client.MatchingLabels{bundlesLabel: name}); err != nil {
			return false, err
		}
		n := 0
		for i := range l.Items {
			if isTarget(&l.Items[i]) {
				n++
			}
		}
		return n >= rep.namespaces, nil
	}); err != nil {
		return rep, err
	}
	rep.cold = time.Since(t0)
	if err := atZero(ctx, s); err != nil {
		return rep, fmt.Errorf("after Bundle %s: %w", name, err)
	}
	churnWindow(readEvents(s.events), t0, time.Now(), &rep.coldEv, ofServices) // the wake, its echoes, until at zero again
	key := client.ObjectKey{Namespace: victim, Name: name}
	t0 = time.Now()
	if err := w.c.Delete(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}); err != nil {
		return rep, err
	}
	if err := w.poll(ctx, "target "+key.String()+" restored", func(ctx context.Context) (bool, error) {
		var cm corev1.ConfigMap
		err := w.c.Get(ctx, key, &cm)
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return err == nil && isTarget(&cm), err
	}); err != nil {
		return rep, err
	}
	rep.restore = time.Since(t0)
	if err := atZero(ctx, s); err != nil {
		return rep, fmt.Errorf("after restoring %s: %w", key, err)
	}
	churnWindow(readEvents(s.events), t0, time.Now(), &rep.restorEv, ofServices)
	return rep, nil
}

// isTarget: a Bundle's target as the operator writes it.
func isTarget(cm *corev1.ConfigMap) bool {
	return cm.Data["ca.crt"] == "ROOT-1" && len(cm.OwnerReferences) == 1
}

// poll checks done every 20 ms for up to 2 minutes (a sweep, were one
// left, restores in minutes: that is a failure here).
func (w *worthPart) poll(ctx context.Context, what string, done wait.ConditionWithContextFunc) error {
	if err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 2*time.Minute, true, done); err != nil {
		return fmt.Errorf("bundles: %s: not within 2 minutes", what)
	}
	return nil
}

// touchSecret updates the i-th change's churn Secret (round-robin over
// the wcm-N namespaces).
func (w *worthPart) touchSecret(ctx context.Context, i int) error {
	return w.touch(ctx, &corev1.Secret{}, client.ObjectKey{Namespace: cmNamespace(i % worthCMNS), Name: "churn"}, func(o client.Object) {
		o.(*corev1.Secret).Data = map[string][]byte{"n": []byte(strconv.Itoa(i))}
	})
}

// touchNamespace writes a label of the i-th change's wcm-N namespace.
func (w *worthPart) touchNamespace(ctx context.Context, i int) error {
	return w.touch(ctx, &corev1.Namespace{}, client.ObjectKey{Name: cmNamespace(i % worthCMNS)}, func(o client.Object) {
		o.SetLabels(map[string]string{churnLabel: strconv.Itoa(i)})
	})
}

func metOr(ok bool) string {
	if ok {
		return "met"
	}
	return "**not met**"
}

func bundlesSection(reps []bundleRep, kinds []churnKind, churns []churnResult, load0 string) string {
	var b strings.Builder
	cmd := "go run ./bench/suite -only bundles -churn " + strings.Replace(strings.Replace(worthChurn.String(), "m0s", "m", 1), "h0m", "h", 1)
	fmt.Fprintf(&b, "Printed by `%s` on %s (%d CPUs; the 1-minute load average was %s when the part began and %s when it ended: other work shared the machine, so the ratios count, the times only beside them).\n\n",
		cmd, time.Now().UTC().Format("2006-01-02"), runtime.NumCPU(), load0, loadavg())
	fmt.Fprintf(&b, "The in-repo test project examples/bundles (the shape of a published cache-heavy operator, adopted by its main alone; it copies a key of a ConfigMap of its trust namespace into a ConfigMap of the Bundle's name in every namespace) with its default manifests (`opzero manifests`, the hub wiring; operator and trust namespace %s; its Subscription's sweeps moved to once a year, as its TestBundlesAtZero does, so that nothing but a delivery wakes it), run by one `opzero dev -f` (the hub and the operator as local processes, `--idle %s`) on a control plane of the part's own. The cluster holds %d namespaces the part created besides the system ones (wcm-0..%d with one ConfigMap and one Secret `churn` each, wo-01..%d), none of them the trust namespace. Deliveries, instances and cold starts are read from opzero dev's event stream (`--events=json`): deliveries are the requests the operator's Knative Service answered, cold starts the instances started with none running, instance time the share of the window with at least one instance running.\n\n",
		bundlesTrust, worthIdle, worthCMNS+worthOps, worthCMNS-1, worthOps)
	if len(churns) > 0 {
		fmt.Fprintf(&b, "**Unrelated changes at zero**: %d updates/s for %s in all, in three consecutive windows of %s, one kind each, round-robin over the wcm-N namespaces; each window starts with the operator at zero (none running, none started or stopped for 2 s). Goal: 0 deliveries, instance time ≤ 1%%.\n\n",
			worthChurnHz, worthChurn, (worthChurn / 3).Round(time.Second))
		b.WriteString("| changes | window | changes made | deliveries | cold starts | instance starts | instance time | reconciles | goal |\n|---|---|---|---|---|---|---|---|---|\n")
		var all churnResult
		for i, c := range churns {
			share := 100 * c.up.Seconds() / c.window.Seconds()
			fmt.Fprintf(&b, "| %s | %s | %d | %d | %d | %d | %.2f%% | %d | %s |\n", kinds[i].what, c.window.Round(time.Second), c.updates, c.deliveries, c.coldStarts, c.starts, share, c.reconciles,
				metOr(c.deliveries == 0 && share <= 1))
			all.window, all.updates, all.deliveries, all.coldStarts, all.starts, all.up, all.reconciles = all.window+c.window, all.updates+c.updates,
				all.deliveries+c.deliveries, all.coldStarts+c.coldStarts, all.starts+c.starts, all.up+c.up, all.reconciles+c.reconciles
		}
		share := 100 * all.up.Seconds() / all.window.Seconds()
		fmt.Fprintf(&b, "| all three | %s | %d | %d | %d | %d | %.2f%% | %d | %s |\n\n", all.window.Round(time.Second), all.updates, all.deliveries, all.coldStarts, all.starts, share, all.reconciles,
			metOr(all.deliveries == 0 && share <= 1))
		b.WriteString("ConfigMaps: the project watches ConfigMaps twice, its sources in the trust namespace (the manager cache's ByObject) and its targets everywhere by controller owner (its own cache.New, metadata-only); the hub applies both (a Subscription entry in the trust namespace, one with `owner` Bundle), so a ConfigMap of another namespace that no Bundle owns reaches nothing. Secrets: the manager cache restricts them to the trust namespace and no controller watches them; the Subscription names none. Namespaces: the controller watches every Namespace with a `predicate.Funcs` whose UpdateFunc and DeleteFunc are `return false`; `opzero manifests` reads them in the project's source and gives the Subscription's Namespace entry `events: [created]`, so the hub drops label updates before anything is woken (a predicate whose functions look at the object is not read: there the hub delivers every Namespace change and the predicate runs in the woken instance).\n\n")
	}
	if len(reps) > 0 {
		var colds, restores []time.Duration
		var ratios []float64
		fmt.Fprintf(&b, "**An owned child deleted at zero**, %d times, beside the cold start of a Bundle created at zero in the same session: Bundle trust-k created at zero (its create first calls the project's validating webhook through the hub, which wakes the operator) until its target exists in every namespace (the API server's answer to a label-selected list every 20 ms); then, at zero again, trust-k's target in wcm-(k-1) deleted until it is back (a GET every 20 ms). Deliveries are counted from the create or delete until the operator is at zero again: they include the hub's deliveries of the operator's own target writes. Goal: restored within 1 cold start + 1 s.\n\n", len(reps))
		b.WriteString("| run | namespaces | Bundle created at zero -> its targets | cold starts, deliveries until at zero again | target deleted at zero -> restored | cold starts, deliveries until at zero again | restored / Bundle |\n|---|---|---|---|---|---|---|\n")
		for i, r := range reps {
			ratio := r.restore.Seconds() / r.cold.Seconds()
			fmt.Fprintf(&b, "| %d | %d | %s | %d, %d | %s | %d, %d | %.2fx |\n", i+1, r.namespaces, r.cold.Round(time.Millisecond), r.coldEv.coldStarts, r.coldEv.deliveries,
				r.restore.Round(time.Millisecond), r.restorEv.coldStarts, r.restorEv.deliveries, ratio)
			colds, restores, ratios = append(colds, r.cold), append(restores, r.restore), append(ratios, ratio)
		}
		mc, mr := median(colds), median(restores)
		fmt.Fprintf(&b, "| **median** | | **%s** | | **%s** | | **%.2fx** |\n\n", mc.Round(time.Millisecond), mr.Round(time.Millisecond), fmedian(ratios))
		fmt.Fprintf(&b, "Restored / Bundle's cold start, median of the runs' ratios: **%.2fx** (restore %s, Bundle %s, medians). Goal, a restore within 1 cold start + 1 s (the Bundle's as the cold start): %s.\n",
			fmedian(ratios), mr.Round(time.Millisecond), mc.Round(time.Millisecond), metOr(mr <= mc+time.Second))
	}
	return b.String()
}
