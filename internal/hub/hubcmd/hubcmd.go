// Package hubcmd is the opzero hub's command line: its flags and what runs
// them. cmd/opzero-hub (the binary the generated manifests deploy) and
// `opzero hub run` (the CLI's subcommand) share it, so the two take the
// same flags and run the same code, as internal/wakeup/sourcecmd is for
// the wakeup source.
package hubcmd

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
	"strings"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/opzero/opzero/internal/clihelp"
	"github.com/opzero/opzero/internal/hub"
	"github.com/opzero/opzero/internal/hub/admission"
	"github.com/opzero/opzero/internal/hub/starting"
	"github.com/opzero/opzero/internal/trim"
)

// Short is a one-line summary of the hub.
const Short = "Run the opzero hub, which feeds every serverless operator"

// Long describes the hub for --help.
const Long = `The hub delivers what every serverless opzero operator in the cluster asks
for in its Subscription (opzero.dev/v1alpha1): Knative ApiServerSource
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
sending, writes its progress and releases them at once. A replica that
finds bucket 0 held stands by lightly (--standby): it reads the Leases and
nothing else until it takes bucket 0, so two replicas started together end
as one that serves and one that stands by.

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
operators' own), and get/create/update on its certificate's Secret.`

// Example shows the flags the generated manifests pass, and the service account.
const Example = `--health-addr :8081 --service-account opzero-system/opzero-hub`

// Flags are the hub's settings.
type Flags struct {
	serviceAccount, leaseNamespace *clihelp.Computed
	healthAddr, id, standby        string
	recheck, flush                 time.Duration
	early                          bool
	buckets                        int
	webhooks                       *admission.Flags
}

// Bind registers the flags on fs.
func (f *Flags) Bind(fs *flag.FlagSet) {
	ns := os.Getenv("POD_NAMESPACE")
	f.serviceAccount = clihelp.NewComputed(fs, "service-account", func() string {
		if ns == "" {
			return ""
		}
		return ns + "/opzero-hub"
	}, "the hub's own service account, namespace/name: deliveries to a sink with an audience carry its TokenRequest tokens; empty sends no token (default $POD_NAMESPACE/opzero-hub)")
	fs.StringVar(&f.healthAddr, "health-addr", "", "serve /healthz (fails once the watch of Subscriptions has been down for 2 minutes), /readyz (the watch synced, every bucket tried) and /metrics on this address, e.g. :8081 (default not served)")
	fs.DurationVar(&f.recheck, "recheck", 5*time.Minute, "how often every Subscription's sink and RBAC are checked again, besides when it or an RBAC object changes (those not Ready: every 5s)")
	fs.DurationVar(&f.flush, "flush", 2*time.Second, "how often delivery progress is written to the Subscriptions' status")
	fs.BoolVar(&f.early, "early-delivery", true, "when an event or admission call for a Knative Service waits for a pod to start, send it also to that pod's container directly as soon as it listens, before Knative finds the pod ready (about a second earlier on a cold start); the first answer counts. The pods announce themselves on --health-addr ("+starting.AnnouncePath+"), else they are found in EndpointSlices; false: only through the Service's address")
	f.leaseNamespace = clihelp.NewComputed(fs, "lease-namespace", func() string { return ns },
		"where the bucket Leases are; empty: no Leases, this process serves every Subscription (run one replica only) (default $POD_NAMESPACE)")
	fs.IntVar(&f.buckets, "buckets", 4, "how many buckets the Subscriptions are hashed into; every replica must use the same number")
	fs.StringVar(&f.id, "instance-id", "", "this replica's name in the Leases, unique among the replicas (default $POD_NAME, else the host name with a random suffix)")
	clihelp.Alias(fs, "replica-id", "instance-id")
	fs.StringVar(&f.standby, "standby", "", "how a replica that finds bucket 0 held by another waits: light (reads the bucket Leases every 2s and nothing else until it takes bucket 0, then serves and takes the others as they come free; it answers admission calls all the same; less memory, and two replicas started together end as one serving and one standing by) or full (also watches and checks the Subscriptions); the takeover is as fast either way (default light)")
	f.webhooks = admission.BindFlags(fs, ns)
}

// trimWhenSettled gives the heap's garbage back to the kernel and unmaps
// the binary's pages (internal/trim, dropped from the page cache too where
// no process maps them) once the start has settled (10 s),
// and again once the hub has been quiet for 10 s after it worked or won
// or lost buckets (a replica that hands its Subscriptions over keeps
// nothing of them resident): an always-on process keeps resident only
// what its steady state touches (minor faults map the rest again). From a
// trim until the next work the collector runs tighter and the heap's free
// pages go back every 30 s (trim.IdleGC), so that the little an idle hub
// allocates (its Lease renewals) does not stay resident as garbage.
// OPZERO_TRIM=off turns it off, =heap keeps the binary's pages.
func trimWhenSettled(ctx context.Context, h *hub.Hub) {
	if os.Getenv("OPZERO_TRIM") == "off" {
		return
	}
	s := &trim.Settle{After: 10 * time.Second, Quiet: 10 * time.Second}
	gc := trim.NewIdleGC()
	t := time.NewTicker(2 * time.Second)
	defer t.Stop()
	last := h.Stats().Work()
	for s.Due(time.Now(), last); ; {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			work := h.Stats().Work()
			if work != last {
				gc.Busy()
			}
			last = work
			if s.Due(now, work) {
				trim.NowAlwaysOn()
				gc.Idle(now)
			} else {
				gc.Tick(now)
			}
		}
	}
}

// lightStandby is --standby: light unless full is asked for. A light
// standby answers admission calls too (its endpoint is started before it
// stands by, and reads the Subscription of a Deployment it wakes).
func (f Flags) lightStandby() (bool, error) {
	switch f.standby {
	case "", "light":
		return true, nil
	case "full":
		return false, nil
	}
	return false, fmt.Errorf("--standby %q: want light or full", f.standby)
}

// replicaID is --instance-id, else $POD_NAME: a container restarted in its
// pod (SIGKILL, OOM) takes its own Leases back at once, from the progress
// in status, as kubelet has ended the previous one. Without a pod name, the
// host name with a random suffix: a restarted process waits for its
// predecessor's Leases to expire.
func (f Flags) replicaID() string {
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

// Run connects to the API server (KUBECONFIG, else in-cluster) and runs
// the hub until ctx ends. Logs go to stderr as JSON.
func (f Flags) Run(ctx context.Context) error {
	sa, healthAddr, recheck, flush, early := f.serviceAccount.Get(), f.healthAddr, f.recheck, f.flush, f.early
	ha := struct {
		namespace string
		buckets   int
	}{f.leaseNamespace.Get(), f.buckets}
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
	light, err := f.lightStandby()
	if err != nil {
		return err
	}
	replica, version := f.replicaID(), hub.BuildVersion()
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
		NoEarlyDelivery: !early, Starting: st, LeaseNamespace: ha.namespace, Buckets: ha.buckets, ReplicaID: replica, Version: version,
		LightStandby: light})
	if err != nil {
		return err
	}
	adm, err := startAdmission(ctx, cfg, f.webhooks, id, st, h, log)
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
