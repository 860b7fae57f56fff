package serverless_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/go-logr/logr/funcr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/opzero/opzero/builder"
	"github.com/opzero/opzero/internal/cloudevent"
	"github.com/opzero/opzero/internal/engine/serverless"
)

// TestInFlightLimit: beyond MaxInFlight, 429 with Retry-After and no reconcile.
func TestInFlightLimit(t *testing.T) {
	p := newProbe()
	p.started = make(chan reconcile.Request, 10)
	p.gate = make(chan struct{})
	h := newHarness(t, p, nil, serverless.Options{MaxInFlight: 1})
	held := make(chan answer, 1)
	go func() {
		held <- h.post(h.event(cloudevent.Reference, cloudevent.Update, newWidget(h.ns, "a"), "widgets"), false)
	}()
	<-p.started
	a := h.post(h.event(cloudevent.Reference, cloudevent.Update, newWidget(h.ns, "b"), "widgets"), false)
	close(p.gate)
	if a.code != http.StatusTooManyRequests || !strings.Contains(a.body, "too many") {
		t.Fatalf("second concurrent request: %d %q, want 429", a.code, a.body)
	}
	if <-held; len(p.spansOf(req(h.ns, "b"))) != 0 {
		t.Fatal("the refused event was reconciled")
	}
}

// TestSecretDataStaysOut: an operator that watches Secrets never puts their
// data in its logs or answers, whatever the event.
func TestSecretDataStaysOut(t *testing.T) {
	var logs bytes.Buffer
	var logsMu sync.Mutex // client-go (v0.35) logs its requests from the reconcile's goroutine too
	log := funcr.New(func(prefix, args string) {
		logsMu.Lock()
		defer logsMu.Unlock()
		logs.WriteString(prefix + args + "\n")
	}, funcr.Options{Verbosity: 10})
	p := newProbe()
	p.result = func(reconcile.Request, int) (reconcile.Result, error) { return reconcile.Result{}, errTest }
	h := newHarness(t, p, func(b *builder.Builder) *builder.Builder {
		return b.Watches(&corev1.Secret{}, func(context.Context, client.Reader, client.Object) ([]reconcile.Request, error) {
			return []reconcile.Request{req("x", "w")}, nil
		})
	}, serverless.Options{Logger: log})
	const sentinel = "hunter2-do-not-leak"
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s", Namespace: h.ns}, StringData: map[string]string{"password": sentinel},
		Data: map[string][]byte{"token": []byte(sentinel)}}
	good := h.event(cloudevent.Resource, cloudevent.Update, s, "secrets")
	bad := h.event(cloudevent.Resource, cloudevent.Update, s, "secrets")
	bad.SetExtension("name", "other") // disagrees with the object: rejected, with the object in hand
	var bodies []string
	for _, ev := range []*event.Event{good, bad} {
		a := h.post(ev, false)
		bodies = append(bodies, a.body, a.result)
	}
	logsMu.Lock()
	all := logs.String()
	logsMu.Unlock()
	for _, out := range append(bodies, all) {
		if strings.Contains(out, sentinel) || strings.Contains(out, "aHVudGVy") {
			t.Fatalf("Secret data leaked: %q", out)
		}
	}
	if all == "" { // logs itself is still written: the failed reconcile's retries go on
		t.Fatal("nothing was logged; the test proves nothing")
	}
}

// TestServeTLS: with a certificate and key, the engine serves HTTPS.
func TestServeTLS(t *testing.T) {
	p := newProbe()
	h := newHarness(t, p, nil, serverless.Options{})
	cert, key, pool := selfSigned(t)
	ctx, cancel := context.WithCancel(context.Background())
	addr := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- h.engine.Serve(ctx, serverless.ServeOptions{Addr: "127.0.0.1:0", CertFile: cert, KeyFile: key,
			Ready: func(a net.Addr) { addr <- a.String() }})
	}()
	url := "https://" + <-addr + "/"
	hreq, _ := cloudevent.NewRequest(ctx, url, h.event(cloudevent.Reference, cloudevent.Update, newWidget(h.ns, "tls"), "widgets"), false)
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}, Timeout: 10 * time.Second}
	resp, err := c.Do(hreq)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.TLS == nil || len(p.spansOf(req(h.ns, "tls"))) != 1 {
		t.Fatalf("HTTPS delivery: %d tls=%v", resp.StatusCode, resp.TLS != nil)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func selfSigned(t *testing.T) (certFile, keyFile string, pool *x509.CertPool) {
	key, _ := rsa.GenerateKey(rand.Reader, 2048)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "127.0.0.1"},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	_ = os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600)
	_ = os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}), 0o600)
	c, _ := x509.ParseCertificate(der)
	pool = x509.NewCertPool()
	pool.AddCert(c)
	return certFile, keyFile, pool
}

var errTest = errors.New("backend down")
