package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/opzero/opzero/internal/clihelp"
	"github.com/opzero/opzero/internal/kustomize"
	"github.com/opzero/opzero/internal/manifests"
	"github.com/opzero/opzero/internal/unchanged"
)

func newHubAdoptCmd() *cobra.Command {
	var (
		files                []string
		kdir, deployment     string
		out                  string
		o                    unchanged.Options
		selectors, ownersArg []string
		events               []string
		fromCluster          bool
		kubeconfig           string
	)
	cmd := &cobra.Command{
		Use:   "adopt (-f <release.yaml>... | -k <kustomize dir> | --from-cluster --deployment <ns/name>)",
		Short: "Keep an operator nobody rebuilt at zero: write its Subscription",
		Long: `adopt reads what an operator ships (its release YAML, a rendered Helm chart, a
kustomize folder, or its Deployment already running in the cluster) and
writes, without its source, the hub Subscription that serves its unchanged
Deployment: the Deployment stays at 0 replicas while nothing it needs changes,
a change the Subscription lets through scales it to 1 (the operator's own list
and watch then see it), and after --idle with nothing let through and no work
in flight it goes back to 0. Apply the output beside the release, with the hub
installed (opzero hub manifests).

What it watches comes from its RBAC: every kind its service account may
list and watch (a RoleBinding's rules in its namespace, a
ClusterRoleBinding's everywhere), leader election and Events left out.
Kinds come from the input's CRDs and Kubernetes' own APIs. Each line of
the header says what was derived and how sure it is; the same lines go
to stderr.

Narrow it as Subscriptions are narrowed: --watch-namespace, --selector
Kind=<selector>, --owner Kind=<OwnerKind> (only objects whose controller
owner is of that kind wake it), --events Kind=created,deleted (only those
types of change wake it), --ignore Kind (a kind it may watch whose
changes need no reconcile). A RequeueAfter the hub cannot see is
covered by --max-sleep: the longest it stays at zero.

Its admission webhooks (configurations calling a Service that selects its
pods) are written again to call the hub, which wakes the Deployment and
forwards each call to a ready pod, checked against the webhook's caBundle
or its cert-manager Certificate's Secret: apply the output after the
release, whose configurations it replaces. A conversion webhook keeps the
operator up: it is warned of.`,
		Example: `  # a release YAML
  opzero hub adopt -f dist/install.yaml -o at-zero.yaml
  # a Helm chart, rendered
  helm template my-op ./chart -n my-op | opzero hub adopt -f - --idle 2m
  # a kubebuilder project's own deployment, unchanged
  opzero hub adopt -k config/default --owner Deployment=Memcached | kubectl apply -f -
  # an operator already installed
  opzero hub adopt --from-cluster --deployment cert-manager/cert-manager -o at-zero.yaml`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			inputs := 0
			for _, given := range []bool{len(files) > 0, kdir != "", fromCluster} {
				if given {
					inputs++
				}
			}
			if inputs != 1 {
				return errors.New("give the operator's objects one way: -f <file> (repeatable, - for stdin), -k <kustomize folder>, or --from-cluster --deployment <ns/name>")
			}
			var stream bytes.Buffer
			for _, f := range files {
				var b []byte
				var err error
				if f == "-" {
					b, err = io.ReadAll(cmd.InOrStdin())
				} else {
					b, err = os.ReadFile(f)
				}
				if err != nil {
					return err
				}
				stream.Write(b)
				stream.WriteString("\n---\n")
			}
			if kdir != "" {
				b, err := kustomize.Render(kdir)
				if err != nil {
					return err
				}
				stream.Write(b)
			}
			var objs []map[string]any
			var err error
			if fromCluster {
				if !strings.Contains(deployment, "/") {
					return errors.New("--from-cluster needs --deployment <namespace>/<name>")
				}
				if kubeconfig == "" {
					kubeconfig = os.Getenv("KUBECONFIG")
				}
				cfg, err := restConfig(kubeconfig)
				if err != nil {
					return err
				}
				if objs, err = unchanged.FromCluster(cmd.Context(), cfg, deployment); err != nil {
					return err
				}
			} else if objs, err = decodeObjects(stream.Bytes()); err != nil {
				return err
			}
			o.Deployment = deployment
			if o.Selectors, err = pairs("--selector", selectors); err != nil {
				return err
			}
			if o.Owners, err = pairs("--owner", ownersArg); err != nil {
				return err
			}
			if o.Events, err = kindEvents("--events", events); err != nil {
				return err
			}
			o.HubNamespace, o.HubName, o.AggregateLabel = manifests.HubNamespace, manifests.HubName, manifests.HubAggregateLabel
			if o.WebhookToken, err = manifests.NewWebhookToken(); err != nil {
				return err
			}
			r, err := unchanged.Derive(objs, o)
			if err != nil {
				return err
			}
			var b bytes.Buffer
			fmt.Fprintf(&b, "# opzero hub adopt: Deployment %s/%s served by the hub at zero.\n", r.Namespace, r.Deployment)
			for _, n := range r.Notes {
				fmt.Fprintf(&b, "#   [%s] %s\n", n.Sure, n.Text)
				fmt.Fprintf(cmd.ErrOrStderr(), "[%s] %s\n", n.Sure, n.Text)
			}
			for _, obj := range r.Objects {
				y, err := yaml.Marshal(obj)
				if err != nil {
					return err
				}
				b.WriteString("---\n")
				b.Write(y)
			}
			if out == "" || out == "-" {
				_, err = cmd.OutOrStdout().Write(b.Bytes())
				return err
			}
			if err := os.WriteFile(out, b.Bytes(), 0o644); err != nil {
				return err
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "wrote %d objects to %s\n", len(r.Objects), out)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringArrayVarP(&files, "filename", "f", nil, "a YAML file of the operator's objects (its Deployment, RBAC, CRDs), - for stdin; repeatable")
	f.StringVarP(&kdir, "kustomize", "k", "", "a kustomize folder to build for the operator's objects (a kubebuilder project's config/default)")
	f.StringVar(&deployment, "deployment", "", "the operator's Deployment, <name> or <namespace>/<name>, when the input has several")
	f.StringVarP(&out, "output", "o", "-", "file to write, - for stdout")
	f.BoolVar(&fromCluster, "from-cluster", false, "read the operator's Deployment (--deployment <ns/name>), the RBAC bound to its service account, the CRDs and webhook configurations from the cluster")
	f.StringVar(&kubeconfig, "kubeconfig", "", "with --from-cluster: the cluster's kubeconfig (default $KUBECONFIG)")
	f.StringSliceVar(&o.Namespaces, "watch-namespace", nil, "wake it only for changes in these namespaces (namespaced kinds; repeatable or comma-separated)")
	f.StringArrayVarP(&selectors, "selector", "l", nil, "Kind=<label selector>: wake it only for objects of that kind the selector matches (repeatable)")
	f.StringArrayVar(&ownersArg, "owner", nil, "Kind=<OwnerKind>: wake it only for objects of that kind whose controller owner is an OwnerKind (repeatable)")
	f.StringArrayVar(&events, "events", nil, "Kind=created,updated,deleted (any of them): wake it only for those types of change of that kind; the same kind again adds types (repeatable)")
	f.StringSliceVar(&o.Ignore, "ignore", nil, "Kind (or group/Kind) it may watch but whose changes need no reconcile, such as pods it only lists: they do not wake it (repeatable or comma-separated)")
	f.DurationVar(&o.IdleAfter, "idle", 0, "how long it runs with nothing let through and no work in flight before it goes back to 0; 0: the hub's (default 1m)")
	clihelp.PAlias(f, "idle-after", "idle")
	f.DurationVar(&o.MaxSleep, "max-sleep", 0, "the longest it stays at zero, for what the hub cannot see such as a RequeueAfter; 0: the hub's (default 1h)")
	return cmd
}

// pairs reads Key=value flags.
func pairs(flag string, vs []string) (map[string]string, error) {
	m := map[string]string{}
	for _, v := range vs {
		k, val, ok := strings.Cut(v, "=")
		if !ok || k == "" || val == "" {
			return nil, fmt.Errorf("%s %q: want Kind=<value>", flag, v)
		}
		m[k] = val
	}
	return m, nil
}

// kindEvents reads Kind=created,deleted flags (hub adopt's --events,
// manifests' --hub-events): the types of change by kind, as given (the
// same kind twice lists both's); the package using them checks the
// types and the kinds.
func kindEvents(flag string, vs []string) (map[string][]string, error) {
	if len(vs) == 0 {
		return nil, nil
	}
	m := map[string][]string{}
	for _, v := range vs {
		k, types, ok := strings.Cut(v, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("%s %q: want Kind=created,updated,deleted (any of them, comma-separated)", flag, v)
		}
		m[k] = append(m[k], strings.FieldsFunc(types, func(r rune) bool { return r == ',' || r == ' ' })...)
	}
	return m, nil
}

// decodeObjects reads a YAML or JSON stream of objects; a List's items are
// objects too.
func decodeObjects(b []byte) ([]map[string]any, error) {
	d := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(b), 4096)
	var out []map[string]any
	for i := 1; ; i++ {
		var o map[string]any
		if err := d.Decode(&o); err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return nil, fmt.Errorf("reading the operator's objects (document %d): %w", i, err)
		}
		if len(o) == 0 {
			continue
		}
		if k, _ := o["kind"].(string); strings.HasSuffix(k, "List") {
			items, _ := o["items"].([]any)
			for _, it := range items {
				if m, ok := it.(map[string]any); ok {
					out = append(out, m)
				}
			}
			continue
		}
		out = append(out, o)
	}
}
