package depcheck

import (
	"go/types"
	"sort"
	"strings"
	"testing"

	"golang.org/x/tools/go/packages"
)

// public is what a user imports: everything else lives under internal/.
var public = []string{mod + "operator", mod + "builder", mod + "reconcileutil", mod + "testenv", mod + "api/v1alpha1"}

// TestPublicAPINamesNoInternalType: no exported identifier of a public
// package (a function's or method's signature, an exported field, a
// variable's or constant's type, an interface's methods, a type's
// definition) mentions a type of an internal package, which a user could
// neither name nor construct. `go doc -all` of these packages shows only
// public types as a result.
func TestPublicAPINamesNoInternalType(t *testing.T) {
	pkgs, err := packages.Load(&packages.Config{Mode: packages.NeedName | packages.NeedTypes}, public...)
	if err != nil {
		t.Fatal(err)
	}
	if len(pkgs) != len(public) {
		t.Fatalf("loaded %d packages, want %d", len(pkgs), len(public))
	}
	for _, p := range pkgs {
		for _, e := range p.Errors {
			t.Fatalf("%s: %v", p.PkgPath, e)
		}
		leaks := internalMentions(p.Types)
		sort.Strings(leaks)
		for _, l := range leaks {
			t.Errorf("%s: %s", p.PkgPath, l)
		}
	}
}

// internalMentions lists "<identifier>: <internal type>" for every exported
// identifier of pkg whose API reaches a named type of an internal package.
func internalMentions(pkg *types.Package) []string {
	var out []string
	report := func(ident string, typ types.Type) {
		w := walker{seen: map[types.Type]bool{}, home: pkg}
		w.walk(typ)
		for _, n := range w.found {
			out = append(out, ident+": "+n)
		}
	}
	scope := pkg.Scope()
	for _, name := range scope.Names() {
		obj := scope.Lookup(name)
		if !obj.Exported() {
			continue
		}
		switch o := obj.(type) {
		case *types.TypeName:
			if o.IsAlias() {
				report(name, types.Unalias(o.Type()))
				continue
			}
			named, ok := o.Type().(*types.Named)
			if !ok {
				continue
			}
			report(name, named.Underlying())
			for _, recv := range []types.Type{named, types.NewPointer(named)} {
				ms := types.NewMethodSet(recv)
				for i := 0; i < ms.Len(); i++ {
					m := ms.At(i).Obj()
					if m.Exported() {
						report(name+"."+m.Name(), m.Type())
					}
				}
			}
		default:
			report(name, obj.Type())
		}
	}
	return out
}

// walker collects the internal named types a type's exported surface
// reaches. Named types of the public package itself are checked as their
// own identifiers; those of other packages are only checked by path.
type walker struct {
	seen  map[types.Type]bool
	home  *types.Package
	found []string
}

func (w *walker) walk(t types.Type) {
	if t == nil || w.seen[t] {
		return
	}
	w.seen[t] = true
	switch t := t.(type) {
	case *types.Alias:
		w.walk(types.Unalias(t))
	case *types.Named:
		if p := t.Obj().Pkg(); p != nil && isInternal(p.Path()) {
			w.found = append(w.found, p.Path()+"."+t.Obj().Name())
		}
		if args := t.TypeArgs(); args != nil {
			for i := 0; i < args.Len(); i++ {
				w.walk(args.At(i))
			}
		}
		// An unexported type of the package itself reached from its API
		// (e.g. an exported field of an unexported embedded struct) is part
		// of the surface too.
		if p := t.Obj().Pkg(); p == w.home && !t.Obj().Exported() {
			w.walk(t.Underlying())
		}
	case *types.Pointer:
		w.walk(t.Elem())
	case *types.Slice:
		w.walk(t.Elem())
	case *types.Array:
		w.walk(t.Elem())
	case *types.Map:
		w.walk(t.Key())
		w.walk(t.Elem())
	case *types.Chan:
		w.walk(t.Elem())
	case *types.Signature:
		for _, tup := range []*types.Tuple{t.Params(), t.Results()} {
			for i := 0; i < tup.Len(); i++ {
				w.walk(tup.At(i).Type())
			}
		}
	case *types.Struct:
		for i := 0; i < t.NumFields(); i++ {
			if f := t.Field(i); f.Exported() || f.Embedded() {
				w.walk(f.Type())
			}
		}
	case *types.Interface:
		for i := 0; i < t.NumMethods(); i++ {
			if m := t.Method(i); m.Exported() {
				w.walk(m.Type())
			}
		}
		for i := 0; i < t.NumEmbeddeds(); i++ {
			w.walk(t.EmbeddedType(i))
		}
	case *types.TypeParam:
		w.walk(t.Constraint())
	}
}

func isInternal(path string) bool {
	return strings.HasSuffix(path, "/internal") || strings.Contains(path, "/internal/") || strings.HasPrefix(path, "internal/")
}

// TestInternalMentionsFindsALeak: the check above can fail: a package
// whose exported function returns an internal type is reported.
func TestInternalMentionsFindsALeak(t *testing.T) {
	internal := types.NewPackage(mod+"internal/engine/serverless", "serverless")
	engine := types.NewNamed(types.NewTypeName(0, internal, "Engine", nil), types.NewStruct(nil, nil), nil)
	pub := types.NewPackage(mod+"operator", "operator")
	res := types.NewTuple(types.NewVar(0, pub, "", types.NewPointer(engine)))
	pub.Scope().Insert(types.NewFunc(0, pub, "Engine", types.NewSignatureType(nil, nil, nil, nil, res, false)))
	hidden := types.NewFunc(0, pub, "engine", types.NewSignatureType(nil, nil, nil, nil, res, false))
	pub.Scope().Insert(hidden)
	got := internalMentions(pub)
	if want := "Engine: " + mod + "internal/engine/serverless.Engine"; len(got) != 1 || got[0] != want {
		t.Fatalf("got %q, want [%q] (the unexported function is not API)", got, want)
	}
}
