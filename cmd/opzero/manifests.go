package main

import (
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/opzero/opzero/internal/manifests"
)

func newManifestsCmd() *cobra.Command {
	var o manifests.Options
	var pkg, out string
	var durable bool
	var timeout time.Duration
	var env envFlags
	cmd := &cobra.Command{
		Use:   "manifests [--operator] <go package> [-o <dir>|-] [--env NAME=VALUE ...] [-- <operator args>]",
		Short: "Generate everything needed to deploy an operator, from the operator's own description",
		Long: `manifests builds the operator's main package and runs it with OPZERO_DESCRIBE=1:
an opzero operator then prints what it reconciles, owns and watches (kinds,
selectors), its sweep schedules and instance bounds (builder.WithSweep,
WithScale, WithConcurrency) instead of serving. Everything is derived from
that description; there is no second list to keep in sync:

  crds.yaml           CRDs of the kinds whose Go types live in the operator's
                      module, generated with controller-tools (as controller-gen
                      would), and the Wakeup CRD when durable time is on
  rbac.yaml           the operator's ServiceAccount, a least-privilege
                      ClusterRole (its kinds, events, wakeups, tokenreviews,
                      plus the reconciler package's +kubebuilder:rbac markers)
                      and a Role for Leases in --namespace
  operator.yaml       serverless: a Knative Service (min/max scale,
                      containerConcurrency, timeout, autoscaling annotations);
                      classic: a Deployment with leader election
  sources.yaml        serverless: one ApiServerSource per kind (Resource mode
                      for the primary and owned kinds, an owner filter for owned
                      ones, Reference mode for watched ones), each with its own
                      ServiceAccount allowed only get/list/watch on its kind;
                      PingSources for the sweep and the full sweep
  wakeup-source.yaml  serverless with durable time: the wakeup source (its own
                      small binary, cmd/wakeup-source) as a Deployment with its
                      ServiceAccount and RBAC
  hub.yaml            serverless with --source=hub: the cluster's opzero hub
                      (cmd/opzero-hub), the same in every operator's manifests:
                      Namespace opzero-system, ServiceAccount, ClusterRole
                      opzero-hub aggregating those labelled
                      opzero.dev/aggregate-to-hub, and its Deployment
  broker.yaml         when the operator takes Broker events (builder.WatchesEvents):
                      its Broker (named after it, or --broker) and one Trigger
                      per filter, <operator>-<name>, with the delivery flags;
                      classic mode also gets a Service in front of the
                      operator's --events-addr. Without WatchesEvents,
                      --broker adds a Broker and one Trigger (--trigger-type)
  webhooks.yaml       when the binary registers webhooks (an adopted
                      controller-runtime project): the same image with
                      --mode=webhooks as an always-on Deployment (serverless;
                      classic: the operator serves them), its Service, its
                      serving certificate (--webhook-certs), the
                      Mutating/ValidatingWebhookConfigurations of the
                      project's +kubebuilder:webhook markers pointing at the
                      Service; a CRD the binary converts gets its conversion
                      webhook (/convert). The Knative Service gets
                      ENABLE_WEBHOOKS=false: kubebuilder's main then leaves
                      them out

With --source=hub (serverless only), sources.yaml holds one Subscription
(opzero.dev/v1alpha1) instead of the ApiServerSources, PingSources and the
wakeup source: the same kinds in the same modes, the sweeps, the Wakeups, and
for a watched kind declared with builder.ReferencedBy a referencedBy filter,
so that the hub wakes the operator only for objects a primary names.
rbac.yaml then grants the hub read access to the operator's kinds
(ClusterRole opzero-hub:<namespace>:<operator>, aggregated into the hub's).

Sources send OIDC tokens for --audience, which the operator is started with;
it accepts only its own senders (--allowed-senders: the OIDC service accounts
Knative creates for its sources and triggers, and the wakeup source's; with
--source=hub, the hub's service account and the triggers').
The operator's environment is declared once and goes into the Knative Service
and the classic Deployment alike: what the operator declares itself
(builder.WithEnv, WithSecretEnv), then --env, --env-secret, --env-from-secret and
--env-from-configmap. Arguments after -- are added to the operator's own.
Regenerating keeps them: they come from the operator and the command line,
never from an edit of the output. A bad name, a name Knative or opzero sets
itself (PORT, K_SERVICE, K_CONFIGURATION, K_REVISION, POD_NAMESPACE,
OPZERO_MAX_SCALE), the same name with two values, or an argument that sets a
flag the operator does not have is refused and nothing is written.

Output is deterministic: the same operator and flags give the same bytes,
except a webhook certificate made with --webhook-certs=secret: new on stdout,
kept from the folder's webhooks.yaml with -o while it serves the Service's names
for 30 more days. Its private key is in webhooks.yaml: keep it out of version
control, or use --webhook-certs=cert-manager.`,
		Example: `  opzero manifests ./examples/configwatcher -o deploy/
  opzero manifests --operator ./examples/configwatcher --mode=classic -o - | kubectl apply -f -
  opzero manifests --operator ./cmd/myoperator --namespace ops --broker default --dead-letter-sink http://dls.ops.svc
  opzero manifests ./examples/configwatcher --source=hub -o deploy/
  opzero manifests ./cmd/myoperator -o deploy/ --env LOG_LEVEL=debug --env-secret GITHUB_TOKEN=github:token \
      --env-from-configmap myoperator-settings -- --max-concurrent-reconciles=4`,
		Args: func(cmd *cobra.Command, args []string) error {
			if n := positional(cmd, args); len(n) > 1 {
				return fmt.Errorf("one operator package, got %d: %v (operator arguments go after --)", len(n), n)
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Args = operatorArgs(cmd, args)
			args = positional(cmd, args)
			if err := parseEnvFlags(&o, env); err != nil {
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
			o.TimeoutSeconds = int(timeout / time.Second)
			if timeout > 0 && o.TimeoutSeconds == 0 {
				return fmt.Errorf("--timeout=%s: at least 1s", timeout)
			}
			dir, err := os.Getwd()
			if err != nil {
				return err
			}
			o.Warnings = cmd.ErrOrStderr()
			if out != "-" && o.WebhookCerts != manifests.CertsCertManager {
				if o.WebhookCert, err = manifests.ReadWebhookCert(out); err != nil {
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
			if err := manifests.WriteDir(out, objs); err != nil {
				return err
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "wrote %d objects to %s\n", len(objs), out)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&pkg, "operator", "", "Go package of the operator's main, as go build takes it, e.g. ./examples/configwatcher (required)")
	f.StringVarP(&out, "output", "o", "-", "folder to write crds.yaml, rbac.yaml, ... into, or - for one YAML stream on stdout")
	f.StringVar(&o.Mode, "mode", manifests.Serverless, "serverless (Knative Service and sources) or classic (Deployment with leader election)")
	f.StringVar(&o.Namespace, "namespace", "default", "namespace of the operator, its sources and service accounts")
	f.StringVar(&o.Image, "image", "", "operator image (default ko://<operator import path>, which ko and opzero dev build)")
	f.StringVar(&o.Audience, "audience", "", "OIDC audience of deliveries: the operator's --audience and the sources' sink.audience (default opzero:<namespace>:<name>)")
	f.BoolVar(&durable, "durable-time", true, "serverless: record RequeueAfter and retries as Wakeups (--wakeup-sink, the Wakeup CRD, the wakeup source)")
	f.StringVar(&o.WakeupImage, "wakeup-image", manifests.DefaultWakeupImage, "image of the wakeup source; its entrypoint takes the wakeup source's flags, as cmd/wakeup-source does")
	f.StringVar(&o.Source, "source", manifests.SourceKnative, "serverless: how events reach the operator: knative (an ApiServerSource per kind, PingSources, a wakeup source) or hub (a Subscription to the cluster's opzero hub, which is deployed too)")
	f.StringVar(&o.HubImage, "hub-image", manifests.DefaultHubImage, "with --source=hub: image of the hub; its entrypoint takes the hub's flags, as cmd/opzero-hub does")
	f.DurationVar(&timeout, "timeout", 300*time.Second, "serverless: the Service's timeoutSeconds, the longest one request may take")
	f.DurationVar(&o.Idle, "idle", 0, "serverless: keep an idle instance this long before scaling to zero (Knative keeps it for its stable window, then the retention period: under 60s autoscaling.knative.dev/window, at least 6s; above, scale-to-zero-pod-retention-period of the rest; 0: Knative's defaults, 60s or more)")
	f.StringVar(&o.Broker, "broker", "", "the Broker's name (default: the operator's when it takes Broker events); without WatchesEvents, serverless: also emit a Broker of this name and a Trigger to the operator")
	f.StringVar(&o.TriggerType, "trigger-type", "", "with --broker and no WatchesEvents: only CloudEvents of this type")
	f.IntVar(&o.Delivery.Retry, "retry", 5, "Broker and Triggers: delivery retries")
	f.StringVar(&o.Delivery.BackoffPolicy, "backoff-policy", "exponential", "Broker and Triggers: exponential or linear")
	f.StringVar(&o.Delivery.BackoffDelay, "backoff-delay", "PT0.5S", "Broker and Triggers: ISO-8601 backoff delay (exponential: the first retry waits it, each next twice as long; linear: the first retry is immediate, the n-th waits n-1 times it)")
	f.StringVar(&o.Delivery.DeadLetterSink, "dead-letter-sink", "", "Broker and Triggers: URI that gets events whose retries are exhausted")
	f.StringVar(&o.WebhookCerts, "webhook-certs", manifests.CertsSecret, "an adopted project's webhooks: how their serving certificate is made: secret (a CA and a certificate made here, in a Secret, the CA in every caBundle) or cert-manager (an Issuer and a Certificate; cert-manager injects the caBundles)")
	f.StringArrayVar(&env.env, "env", nil, "NAME=VALUE: an environment variable of the operator (repeatable)")
	f.StringArrayVar(&env.secret, "env-secret", nil, "NAME=SECRET:KEY: an environment variable of the operator set from a key of a Secret in --namespace (repeatable)")
	f.StringArrayVar(&env.fromSecret, "env-from-secret", nil, "a Secret in --namespace whose every key becomes an environment variable of the operator (repeatable)")
	f.StringArrayVar(&env.fromConfigMap, "env-from-configmap", nil, "a ConfigMap in --namespace whose every key becomes an environment variable of the operator (repeatable)")
	return cmd
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
