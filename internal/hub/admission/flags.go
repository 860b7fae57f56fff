package admission

import (
	"flag"
	"fmt"
	"os"
	"strings"

	"k8s.io/apimachinery/pkg/types"
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
	addr, certDir, secret, service, clientCA string
	inFlight                                 int
}

// BindFlags adds the admission endpoint's flags to fs; ns is the hub's
// namespace ($POD_NAMESPACE), the default of the Secret's and Service's.
func BindFlags(fs *flag.FlagSet, ns string) *Flags {
	f := &Flags{}
	fs.StringVar(&f.addr, "webhook-addr", "", "Serve the operators' admission webhooks (TLS) on this address, e.g. :8443 (default: not served; $"+envPort+" sets the port, as opzero dev does).")
	fs.StringVar(&f.certDir, "webhook-cert-dir", "", "A folder with tls.crt and tls.key to serve the webhooks with (default $"+envCertDir+"; empty: the hub makes its own in --webhook-cert-secret).")
	def := func(name string) string {
		if ns == "" {
			return ""
		}
		return ns + "/" + name
	}
	fs.StringVar(&f.secret, "webhook-cert-secret", def("opzero-hub-webhook-certs"), "namespace/name of the Secret where the hub keeps the webhooks' CA and serving certificate (made, and renewed 30 days before expiry, by the hub).")
	fs.StringVar(&f.service, "webhook-service", def("opzero-hub"), "namespace/name of the hub's Service: the certificate is for its names, and every webhook configuration that calls it gets the CA as caBundle.")
	fs.StringVar(&f.clientCA, "webhook-client-ca", "", "A PEM file: callers must present a client certificate it signed (the API server, given one by its AdmissionConfiguration kubeconfig); default: none asked (the path's per-install token authenticates).")
	fs.IntVar(&f.inFlight, "webhook-in-flight", 32, "At most this many admission calls forwarded to one operator at once; more are answered 429 (the API server retries within the timeout, then its failurePolicy applies).")
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
	if o.Service, err = nsName("--webhook-service", f.service); err != nil {
		return o, false, err
	}
	if dir == "" {
		if o.CertSecret, err = nsName("--webhook-cert-secret", f.secret); err != nil {
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
