package main

import (
	"strings"

	"github.com/spf13/cobra"

	"github.com/opzero/opzero/internal/clihelp"
)

// wrapHelp makes every command's help keep to clihelp.Width columns in
// the form opzero-hub's and wakeup-source's have: each flag's usage
// wrapped under its name (clihelp.FlagUsages; cobra's own template leaves
// each flag on one line), and each command's Short in the list of
// commands wrapped under itself. Long texts are wrapped by their authors;
// TestFlagConvention checks every line.
func wrapHelp(root *cobra.Command) {
	t := root.UsageTemplate()
	for _, set := range []string{".LocalFlags", ".InheritedFlags"} {
		t = strings.ReplaceAll(t, "{{"+set+".FlagUsages ", "{{flagUsages "+set+" ")
	}
	t = strings.ReplaceAll(t, "{{rpad .Name .NamePadding }} {{.Short}}", "{{rpad .Name .NamePadding }} {{wrapShort .}}")
	cobra.AddTemplateFunc("flagUsages", clihelp.FlagUsages)
	cobra.AddTemplateFunc("wrapShort", func(c *cobra.Command) string {
		indent := 2 + c.NamePadding() + 1
		return clihelp.Wrap(c.Short, indent, clihelp.Width)
	})
	root.SetUsageTemplate(t)
}
