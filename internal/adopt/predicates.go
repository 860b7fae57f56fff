package adopt

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
)

// The parts of an object whose change controller-runtime's own update
// predicates look at: GenerationChangedPredicate, LabelChangedPredicate,
// AnnotationChangedPredicate.
const (
	ChangedGeneration  = "generation"
	ChangedLabels      = "labels"
	ChangedAnnotations = "annotations"
)

// predicatePkg is where controller-runtime's predicates are declared.
const predicatePkg = "sigs.k8s.io/controller-runtime/pkg/predicate"

// UpdatedWhen reads the predicates of every source registered for the
// kind as the parts of an object whose change lets an update through: an
// update that changes none of them would be dropped by the predicates of
// every source, so a filter before the operator may drop it too. It is
// read from the types of the predicates (controller-runtime's
// GenerationChangedPredicate, LabelChangedPredicate,
// AnnotationChangedPredicate, ResourceVersionChangedPredicate, and Or and
// And of them), never by calling them: a predicate of the project's own
// may look at anything. parts is nil when some source lets every update
// through, or has a predicate that cannot be read so; untranslated names
// those predicates (their Go types), to be said.
//
// A source's predicates must all pass (And): one of them that translates
// bounds what the source lets through, whatever the others are. An Or
// translates only when each of its predicates does (the union of their
// parts).
func (i *Informer) UpdatedWhen() (parts, untranslated []string) {
	all := false
	for _, h := range i.Handlers() {
		ps, ok := handlerPredicates(h)
		if !ok {
			untranslated = append(untranslated, fmt.Sprintf("%T (an event handler opzero cannot read)", h))
			all = true
			continue
		}
		p, bad := conjunction(ps)
		untranslated = append(untranslated, bad...)
		if p == nil {
			all = true
			continue
		}
		parts = union(parts, p)
	}
	slices.Sort(untranslated)
	if all {
		return nil, slices.Compact(untranslated)
	}
	return parts, slices.Compact(untranslated)
}

// handlerPredicates are the predicates of controller-runtime's event
// handler (internal/source.EventHandler, its predicates field in v0.21 to
// v0.25), as reflect values of the interface type.
func handlerPredicates(h any) ([]reflect.Value, bool) {
	v := reflect.ValueOf(h)
	for v.Kind() == reflect.Pointer || v.Kind() == reflect.Interface {
		if v.IsNil() {
			return nil, false
		}
		v = v.Elem()
	}
	if v.Kind() != reflect.Struct || !strings.HasPrefix(v.Type().PkgPath(), "sigs.k8s.io/controller-runtime/") {
		return nil, false
	}
	f := v.FieldByName("predicates")
	if !f.IsValid() || f.Kind() != reflect.Slice {
		return nil, false
	}
	out := make([]reflect.Value, f.Len())
	for n := range out {
		out[n] = f.Index(n)
	}
	return out, true
}

// conjunction translates predicates that must all pass: the smallest set
// of parts one of them gives, nil if none gives one (every update passes,
// as far as can be told). bad names what did not translate.
func conjunction(ps []reflect.Value) (parts, bad []string) {
	for _, p := range ps {
		q, b := translate(p)
		bad = append(bad, b...)
		if q != nil && (parts == nil || len(q) < len(parts)) {
			parts = q
		}
	}
	return parts, bad
}

// translate reads one predicate: the parts whose change it lets through,
// nil for every update (ResourceVersionChangedPredicate, or one it cannot
// read, named in bad).
func translate(p reflect.Value) (parts, bad []string) {
	p, name, ok := predicateValue(p)
	if !ok {
		return nil, nil
	}
	t := p.Type()
	if t.PkgPath() == predicatePkg {
		switch name {
		case "TypedGenerationChangedPredicate", "GenerationChangedPredicate":
			return []string{ChangedGeneration}, nil
		case "TypedLabelChangedPredicate", "LabelChangedPredicate":
			return []string{ChangedLabels}, nil
		case "TypedAnnotationChangedPredicate", "AnnotationChangedPredicate":
			return []string{ChangedAnnotations}, nil
		case "TypedResourceVersionChangedPredicate", "ResourceVersionChangedPredicate":
			return nil, nil // every update changes the resourceVersion
		case "and", "or":
			f := p.FieldByName("predicates")
			if f.Kind() != reflect.Slice {
				break
			}
			var inner []reflect.Value
			for n := range f.Len() {
				inner = append(inner, f.Index(n))
			}
			if name == "and" {
				return conjunction(inner)
			}
			for _, q := range inner {
				qp, qb := translate(q)
				bad = append(bad, qb...)
				if qp == nil {
					return nil, bad
				}
				parts = union(parts, qp)
			}
			return parts, bad
		}
	}
	if t.PkgPath() == predicatePkg && name == "TypedFuncs" {
		return nil, []string{funcsUntranslated(p)}
	}
	if t.PkgPath() == "" {
		return nil, []string{t.String()}
	}
	return nil, []string{t.PkgPath() + "." + name}
}

// KindPlaceholder stands for the kind in what UpdatedWhen names as
// untranslated: the caller, which knows the kind, writes it in.
const KindPlaceholder = "<Kind>"

// funcsUntranslated names a predicate.Funcs. One that sets its
// functions for some types of change (created, updated, deleted) and
// not the others lets the others through whatever they are: it filters
// by type of change, maybe all of a type, which the hub does if asked
// (the Subscription's events, opzero manifests --hub-events), though
// what a function returns cannot be read.
func funcsUntranslated(p reflect.Value) string {
	var set, pass []string
	for _, f := range []struct{ field, typ string }{{"CreateFunc", "created"}, {"UpdateFunc", "updated"}, {"DeleteFunc", "deleted"}} {
		if v := p.FieldByName(f.field); v.IsValid() && v.Kind() == reflect.Func && !v.IsNil() {
			set = append(set, f.field)
		} else {
			pass = append(pass, f.typ)
		}
	}
	if len(set) == 0 || len(pass) == 0 {
		return "predicate.Funcs (functions: NewPredicateFuncs, LabelSelectorPredicate or the project's own)"
	}
	return fmt.Sprintf("predicate.Funcs with only %s set (a filter by type of change: if it drops every change of those types, "+
		"--hub-events %s=%s has the hub drop them before the wake)", strings.Join(set, " and "), KindPlaceholder, strings.Join(pass, ","))
}

func union(a, b []string) []string {
	out := append(slices.Clone(a), b...)
	slices.Sort(out)
	return slices.Compact(out)
}

// FuncSite is a function a predicate.Funcs sets for one type of change
// (created, updated, deleted) and where the Go runtime says it is
// declared: opzero manifests reads it there (a function that always
// returns false drops every change of its type).
type FuncSite struct {
	Type string
	File string
	Line int
}

// TypeFilters lists, for each source registered for the kind (one entry
// a handler), the functions its predicate.Funcs set by type of change:
// a type of change every source drops can be dropped before the wake. A
// source with none lets every type through (an empty entry); predicates
// inside Or or And are not read (empty: conservative). ok is false when a
// handler cannot be read at all.
func (i *Informer) TypeFilters() (sources [][]FuncSite, ok bool) {
	for _, h := range i.Handlers() {
		ps, ok := handlerPredicates(h)
		if !ok {
			return nil, false
		}
		sites := []FuncSite{}
		for _, p := range ps {
			sites = append(sites, funcSites(p)...)
		}
		sources = append(sources, sites)
	}
	return sources, len(sources) > 0
}

// funcSites are the functions a predicate.Funcs sets, with their
// declarations; none for any other predicate.
func funcSites(p reflect.Value) []FuncSite {
	p, name, ok := predicateValue(p)
	if !ok || p.Type().PkgPath() != predicatePkg || name != "TypedFuncs" {
		return nil
	}
	var out []FuncSite
	for _, f := range []struct{ field, typ string }{{"CreateFunc", "created"}, {"UpdateFunc", "updated"}, {"DeleteFunc", "deleted"}} {
		v := p.FieldByName(f.field)
		if !v.IsValid() || v.Kind() != reflect.Func || v.IsNil() {
			continue
		}
		if file, line := funcLine(v); file != "" {
			out = append(out, FuncSite{Type: f.typ, File: file, Line: line})
		}
	}
	return out
}

// predicateValue is the predicate p holds (through interfaces and
// pointers) and its type's name without type arguments (generic:
// TypedGenerationChangedPredicate[...]); ok is false for a nil one.
func predicateValue(p reflect.Value) (_ reflect.Value, name string, ok bool) {
	for p.Kind() == reflect.Interface || p.Kind() == reflect.Pointer {
		if p.IsNil() {
			return p, "", false
		}
		p = p.Elem()
	}
	name = p.Type().Name()
	if i := strings.IndexByte(name, '['); i >= 0 {
		name = name[:i]
	}
	return p, name, true
}
