package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/opzero/opzero/internal/scaffold"
)

func newInitCmd() *cobra.Command {
	var o scaffold.InitOptions
	cmd := &cobra.Command{
		Use:   "init --domain <domain> --repo <module path>",
		Short: "Start a new operator project in the current folder, laid out as kubebuilder lays it out",
		Long: `init writes a new operator project into the current folder, which must be
empty (a .git folder is fine): go.mod, PROJECT (kubebuilder's format),
cmd/main.go (operator.New with BindFlags: one binary, --mode=serverless or
--mode=classic; it imports operator/classic for classic mode, which make run
uses: delete that import for a serverless-only binary), a Makefile (generate,
manifests, test, run, dev, build), README.md, hack/boilerplate.go.txt and
.gitignore; then it runs go mod tidy. Add a kind and its controller with
opzero create api.

opzero is not on a module proxy yet, so go.mod replaces it with a local
checkout: --opzero-replace names one; without the flag, the checkout this
opzero was built from (go build or go install from a local folder) is used.`,
		Example: `  mkdir memcached-operator && cd memcached-operator
  opzero init --domain example.com --repo example.com/memcached-operator
  opzero create api --group cache --version v1alpha1 --kind Memcached
  make test`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fromCheckout := false
			if !cmd.Flags().Changed("opzero-replace") {
				o.OpzeroReplace = scaffold.LocalCheckout()
				fromCheckout = o.OpzeroReplace != ""
			}
			o.Out = cmd.ErrOrStderr()
			if err := scaffold.Init(cmd.Context(), o); err != nil {
				return err // bad flags are said before anything else
			}
			if fromCheckout {
				fmt.Fprintf(cmd.ErrOrStderr(), "go.mod: replace %s => %s (the checkout this opzero was built from; --opzero-replace sets another)\n",
					scaffold.Module, o.OpzeroReplace)
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "next: opzero create api --group <group> --version v1alpha1 --kind <Kind>\n")
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Domain, "domain", "", "suffix of the project's API groups: --group cache gives cache.<domain> (required)")
	f.StringVar(&o.Repo, "repo", "", "Go module path of the project, e.g. github.com/you/memcached-operator (required)")
	f.StringVar(&o.Owner, "owner", "", "owner named in the copyright line of the generated files' header")
	f.StringVar(&o.ProjectName, "project-name", "", "name of the project (default the folder's name)")
	f.BoolVar(&o.Force, "force", false, "write into a folder that is not empty, overwriting files of the same names")
	f.StringVar(&o.OpzeroReplace, "opzero-replace", "", "folder of an opzero checkout that go.mod's replace directive points at (default the checkout this opzero was built from, if any)")
	return cmd
}
