package main

import (
	"fmt"
	"log/slog"
	"os"
	"strings"

	"github.com/go-logr/logr"
	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/config"

	v1alpha1 "github.com/opzero/opzero/api/v1alpha1"
	"github.com/opzero/opzero/internal/wakeup"
)

func newWakeupSourceCmd() *cobra.Command {
	var ns, operator, audience, sa string
	var concurrency int
	cmd := &cobra.Command{
		Use:   "wakeup-source",
		Short: "Deliver durable wakeups (RequeueAfter, retries) to serverless operators when they are due",
		Long: `wakeup-source is a small always-on process. It watches Wakeup records
(opzero.dev/v1alpha1, written by serverless operators when a reconcile returns
RequeueAfter or fails) and, at each one's due time, sends a dev.opzero.wakeup
CloudEvent to the record's sink, which starts the operator if it has scaled to
zero; after a 2xx answer it deletes the record. It fires overdue records when it
starts and backs off when a sink fails.

It needs get/list/watch/delete on wakeups.opzero.dev. With --audience it
authenticates like Knative's OIDC senders: a TokenRequest token of
--service-account for that audience.`,
		Example: `  opzero wakeup-source --operator configwatcher --audience opzero:default:configwatcher --service-account default/configwatcher-wakeup-source`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := config.GetConfig()
			if err != nil {
				return fmt.Errorf("no Kubernetes API server: set KUBECONFIG or run in a cluster: %w", err)
			}
			scheme := runtime.NewScheme()
			_ = clientgoscheme.AddToScheme(scheme)
			_ = v1alpha1.AddToScheme(scheme)
			c, err := client.NewWithWatch(cfg, client.Options{Scheme: scheme})
			if err != nil {
				return err
			}
			log := logr.FromSlogHandler(slog.NewJSONHandler(os.Stderr, nil))
			o := wakeup.SourceOptions{Namespace: ns, Operator: operator, Concurrency: concurrency, Log: log}
			if audience != "" {
				sans, saname, ok := strings.Cut(sa, "/")
				if !ok || sans == "" || saname == "" {
					return fmt.Errorf("--service-account %q: want <namespace>/<name>", sa)
				}
				o.Token = wakeup.TokenRequester(c, sans, saname, audience)
			}
			log.Info("wakeup source running", "namespace", ns, "operator", operator, "authenticated", audience != "")
			return wakeup.NewSource(c, o).Run(cmd.Context())
		},
	}
	f := cmd.Flags()
	f.StringVar(&ns, "namespace", "", "namespace to watch (default: all namespaces)")
	f.StringVar(&operator, "operator", "", "deliver only this operator's Wakeups (label opzero.dev/operator; default: every operator's, for one source per cluster)")
	f.StringVar(&audience, "audience", "", "send a bearer token for this audience (the operator's --audience)")
	f.StringVar(&sa, "service-account", "", "<namespace>/<name> of the service account whose tokens are sent (with --audience)")
	f.IntVar(&concurrency, "concurrency", 16, "deliveries in flight at once")
	return cmd
}
