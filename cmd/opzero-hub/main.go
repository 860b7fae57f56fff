// Command opzero-hub is the opzero hub: one always-on process per cluster
// that delivers every serverless operator's Kubernetes events, sweeps and
// wakeups, as its Subscription (opzero.dev/v1alpha1) asks, in place of
// per-operator Knative ApiServerSource adapters, PingSources and wakeup
// sources. `opzero manifests --source=hub` deploys it and writes the
// Subscriptions; see internal/hub for what it guarantees.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/opzero/opzero/internal/hub"
	"github.com/opzero/opzero/internal/hub/admission"
	"github.com/opzero/opzero/internal/hub/starting"
	"github.com/opzero/opzero/internal/profile"
	"github.com/opzero/opzero/internal/trim"
)

const usage = `opzero-hub delivers what every serverless opzero operator in the cluster
asks for in its Subscription (opzero.dev/v1alpha1): Knative ApiServerSource
events of the kinds it watches (shared watches, metadata only where a
reference is enough, filtered by selector, namespace, owner and referencedBy
before anything is sent), PingSource ticks of its sweeps, and its Wakeups when
they are due. It checks with SubjectAccessReview that each operator's service
account may itself read what it subscribes to, and persists how far it has
delivered in each Subscription's status.

Replicas share the Subscriptions: each Subscription hashes into one of
--buckets buckets, each bucket is held by the replica that holds its Lease
(opzero-hub-bucket-<i> in --lease-namespace), and a replica serves the
Subscriptions of the buckets it holds. A replica killed loses its buckets to
another once their Leases expire (10 s); one stopped by SIGTERM stops
sending, writes its progress and releases them at once.

With --webhook-addr it is also the one TLS endpoint of every serverless
operator's admission webhooks: the API server calls it at
/admission/<namespace>/<operator>/<token>/<path> (the webhook configurations
opzero manifests writes), it checks the review against what that webhook
declares and forwards it to the operator's Knative Service with its OIDC
token, waking it (internal/hub/admission). It keeps its serving certificate
in a Secret and writes its CA into those configurations' caBundles.

It needs: get/list/watch on subscriptions.opzero.dev and every kind
subscribed to (opzero manifests --source=hub aggregates them into the
opzero-hub ClusterRole), update on subscriptions/status, get/list/watch/delete
on wakeups.opzero.dev, create on events and subjectaccessreviews, get on the
sinks (Knative Services), create on its own serviceaccounts/token,
get, create and update on leases in --lease-namespace; for the webhooks,
get/list/watch on mutating/validatingwebhookconfigurations (patch on the
operators' own), and get/create/update on its certificate's Secret.

Usage:
  opzero-hub [flags]

Example:
  opzero-hub --health-addr :8081 --service-account opzero-system/opzero-hub

Flags:
`

func main() {
	fs := flag.NewFlagSet("opzero-hub", flag.ExitOnError)
	defSA := ""
	if ns := os.Getenv("POD_NAMESPACE"); ns != "" {
		defSA = ns + "/opzero-hub"
	}
	sa := fs.String("service-account", defSA, "The hub's own service account, namespace/name: deliveries to a sink with an audience carry its TokenRequest tokens (default $POD_NAMESPACE/opzero-hub; empty sends no token).")
	healthAddr := fs.String("health-addr", "", "Serve /healthz (fails once the watch of Subscriptions has been down for 2 minutes), /readyz (the watch synced, every bucket tried) and /metrics on this address, e.g. :8081 (default: not served).")
	recheck := fs.Duration("recheck", 5*time.Minute, "How often every Subscription's sink and RBAC are checked again, besides when it or an RBAC object changes (those not Ready: every 5s).")
	flush := fs.Duration("flush", 2*time.Second, "How often delivery progress is written to the Subscriptions' status.")
	early := fs.Bool("early-delivery", true, "When an event or admission call for a Knative Service waits for a pod to start, send it also to that pod's container directly as soon as it listens, before Knative finds the pod ready (about a second earlier on a cold start); the first answer counts. The pods announce themselves on --health-addr ("+starting.AnnouncePath+"), else they are found in EndpointSlices. false: only through the Service's address.")
	ha := haFlags{}
	fs.StringVar(&ha.namespace, "lease-namespace", os.Getenv("POD_NAMESPACE"), "Where the bucket Leases are (default $POD_NAMESPACE); empty: no Leases, this process serves every Subscription (run one replica only).")
	fs.IntVar(&ha.buckets, "buckets", 4, "How many buckets the Subscriptions are hashed into; every replica must use the same number.")
	fs.StringVar(&ha.id, "replica-id", "", "This replica's name in the Leases, unique among the replicas (default $POD_NAME, else the host name with a random suffix).")
	webhooks := admission.BindFlags(fs, os.Getenv("POD_NAMESPACE"))
	fs.Usage = func() { fmt.Fprint(fs.Output(), usage); fs.PrintDefaults() }
	_ = fs.Parse(os.Args[1:])
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "error: unexpected argument %q: opzero-hub takes only flags (see -help)\n", fs.Arg(0))
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := run(ctx, *sa, *healthAddr, *recheck, *flush, *early, ha, webhooks)
	profile.Stop() // a benchmark build (-tags opzero_pprof) writes its profiles
	if err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}

// trimWhenSettled gives the heap's garbage back to the kernel and unmaps
// the binary's pages (internal/trim) once the start has settled (10 s),
// and again once the hub has been quiet for 10 s after it worked or won
// or lost buckets (a replica that hands its Subscriptions over keeps
// nothing of them resident): an always-on process keeps resident only
// what its steady state touches (minor faults map the rest again).
// OPZERO_TRIM=off turns it off, =heap keeps the binary's pages.
func trimWhenSettled(ctx context.Context, h *hub.Hub) {
	if os.Getenv("OPZERO_TRIM") == "off" {
		return
	}
	s := &trim.Settle{After: 10 * time.Second, Quiet: 10 * time.Second}
	t := time.NewTicker(2 * time.Second)
	defer t.Stop()
	for s.Due(time.Now(), h.Stats().Work()); ; {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			if s.Due(now, h.Stats().Work()) {
				trim.Now()
			}
		}
	}
}

// haFlags are the replicas' flags.
type haFlags struct {
	namespace, id string
	buckets       int
}

// replicaID is --replica-id, else $POD_NAME: a container restarted in its
// pod (SIGKILL, OOM) takes its own Leases back at once, from the progress
// in status, as kubelet has ended the previous one. Without a pod name, the
// host name with a random suffix: a restarted process waits for its
// predecessor's Leases to expire.
func (f haFlags) replicaID() string {
	if f.id != "" {
		return f.id
	}
	if name := os.Getenv("POD_NAME"); name != "" {
		return name
	}
	name, _ := os.Hostname()
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return name + "_" + hex.EncodeToString(b)
}

func run(ctx context.Context, sa, healthAddr string, recheck, flush time.Duration, early bool, ha haFlags, webhooks *admission.Flags) error {
	var id types.NamespacedName
	if sa != "" {
		ns, name, ok := strings.Cut(sa, "/")
		if !ok || ns == "" || name == "" {
			return fmt.Errorf("--service-account %q: want <namespace>/<name> of the hub's service account", sa)
		}
		id = types.NamespacedName{Namespace: ns, Name: name}
	}
	// KUBECONFIG, else in-cluster (client-go's rules, as kubectl's).
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(clientcmd.NewDefaultClientConfigLoadingRules(), nil).ClientConfig()
	if err != nil {
		return fmt.Errorf("no Kubernetes API server: set KUBECONFIG or run in a cluster: %w", err)
	}
	// client-go's default (5 per second) would queue the status and
	// SubjectAccessReview writes of many Subscriptions; watches are one
	// request each.
	cfg.QPS, cfg.Burst = 50, 100
	log := logr.FromSlogHandler(slog.NewJSONHandler(os.Stderr, nil))
	if ha.buckets < 1 {
		return fmt.Errorf("--buckets %d: want 1 or more (the same on every replica)", ha.buckets)
	}
	replica, version := ha.replicaID(), hub.BuildVersion()
	// One follower of the operators' starting pods for the events and the
	// admission calls, which takes the pods' announcements too.
	var st *starting.Services
	if early {
		dyn, err := dynamic.NewForConfig(cfg)
		if err != nil {
			return err
		}
		st = starting.NewServices(dyn, log)
	}
	h, err := hub.New(cfg, hub.Options{Identity: id, Recheck: recheck, Flush: flush, Log: log,
		NoEarlyDelivery: !early, Starting: st, LeaseNamespace: ha.namespace, Buckets: ha.buckets, ReplicaID: replica, Version: version})
	if err != nil {
		return err
	}
	adm, err := startAdmission(ctx, cfg, webhooks, id, st, h, log)
	if err != nil {
		return err
	}
	if healthAddr != "" {
		l, err := net.Listen("tcp", healthAddr)
		if err != nil {
			return fmt.Errorf("--health-addr %s: %w (choose another address)", healthAddr, err)
		}
		reg := prometheus.NewRegistry()
		reg.MustRegister(h.Stats().Collectors()...)
		if adm != nil {
			reg.MustRegister(adm.Collectors()...)
		}
		mux := http.NewServeMux()
		mux.Handle("/healthz", h.HealthHandler())
		mux.Handle("/readyz", h.ReadyHandler())
		mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		if st != nil {
			mux.Handle(starting.AnnouncePath, st.Handler())
		}
		srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = srv.Serve(l) }()
		defer srv.Close()
	}
	go trimWhenSettled(ctx, h)
	log.Info("opzero hub running", "identity", sa, "health", healthAddr, "pid", os.Getpid(), "version", version,
		"replica", replica, "leaseNamespace", ha.namespace, "buckets", ha.buckets)
	return h.Run(ctx)
}

// startAdmission serves the operators' admission webhooks
// (internal/hub/admission) when --webhook-addr (or opzero dev's port) is set.
func startAdmission(ctx context.Context, cfg *rest.Config, f *admission.Flags, id types.NamespacedName, st *starting.Services, targets admission.Targets, log logr.Logger) (*admission.Server, error) {
	o, on, err := f.Options()
	if err != nil || !on {
		return nil, err
	}
	o.Identity, o.Log, o.NoEarly, o.Starting, o.Targets = id, log, st == nil, st, targets
	s, err := admission.New(cfg, o)
	if err != nil {
		return nil, err
	}
	if _, err := s.Start(ctx); err != nil {
		return nil, err
	}
	return s, nil
}
