package manifests

import (
	"bytes"
	"go/ast"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opzero/opzero/internal/description"
)

const predicateSource = `package p

var preds = Funcs{
	UpdateFunc: func(event.UpdateEvent) bool { return false },
	DeleteFunc: func(e event.DeleteEvent) bool { return e.Object == nil },
	CreateFunc: func(event.CreateEvent) bool {
		return true
	},
}

func never(event.DeleteEvent) bool {
	return false
}

var spaced = Funcs{UpdateFunc: func(event.UpdateEvent) bool {
	// a comment, then
	return false
}}
`

// TestReturnsFalse: only a function whose body is `return false` drops
// every change of its type, named by its first line or (as the Go runtime
// names a small function) a line inside it; a missing file or a line with
// no function is not one.
func TestReturnsFalse(t *testing.T) {
	file := filepath.Join(t.TempDir(), "p.go")
	if err := os.WriteFile(file, []byte(predicateSource), 0o644); err != nil {
		t.Fatal(err)
	}
	fset, files := token.NewFileSet(), map[string]*ast.File{}
	for line, want := range map[int]bool{4: true, 5: false, 6: false, 7: false, 11: true, 12: true, 15: true, 17: true, 1: false, 99: false} {
		if got := returnsFalse(fset, files, file, line); got != want {
			t.Errorf("line %d: %v, want %v", line, got, want)
		}
	}
	if returnsFalse(fset, files, filepath.Join(t.TempDir(), "missing.go"), 4) {
		t.Error("a missing file: true, want false")
	}
	for line, want := range map[int]int{7: 6, 12: 11, 17: 15, 4: 4, 2: 0} {
		if _, got := funcAt(fset, files, file, line); got != want {
			t.Errorf("funcAt line %d: begins at %d, want %d (the innermost function holding it)", line, got, want)
		}
	}
}

// TestDropsByType: a type is dropped when every source of every use of
// the kind drops it; a use not read, a source without such a function,
// or every type dropped derives nothing; --hub-events of the kind wins.
func TestDropsByType(t *testing.T) {
	file := filepath.Join(t.TempDir(), "p.go")
	if err := os.WriteFile(file, []byte(predicateSource), 0o644); err != nil {
		t.Fatal(err)
	}
	site := func(typ string, line int) description.FuncSite {
		return description.FuncSite{Type: typ, File: file, Line: line}
	}
	ns := func(filters ...[]description.FuncSite) description.Kind {
		return description.Kind{Version: "v1", Kind: "Namespace", TypeFilters: filters}
	}
	desc := func(kinds ...description.Kind) *description.Description {
		d := &description.Description{}
		for i, k := range kinds {
			op := description.Controller{Name: "op", Primary: description.Kind{Group: "x.io", Kind: "Widget"}}
			op.Watched = append(op.Watched, k)
			if i > 0 {
				op.Name = "op2"
			}
			d.Operators = append(d.Operators, op)
		}
		return d
	}
	for _, c := range []struct {
		name string
		d    *description.Description
		want string // key: events (dropped)
	}{
		{"updates and deletes dropped", desc(ns([]description.FuncSite{site("updated", 4), site("deleted", 11)})), "/Namespace: created (updated, deleted)"},
		{"a delete that is not always false", desc(ns([]description.FuncSite{site("updated", 4), site("deleted", 5)})), "/Namespace: created, deleted (updated)"},
		{"a second source without predicates", desc(ns([]description.FuncSite{site("updated", 4)}, []description.FuncSite{})), ""},
		{"a second use not read", desc(ns([]description.FuncSite{site("updated", 4)}), ns()), ""},
		{"both uses drop updates", desc(ns([]description.FuncSite{site("updated", 4)}), ns([]description.FuncSite{site("updated", 15)})), "/Namespace: created, deleted (updated)"},
		{"every type dropped", desc(ns([]description.FuncSite{site("created", 4), site("updated", 4), site("deleted", 11)})), ""},
	} {
		var got []string
		for _, td := range dropsByType(c.d) {
			got = append(got, td.key+": "+strings.Join(td.events, ", ")+" ("+strings.Join(td.dropped, ", ")+")")
		}
		if strings.Join(got, "; ") != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}

	d := desc(ns([]description.FuncSite{site("updated", 4), site("deleted", 11)}))
	var w bytes.Buffer
	events, derived := withDerivedEvents(Options{Warnings: &w}, d, "op", filepath.Dir(file))
	if strings.Join(events["/Namespace"], ",") != "created" || !derived["/Namespace"] {
		t.Errorf("derived events %v (%v), want /Namespace: created", events, derived)
	}
	if !strings.Contains(w.String(), "note: op: Namespace: its predicates drop every change of type updated, deleted (the functions at p.go:11, p.go:4 return false)") {
		t.Errorf("note: %q", w.String())
	}
	user := map[string][]string{"Namespace": {"created", "updated"}}
	if events, derived := withDerivedEvents(Options{HubEvents: user}, d, "op", ""); len(derived) != 0 || len(events) != 1 || strings.Join(events["Namespace"], ",") != "created,updated" {
		t.Errorf("with --hub-events Namespace=created,updated: %v (%v), want the user's alone", events, derived)
	}
}
