package operator

import (
	"flag"
	"fmt"
	"io"
	"os"
	"reflect"
	"slices"
	"sort"
	"strings"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/opzero/opzero/builder"
	"github.com/opzero/opzero/internal/description"
	"github.com/opzero/opzero/operator/internal/seam"
)

// describeTarget is where a binary started with OPZERO_DESCRIBE writes its
// description ("" = serve normally).
func describeTarget() string { return os.Getenv(description.Env) }

// newDescriber returns a Runtime that connects to nothing: Register records
// the operators, Start writes their description and returns nil, so the
// user's main exits 0 without serving. `opzero manifests` runs binaries so.
func newDescriber(opts Options, target string) *Runtime {
	return &Runtime{opts: opts, describeTo: target}
}

// writeDescription is Start in describe mode.
func (r *Runtime) writeDescription() error {
	d := description.Description{Mode: string(r.opts.Mode), ServerlessOnly: seam.Classic == nil, Webhooks: r.webhooks,
		Versions: multiVersionKinds(r.opts.Scheme), Cache: r.cache, Probes: r.probes}
	for _, op := range r.ops {
		d.Operators = append(d.Operators, describe(op))
	}
	flag.CommandLine.VisitAll(func(f *flag.Flag) { d.Flags = append(d.Flags, f.Name) })
	if fs := r.opts.pflags; fs != nil { // a cobra or pflag project's (BindPFlags)
		fs.VisitAll(func(f *pflag.Flag) { d.Flags = append(d.Flags, f.Name) })
	}
	sort.Strings(d.Flags)
	d.Flags = slices.Compact(d.Flags)
	var w io.Writer = os.Stdout
	if t := r.describeTo; t != "1" && t != "-" {
		f, err := os.Create(t)
		if err != nil {
			return fmt.Errorf("%s=%s: %w", description.Env, t, err)
		}
		defer f.Close()
		w = f
	}
	return description.Write(w, d)
}

// describe turns an operator description into its wire form.
func describe(op *builder.Controller) description.Controller {
	out := description.Controller{
		Name:                   op.Name,
		Primary:                describeKind(op.Primary),
		AutoObservedGeneration: op.AutoObservedGeneration,
		ReconcilerPackage:      pkgOf(op.Reconciler),
		Env:                    describeEnv(op.Env),
		Warnings:               op.Warnings,
		Notes:                  op.Notes,
		Deploy: description.Deploy{Sweep: op.Deploy.Sweep, FullSweep: op.Deploy.FullSweep,
			MinScale: op.Deploy.MinScale, MaxScale: op.Deploy.MaxScale, Concurrency: op.Deploy.Concurrency},
	}
	if !op.Skip.Disabled {
		out.Skip = &description.Skip{OnLabelChange: op.Skip.OnLabelChange, OnAnnotationChange: op.Skip.OnAnnotationChange}
	}
	for _, k := range op.Owned {
		out.Owned = append(out.Owned, describeKind(k))
	}
	for _, w := range op.Watched {
		k := describeKind(w.Kind)
		k.ReferencedBy = w.ReferencedBy
		out.Watched = append(out.Watched, k)
	}
	for _, e := range op.Events {
		out.Events = append(out.Events, description.EventWatch{Name: e.Name, Attributes: e.Filter.Attributes,
			Filters: describeFilters(e.Filter.Filters)})
	}
	for _, u := range op.Unserved {
		out.Unserved = append(out.Unserved, description.Source{Name: u.Name, File: u.File, Line: u.Line})
	}
	sortKinds(out.Owned)
	sortKinds(out.Watched)
	return out
}

func describeFilters(fs []builder.TriggerFilter) []description.TriggerFilter {
	var out []description.TriggerFilter
	for _, f := range fs {
		d := description.TriggerFilter{Exact: f.Exact, Prefix: f.Prefix, Suffix: f.Suffix,
			All: describeFilters(f.All), Any: describeFilters(f.Any)}
		if f.Not != nil {
			d.Not = &describeFilters([]builder.TriggerFilter{*f.Not})[0]
		}
		out = append(out, d)
	}
	return out
}

func describeKind(k builder.Kind) description.Kind {
	plural, _ := meta.UnsafeGuessKindToResource(k.GVK)
	d := description.Kind{Group: k.GVK.Group, Version: k.GVK.Version, Kind: k.GVK.Kind, Resource: plural.Resource,
		GoPackage: pkgOf(k.Object)}
	if k.Selector != nil && !k.Selector.Empty() {
		d.Selector = k.Selector.String()
	}
	for _, c := range k.UpdatedWhen {
		d.UpdatedWhen = append(d.UpdatedWhen, string(c))
	}
	d.Unfiltered = k.Unfiltered
	for _, src := range k.TypeFilters {
		sites := []description.FuncSite{}
		for _, s := range src {
			sites = append(sites, description.FuncSite{Type: s.Type, File: s.File, Line: s.Line})
		}
		d.TypeFilters = append(d.TypeFilters, sites)
	}
	d.Everywhere = k.Everywhere
	return d
}

func pkgOf(v any) string {
	if v == nil {
		return ""
	}
	t := reflect.TypeOf(v)
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t.PkgPath()
}

func sortKinds(ks []description.Kind) {
	sort.Slice(ks, func(i, j int) bool {
		a, b := ks[i], ks[j]
		if a.Group != b.Group {
			return a.Group < b.Group
		}
		if a.Version != b.Version {
			return a.Version < b.Version
		}
		return a.Kind < b.Kind
	})
}

// multiVersionKinds are the kinds scheme has in several versions, outside
// the Kubernetes packages (k8s.io/..., sigs.k8s.io/...), sorted.
func multiVersionKinds(scheme *runtime.Scheme) []description.ConversionKind {
	if scheme == nil {
		return nil
	}
	versions := map[schema.GroupKind][]description.Version{}
	for gvk, t := range scheme.AllKnownTypes() {
		pkg := t.PkgPath()
		if strings.HasPrefix(pkg, "k8s.io/") || strings.HasPrefix(pkg, "sigs.k8s.io/") || strings.HasSuffix(gvk.Kind, "List") || gvk.Version == runtime.APIVersionInternal {
			continue
		}
		versions[gvk.GroupKind()] = append(versions[gvk.GroupKind()], description.Version{Version: gvk.Version, GoPackage: pkg})
	}
	var out []description.ConversionKind
	for gk, vs := range versions {
		if len(vs) < 2 {
			continue
		}
		sort.Slice(vs, func(i, j int) bool { return vs[i].Version < vs[j].Version })
		out = append(out, description.ConversionKind{Group: gk.Group, Kind: gk.Kind, Versions: vs})
	}
	sort.Slice(out, func(i, j int) bool {
		return out[i].Group < out[j].Group || out[i].Group == out[j].Group && out[i].Kind < out[j].Kind
	})
	return out
}
