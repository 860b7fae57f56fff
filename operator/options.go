package operator

import (
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"

	"github.com/opzero/opzero/internal/clihelp"
)

// Mode is how the operator runs.
type Mode string

// The modes. Webhooks is for adopted projects only (classic.NewManager):
// the project's admission and conversion webhooks, served always on, while
// its controllers run serverless elsewhere.
const (
	Serverless Mode = "serverless"
	Classic    Mode = "classic"
	Webhooks   Mode = "webhooks"
)

// Options configures a Runtime.
type Options struct {
	Mode   Mode
	Scheme *runtime.Scheme
	// Config reaches the API server; nil means KUBECONFIG, then in-cluster.
	Config *rest.Config
	// APITimeout bounds each call to the API server (rest.Config.Timeout),
	// so an API server that accepts connections but does not answer cannot
	// hold a reconcile (serverless: the event is answered 503, and every
	// sender retries). Zero means DefaultAPITimeout, negative no bound; a
	// Config with its own Timeout keeps it. Classic mode bounds the client's
	// calls, not the cache's watches, which are long by design.
	APITimeout time.Duration
	// Addr is where a serverless operator listens (":$PORT", else ":8080").
	Addr string
	// MaxConcurrentReconciles bounds distinct keys reconciling at once
	// (reconciler calls; a serverless instance's Lease writes do not count).
	MaxConcurrentReconciles int
	// ShutdownTimeout bounds the drain on SIGTERM (serverless).
	ShutdownTimeout time.Duration

	// LeaderElection (classic) is on unless DisableLeaderElection.
	DisableLeaderElection   bool
	LeaderElectionNamespace string
	// HealthProbeAddr (classic) and MetricsAddr (Prometheus /metrics, both
	// modes; serverless serves it on its own listener); "0" disables, the
	// default.
	HealthProbeAddr string
	MetricsAddr     string
	// EventsAddr (classic) is where an operator that declares WatchesEvents
	// takes its Broker's events (":8082"; "0" takes none). Serverless
	// operators take them on Addr with every other event.
	EventsAddr string

	// Audience is the OIDC audience senders' tokens must carry (serverless;
	// required unless InsecureNoAuth). AllowedSenders, if set, lists the
	// usernames (system:serviceaccount:<ns>:<name>) that may send events.
	Audience       string
	AllowedSenders []string
	// InsecureNoAuth accepts events without a token: only where nothing
	// untrusted can reach the operator. Warned about at start.
	InsecureNoAuth bool
	// TLSCertFile and TLSKeyFile serve HTTPS (serverless).
	TLSCertFile, TLSKeyFile string

	// WakeupSink, if set, turns on durable time (serverless): RequeueAfter
	// and retries are recorded as Wakeups, which the opzero hub (with
	// --source=knative, the wakeup source) delivers to this URL (the
	// operator's own) when due, surviving scale to zero.
	WakeupSink string
	// Async answers as soon as an event is durably recorded (needs WakeupSink).
	Async bool
	// AnswerAdmitted answers an ApiServerSource event as soon as its keys
	// are queued, and reconciles afterwards (serverless; opt-in): one
	// source then feeds several reconciles at once. A SIGKILL can lose
	// admitted reconciles, which the sweeps heal; see --answer.
	AnswerAdmitted bool
	// EventCache answers the reconciler's Gets of owned and watched objects
	// from what Resource-mode events delivered while warm (serverless;
	// opt-in); see --event-cache.
	EventCache bool
	// WakeupNamespace holds Wakeups of cluster-scoped objects ($POD_NAMESPACE, else default).
	WakeupNamespace string

	// MaxScale is the most instances the operator may run as (Knative's
	// max-scale; env OPZERO_MAX_SCALE); negative is unbounded (Knative's
	// max-scale 0, which the manifests write as -1 for
	// builder.WithScale(min, 0)). Above 1 or unbounded, each key is serialized
	// across instances with coordination.k8s.io Leases: one instance
	// reconciling alone holds the operator-wide sole Lease, and per-key
	// Leases, kept between a key's reconciles while its events keep coming
	// (LeaseKeepIdle), are taken once several reconcile (see PerKeyLeases);
	// at 0 or 1, in memory only.
	MaxScale int
	// LeaseDuration is how long a key's Lease outlives its holder (15 s).
	LeaseDuration time.Duration
	// LeaseKeepIdle keeps a key's Lease between its reconciles until the key
	// has had none for that long (1 s; negative: release after each).
	LeaseKeepIdle time.Duration
	// PerKeyLeases turns off running alone: with max-scale > 1, an
	// instance that finds no other instance reconciling holds every key
	// with one operator-wide Lease (the sole Lease; one create, renewals
	// and one delete per warm period) instead of a Lease per key (two
	// writes per key), and steps down to per-key Leases when another
	// instance needs to reconcile. With PerKeyLeases, every key takes
	// its own Lease.
	PerKeyLeases bool
	// InstanceID is the Leases' holder identity ($POD_NAME, else the host
	// name, which is the pod name in Kubernetes, plus "-<pid>" if not PID 1).
	InstanceID string
	// AdvertiseAddress is where the other instances reach this one (a URL),
	// recorded on the Leases it holds so that they forward it the events of
	// its keys (env OPZERO_ADVERTISE_ADDRESS; default in a pod
	// http://<pod IP>:<port> without TLS, else none; "none": none).
	AdvertiseAddress string

	// BackoffBase and BackoffCap shape retries after failures (1 s, 5 min).
	BackoffBase, BackoffCap time.Duration

	// ReconcileTimeout bounds one reconcile (serverless; 5 min).
	ReconcileTimeout time.Duration
	// MaxWait bounds how long a request waits for its reconciles before it
	// is answered (serverless; 4 min 30 s, under Knative's default revision
	// timeout of 5 min).
	MaxWait time.Duration
	// FollowUpSettle holds a key's follow-up reconcile (for events that
	// arrived while it reconciled) until its events pause this long, at most
	// 20 ms after the previous reconcile (serverless; 2 ms; negative: never
	// hold).
	FollowUpSettle time.Duration
	// MaxInFlight bounds requests handled at once; more are answered 429
	// with Retry-After, which every Knative sender retries (serverless; 1000).
	MaxInFlight int

	// Logger receives the runtime's logs (logr.Discard()).
	Logger logr.Logger

	// standIns are the project's flags BindFlags found in place of
	// opzero's (applyStandIns).
	standIns []standIn
	// pflags is the flag set BindPFlags bound to: its flags are the
	// binary's, described as flag.CommandLine's are.
	pflags *pflag.FlagSet
}

// DefaultAPITimeout is Options.APITimeout's default: longer than any call a
// reconcile makes to a healthy API server (a List of a page of 500), far
// shorter than Knative's 5 min request timeout.
const DefaultAPITimeout = 30 * time.Second

// withTimeout returns a copy of cfg with Options.APITimeout applied.
func (o *Options) withTimeout(cfg *rest.Config) *rest.Config {
	c := rest.CopyConfig(cfg)
	if c.Timeout == 0 {
		switch {
		case o.APITimeout == 0:
			c.Timeout = DefaultAPITimeout
		case o.APITimeout > 0:
			c.Timeout = o.APITimeout
		}
	}
	return c
}

// projectFlags names, for an opzero flag, the flags a controller-runtime
// project (kubebuilder, operator-sdk) already has for the same thing. Its
// flags fill its ctrl.Options, which classic.NewManager runs in both modes,
// so in an adopted binary they are the ones that count.
var projectFlags = map[string][]string{
	"metrics-addr":              {"metrics-bind-address"},
	"health-addr":               {"health-probe-bind-address"},
	"disable-leader-election":   {"leader-elect"},
	"leader-election-namespace": {"leader-elect"}, // controller-runtime's default: the pod's namespace
}

// BindFlags registers the options users set at run time on fs, except
// those fs already has: a flag of the same name, or the project's own flag
// for the same thing (kubebuilder's --metrics-bind-address,
// --health-probe-bind-address, --leader-elect), so that -h lists one flag
// per setting. Call it after the project's own flags are defined.
//
// Each flag of the project that stands in for one of opzero's is said at
// start (operator.New logs it): its own --metrics-bind-address and
// friends fill the ctrl.Options that count; a flag of the same name as
// opzero's is the project's, and opzero reads its value only where the
// meaning is the same (--max-concurrent-reconciles: distinct objects
// reconciled at once, which the project's flag gives its controllers),
// else opzero's setting keeps its default.
func (o *Options) BindFlags(fs *flag.FlagSet) {
	o.bindBeside(fs.Name(), func(name string) (interface{ String() string }, bool) {
		if f := fs.Lookup(name); f != nil {
			return f.Value, true
		}
		return nil, false
	}, func(f *flag.Flag) { fs.Var(f.Value, f.Name, f.Usage) })
	clihelp.HideAliases(fs)
}

// bindBeside adds opzero's flags with add, but those the project's flag
// set has (lookup) under the same name or its own name for the setting,
// which it records as stand-ins (applyStandIns).
func (o *Options) bindBeside(name string, lookup func(string) (interface{ String() string }, bool), add func(*flag.Flag)) {
	ours := flag.NewFlagSet(name, flag.ContinueOnError)
	o.bindFlags(ours)
	o.standIns = nil
	added := map[string]bool{}
	ours.VisitAll(func(f *flag.Flag) {
		if _, ok := clihelp.AliasOf(f); ok {
			return
		}
		for _, n := range append([]string{f.Name}, projectFlags[f.Name]...) {
			if v, ok := lookup(n); ok {
				o.standIns = append(o.standIns, standIn{ours: f.Name, name: n, value: v})
				return
			}
		}
		add(f)
		added[f.Name] = true
	})
	// An old name (a hidden alias) goes where its flag went, and only if
	// the project has no flag of that name.
	ours.VisitAll(func(f *flag.Flag) {
		if of, ok := clihelp.AliasOf(f); ok && added[of] {
			if _, taken := lookup(f.Name); !taken {
				add(f)
			}
		}
	})
}

// oldNames are opzero's flags' old names (old: new), which still set
// them: generated manifests and running Deployments pass them. Help
// shows only the new name.
var oldNames = map[string]string{"health-probe-addr": "health-addr"}

// BindPFlags is BindFlags for a project whose flags are cobra's or
// pflag's: opzero's flags are added to fs (their --name form) except
// those fs already has or has the project's own flag for, as BindFlags
// does. Call it after the project's flags are defined, e.g. on
// rootCmd.Flags() before Execute.
func (o *Options) BindPFlags(fs *pflag.FlagSet) {
	o.pflags = fs
	o.bindBeside("opzero", func(name string) (interface{ String() string }, bool) {
		if f := fs.Lookup(name); f != nil {
			return f.Value, true
		}
		return nil, false
	}, func(f *flag.Flag) { fs.AddFlag(clihelp.PFlag(f)) })
}

// standIn is a flag of the project registered where opzero's would be.
type standIn struct {
	ours  string
	name  string // the project's flag
	value interface{ String() string }
}

// sameMeaning are opzero's flags whose value a project's flag of the same
// name gives: it means the same there (controller-runtime's
// controller.Options.MaxConcurrentReconciles, which kubebuilder-style
// projects set from a flag of that name).
var sameMeaning = map[string]bool{"max-concurrent-reconciles": true}

// applyStandIns takes, after the flags were parsed, what the project's
// stand-in flags give opzero's settings, and says each once.
func (o *Options) applyStandIns(log logr.Logger) {
	for _, s := range o.standIns {
		v := s.value.String()
		switch {
		case s.ours != s.name:
			log.Info("a project flag stands in for an opzero flag: its value fills the controller-runtime options that count, opzero's flag is not registered",
				"project", "--"+s.name, "opzero", "--"+s.ours, "value", v)
		case sameMeaning[s.ours]:
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 {
				log.Info("the project's flag of an opzero flag's name does not hold a count: opzero's setting keeps its default", "flag", "--"+s.ours, "value", v)
				continue
			}
			if o.MaxConcurrentReconciles == 0 && n > 0 {
				o.MaxConcurrentReconciles = n
			}
			log.Info("the project's flag of an opzero flag's name, with the same meaning, sets opzero's too", "flag", "--"+s.ours, "value", v,
				"maxConcurrentReconciles", o.MaxConcurrentReconciles)
		default:
			log.Info("the project has a flag of an opzero flag's name: it is the project's own, opzero's setting keeps its default (set it in operator.Options)",
				"flag", "--"+s.ours, "value", v)
		}
	}
}

func (o *Options) bindFlags(fs *flag.FlagSet) {
	if o.Mode == "" {
		o.Mode = Mode(envOr("OPZERO_MODE", string(Serverless)))
	}
	fs.Func("mode", "how to run: serverless (HTTP CloudEvents receiver, e.g. a Knative Service), classic (controller-runtime manager), webhooks (an adopted project's webhooks only, always on, for controllers that run serverless), or plan (reconcile every object once with every write dry-run, print what would change and exit: docs/plan.md; opzero plan runs it); env OPZERO_MODE (default "+string(o.Mode)+")",
		func(s string) error {
			switch Mode(s) {
			case Serverless, Classic, Webhooks, Plan:
				o.Mode = Mode(s)
				return nil
			}
			return fmt.Errorf("unknown mode %q: want serverless, classic, webhooks or plan", s)
		})
	fs.StringVar(&o.Addr, "addr", o.Addr, "serverless: listen address (default :$PORT as Knative sets it, else :8080)")
	fs.DurationVar(&o.APITimeout, "api-timeout", o.APITimeout, "bound on each call to the API server, so one that accepts connections but does not answer cannot hold a reconcile; a negative duration such as -1ns: no bound (default "+DefaultAPITimeout.String()+")")
	fs.IntVar(&o.MaxConcurrentReconciles, "max-concurrent-reconciles", o.MaxConcurrentReconciles, "distinct objects reconciled at once: reconciler calls; taking and releasing per-key Leases (max-scale > 1) does not count (default 8 serverless, 1 classic)")
	if o.Audience == "" {
		o.Audience = os.Getenv("OPZERO_AUDIENCE")
	}
	fs.StringVar(&o.Audience, "audience", o.Audience, "serverless (and classic with Broker events): OIDC audience that senders' bearer tokens must carry (Knative sink.audience); env OPZERO_AUDIENCE")
	fs.Func("allowed-senders", "serverless (and classic with Broker events): comma-separated senders allowed to deliver, system:serviceaccount:<ns>:<name> (default any authenticated sender)",
		func(s string) error {
			for _, v := range strings.Split(s, ",") {
				if v = strings.TrimSpace(v); v != "" {
					o.AllowedSenders = append(o.AllowedSenders, v)
				}
			}
			return nil
		})
	fs.BoolVar(&o.InsecureNoAuth, "insecure-no-auth", o.InsecureNoAuth, "serverless (and classic with Broker events): accept events without a bearer token (anyone who reaches the port can drive the operator)")
	fs.StringVar(&o.TLSCertFile, "tls-cert-file", o.TLSCertFile, "serverless: serve HTTPS with this certificate (PEM)")
	fs.StringVar(&o.TLSKeyFile, "tls-key-file", o.TLSKeyFile, "serverless: private key for --tls-cert-file (PEM)")
	fs.DurationVar(&o.FollowUpSettle, "follow-up-settle", o.FollowUpSettle, "serverless: hold a key's follow-up reconcile until its events pause this long, at most 20ms after the previous reconcile; a negative duration such as -1ns never holds (default 2ms)")
	fs.IntVar(&o.MaxInFlight, "max-in-flight", o.MaxInFlight, "serverless: requests handled at once before answering 429 (default 1000)")
	fs.StringVar(&o.WakeupSink, "wakeup-sink", o.WakeupSink, "serverless: record RequeueAfter and retries as durable Wakeups that the opzero hub (with --source=knative, the wakeup source) delivers to this URL (the operator's own)")
	fs.BoolVar(&o.Async, "async", o.Async, "serverless: answer 202 once an event is durably recorded (needs --wakeup-sink), reconcile afterwards")
	fs.Func("answer", "serverless: when to answer an ApiServerSource event: reconciled (after its reconciles) or admitted (once its objects are queued; faster with one source, but a SIGKILL can lose queued reconciles until the next sweep) (default reconciled)",
		func(s string) error {
			switch s {
			case "reconciled", "admitted":
				o.AnswerAdmitted = s == "admitted"
				return nil
			}
			return fmt.Errorf("unknown answer %q: want reconciled or admitted", s)
		})
	fs.BoolVar(&o.EventCache, "event-cache", o.EventCache, "serverless: answer the reconciler's reads of owned and watched objects from what Resource-mode events delivered, and what earlier reads returned until an event of the object arrives, while this instance is warm; never older than what it read or wrote; lists and objects neither seen nor read go to the API server")
	fs.StringVar(&o.WakeupNamespace, "wakeup-namespace", o.WakeupNamespace, "serverless: namespace for Wakeups of cluster-scoped objects (default $POD_NAMESPACE, else default)")
	if o.MaxScale == 0 {
		if n, err := strconv.Atoi(os.Getenv("OPZERO_MAX_SCALE")); err == nil {
			o.MaxScale = n
		}
	}
	fs.IntVar(&o.MaxScale, "max-scale", o.MaxScale, "serverless: most instances that may run at once (Knative max-scale; env OPZERO_MAX_SCALE, which the generated manifests set); above 1, per-key Leases serialize reconciles across instances, as does a negative value (unbounded); 0 or 1 in memory (default 0)")
	fs.DurationVar(&o.LeaseDuration, "lease-duration", o.LeaseDuration, "serverless, max-scale > 1: how long a key's Lease outlives an instance that died holding it (default 15s)")
	fs.DurationVar(&o.LeaseKeepIdle, "lease-keep-idle", o.LeaseKeepIdle, "serverless, max-scale > 1: keep a key's Lease between its reconciles until it has had none for this long, so a stream of events costs two Lease writes, not two per reconcile; a negative duration such as -1ns releases after each reconcile (default 1s)")
	fs.BoolVar(&o.PerKeyLeases, "per-key-leases", o.PerKeyLeases, "serverless, max-scale > 1: take a Lease per key always; by default an instance that finds no other reconciling holds every key with one operator-wide Lease (one create, renewals and one delete while it is busy, instead of two writes per key) and steps down to per-key Leases when another instance needs to reconcile")
	fs.StringVar(&o.InstanceID, "instance-id", o.InstanceID, "serverless, max-scale > 1: this instance's Lease holder identity (default $POD_NAME, else host name[-pid])")
	fs.StringVar(&o.AdvertiseAddress, "advertise-address", o.AdvertiseAddress, "serverless, max-scale > 1: URL where the other instances reach this one, recorded on the Leases it holds so that they forward it the events of its keys instead of marking the Lease; env OPZERO_ADVERTISE_ADDRESS; none: off (default in a pod without TLS http://<pod IP>:<port>)")
	fs.DurationVar(&o.BackoffBase, "backoff-base", o.BackoffBase, "first retry delay after a failed reconcile (default 1s)")
	fs.DurationVar(&o.BackoffCap, "backoff-cap", o.BackoffCap, "longest retry delay (default 5m)")
	fs.BoolVar(&o.DisableLeaderElection, "disable-leader-election", o.DisableLeaderElection, "classic: run without leader election (only one replica!)")
	fs.StringVar(&o.LeaderElectionNamespace, "leader-election-namespace", o.LeaderElectionNamespace, "classic: namespace of the leader-election Lease (default $POD_NAMESPACE, else default)")
	fs.StringVar(&o.HealthProbeAddr, "health-addr", o.HealthProbeAddr, "classic: serve /healthz and /readyz on this address, e.g. :8081; 0: not served (default 0)")
	fs.StringVar(&o.MetricsAddr, "metrics-addr", o.MetricsAddr, "serve Prometheus /metrics on this address, e.g. :9090; 0: not served; OTLP push follows the OTEL_* environment variables (default 0)")
	fs.StringVar(&o.EventsAddr, "events-addr", o.EventsAddr, "classic: where an operator with WatchesEvents takes its Broker's CloudEvents, authenticated as in serverless mode (--audience, --allowed-senders); 0 takes none (default :8082)")
	for old, name := range oldNames {
		clihelp.Alias(fs, old, name)
	}
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// manyInstances says whether more than one instance may reconcile at once:
// MaxScale above 1, or negative (unbounded).
func (o Options) manyInstances() bool { return o.MaxScale > 1 || o.MaxScale < 0 }
