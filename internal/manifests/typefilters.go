package manifests

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/opzero/opzero/internal/description"
)

// returnsFalse says whether the function at file:line (a func literal or
// a named function, as the Go runtime names it: funcAt) is one statement,
// `return false`: it drops every change of its type. Anything else, or a
// file that cannot be read, is not (the hub then lets that type through,
// as before).
func returnsFalse(fset *token.FileSet, files map[string]*ast.File, file string, line int) bool {
	body, _ := funcAt(fset, files, file, line)
	if body == nil || len(body.List) != 1 {
		return false
	}
	ret, ok := body.List[0].(*ast.ReturnStmt)
	if !ok || len(ret.Results) != 1 {
		return false
	}
	id, ok := ret.Results[0].(*ast.Ident)
	return ok && id.Name == "false"
}

// declLine is the line the function at file:line begins on (funcAt), or
// line itself when the file has no such function or cannot be read.
func declLine(fset *token.FileSet, files map[string]*ast.File, file string, line int) int {
	if _, start := funcAt(fset, files, file, line); start > 0 {
		return start
	}
	return line
}

// funcAt is the innermost function (a func literal or a declaration) of
// file whose lines hold line, its body and the line it begins on: the Go
// runtime names a function by the line of its entry, which for a small
// one is its first statement's, not the line of its func keyword. The
// files parsed are kept in files; body is nil when there is no such
// function or the file cannot be read.
func funcAt(fset *token.FileSet, files map[string]*ast.File, file string, line int) (body *ast.BlockStmt, start int) {
	f, ok := files[file]
	if !ok {
		src, err := os.ReadFile(file)
		if err == nil {
			f, _ = parser.ParseFile(fset, file, src, parser.SkipObjectResolution)
		}
		files[file] = f
	}
	if f == nil {
		return nil, 0
	}
	span := -1
	ast.Inspect(f, func(n ast.Node) bool {
		var b *ast.BlockStmt
		switch fn := n.(type) {
		case *ast.FuncLit:
			b = fn.Body
		case *ast.FuncDecl:
			b = fn.Body
		default:
			return true
		}
		from, to := fset.Position(n.Pos()).Line, fset.Position(n.End()).Line
		if b != nil && from <= line && line <= to && (span < 0 || to-from < span) {
			body, start, span = b, from, to-from
		}
		return true
	})
	return body, start
}

// typeDrop is a kind's types of change that the project's predicates drop
// in every source, read from its source (returnsFalse).
type typeDrop struct {
	key     string   // group/Kind, as --hub-events takes it
	events  []string // the types that still wake it, in HubEventTypes' order
	dropped []string
	sites   []string // file:line of the functions that drop them
}

// dropsByType finds, for each kind of the description, the types of
// change (created, updated, deleted) that every use of the kind drops: in
// each of its sources some predicate.Funcs sets that type's function to
// one that returns false. Such a kind gets the Subscription's events the
// project's predicates imply, as --hub-events would give it; a kind whose
// every type is dropped, or that is used once without TypeFilters (not
// read), gets none.
func dropsByType(d *description.Description) []typeDrop {
	uses := map[string][]description.Kind{}
	for _, op := range d.Operators {
		for _, k := range append(append([]description.Kind{op.Primary}, op.Owned...), op.Watched...) {
			key := k.Group + "/" + k.Kind
			uses[key] = append(uses[key], k)
		}
	}
	fset, files := token.NewFileSet(), map[string]*ast.File{}
	var out []typeDrop
	for _, key := range slices.Sorted(maps.Keys(uses)) {
		td := typeDrop{key: key}
		for _, typ := range HubEventTypes {
			dropped := true
			var sites []string
			for _, k := range uses[key] {
				if len(k.TypeFilters) == 0 {
					dropped = false
				}
				for _, src := range k.TypeFilters {
					i := slices.IndexFunc(src, func(s description.FuncSite) bool {
						return s.Type == typ && returnsFalse(fset, files, s.File, s.Line)
					})
					if i < 0 {
						dropped = false
						break
					}
					sites = append(sites, fmt.Sprintf("%s:%d", src[i].File, declLine(fset, files, src[i].File, src[i].Line)))
				}
				if !dropped {
					break
				}
			}
			if dropped {
				td.dropped = append(td.dropped, typ)
				td.sites = append(td.sites, sites...)
			} else {
				td.events = append(td.events, typ)
			}
		}
		if len(td.dropped) > 0 && len(td.events) > 0 {
			slices.Sort(td.sites)
			td.sites = slices.Compact(td.sites)
			out = append(out, td)
		}
	}
	return out
}

// withDerivedEvents is o's HubEvents with the types of change the
// project's predicates drop (dropsByType) for each kind --hub-events does
// not name, a note for each, and those kinds (group/Kind).
func withDerivedEvents(o Options, d *description.Description, name, dir string) (_ map[string][]string, derived map[string]bool) {
	drops := dropsByType(d)
	if len(drops) == 0 {
		return o.HubEvents, nil
	}
	derived = map[string]bool{}
	out := maps.Clone(o.HubEvents)
	if out == nil {
		out = map[string][]string{}
	}
	for _, td := range drops {
		group, kind, _ := strings.Cut(td.key, "/")
		if _, named := hubEventsFor(o.HubEvents, description.Kind{Group: group, Kind: kind}); named != "" {
			continue // the user's --hub-events decide
		}
		out[td.key] = td.events
		derived[td.key] = true
		if o.Warnings != nil {
			var sites []string
			if abs, err := filepath.Abs(dir); err == nil {
				dir = abs
			}
			for _, s := range td.sites {
				if r, err := filepath.Rel(dir, s); err == nil && !strings.HasPrefix(r, "..") {
					s = r
				}
				sites = append(sites, s)
			}
			fmt.Fprintf(o.Warnings, "note: %s: %s: its predicates drop every change of type %s (the functions at %s return false), so the hub drops them before the wake: only %s wakes it "+
				"(the Subscription's events; --hub-events %s=... decides instead)\n",
				name, kind, strings.Join(td.dropped, ", "), strings.Join(sites, ", "), strings.Join(td.events, ", "), kind)
		}
	}
	return out, derived
}

// funcsNote is how UpdatedWhen names a predicate.Funcs that filters by
// type of change (adopt.funcsUntranslated), in a Kind's Unfiltered.
const funcsNote = "predicate predicate.Funcs with only "
