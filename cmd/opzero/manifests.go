package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/opzero/opzero/internal/kustomize"
	"github.com/opzero/opzero/internal/manifests"
)

func newManifestsCmd() *cobra.Command {
	var o manifests.Options
	var pkg, out, config string
	var durable, installHub, helpFiles bool
	var timeout time.Duration
	var env envFlags
	var hubEvents []string
	cmd := &cobra.Command{
		Use:   "manifests [--operator] <go package> [-o <dir>|-] [--env NAME=VALUE ...] [-- <operator args>]",
		Short: "Generate everything needed to deploy an operator, from the operator's own description",
		Long: `manifests builds the operator's main package and runs it with
OPZERO_DESCRIBE=1: an opzero operator then prints what it reconciles, owns
and watches, its sweeps and its instance bounds (builder.WithSweep,
WithScale, WithConcurrency) instead of serving. Every file is derived from
that description; there is no second list to keep in sync.

With -o <dir> it writes crds.yaml, rbac.yaml, operator.yaml and
sources.yaml, and as the operator needs them hub.yaml (the cluster's hub,
which the default --source=hub serves the operator through),
wakeup-source.yaml, broker.yaml and webhooks.yaml; with -o -, one YAML
stream. --help-files says what each file holds, how the operator's
environment, an adopted project's config/ and webhook certificates are
handled, and what is deterministic; docs/manifests.md is the same guide.`,
		Example: `  opzero manifests ./examples/configwatcher -o deploy/
  opzero manifests --operator ./examples/configwatcher --mode=classic -o - | kubectl apply -f -
  opzero manifests --operator ./cmd/myoperator --namespace ops --broker default --dead-letter-sink http://dls.ops.svc
  opzero manifests ./examples/configwatcher --source=knative -o deploy/
  opzero manifests ./cmd/myoperator --install-hub=false -o deploy/   # the hub: opzero hub manifests
  opzero manifests ./cmd/myoperator --hub-events Namespace=created -o deploy/   # not woken by updates and deletes of Namespaces
  opzero manifests ./cmd -o config/serverless     # a kubebuilder project: reads config/default, writes an overlay
  opzero manifests ./cmd/myoperator -o deploy/ --env LOG_LEVEL=debug --env-secret GITHUB_TOKEN=github:token \
      --env-from-configmap myoperator-settings -- --max-concurrent-reconciles=4`,
		Args: func(cmd *cobra.Command, args []string) error {
			if helpFiles {
				return nil
			}
			if n := positional(cmd, args); len(n) > 1 {
				return fmt.Errorf("one operator package, got %d: %v (operator arguments go after --)", len(n), n)
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if helpFiles {
				_, err := fmt.Fprint(cmd.OutOrStdout(), manifestsFiles)
				return err
			}
			o.Args = operatorArgs(cmd, args)
			args = positional(cmd, args)
			if err := parseEnvFlags(&o, env); err != nil {
				return err
			}
			var err error
			if o.HubEvents, err = kindEvents("--hub-events", hubEvents); err != nil {
				return err
			}
			if len(args) == 1 {
				if pkg != "" && pkg != args[0] {
					return fmt.Errorf("two operators: --operator %s and %s; name one", pkg, args[0])
				}
				pkg = args[0]
			}
			if pkg == "" {
				return fmt.Errorf("which operator? name the Go package of its main, e.g. opzero manifests ./examples/configwatcher")
			}
			o.NoDurableTime = !durable
			o.NoHub = !installHub
			if o.Mode == manifests.Classic && !cmd.Flags().Changed("source") {
				o.Source = "" // the default source is the serverless operator's
			}
			o.TimeoutSeconds = int(timeout / time.Second)
			if timeout > 0 && o.TimeoutSeconds == 0 {
				return fmt.Errorf("--timeout=%s: at least 1s", timeout)
			}
			dir, err := os.Getwd()
			if err != nil {
				return err
			}
			o.Warnings = cmd.ErrOrStderr()
			overlay, err := readConfig(cmd, dir, pkg, config, out, &o)
			if err != nil {
				return err
			}
			if out != "-" && o.WebhookCerts != manifests.CertsCertManager {
				if o.WebhookCert, err = manifests.ReadWebhookCert(out); err != nil {
					return err
				}
			}
			if out != "-" {
				if o.WebhookToken, err = manifests.ReadWebhookToken(out); err != nil {
					return err
				}
			}
			objs, err := manifests.Build(cmd.Context(), dir, pkg, o)
			if err != nil {
				return err
			}
			if out == "-" {
				b, err := manifests.Stream(objs)
				if err != nil {
					return err
				}
				_, err = cmd.OutOrStdout().Write(b)
				return err
			}
			if overlay {
				extra, err := controllerResources(cmd.ErrOrStderr(), out, pkg)
				if err != nil {
					return err
				}
				if err := manifests.WriteOverlay(out, objs, extra...); err != nil {
					return err
				}
				fmt.Fprintf(cmd.ErrOrStderr(), "wrote %d objects and their kustomization.yaml to %s (kubectl apply -k %s, opzero dev -k %s)\n", len(objs), out, out, out)
				return nil
			}
			if err := manifests.WriteDir(out, objs); err != nil {
				return err
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "wrote %d objects to %s\n", len(objs), out)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&pkg, "operator", "", "Go package of the operator's main, as go build takes it, e.g. ./examples/configwatcher (required)")
	f.StringVarP(&out, "output", "o", "-", "folder to write crds.yaml, rbac.yaml, ... into, or - for one YAML stream on stdout; a folder under the project's config/ (e.g. config/serverless) also gets a kustomization.yaml listing them")
	f.StringVar(&config, "config", "", "the project's kustomization to read the manager's env, envFrom, resources, securityContext, namespace, namePrefix and labels from; none reads nothing (default the config/default folder of the operator's Go module, when it has a kustomization.yaml)")
	f.StringVar(&o.Mode, "mode", manifests.Serverless, "serverless (Knative Service and sources) or classic (Deployment with leader election)")
	f.StringVarP(&o.Namespace, "namespace", "n", "default", "namespace of the operator, its sources and service accounts; unset, config/'s namespace if it declares one")
	f.StringVar(&o.Image, "image", "", "operator image (default ko://<operator import path>, which ko and opzero dev build)")
	f.StringVar(&o.Audience, "audience", "", "OIDC audience of deliveries: the operator's --audience and the sources' sink.audience (default opzero:<namespace>:<name>)")
	f.BoolVar(&durable, "durable-time", true, "serverless: record RequeueAfter and retries as Wakeups (--wakeup-sink, the Wakeup CRD), which the hub delivers (with --source=knative, the wakeup source)")
	f.StringVar(&o.WakeupImage, "wakeup-image", manifests.DefaultWakeupImage, "image of the wakeup source; its entrypoint takes the wakeup source's flags, as cmd/wakeup-source does")
	f.StringVar(&o.Source, "source", manifests.SourceHub, "serverless: how events reach the operator: hub (a Subscription to the cluster's opzero hub, which hub.yaml installs) or knative (an ApiServerSource per kind, PingSources, a wakeup source); --mode=classic ignores it")
	f.StringVar(&o.HubImage, "hub-image", manifests.DefaultHubImage, "with --source=hub: image of the hub; its entrypoint takes the hub's flags, as cmd/opzero-hub does")
	f.StringArrayVar(&hubEvents, "hub-events", nil, "with --source=hub: Kind=created,updated,deleted (any of them; Kind or group/Kind): the hub wakes the operator only for those types of change of a kind it watches (the Subscription's events; repeatable, the same kind again adds types)")
	f.BoolVar(&installHub, "install-hub", true, "with --source=hub: write hub.yaml, the cluster's hub (the same in every operator's manifests, so applying it again is harmless); false when the hub is installed once per cluster with opzero hub manifests")
	f.DurationVar(&timeout, "timeout", 300*time.Second, "serverless: the Service's timeoutSeconds, the longest one request may take")
	f.DurationVar(&o.Idle, "idle", 0, "serverless: keep an idle instance this long before scaling to zero (Knative keeps it for its stable window, then the retention period: under 60s autoscaling.knative.dev/window, at least 6s; above, scale-to-zero-pod-retention-period of the rest; 0: Knative's defaults, 60s or more)")
	f.StringVar(&o.Broker, "broker", "", "the Broker's name; without WatchesEvents, serverless: also emit a Broker of this name and a Trigger to the operator (default the operator's name when it takes Broker events)")
	f.StringVar(&o.TriggerType, "trigger-type", "", "with --broker and no WatchesEvents: only CloudEvents of this type")
	f.IntVar(&o.Delivery.Retry, "retry", 5, "Broker and Triggers: delivery retries")
	f.StringVar(&o.Delivery.BackoffPolicy, "backoff-policy", "exponential", "Broker and Triggers: exponential or linear")
	f.StringVar(&o.Delivery.BackoffDelay, "backoff-delay", "PT0.5S", "Broker and Triggers: ISO-8601 backoff delay (exponential: the first retry waits it, each next twice as long; linear: the first retry is immediate, the n-th waits n-1 times it)")
	f.StringVar(&o.Delivery.DeadLetterSink, "dead-letter-sink", "", "Broker and Triggers: URI that gets events whose retries are exhausted")
	f.StringVar(&o.Webhooks, "webhooks", "", "serverless: how an adopted project's admission webhooks are served: hub (the API server calls the cluster's opzero hub, which wakes the operator; no process of the operator's runs at zero) or always-on (the same binary with --mode=webhooks as a Deployment: no cold start inside an admission call); conversion is served always on either way (default hub)")
	f.StringVar(&o.WebhookCerts, "webhook-certs", manifests.CertsSecret, "an adopted project's webhooks: how their serving certificate is made: secret (a CA and a certificate made here, in a Secret, the CA in every caBundle) or cert-manager (an Issuer and a Certificate; cert-manager injects the caBundles)")
	f.StringArrayVar(&env.env, "env", nil, "NAME=VALUE: an environment variable of the operator (repeatable)")
	f.StringArrayVar(&env.secret, "env-secret", nil, "NAME=SECRET:KEY: an environment variable of the operator set from a key of a Secret in --namespace (repeatable)")
	f.StringArrayVar(&env.fromSecret, "env-from-secret", nil, "a Secret in --namespace whose every key becomes an environment variable of the operator (repeatable)")
	f.StringArrayVar(&env.fromConfigMap, "env-from-configmap", nil, "a ConfigMap in --namespace whose every key becomes an environment variable of the operator (repeatable)")
	f.StringArrayVar(&o.ProjectManifests, "project-manifests", nil, "a file the project deploys from outside config/ (helm template of its chart, its release YAML): its webhook configurations, CRDs and the roles bound to its Deployment's service account are read as config/'s are (repeatable)")
	f.BoolVar(&o.AllowUnserved, "allow-unserved", false, "serverless: write them despite a source.Func or custom source.Source")
	f.BoolVar(&helpFiles, "help-files", false, "say what each file holds and how the environment, config/ and webhook certificates are handled, and write nothing")
	return cmd
}

// readConfig reads the project's config/ into o.Project (--config: a
// kustomization folder, none, or "" for config/default of the operator's
// module), lets its namespace stand unless --namespace is given, and says
// whether out is written as a kustomization (a folder under the module's
// config/, or one opzero wrote a kustomization.yaml into before), whose
// kustomization.yaml it checks before anything is built.
func readConfig(cmd *cobra.Command, dir, pkg, config, out string, o *manifests.Options) (overlay bool, err error) {
	if config == "none" && out == "-" {
		return false, nil
	}
	mod, err := manifests.ModuleDir(cmd.Context(), dir, pkg)
	if err != nil {
		return false, nil // Build names what is wrong with the package
	}
	explicit := config != ""
	if config == "" {
		config = manifests.ConfigDir(mod)
	}
	if config != "" && config != "none" {
		p, err := manifests.ReadProject(config)
		switch {
		case err != nil && explicit:
			return false, fmt.Errorf("%w; nothing written", err)
		case err != nil:
			// config/default found, not asked for: a project whose
			// kustomization does not build yet (kubebuilder's refers to
			// config/crd/bases, which `make manifests` writes) still gets
			// its manifests, as before opzero read config/, and is told.
			fmt.Fprintf(cmd.ErrOrStderr(), "warning: %v\n  the manager's settings in %s are not carried into the output: fix the kustomization (in a kubebuilder project, `make manifests` writes config/crd/bases), or pass --config=none to read nothing\n", err, config)
		default:
			o.Project = p
			fmt.Fprintf(cmd.ErrOrStderr(), "read the manager's settings from %s (Deployment %s, container %s); --env and --namespace win over them\n",
				p.File, p.Deployment, p.Container)
			if !cmd.Flags().Changed("namespace") {
				o.Namespace = ""
			}
		}
	}
	if out == "-" {
		return false, nil
	}
	abs, err := filepath.Abs(out)
	if err != nil {
		return false, err
	}
	rel, err := filepath.Rel(filepath.Join(mod, "config"), abs)
	overlay = err == nil && rel != "." && !strings.HasPrefix(rel, "..") || kustomize.Ours(out) ||
		manifests.OwnOutsideModule(cmd.Context(), dir, pkg) // opzero-metacontroller from a folder of YAML: its kustomization
	if overlay {
		if err := kustomize.CheckWritable(out); err != nil {
			return false, fmt.Errorf("%w; nothing written", err)
		}
	}
	return overlay, nil
}

// envFlags are the raw --env* flags.
type envFlags struct{ env, secret, fromSecret, fromConfigMap []string }

func parseEnvFlags(o *manifests.Options, f envFlags) error {
	for _, s := range f.env {
		v, err := manifests.ParseEnv(s)
		if err != nil {
			return err
		}
		o.Env = append(o.Env, v)
	}
	for _, s := range f.secret {
		v, err := manifests.ParseSecretEnv(s)
		if err != nil {
			return err
		}
		o.Env = append(o.Env, v)
	}
	for _, n := range f.fromConfigMap {
		o.EnvFrom = append(o.EnvFrom, manifests.EnvFrom{Kind: "ConfigMap", Name: n})
	}
	for _, n := range f.fromSecret {
		o.EnvFrom = append(o.EnvFrom, manifests.EnvFrom{Kind: "Secret", Name: n})
	}
	return nil
}

// positional are the arguments before --; operatorArgs those after it.
func positional(cmd *cobra.Command, args []string) []string {
	if i := cmd.ArgsLenAtDash(); i >= 0 {
		return args[:i]
	}
	return args
}

func operatorArgs(cmd *cobra.Command, args []string) []string {
	if i := cmd.ArgsLenAtDash(); i >= 0 {
		return args[i:]
	}
	return nil
}
