package manifests_test

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/opzero/opzero/internal/manifests"
)

// TestAdoptedProjectsFlags: for a binary with a kubebuilder project's own
// flags (opzero's are then left out of it), the classic Deployment runs
// with the project's --leader-elect and --health-probe-bind-address, and the
// Knative Service turns the project's probe listener off (Knative probes the
// serving port); an opzero binary keeps opzero's flags.
func TestAdoptedProjectsFlags(t *testing.T) {
	in, err := manifests.Prepare(context.Background(), configWatcher(t), manifests.Options{})
	if err != nil {
		t.Fatal(err)
	}
	opzeroFlags := in.Flags
	project := []string{"audience", "health-probe-bind-address", "leader-elect", "metrics-bind-address", "mode", "wakeup-sink", "allowed-senders"}
	for _, tc := range []struct {
		name             string
		flags            []string
		classic, knative []string
	}{
		{"adopted", project,
			[]string{"--mode=classic", "--leader-elect", "--health-probe-bind-address=:8081"},
			[]string{"--health-probe-bind-address=0"}},
		{"opzero", opzeroFlags,
			[]string{"--mode=classic", "--leader-election-namespace=ns", "--health-addr=:8081"}, nil},
		// a binary of an opzero before --health-addr: its old name, which
		// the binary has
		{"older opzero", slices.DeleteFunc(slices.Clone(opzeroFlags), func(f string) bool { return f == "health-addr" }),
			[]string{"--mode=classic", "--leader-election-namespace=ns", "--health-probe-addr=:8081"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in.Flags = tc.flags
			for mode, want := range map[string][]string{manifests.Classic: tc.classic, manifests.Serverless: tc.knative} {
				objs, err := manifests.Generate(in, manifests.Options{Mode: mode, Namespace: "ns"})
				if err != nil {
					t.Fatal(err)
				}
				var args []string
				for _, a := range operatorContainer(t, objs)["args"].([]any) {
					args = append(args, fmt.Sprint(a))
				}
				for _, w := range want {
					if !slices.Contains(args, w) {
						t.Errorf("%s: args %q, want %s among them", mode, args, w)
					}
				}
				for _, a := range args {
					name := flagName(a)
					if !slices.Contains(tc.flags, name) {
						t.Errorf("%s: argument %s sets a flag the binary does not have (%v)", mode, a, tc.flags)
					}
				}
			}
		})
	}
}

func flagName(arg string) string {
	for len(arg) > 0 && arg[0] == '-' {
		arg = arg[1:]
	}
	for i := range len(arg) {
		if arg[i] == '=' {
			return arg[:i]
		}
	}
	return arg
}
