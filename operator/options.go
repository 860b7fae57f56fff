package operator

import (
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"

	"github.com/opzero/opzero/engine/serverless"
)

// Mode is how the operator runs.
type Mode string

// The two modes.
const (
	Serverless Mode = "serverless"
	Classic    Mode = "classic"
)

// Options configures a Runtime.
type Options struct {
	Mode   Mode
	Scheme *runtime.Scheme
	// Config reaches the API server; nil means KUBECONFIG, then in-cluster.
	Config *rest.Config
	// Addr is where a serverless operator listens (":$PORT", else ":8080").
	Addr string
	// MaxConcurrentReconciles bounds distinct keys reconciling at once.
	MaxConcurrentReconciles int
	// ShutdownTimeout bounds the drain on SIGTERM (serverless).
	ShutdownTimeout time.Duration

	// LeaderElection (classic) is on unless DisableLeaderElection.
	DisableLeaderElection   bool
	LeaderElectionNamespace string
	// HealthProbeAddr and MetricsAddr (classic); "0" disables, the default.
	HealthProbeAddr string
	MetricsAddr     string

	// Serverless tunes the serverless engine beyond the fields above.
	Serverless serverless.Options
	Logger     logr.Logger
}

// BindFlags registers the options users set at run time.
func (o *Options) BindFlags(fs *flag.FlagSet) {
	if o.Mode == "" {
		o.Mode = Mode(envOr("OPZERO_MODE", string(Serverless)))
	}
	fs.Func("mode", "how to run: serverless (HTTP CloudEvents receiver, e.g. a Knative Service) or classic (controller-runtime manager); env OPZERO_MODE (default "+string(o.Mode)+")",
		func(s string) error {
			switch Mode(s) {
			case Serverless, Classic:
				o.Mode = Mode(s)
				return nil
			}
			return fmt.Errorf("unknown mode %q: want serverless or classic", s)
		})
	fs.StringVar(&o.Addr, "addr", o.Addr, "serverless: listen address (default :$PORT as Knative sets it, else :8080)")
	fs.IntVar(&o.MaxConcurrentReconciles, "max-concurrent-reconciles", o.MaxConcurrentReconciles, "distinct objects reconciled at once (default 8 serverless, 1 classic)")
	fs.BoolVar(&o.DisableLeaderElection, "disable-leader-election", o.DisableLeaderElection, "classic: run without leader election (only one replica!)")
	fs.StringVar(&o.LeaderElectionNamespace, "leader-election-namespace", o.LeaderElectionNamespace, "classic: namespace of the leader-election Lease (default $POD_NAMESPACE, else default)")
	fs.StringVar(&o.HealthProbeAddr, "health-probe-addr", o.HealthProbeAddr, "classic: health probe address (0 disables)")
	fs.StringVar(&o.MetricsAddr, "metrics-addr", o.MetricsAddr, "classic: metrics address (0 disables)")
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}
