package dev

import (
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// Knative Serving's autoscaling annotations (on spec.template.metadata).
const (
	annRetention = "autoscaling.knative.dev/scale-to-zero-pod-retention-period"
	annWindow    = "autoscaling.knative.dev/window"
	annMaxScale  = "autoscaling.knative.dev/max-scale"
	annMinScale  = "autoscaling.knative.dev/min-scale"
	annTarget    = "autoscaling.knative.dev/target"
)

// Defaults where a Service's annotations say nothing.
const (
	// DefaultIdle is the scale-to-zero period without a window annotation:
	// Knative's default stable window (a retention period adds to it).
	DefaultIdle = 60 * time.Second
	// DefaultTimeout is Knative's revision-timeout-seconds default, for a
	// Service without timeoutSeconds.
	DefaultTimeout = 300 * time.Second
	// UnlimitedScale is the local cap for max-scale 0 (Knative: unlimited).
	UnlimitedScale = 10
	// defaultTarget is Knative's container-concurrency-target-default, used
	// when containerConcurrency is 0 (unlimited) and there is no target.
	defaultTarget = 100
)

// serviceSpec is what opzero dev needs from a Knative Service.
type serviceSpec struct {
	obj         *unstructured.Unstructured
	Name, NS    string
	Pkg         string   // Go import path of the ko:// image ("" with Command)
	Command     []string // the local command of annCommand, instead of the image
	Args        []string
	Container   map[string]any // its one container (env is resolved when it starts)
	Idle        time.Duration
	MinScale    int
	MaxScale    int
	Concurrency int           // requests one instance takes before another starts
	Timeout     time.Duration // timeoutSeconds: a request's bound (DefaultTimeout)
	// ReadinessPath is the container's readinessProbe.httpGet.path; ""
	// (no probe, or not an HTTP one): ready when its port takes a TCP
	// connection, as Knative probes a container without a readinessProbe.
	ReadinessPath string
}

// parseService reads a serving.knative.dev/v1 Service. Only what a local
// process can honour is accepted; the rest is an error or is ignored as the
// package doc says.
func parseService(u *unstructured.Unstructured) (*serviceSpec, error) {
	where := "Knative Service " + key(u)
	s := &serviceSpec{obj: u, Name: u.GetName(), NS: u.GetNamespace()}
	containers, _, _ := unstructured.NestedSlice(u.Object, "spec", "template", "spec", "containers")
	if len(containers) != 1 {
		return nil, fmt.Errorf("%s: %d containers; opzero dev runs Services with exactly one", where, len(containers))
	}
	c, _ := containers[0].(map[string]any)
	image, _, _ := unstructured.NestedString(c, "image")
	var err error
	if s.Command, err = localCommand(u, where); err != nil {
		return nil, err
	}
	if s.Command == nil {
		if s.Pkg, err = importPath(image, where); err != nil {
			return nil, err
		}
	}
	if cmd, _, _ := unstructured.NestedStringSlice(c, "command"); len(cmd) > 0 && s.Command == nil {
		return nil, fmt.Errorf("%s: container command %v: a ko:// image runs its own binary; pass flags in args", where, cmd)
	}
	s.Args, _, _ = unstructured.NestedStringSlice(c, "args")
	if err := checkKnativeEnv(where, c); err != nil {
		return nil, err
	}
	s.Container = c
	if path, ok, _ := unstructured.NestedString(c, "readinessProbe", "httpGet", "path"); ok {
		s.ReadinessPath = "/" + strings.TrimPrefix(path, "/")
	}
	ann, _, _ := unstructured.NestedStringMap(u.Object, "spec", "template", "metadata", "annotations")
	if s.Idle, err = idleFrom(ann); err != nil {
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	if s.MaxScale, err = intAnn(ann, annMaxScale, 0); err != nil {
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	if s.MaxScale == 0 {
		s.MaxScale = UnlimitedScale
	}
	if s.MinScale, err = intAnn(ann, annMinScale, 0); err != nil {
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	if s.MinScale > s.MaxScale {
		return nil, fmt.Errorf("%s: %s %d is above %s %d", where, annMinScale, s.MinScale, annMaxScale, s.MaxScale)
	}
	s.Timeout = DefaultTimeout
	if ts, ok, _ := unstructured.NestedInt64(u.Object, "spec", "template", "spec", "timeoutSeconds"); ok {
		if ts <= 0 {
			return nil, fmt.Errorf("%s: timeoutSeconds %d: want a positive number of seconds", where, ts)
		}
		s.Timeout = time.Duration(ts) * time.Second
	}
	cc, _, _ := unstructured.NestedInt64(u.Object, "spec", "template", "spec", "containerConcurrency")
	s.Concurrency = int(cc)
	if s.Concurrency == 0 {
		if s.Concurrency, err = intAnn(ann, annTarget, defaultTarget); err != nil {
			return nil, fmt.Errorf("%s: %w", where, err)
		}
	}
	return s, nil
}

// annCommand on a Knative Service runs it locally as this command (a JSON
// array: the program, then its arguments; relative paths from the build
// folder) instead of its image: a hook written in Python or JavaScript runs
// as a process like an operator built from ko://. Knative ignores it.
const annCommand = "dev.opzero.dev/command"

// localCommand reads annCommand; nil if the Service has none.
func localCommand(u *unstructured.Unstructured, where string) ([]string, error) {
	v, ok := u.GetAnnotations()[annCommand]
	if !ok {
		return nil, nil
	}
	var argv []string
	if err := json.Unmarshal([]byte(v), &argv); err != nil || len(argv) == 0 || argv[0] == "" {
		return nil, fmt.Errorf("%s: annotation %s %q: want a JSON array of the program and its arguments, e.g. [\"python3\", \"hook.py\"]", where, annCommand, v)
	}
	p, err := exec.LookPath(argv[0])
	if err != nil {
		return nil, fmt.Errorf("%s: annotation %s: %w (install it, or name it by its path)", where, annCommand, err)
	}
	argv[0] = p
	return argv, nil
}

// idleFrom is the scale-to-zero period, as real Knative (v0.50.0)
// measures it: the autoscaling window (DefaultIdle without one), then the
// pod retention period. (Knative's grace period overlaps them: the
// activator is already in the path.)
func idleFrom(ann map[string]string) (time.Duration, error) {
	idle := DefaultIdle
	for _, k := range []string{annWindow, annRetention} {
		v, ok := ann[k]
		if !ok {
			continue
		}
		d, err := time.ParseDuration(v)
		if err != nil {
			return 0, fmt.Errorf("annotation %s: %q is not a duration (e.g. 30s)", k, v)
		}
		switch {
		case d < 0:
			return 0, fmt.Errorf("annotation %s: %q is negative", k, v)
		case k == annWindow:
			idle = d
		default:
			idle += d
		}
	}
	return idle, nil
}

func intAnn(ann map[string]string, k string, def int) (int, error) {
	v, ok := ann[k]
	if !ok {
		return def, nil
	}
	f, err := strconv.ParseFloat(v, 64) // Knative accepts "2" and "2.0" for target
	if err != nil || f < 0 {
		return 0, fmt.Errorf("annotation %s: %q is not a non-negative number", k, v)
	}
	return int(f), nil
}

// clusterURLs are the addresses a Service has inside a cluster, longest
// first, which opzero dev replaces with its local URL in args and env (so
// e.g. --wakeup-sink reaches the activator).
func (s *serviceSpec) clusterURLs() []string {
	base := "http://" + s.Name + "." + s.NS
	return []string{base + ".svc.cluster.local", base + ".svc"}
}

// rewrite replaces every Service's in-cluster URL in v with its local URL,
// longest first: http://<name>.<ns>.svc.cluster.local must not become the
// local URL of http://<name>.<ns>.svc followed by ".cluster.local".
func rewrite(v string, local map[string]string) string {
	froms := slices.Collect(maps.Keys(local))
	slices.SortFunc(froms, func(a, b string) int { return cmp.Or(len(b)-len(a), strings.Compare(a, b)) })
	pairs := make([]string, 0, 2*len(froms))
	for _, from := range froms {
		pairs = append(pairs, from, local[from])
	}
	return strings.NewReplacer(pairs...).Replace(v)
}

// serviceStatus is what Knative's controllers would write once the
// Service's revision is ready, with the local URL as url and address.
func serviceStatus(u *unstructured.Unstructured, localURL string) map[string]any {
	now := time.Now().UTC().Format(time.RFC3339)
	rev := u.GetName() + "-00001"
	cond := func(t string) map[string]any {
		return map[string]any{"type": t, "status": "True", "lastTransitionTime": now}
	}
	return map[string]any{
		"observedGeneration":        u.GetGeneration(),
		"url":                       localURL,
		"address":                   map[string]any{"url": localURL},
		"latestCreatedRevisionName": rev,
		"latestReadyRevisionName":   rev,
		"traffic":                   []any{map[string]any{"revisionName": rev, "latestRevision": true, "percent": int64(100)}},
		"conditions":                []any{cond("ConfigurationsReady"), cond("Ready"), cond("RoutesReady")},
	}
}
