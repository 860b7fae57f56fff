package admission

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/opzero/opzero/internal/hub/starting"
	"github.com/opzero/opzero/internal/wakeup/wakesource"
)

// Options configure a Server.
type Options struct {
	// Addr is where the TLS endpoint listens (e.g. :8443).
	Addr string
	// CertDir, if set, holds tls.crt and tls.key (read again every
	// minute); the hub then makes no certificate and writes no caBundle.
	// Otherwise the certificate is kept in CertSecret.
	CertDir    string
	CertSecret types.NamespacedName
	// Service is the hub's Service: the certificate is for its names, and
	// the webhooks that call it get the CA as caBundle.
	Service types.NamespacedName
	// ClientCA, if set, is a PEM file: a caller must present a client
	// certificate it signed (an API server given one by its
	// AdmissionConfiguration kubeconfig), else the TLS handshake fails.
	ClientCA string
	// Identity is the hub's service account: forwarded calls carry its
	// TokenRequest tokens for the operator's audience (empty: no token).
	Identity types.NamespacedName
	// InFlight bounds the calls forwarded to one operator at once (32);
	// more are answered 429 at once (the API server retries within the
	// webhook's timeout, then its failurePolicy applies).
	InFlight int
	// HTTP forwards the calls (each bounded by its webhook's timeout).
	HTTP *http.Client
	Log  logr.Logger
	// NoEarly forwards a call only to the operator's address: not also to
	// a starting pod of its Knative Service while Knative waits for the
	// pod to be ready (package starting).
	NoEarly bool
	// Starting follows the operators' starting pods (nil: the server makes
	// its own unless NoEarly); the hub's, to share the pods' announcements.
	Starting *starting.Services
	// Targets wakes the Deployments of unchanged operators whose
	// configurations carry AnnotationUpstream (nil: their calls fail).
	Targets Targets
}

// Server is the hub's admission endpoint: see the package documentation.
type Server struct {
	o      Options
	dyn    dynamic.Interface
	proxy  *proxy
	cert   servingCert
	certs  certSource
	routes atomic.Pointer[table]
	// swapped is closed (and made again) at each change of the routes.
	swapMu  sync.Mutex
	swapped chan struct{}
	configs atomic.Pointer[[]*unstructured.Unstructured]
	inject  chan struct{}
	synced  chan struct{} // closed once the configurations were first listed

	tokMu  sync.Mutex
	tokens map[string]func(context.Context) (string, error)

	wg sync.WaitGroup
}

// New prepares a Server; nothing runs until Start.
func New(cfg *rest.Config, o Options) (*Server, error) {
	if o.InFlight <= 0 {
		o.InFlight = 32
	}
	if o.Log.GetSink() == nil {
		o.Log = logr.Discard()
	}
	if o.HTTP == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.MaxIdleConnsPerHost = 16
		o.HTTP = &http.Client{Transport: t}
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	s := &Server{o: o, dyn: dyn, inject: make(chan struct{}, 1), tokens: map[string]func(context.Context) (string, error){}, synced: make(chan struct{}),
		swapped: make(chan struct{})}
	if o.CertDir != "" {
		s.certs = fileCerts{dir: o.CertDir}
	} else {
		if o.CertSecret.Name == "" || o.Service.Name == "" {
			return nil, errors.New("admission: without a certificate folder, the Secret to keep the certificate in and the hub's Service are needed")
		}
		sv := o.Service
		s.certs = secretCerts{dyn: dyn, secret: o.CertSecret, now: time.Now,
			names: []string{sv.Name + "." + sv.Namespace + ".svc", sv.Name + "." + sv.Namespace + ".svc.cluster.local", sv.Name + "." + sv.Namespace, sv.Name}}
	}
	empty := table{}
	s.routes.Store(&empty)
	s.proxy = &proxy{routes: func() table { return *s.routes.Load() }, synced: s.synced, resolve: newServiceResolver(dyn), tokens: s.token,
		http: o.HTTP, inFlight: o.InFlight, log: o.Log.WithName("admission"), slots: map[types.NamespacedName]chan struct{}{},
		targets: o.Targets, upstreams: newUpstreams(dyn), changed: s.routesChanged}
	if !o.NoEarly {
		s.proxy.starting = o.Starting
		if s.proxy.starting == nil {
			s.proxy.starting = starting.NewServices(dyn, o.Log.WithName("admission"))
		}
	}
	return s, nil
}

// routesChanged is a channel closed at the next change of the routes.
func (s *Server) routesChanged() <-chan struct{} {
	s.swapMu.Lock()
	defer s.swapMu.Unlock()
	return s.swapped
}

// Handler is the admission endpoint without TLS (tests).
func (s *Server) Handler() http.Handler { return s.proxy }

// token is the hub's token for audience, reused until 80% of its life.
// Each audience has its own: a slow TokenRequest for one operator does
// not hold up another's calls.
func (s *Server) token(ctx context.Context, audience string) (string, error) {
	if s.o.Identity.Name == "" {
		return "", nil
	}
	s.tokMu.Lock()
	t := s.tokens[audience]
	if t == nil {
		t = wakesource.TokenRequester(s.dyn, s.o.Identity.Namespace, s.o.Identity.Name, audience)
		s.tokens[audience] = t
	}
	s.tokMu.Unlock()
	return t(ctx)
}

// Start listens on Options.Addr and serves until ctx ends (Wait waits
// for the end): the certificate (read or made first; until then
// handshakes fail), the webhook configurations' routes, and the caBundle
// injection. A taken address is an error here.
func (s *Server) Start(ctx context.Context) (net.Addr, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: s.cert.getCertificate}
	if s.o.ClientCA != "" {
		b, err := os.ReadFile(s.o.ClientCA)
		if err != nil {
			return nil, fmt.Errorf("the client CA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(b) {
			return nil, fmt.Errorf("the client CA %s: no PEM certificate in it", s.o.ClientCA)
		}
		tc.ClientAuth, tc.ClientCAs = tls.RequireAndVerifyClientCert, pool
	}
	l, err := net.Listen("tcp", s.o.Addr)
	if err != nil {
		return nil, fmt.Errorf("the admission endpoint on %s: %w", s.o.Addr, err)
	}
	srv := &http.Server{Handler: s.mux(), TLSConfig: tc, ReadHeaderTimeout: 10 * time.Second,
		BaseContext: func(net.Listener) context.Context { return ctx }}
	w := &configWatch{dyn: s.dyn, log: s.o.Log.WithName("admission"), changed: s.configsChanged, synced: s.synced}
	s.wg.Add(4)
	go func() { defer s.wg.Done(); s.keepCert(ctx) }()
	go func() { defer s.wg.Done(); w.run(ctx) }()
	go func() { defer s.wg.Done(); s.injectLoop(ctx) }()
	go func() {
		defer s.wg.Done()
		go func() {
			<-ctx.Done()
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = srv.Shutdown(sctx)
		}()
		if err := srv.ServeTLS(l, "", ""); !errors.Is(err, http.ErrServerClosed) {
			s.o.Log.Error(err, "the admission endpoint stopped")
		}
	}()
	s.o.Log.Info("admission endpoint listening", "addr", l.Addr().String(), "certificate", s.certWhere(), "clientCA", s.o.ClientCA)
	return l.Addr(), nil
}

func (s *Server) certWhere() string {
	if s.o.CertDir != "" {
		return "folder " + s.o.CertDir
	}
	return "Secret " + s.o.CertSecret.String() + " (made and renewed here)"
}

// Wait returns once everything Start started has ended.
func (s *Server) Wait() { s.wg.Wait() }

func (s *Server) mux() http.Handler {
	mux := http.NewServeMux()
	mux.Handle(PathPrefix, s.proxy)
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	return mux
}

// keepCert loads the certificate (retrying until it can), then again
// every certRefresh; a new one is served from the next handshake.
func (s *Server) keepCert(ctx context.Context) {
	delay := time.Second
	for {
		kp, err := s.certs.load(ctx)
		switch {
		case err != nil:
			s.o.Log.Info("the admission endpoint's certificate could not be read or made; trying again", "error", err.Error(), "in", delay.String())
		case s.cert.set(kp):
			s.o.Log.Info("serving the admission endpoint with a certificate", "from", kp.source, "names", strings.Join(kp.leaf.DNSNames, ","), "notAfter", kp.leaf.NotAfter)
			s.kickInject()
		}
		next := certRefresh
		if err != nil {
			next, delay = delay, min(2*delay, 30*time.Second)
		} else {
			delay = time.Second
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(next):
		}
	}
}

func (s *Server) configsChanged(cfgs []config, objs []*unstructured.Unstructured) {
	t, skipped := buildTable(cfgs, s.o.Service)
	for _, m := range skipped {
		s.o.Log.Info("a webhook is not served through the hub", "reason", m)
	}
	s.routes.Store(&t)
	s.swapMu.Lock()
	close(s.swapped)
	s.swapped = make(chan struct{})
	s.swapMu.Unlock()
	s.configs.Store(&objs)
	s.kickInject()
}

func (s *Server) kickInject() {
	select {
	case s.inject <- struct{}{}:
	default:
	}
}

// injectLoop writes the CA into the caBundles after each change of the
// certificate or the configurations (self-managed certificate only),
// and again every minute for a failed write.
func (s *Server) injectLoop(ctx context.Context) {
	if _, fromFiles := s.certs.(fileCerts); fromFiles {
		return
	}
	tick := time.NewTicker(time.Minute)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.inject:
		case <-tick.C:
		}
		kp, objs := s.cert.get(), s.configs.Load()
		if kp == nil || objs == nil || len(kp.caPEM) == 0 {
			continue
		}
		for _, err := range injectCABundle(ctx, s.dyn, *objs, s.o.Service, kp.caPEM) {
			s.o.Log.Info("a caBundle could not be written; trying again on the next change or in a minute", "error", err.Error())
		}
	}
}

// Collectors are the endpoint's counters as Prometheus metrics.
func (s *Server) Collectors() []prometheus.Collector {
	counter := func(name, help string, v *atomic.Int64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: "opzero_hub", Subsystem: "admission", Name: name, Help: help},
			func() float64 { return float64(v.Load()) })
	}
	return []prometheus.Collector{
		counter("forwarded_total", "AdmissionReviews forwarded to an operator and answered.", &s.proxy.forwarded),
		counter("refused_total", "Calls refused before reaching an operator: unknown path, not an AdmissionReview, or a resource the webhook does not declare.", &s.proxy.refused),
		counter("failed_total", "Calls that reached no answer: the operator failed, timed out or had too many in flight.", &s.proxy.failed),
		counter("early_total", "Of the calls forwarded, those a starting pod of the operator answered directly, before Knative found it ready.", &s.proxy.early),
	}
}
