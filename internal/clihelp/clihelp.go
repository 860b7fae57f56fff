// Package clihelp is the one convention of opzero's command lines: the
// CLI (cobra), the operator's flags (operator.Options.BindFlags, on a
// project's standard flag set), opzero-hub and wakeup-source (standard
// flag sets of their own) print their flags in the same form, pflag's
// (`--name type   usage (default X)`), wrapped to Width columns, with
// old names kept working as hidden aliases.
//
// The standard flag package has no hidden flags: Alias registers the old
// name with a Value that marks it, and Print (and Usage, which a binary
// or BindFlags installs as the flag set's Usage) leaves it out. A
// project's own Usage, if it has one, prints what it prints.
//
// The convention a test keeps (cmd/opzero's TestFlagConvention): one name
// per idea across the binaries; a default stated once, as "(default X)"
// at the end of the line, by the flag library from the flag's default or,
// where the default is computed at run time, written so in the usage; a
// usage that starts in lower case and ends without a period.
package clihelp

import (
	"flag"
	"fmt"
	"io"
	"reflect"
	"strings"

	"github.com/spf13/pflag"
)

// Width is the column help is wrapped to.
const Width = 80

// alias is the Value of a flag registered under an old name: the new
// flag's own Value, so that either name sets it.
type alias struct {
	flag.Value
	of string
}

// String is the flag's value ("" for the zero alias the flag package
// makes to tell whether a default is a zero value).
func (a *alias) String() string {
	if a == nil || a.Value == nil {
		return ""
	}
	return a.Value.String()
}

// Unwrap is the Value of the flag this is an old name of.
func (a *alias) Unwrap() flag.Value { return a.Value }

// IsBoolFlag lets the old name of a boolean flag go without a value.
func (a *alias) IsBoolFlag() bool {
	b, ok := a.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// Alias registers old on fs as a hidden alias of the flag name, which fs
// must have: either name sets the same value; help shows only name.
func Alias(fs *flag.FlagSet, old, name string) {
	f := fs.Lookup(name)
	if f == nil {
		panic(fmt.Sprintf("clihelp.Alias(%q, %q): no flag %q", old, name, name))
	}
	fs.Var(&alias{Value: f.Value, of: name}, old, aliasUsage+name)
}

// PAlias is Alias for a pflag (cobra) flag set: old, hidden, sets what
// the flag name sets.
func PAlias(fs *pflag.FlagSet, old, name string) {
	f := fs.Lookup(name)
	if f == nil {
		panic(fmt.Sprintf("clihelp.PAlias(%q, %q): no flag %q", old, name, name))
	}
	fs.AddFlag(&pflag.Flag{Name: old, Usage: aliasUsage + name, Value: f.Value, DefValue: f.DefValue,
		NoOptDefVal: f.NoOptDefVal, Hidden: true})
}

// aliasUsage starts the usage of an old name.
const aliasUsage = "old name of --"

// PAliasOf says whether f is an old name, hidden, and of which flag.
func PAliasOf(f *pflag.Flag) (string, bool) {
	of, ok := strings.CutPrefix(f.Usage, aliasUsage)
	return of, ok && f.Hidden
}

// AliasOf says whether f is an old name Alias registered, and of which flag.
func AliasOf(f *flag.Flag) (string, bool) {
	a, ok := f.Value.(*alias)
	if !ok {
		return "", false
	}
	return a.of, true
}

// PFlag is f as a pflag flag (its --name form): the same Value, default
// and usage, a type name pflag shows (a flag.Func is a string, a
// flag.BoolFunc a bool), hidden if it is an alias.
func PFlag(f *flag.Flag) *pflag.Flag {
	v := goValue{Value: f.Value, typ: typeName(f.Value)}
	p := &pflag.Flag{Name: f.Name, Usage: f.Usage, Value: v, DefValue: f.DefValue}
	if v.typ == "bool" {
		p.NoOptDefVal = "true"
	}
	if _, ok := AliasOf(f); ok {
		p.Hidden = true
	}
	return p
}

// PFlags is fs as a pflag flag set (PFlag of each flag).
func PFlags(fs *flag.FlagSet) *pflag.FlagSet {
	p := pflag.NewFlagSet(fs.Name(), pflag.ContinueOnError)
	fs.VisitAll(func(f *flag.Flag) { p.AddFlag(PFlag(f)) })
	return p
}

// Print writes fs's flags in the CLI's form, wrapped, aliases left out.
func Print(w io.Writer, fs *flag.FlagSet) {
	fmt.Fprint(w, FlagUsages(PFlags(fs)))
}

// FlagUsages is the help of fs's flags, hidden ones left out: each flag's
// line as pflag writes it ("  -o, --output string"), then its usage and
// default ("(default X)", pflag's form) wrapped to Width under it at
// column 8, as the flag package and kubectl write it: a long flag name
// costs no width of the text.
func FlagUsages(fs *pflag.FlagSet) string {
	var b strings.Builder
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Hidden {
			return
		}
		line := "      --" + f.Name
		if f.Shorthand != "" {
			line = "  -" + f.Shorthand + ", --" + f.Name
		}
		typ, usage := pflag.UnquoteUsage(f)
		if typ != "" {
			line += " " + typ
		}
		if !zero(f) {
			if f.Value.Type() == "string" {
				usage += fmt.Sprintf(" (default %q)", f.DefValue)
			} else {
				usage += fmt.Sprintf(" (default %s)", f.DefValue)
			}
		}
		b.WriteString(line + "\n" + strings.Repeat(" ", usageIndent) + Wrap(usage, usageIndent, Width) + "\n")
	})
	return b.String()
}

// usageIndent is the column a flag's usage starts at.
const usageIndent = 8

// zero says whether f's default is its type's zero value, which help
// does not state (as pflag does not).
func zero(f *pflag.Flag) bool {
	switch f.DefValue {
	case "", "0", "0s", "false", "[]", "<nil>":
		return true
	}
	return false
}

// Wrap breaks s into lines of at most width columns (a word longer than
// a line stays whole), the first starting at column indent, the next
// indented to it.
func Wrap(s string, indent, width int) string {
	var b strings.Builder
	col := indent
	for i, w := range strings.Fields(s) {
		switch {
		case i > 0 && col+1+len(w) > width:
			b.WriteString("\n" + strings.Repeat(" ", indent))
			col = indent
		case i > 0:
			b.WriteByte(' ')
			col++
		}
		b.WriteString(w)
		col += len(w)
	}
	return b.String()
}

// Usage is a Usage for fs: head (wrapped by its author), then "Flags:"
// and Print.
func Usage(fs *flag.FlagSet, head string) func() {
	return func() {
		w := fs.Output()
		fmt.Fprint(w, head)
		if head != "" && !strings.HasSuffix(head, "\n") {
			fmt.Fprintln(w)
		}
		fmt.Fprintln(w, "Flags:")
		Print(w, fs)
	}
}

// stdUsage and setUsage are the code of the flag package's own
// flag.Usage, as the program starts, and of a new FlagSet's Usage (a
// method value: the same code for every FlagSet).
var (
	stdUsage = reflect.ValueOf(flag.Usage).Pointer()
	setUsage = reflect.ValueOf(flag.NewFlagSet("", flag.ContinueOnError).Usage).Pointer()
)

// HideAliases makes fs's help leave its aliases out where fs prints the
// flag package's own help (a flag set's default Usage; flag.CommandLine
// while flag.Usage is the package's): it prints Print's form instead. A
// Usage of the program's own is left as it is. (The flag package has no
// way to ask whether a Usage is its own but to compare the functions'
// code.)
func HideAliases(fs *flag.FlagSet) {
	head := func(name string) string { return "Usage of " + name + ":\n" }
	switch {
	case fs == flag.CommandLine && reflect.ValueOf(flag.Usage).Pointer() == stdUsage:
		flag.Usage = func() {
			w := fs.Output()
			fmt.Fprint(w, head(fs.Name()))
			Print(w, fs)
		}
	case fs != flag.CommandLine && (fs.Usage == nil || reflect.ValueOf(fs.Usage).Pointer() == setUsage):
		fs.Usage = func() {
			w := fs.Output()
			fmt.Fprint(w, head(fs.Name()))
			Print(w, fs)
		}
	}
}

// goValue is a standard flag's Value as pflag's, with the type name help shows.
type goValue struct {
	flag.Value
	typ string
}

func (v goValue) Type() string { return v.typ }

// Unwrap is the standard flag's Value.
func (v goValue) Unwrap() flag.Value { return v.Value }

// typeName is the type help shows for v: the kind of a value of the flag
// package (its durationValue: duration; a flag.Func's: string), a pflag
// Value's Type, else "value", as the flag package shows it.
func typeName(v flag.Value) string {
	if a, ok := v.(*alias); ok {
		v = a.Value
	}
	if t, ok := v.(interface{ Type() string }); ok { // pflag's
		return t.Type()
	}
	if b, ok := v.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
		return "bool"
	}
	t := reflect.TypeOf(v)
	if t.Kind() == reflect.Pointer || t.Kind() == reflect.Interface {
		t = t.Elem()
	}
	if t.PkgPath() != "flag" {
		return "value"
	}
	switch n := strings.TrimSuffix(t.Name(), "Value"); n {
	case "func", "text":
		return "string"
	case "int64":
		return "int"
	case "uint64":
		return "uint"
	case "float64":
		return "float"
	case "string", "int", "uint", "duration":
		return n
	default:
		return "value"
	}
}

// Computed is a string flag whose default is computed when it is read
// (from the environment, say), so that its usage states the default
// once, the same on every machine, as "(default $POD_NAMESPACE/name)".
// Set by the command line, even to "", it holds what was set.
type Computed struct {
	val string
	set bool
	def func() string
}

// NewComputed registers a Computed flag on fs.
func NewComputed(fs *flag.FlagSet, name string, def func() string, usage string) *Computed {
	c := &Computed{def: def}
	fs.Var(c, name, usage)
	return c
}

// Get is the value set, else the default.
func (c *Computed) Get() string {
	if c.set {
		return c.val
	}
	return c.def()
}

func (c *Computed) String() string {
	if c == nil {
		return ""
	}
	return c.val
}

// Set sets the value.
func (c *Computed) Set(s string) error {
	c.val, c.set = s, true
	return nil
}

// Type is the type help shows.
func (c *Computed) Type() string { return "string" }
