package admission

import (
	"flag"
	"fmt"
	"os"
	"strings"

	"k8s.io/apimachinery/pkg/types"

	"github.com/opzero/opzero/internal/clihelp"
)

// The environment with which opzero dev moves a process's webhook server
// (as Knative gives PORT): the port, and the folder of tls.crt and
// tls.key it made for 127.0.0.1 (internal/devenv/dev/webhooks.go).
const (
	envPort    = "OPZERO_WEBHOOK_PORT"
	envCertDir = "OPZERO_WEBHOOK_CERT_DIR"
)

// Flags are cmd/opzero-hub's flags of the admission endpoint.
type Flags struct {
	addr, certDir, clientCA string
	secret, service         *clihelp.Computed
	inFlight                int
}

// BindFlags adds the admission endpoint's flags to fs; ns is the hub's
// namespace ($POD_NAMESPACE), the default of the Secret's and Service's.
func BindFlags(fs *flag.FlagSet, ns string) *Flags {
	f := &Flags{}
	fs.StringVar(&f.addr, "webhook-addr", "", "serve the operators' admission webhooks (TLS) on this address, e.g. :8443; $"+envPort+" sets the port, as opzero dev does (default not served)")
	fs.StringVar(&f.certDir, "webhook-cert-dir", "", "a folder with tls.crt and tls.key to serve the webhooks with; empty: the hub makes its own in --webhook-cert-secret (default $"+envCertDir+")")
	def := func(name string) func() string {
		return func() string {
			if ns == "" {
				return ""
			}
			return ns + "/" + name
		}
	}
	f.secret = clihelp.NewComputed(fs, "webhook-cert-secret", def("opzero-hub-webhook-certs"), "namespace/name of the Secret where the hub keeps the webhooks' CA and serving certificate, made and renewed 30 days before expiry by the hub (default $POD_NAMESPACE/opzero-hub-webhook-certs)")
	f.service = clihelp.NewComputed(fs, "webhook-service", def("opzero-hub"), "namespace/name of the hub's Service: the certificate is for its names, and every webhook configuration that calls it gets the CA as caBundle (default $POD_NAMESPACE/opzero-hub)")
	fs.StringVar(&f.clientCA, "webhook-client-ca", "", "a PEM file: callers must present a client certificate it signed (the API server, given one by its AdmissionConfiguration kubeconfig) (default none asked: the path's per-install token authenticates)")
	fs.IntVar(&f.inFlight, "webhook-max-in-flight", 32, "admission calls forwarded to one operator at once; more are answered 429 (the API server retries within the timeout, then its failurePolicy applies)")
	clihelp.Alias(fs, "webhook-in-flight", "webhook-max-in-flight")
	return f
}

// Options are the flags as Options (Identity and Log are the caller's);
// enabled is false when no address is set.
func (f *Flags) Options() (o Options, enabled bool, err error) {
	addr, dir := f.addr, f.certDir
	if p := os.Getenv(envPort); p != "" {
		addr = ":" + p
	}
	if d := os.Getenv(envCertDir); d != "" && dir == "" {
		dir = d
	}
	if addr == "" {
		return o, false, nil
	}
	o = Options{Addr: addr, CertDir: dir, ClientCA: f.clientCA, InFlight: f.inFlight}
	if o.Service, err = nsName("--webhook-service", f.service.Get()); err != nil {
		return o, false, err
	}
	if dir == "" {
		if o.CertSecret, err = nsName("--webhook-cert-secret", f.secret.Get()); err != nil {
			return o, false, err
		}
	}
	return o, true, nil
}

func nsName(flag, v string) (types.NamespacedName, error) {
	ns, name, ok := strings.Cut(v, "/")
	if !ok || ns == "" || name == "" {
		return types.NamespacedName{}, fmt.Errorf("%s %q: want <namespace>/<name>", flag, v)
	}
	return types.NamespacedName{Namespace: ns, Name: name}, nil
}
