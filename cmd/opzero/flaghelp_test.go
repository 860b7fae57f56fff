package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// flagTypes are the type names pflag shows for the kinds of flag the CLI
// uses ("" for a bool).
var flagTypes = map[string]bool{"": true, "string": true, "int": true, "duration": true, "strings": true,
	"stringArray": true, "uint": true, "float": true}

// TestFlagHelpReadsRight renders every command's help and checks each
// flag's line: its type is a type name, not a word pflag took from a
// backquoted phrase of the usage (UnquoteUsage shows the first `word` as
// the type: "--kubeconfig opzero controlplane up"), and the usage keeps its
// words.
func TestFlagHelpReadsRight(t *testing.T) {
	var walk func(*cobra.Command)
	n := 0
	walk = func(c *cobra.Command) {
		var help bytes.Buffer
		c.SetOut(&help)
		c.SetErr(&help)
		if err := c.Help(); err != nil {
			t.Fatalf("%s: %v", c.CommandPath(), err)
		}
		text := help.String()
		check := func(f *pflag.Flag) {
			n++
			typ, usage := pflag.UnquoteUsage(f)
			if !flagTypes[typ] {
				t.Errorf("%s --%s: help shows type %q (a backquoted word of its usage?): %q", c.CommandPath(), f.Name, typ, f.Usage)
			}
			if strings.Contains(f.Usage, "`") {
				t.Errorf("%s --%s: usage has a backquote, which pflag turns into the type: %q", c.CommandPath(), f.Name, f.Usage)
			}
			line := "--" + f.Name
			if typ != "" {
				line += " " + typ
			}
			if !strings.Contains(text, line) || !strings.Contains(text, usage) {
				t.Errorf("%s: help does not show %q with %q:\n%s", c.CommandPath(), line, usage, text)
			}
		}
		c.LocalFlags().VisitAll(check)
		c.InheritedFlags().VisitAll(check)
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(newRootCmd())
	if n < 30 {
		t.Fatalf("checked %d flags; the walk missed commands", n)
	}
}

// TestBackquoteWouldBeCaught: the check above is not vacuous.
func TestBackquoteWouldBeCaught(t *testing.T) {
	fs := pflag.NewFlagSet("x", pflag.ContinueOnError)
	fs.String("kubeconfig", "", "default the plane of `opzero controlplane up`")
	typ, _ := pflag.UnquoteUsage(fs.Lookup("kubeconfig"))
	if flagTypes[typ] {
		t.Fatalf("type %q passed", typ)
	}
}
