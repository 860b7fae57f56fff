package plan

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
)

// Formats of a printed Report.
const (
	FormatText = "text" // per object, what would change; a summary
	FormatJSON = "json" // the Report as the binary wrote it
	FormatDiff = "diff" // a field diff per write, "#" lines for the rest
)

// Print writes r in format (text, json or diff).
func Print(w io.Writer, r *Report, format string) error {
	switch format {
	case "", FormatText:
		return PrintText(w, r)
	case FormatJSON:
		return r.Write(w)
	case FormatDiff:
		return PrintDiff(w, r)
	}
	return fmt.Errorf("-o %s: want text, json or diff", format)
}

// PrintText writes what each object's reconcile would do, objects that
// would change nothing counted in the summary, not listed.
func PrintText(w io.Writer, r *Report) error {
	r.RedactSecrets()
	bw := bufio.NewWriter(w)
	for _, c := range r.Controllers {
		fmt.Fprintf(bw, "controller %s: %s, %d listed", c.Name, c.Primary, c.Listed)
		if c.Error != "" {
			fmt.Fprintf(bw, "; error: %s", c.Error)
		}
		fmt.Fprintln(bw)
	}
	var changed, failed, same int
	for _, o := range r.Objects {
		switch {
		case o.Failed():
			failed++
		case o.Changed():
			changed++
		default:
			same++
		}
		if !o.Changed() && !o.Failed() && len(o.External) == 0 && o.Requeue == "" && !o.Gone {
			continue
		}
		fmt.Fprintf(bw, "\n%s (%s, round %d", o.Ref, o.Controller, o.Round)
		if o.Round > 1 && o.Why != "" {
			fmt.Fprintf(bw, ": %s", o.Why)
		}
		fmt.Fprintln(bw, ")")
		printObject(bw, o)
	}
	for _, p := range r.Pending {
		fmt.Fprintf(bw, "\n%s: would reconcile again after round %d; the plan stops here (--rounds)\n", p, r.Rounds)
	}
	if r.Refused > 0 {
		fmt.Fprintf(bw, "\n%d write(s) were not dry-run and were refused before reaching the API server\n", r.Refused)
	}
	fmt.Fprintf(bw, "\nPlan: %d reconcile(s) would change something, %d would change nothing, %d failed (%d round(s)).\n", changed, same, failed, r.Rounds)
	return bw.Flush()
}

func printObject(w io.Writer, o Object) {
	for _, wr := range o.Writes {
		if !wr.Effective() && wr.Error == "" {
			continue // an update that changes nothing
		}
		sub := ""
		if wr.Subresource != "" {
			sub = " (" + wr.Subresource + ")"
		}
		fmt.Fprintf(w, "  %s %s%s", wr.Verb, wr.Ref, sub)
		if wr.Error != "" {
			fmt.Fprintf(w, ": refused by the API server: %s", wr.Error)
		}
		fmt.Fprintln(w)
		for _, c := range wr.Changes {
			fmt.Fprintf(w, "    %s\n", changeLine(c))
		}
	}
	for _, e := range o.Events {
		fmt.Fprintf(w, "  event %s %s on %s: %s\n", e.Type, e.Reason, e.Regarding, e.Note)
	}
	if o.Requeue != "" {
		fmt.Fprintf(w, "  %s\n", o.Requeue)
	}
	if o.Error != "" {
		fmt.Fprintf(w, "  error: %s\n", o.Error)
	}
	if o.Gone {
		fmt.Fprintln(w, "  gone: deleted after the plan listed it; nothing more would be done for it")
	}
	for _, x := range o.External {
		fmt.Fprintf(w, "  external: %s\n", x)
	}
	if o.Planning {
		fmt.Fprintln(w, "  the reconciler asked operator.Planning(ctx): it may have skipped its external writes")
	}
	for _, x := range o.Inexact {
		fmt.Fprintf(w, "  inexact: %s\n", x)
	}
}

func changeLine(c Change) string {
	switch {
	case c.Before == nil:
		return fmt.Sprintf("+ %s: %s", c.Path, valueText(c, c.After))
	case c.After == nil:
		return fmt.Sprintf("- %s: %s", c.Path, valueText(c, c.Before))
	}
	return fmt.Sprintf("~ %s: %s -> %s", c.Path, valueText(c, c.Before), valueText(c, c.After))
}

// valueText is one side of c as printed: a Secret's value is its size.
func valueText(c Change, raw json.RawMessage) string {
	if c.Secret {
		return secretText(raw)
	}
	return compact(raw)
}

// compact is a value on one line (a Report read back from its indented
// JSON keeps the indentation inside its values).
func compact(raw json.RawMessage) string {
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		return string(raw)
	}
	return b.String()
}

// PrintDiff writes every write that would change something as a diff of
// its fields, one hunk per write, in a form a CI job keeps and a reviewer
// reads: "--- before" and "+++ after" headers naming the object, "-" and
// "+" lines of path: value. Events, requeues and errors follow as "#"
// comment lines.
func PrintDiff(w io.Writer, r *Report) error {
	r.RedactSecrets()
	bw := bufio.NewWriter(w)
	for _, o := range r.Objects {
		for _, wr := range o.Writes {
			if !wr.Effective() {
				continue
			}
			name := wr.Ref.String()
			if wr.Subresource != "" {
				name += " (" + wr.Subresource + ")"
			}
			before, after := name, name
			switch wr.Verb {
			case "create":
				before = "/dev/null"
			case "delete", "deleteAllOf":
				after = "/dev/null"
			}
			fmt.Fprintf(bw, "--- %s\n+++ %s\t%s by %s %s round %d\n", before, after, wr.Verb, o.Controller, o.Ref, o.Round)
			for _, c := range wr.Changes {
				if c.Before != nil {
					fmt.Fprintf(bw, "-%s: %s\n", c.Path, valueText(c, c.Before))
				}
				if c.After != nil {
					fmt.Fprintf(bw, "+%s: %s\n", c.Path, valueText(c, c.After))
				}
			}
		}
		var notes []string
		for _, e := range o.Events {
			notes = append(notes, fmt.Sprintf("event %s %s on %s: %s", e.Type, e.Reason, e.Regarding, e.Note))
		}
		if o.Error != "" {
			notes = append(notes, "error: "+o.Error)
		}
		notes = append(notes, prefixed("external: ", o.External)...)
		notes = append(notes, prefixed("inexact: ", o.Inexact)...)
		for _, n := range notes {
			fmt.Fprintf(bw, "# %s: %s\n", o.Ref, strings.ReplaceAll(n, "\n", " "))
		}
	}
	for _, p := range r.Pending {
		fmt.Fprintf(bw, "# %s: would reconcile again after round %d; the plan stops here (--rounds)\n", p, r.Rounds)
	}
	return bw.Flush()
}

func prefixed(p string, ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = p + s
	}
	return out
}
