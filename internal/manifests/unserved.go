package manifests

import (
	"fmt"
	"go/ast"
	"go/token"
	"strings"
)

// checkUnserved refuses serverless manifests for an operator with sources
// that run code of their own (description Controller Unserved), naming
// each source and where it is declared; with AllowUnserved they are
// warnings. Classic runs them as the project does: nothing to say.
func checkUnserved(t *Target, o Options) error {
	if o.Mode == Classic {
		return nil
	}
	var lines []string
	fset, files := token.NewFileSet(), map[string]*ast.File{}
	for _, op := range t.Desc.Operators {
		for _, u := range op.Unserved {
			at := ""
			if u.File != "" {
				at = fmt.Sprintf(" (%s:%d)", relTo(t.Dir, u.File), declLine(fset, files, u.File, u.Line))
			}
			lines = append(lines, fmt.Sprintf("%s: its %s%s watches no kind and runs code of its own, which nothing runs at zero", op.Name, u.Name, at))
		}
	}
	if len(lines) == 0 {
		return nil
	}
	if !o.AllowUnserved {
		return fmt.Errorf("a source cannot be served at zero:\n  %s\n"+
			"what it sends would be reconciled only while an instance runs: take external events through the Broker (builder.WatchesEvents), "+
			"run --mode=classic, or pass --allow-unserved to write the serverless manifests anyway (the sweep then heals what it misses); nothing was written",
			strings.Join(lines, "\n  "))
	}
	if o.Warnings != nil {
		for _, l := range lines {
			fmt.Fprintf(o.Warnings, "warning: %s: what it sends is reconciled only while an instance runs (--allow-unserved)\n", l)
		}
	}
	return nil
}
