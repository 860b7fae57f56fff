package main

import (
	"flag"

	"github.com/spf13/cobra"

	"github.com/opzero/opzero/internal/clihelp"
	"github.com/opzero/opzero/internal/wakeup/sourcecmd"
)

// newWakeupSourceCmd is cmd/wakeup-source inside the CLI: the same flags
// and code path (package sourcecmd).
func newWakeupSourceCmd() *cobra.Command {
	var f sourcecmd.Flags
	cmd := &cobra.Command{
		Use:     "wakeup-source",
		Short:   sourcecmd.Short,
		Long:    sourcecmd.Long + "\n\nThe generated manifests run the same code as its own small binary,\ngithub.com/opzero/opzero/cmd/wakeup-source.",
		Example: "  opzero wakeup-source " + sourcecmd.Example,
		Args:    cobra.NoArgs,
		RunE:    func(cmd *cobra.Command, _ []string) error { return f.Run(cmd.Context()) },
	}
	fs := flag.NewFlagSet("wakeup-source", flag.ContinueOnError)
	f.Bind(fs)
	cmd.Flags().AddFlagSet(clihelp.PFlags(fs))
	return cmd
}
