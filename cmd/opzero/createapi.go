package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/opzero/opzero/internal/scaffold"
)

func newCreateCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "create",
		Short: "Add to a project made by opzero init",
		Args:  cobra.NoArgs,
	}
	cmd.AddCommand(newCreateAPICmd())
	return cmd
}

func newCreateAPICmd() *cobra.Command {
	o := scaffold.APIOptions{Resource: true, Controller: true}
	cmd := &cobra.Command{
		Use:   "api --group <group> --version <version> --kind <Kind>",
		Short: "Add a kind (its Go type and CRD) and its controller to the project",
		Long: `create api adds a kind to the project in the current folder, as kubebuilder
does:

  api/<version>/<kind>_types.go
      the type, with +kubebuilder markers (status subresource, printer columns)
  api/<version>/groupversion_info.go
      the group and version
  api/<version>/zz_generated.deepcopy.go
      DeepCopy methods (controller-gen object)
  internal/controller/<kind>_controller.go
      a reconciler with +kubebuilder:rbac markers, set up with opzero's builder
  internal/controller/<kind>_controller_test.go, suite_test.go
      a test against a real control plane (testenv)
  config/samples/<group>_<version>_<kind>.yaml

It registers the kind and the controller in cmd/main.go (at the
+kubebuilder:scaffold markers) and in PROJECT, then runs go mod tidy, so the
project builds. A project is one operator with one controller: a further kind
takes --controller=false. make manifests writes the CRD.`,
		Example: `  opzero create api --group cache --version v1alpha1 --kind Memcached
  opzero create api --group cache --version v1alpha1 --kind MemcachedBackup --controller=false`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.Out = cmd.ErrOrStderr()
			if err := scaffold.CreateAPI(cmd.Context(), o); err != nil {
				return err
			}
			fmt.Fprintln(cmd.ErrOrStderr(), "next: edit the type and the reconciler, then make test (or make dev)")
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Group, "group", "", "API group without the project's domain, e.g. cache (required)")
	f.StringVar(&o.Version, "version", "", "API version, e.g. v1alpha1 (required)")
	f.StringVar(&o.Kind, "kind", "", "kind, upper camel case, e.g. Memcached (required)")
	f.BoolVar(&o.Resource, "resource", true, "write the kind's Go type and sample (false: only a controller for a kind the project has)")
	f.BoolVar(&o.Controller, "controller", true, "write a controller for the kind and register it in cmd/main.go")
	return cmd
}
