package manifests

import (
	"context"
	"fmt"
	"maps"
	"path/filepath"
	"reflect"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/opzero/opzero/internal/description"
	"github.com/opzero/opzero/internal/envvar"
	"github.com/opzero/opzero/internal/kustomize"
)

// FileNamespace holds the Namespace object a project's config/ makes for
// its manager, when the operator is deployed there.
const FileNamespace = "namespace.yaml"

// ConfigDir is where an adopted project's config/ declares its manager:
// config/default of the Go module that holds dir, when it has a
// kustomization ("" otherwise: nothing to read).
func ConfigDir(moduleDir string) string {
	d := filepath.Join(moduleDir, "config", "default")
	if kustomize.Has(d) {
		return d
	}
	return ""
}

// ModuleDir is the folder of the Go module of package pkg (resolved in
// dir): where its config/ is.
//
// For one of opzero's own commands outside a module that has it (a folder
// of Metacontroller YAML), it is dir itself: the user's folder is the
// project (its config/, the output's kustomization).
func ModuleDir(ctx context.Context, dir, pkg string) (string, error) {
	if OwnOutsideModule(ctx, dir, pkg) {
		return dir, nil
	}
	out, err := goCmd(ctx, dir, "list", "-f", "{{with .Module}}{{.Dir}}{{end}}", pkg)
	if err != nil {
		return "", fmt.Errorf("operator package %q: %w", pkg, err)
	}
	return strings.TrimSpace(out), nil
}

// ReadProject renders the project's kustomization in dir (ConfigDir, or
// --config) and reads what it declares for the manager, for
// Options.Project.
func ReadProject(dir string) (*kustomize.Manager, error) {
	m, err := kustomize.ReadManager(dir)
	if err != nil {
		return nil, fmt.Errorf("reading the project's config (--config=none to ignore it): %w", err)
	}
	return m, nil
}

// operatorName is the operator's name with config/'s namePrefix before
// it, unless the name already starts with the prefix or the prefix is the
// name and a dash: kubebuilder's default namePrefix is "<project>-" and
// opzero names the operator after the project, which would only repeat
// it (memcached-memcached).
func operatorName(m *kustomize.Manager, name string) string {
	if m == nil || m.NamePrefix == name+"-" || strings.HasPrefix(name, m.NamePrefix) {
		return name
	}
	return m.NamePrefix + name
}

// project is Options.Project, checked against what the operator and the
// command line set: the manager container's env entries that are kept
// (a name the operator declares, a flag gives or opzero sets is theirs),
// its envFrom, resources and security contexts, the labels and the
// Namespace object.
type project struct {
	m   *kustomize.Manager
	env []any
}

// readProject checks o.Project; warnings go to o.Warnings.
func readProject(o Options, name string, env []description.EnvVar) (*project, error) {
	m := o.Project
	if m == nil {
		return nil, nil
	}
	warn := func(format string, args ...any) {
		if o.Warnings != nil {
			fmt.Fprintf(o.Warnings, "warning: %s: "+format+"\n", append([]any{m.File}, args...)...)
		}
	}
	if m.NamePrefix != "" {
		for _, msg := range validation.IsDNS1123Label(name) {
			return nil, fmt.Errorf("%s: namePrefix %q makes the operator's name %q: %s", m.File, m.NamePrefix, name, msg)
		}
	}
	p := &project{m: m}
	given := map[string]bool{}
	for _, v := range env {
		given[v.Name] = true
	}
	for _, e := range m.Env {
		n, _ := e["name"].(string)
		if msgs := validation.IsEnvVarName(n); len(msgs) > 0 {
			return nil, fmt.Errorf("%s: the manager container's env %q is not a valid name: %s", m.File, n, strings.Join(msgs, "; "))
		}
		if err := envvar.CheckName(n); err != nil {
			warn("left out: %v", err)
			continue
		}
		if given[n] {
			warn("env %s: the value the operator (builder.WithEnv) or --env/--env-secret gives wins over config/'s", n)
			continue
		}
		vf, _ := e["valueFrom"].(map[string]any)
		if _, ok := vf["fieldRef"]; ok && o.Mode != Classic || vf["resourceFieldRef"] != nil && o.Mode != Classic {
			warn("env %s (valueFrom %s) is left out of the Knative Service: Knative refuses it unless its kubernetes.podspec-fieldref feature is on; use --mode=classic, or --env", n, strings.Join(slices.Sorted(maps.Keys(vf)), ", "))
			continue
		}
		given[n] = true
		p.env = append(p.env, e)
	}
	for _, f := range m.EnvFrom {
		if f["configMapRef"] == nil && f["secretRef"] == nil {
			return nil, fmt.Errorf("%s: the manager container's envFrom entry %v has neither configMapRef nor secretRef", m.File, f)
		}
	}
	return p, nil
}

// envEntries are config/'s env entries that are kept.
func (p *project) envEntries() []any {
	if p == nil {
		return nil
	}
	return p.env
}

// envFrom is config/'s envFrom, then the command line's (a later source
// wins for a key both have, so the flags win).
func (p *project) envFrom(flags []any) []any {
	if p == nil {
		return flags
	}
	var out []any
	for _, f := range p.m.EnvFrom {
		out = append(out, f)
	}
	for _, f := range flags {
		if !slices.ContainsFunc(out, func(have any) bool { return reflect.DeepEqual(have, f) }) {
			out = append(out, f)
		}
	}
	return out
}

// container sets what config/ declares on the operator's container.
func (p *project) container(c map[string]any) {
	if p == nil {
		return
	}
	if p.m.Resources != nil {
		c["resources"] = p.m.Resources
	}
	if p.m.SecurityContext != nil {
		c["securityContext"] = p.m.SecurityContext
	}
}

// pod sets config/'s pod securityContext on a classic pod (Knative refuses
// most of it unless its kubernetes.podspec-securitycontext feature is on).
func (p *project) pod(pod map[string]any) {
	if p != nil && p.m.PodSecurityContext != nil {
		pod["securityContext"] = p.m.PodSecurityContext
	}
}

// apply adds config/'s labels to every object but the hub's (shared by
// every operator) and the CRDs (kept as controller-gen writes them), on
// their metadata and pod templates, never selectors; opzero's own labels
// win. With the operator in config/'s namespace, the Namespace object
// config/ makes for it is added.
func (p *project) apply(objs []Object, namespace string) []Object {
	if p == nil {
		return objs
	}
	for i := range objs {
		o := objs[i]
		if o.File == FileHub || o.Raw != nil || len(p.m.Labels) == 0 {
			continue
		}
		meta, _ := o.Obj["metadata"].(map[string]any)
		meta["labels"] = p.labels(meta["labels"])
		spec, _ := o.Obj["spec"].(map[string]any)
		if tmpl, ok := spec["template"].(map[string]any); ok && (o.Kind() == "Deployment" || o.Kind() == "Service") {
			if tm, ok := tmpl["metadata"].(map[string]any); ok {
				tm["labels"] = p.labels(tm["labels"])
			}
		}
	}
	if ns := p.m.NamespaceObject; ns != nil && namespace == p.m.Namespace {
		objs = append(objs, Object{File: FileNamespace, Obj: ns})
	}
	return objs
}

// labels are have with config/'s labels added (a copy: label maps are
// shared between an object and its template).
func (p *project) labels(have any) map[string]any {
	out := map[string]any{}
	if m, ok := have.(map[string]any); ok {
		maps.Copy(out, m)
	}
	for k, v := range p.m.Labels {
		if _, ok := out[k]; !ok {
			out[k] = v
		}
	}
	return out
}
