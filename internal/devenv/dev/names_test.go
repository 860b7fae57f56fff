package dev

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
)

// TestClusterNamesProxy: through the proxy opzero dev gives its processes
// as HTTP_PROXY, http://<name>.<ns>/... (and .svc, .svc.cluster.local,
// an explicit port) reaches the local address of what serves the Service;
// another name is answered 502, saying what is known.
func TestClusterNamesProxy(t *testing.T) {
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%s %s host=%s", r.Method, r.URL.Path, r.Host)
	}))
	defer hook.Close()
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "other port") }))
	defer other.Close()
	n := &clusterNames{}
	n.add("hook", "metacontroller", 80, strings.TrimPrefix(hook.URL, "http://"))
	n.add("hook", "metacontroller", 8080, strings.TrimPrefix(other.URL, "http://"))
	proxy := httptest.NewServer(n)
	defer proxy.Close()
	pu, _ := url.Parse(proxy.URL)
	c := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(pu)}}
	for in, want := range map[string]string{
		"http://hook.metacontroller/sync":                        "POST /sync host=hook.metacontroller",
		"http://hook.metacontroller.svc/customize":               "POST /customize host=hook.metacontroller.svc",
		"http://hook.metacontroller.svc.cluster.local:80/sync":   "POST /sync host=hook.metacontroller.svc.cluster.local:80",
		"http://hook.metacontroller:8080/sync":                   "other port",
		"http://hook.metacontroller.svc.cluster.local:8080/sync": "other port",
	} {
		resp, err := c.Post(in, "application/json", strings.NewReader("{}"))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(b) != want {
			t.Errorf("%s: %d %q, want 200 %q", in, resp.StatusCode, b, want)
		}
	}
	resp, err := c.Get("http://nothing.metacontroller/sync")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadGateway || !strings.Contains(string(b), "hook.metacontroller:80") {
		t.Fatalf("an unknown name: %d %q, want 502 naming what is known", resp.StatusCode, b)
	}
}

func TestTargetPort(t *testing.T) {
	c := map[string]any{"ports": []any{map[string]any{"name": "http", "containerPort": float64(8081)}}} // as JSON decodes it
	for _, x := range []struct {
		v    any
		want int
	}{{nil, 80}, {int64(9000), 9000}, {float64(9002), 9002}, {"9001", 9001}, {"http", 8081}} {
		got, err := targetPort(x.v, c, 80)
		if err != nil || got != x.want {
			t.Errorf("targetPort(%v) = %d, %v; want %d", x.v, got, err, x.want)
		}
	}
	if _, err := targetPort("nope", c, 80); err == nil {
		t.Error("a targetPort naming no container port was accepted")
	}
}

// TestCommandDeploymentServiceNames: a core Service that selects the pods
// of a Deployment run by its local command answers its ports at the
// targetPort on 127.0.0.1 (Metacontroller's hook manifests, as published);
// so does one of a Deployment run by its interpreter, with no annotation.
func TestCommandDeploymentServiceNames(t *testing.T) {
	objs, err := ReadManifests("-", strings.NewReader(`
apiVersion: apps/v1
kind: Deployment
metadata:
  name: hook
  namespace: metacontroller
  annotations:
    dev.opzero.dev/command: '["python3", "sync.py"]'
spec:
  selector: {matchLabels: {app: hook}}
  template:
    metadata: {labels: {app: hook}}
    spec:
      containers:
      - name: controller
        image: python:3.9
        ports: [{name: web, containerPort: 8080}]
---
apiVersion: v1
kind: Service
metadata:
  name: hook
  namespace: metacontroller
spec:
  selector: {app: hook}
  ports: [{port: 80}, {port: 81, targetPort: web}]
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: published
  namespace: metacontroller
spec:
  selector: {matchLabels: {app: published}}
  template:
    metadata: {labels: {app: published}}
    spec:
      containers:
      - name: controller
        image: python:3.11
        command: [python, /hooks/sync.py]
        volumeMounts: [{name: hooks, mountPath: /hooks}]
      volumes: [{name: hooks, configMap: {name: published}}]
---
apiVersion: v1
kind: Service
metadata:
  name: published
  namespace: metacontroller
spec:
  selector: {app: published}
  ports: [{port: 80}]
---
apiVersion: v1
kind: Service
metadata:
  name: unrelated
  namespace: metacontroller
spec:
  selector: {app: other}
  ports: [{port: 80}]
`))
	if err != nil {
		t.Fatal(err)
	}
	p := &Platform{opts: Options{Objects: objs, Namespace: "default"}}
	if err := p.nameCommandServices(); err != nil {
		t.Fatal(err)
	}
	for host, want := range map[string]string{"hook.metacontroller": "127.0.0.1:80", "hook.metacontroller.svc:81": "127.0.0.1:8080",
		"published.metacontroller": "127.0.0.1:80"} { // no annotation: run by its interpreter
		if got, ok := p.names.lookup(host); !ok || got != want {
			t.Errorf("%s -> %q (%v), want %s", host, got, ok, want)
		}
	}
	if got, ok := p.names.lookup("unrelated.metacontroller"); ok {
		t.Errorf("a Service in front of no local process answers: %s", got)
	}
}

// TestClusterNamesProxyHTTPS: an https URL of an in-cluster name (a
// Metacontroller hook's `url: https://hook.ns/sync`, Service port 443 to
// the process's 8443), through the proxy given as HTTPS_PROXY, is
// tunnelled (CONNECT) to the local address, the TLS played end to end by
// the client and the process (here with a client certificate, as
// Metacontroller's webhook-auth example requires); a host the proxy does
// not know is tunnelled to that host itself; one that does not answer is
// 502.
func TestClusterNamesProxyHTTPS(t *testing.T) {
	hook := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%s %s host=%s clients=%d", r.Method, r.URL.Path, r.Host, len(r.TLS.PeerCertificates))
	}))
	hook.TLS = &tls.Config{ClientAuth: tls.RequireAnyClientCert}
	hook.StartTLS()
	defer hook.Close()
	n := &clusterNames{}
	n.add("hook", "metacontroller", 443, strings.TrimPrefix(hook.URL, "https://"))
	proxy := httptest.NewServer(n)
	defer proxy.Close()
	pu, _ := url.Parse(proxy.URL)
	certs := x509.NewCertPool()
	certs.AddCert(hook.Certificate())
	clientCert := hook.TLS.Certificates[0] // any certificate: the server requires one, verifies none
	client := func(serverName string) *http.Client {
		return &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(pu), TLSClientConfig: &tls.Config{
			RootCAs: certs, ServerName: serverName, Certificates: []tls.Certificate{clientCert}}}}
	}
	// httptest's certificate names example.com and 127.0.0.1, not the Service
	for in, want := range map[string]string{
		"https://hook.metacontroller/sync":                         "POST /sync host=hook.metacontroller clients=1",
		"https://hook.metacontroller.svc.cluster.local:443/custom": "POST /custom host=hook.metacontroller.svc.cluster.local:443 clients=1",
	} {
		resp, err := client("example.com").Post(in, "application/json", strings.NewReader("{}"))
		if err != nil {
			t.Fatalf("%s: %v", in, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(b) != want {
			t.Errorf("%s: %d %q, want 200 %q", in, resp.StatusCode, b, want)
		}
	}
	// not a name of the cluster: the host itself (here the hook's loopback
	// address, which a client would not proxy, named so to be tunnelled)
	direct := strings.Replace(hook.URL, "127.0.0.1", "localhost", 1)
	resp, err := client("127.0.0.1").Get(direct + "/x")
	if err != nil {
		t.Fatalf("%s through the proxy: %v", direct, err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("%s through the proxy: %d", direct, resp.StatusCode)
	}
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	gone := l.Addr().String()
	l.Close()
	req, _ := http.NewRequest(http.MethodConnect, proxy.URL, nil)
	req.Host = gone
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadGateway {
		t.Errorf("CONNECT to %s, where nothing listens: %d, want 502", gone, resp.StatusCode)
	}
}

// TestCommandServiceNamesMovedPort: a Service's targetPort that the local
// command's arguments bind (kubebuilder's --metrics-bind-address=:8443),
// bound by an earlier Deployment's command too (two releases of one
// operator), is planned a free local port for the later one, and the
// Service's name reaches each process where it listens; the first keeps
// its port (the hub scrapes it at its pod's address); a targetPort no
// argument binds stays the port itself.
func TestCommandServiceNamesMovedPort(t *testing.T) {
	release := func(ns string) string {
		return `
apiVersion: apps/v1
kind: Deployment
metadata:
  name: controller-manager
  namespace: ` + ns + `
  annotations:
    dev.opzero.dev/command: '["python3", "manager.py", "--metrics-bind-address=:8443"]'
spec:
  selector: {matchLabels: {control-plane: controller-manager}}
  template:
    metadata: {labels: {control-plane: controller-manager}}
    spec:
      containers: [{name: manager, image: controller:latest}]
---
apiVersion: v1
kind: Service
metadata:
  name: metrics
  namespace: ` + ns + `
spec:
  selector: {control-plane: controller-manager}
  ports: [{name: https, port: 8443, targetPort: 8443}, {name: webhooks, port: 443, targetPort: 9443}]
---
`
	}
	objs, err := ReadManifests("-", strings.NewReader(release("one")+release("two")))
	if err != nil {
		t.Fatal(err)
	}
	p := &Platform{opts: Options{Objects: objs, Namespace: "default"}}
	if err := p.nameCommandServices(); err != nil {
		t.Fatal(err)
	}
	if got, ok := p.names.lookup("metrics.one.svc:8443"); !ok || got != "127.0.0.1:8443" || len(p.moved["one/controller-manager"]) != 0 {
		t.Errorf("metrics.one:8443 -> %q (%v), moved %v: want the first release's own 127.0.0.1:8443", got, ok, p.moved["one/controller-manager"])
	}
	moved := p.moved["two/controller-manager"][8443]
	if got, ok := p.names.lookup("metrics.two.svc:8443"); !ok || moved == 0 || moved == 8443 || got != fmt.Sprintf("127.0.0.1:%d", moved) {
		t.Errorf("metrics.two:8443 -> %q (%v), want the free port planned for the second release (%d), not 8443", got, ok, moved)
	}
	for _, ns := range []string{"one", "two"} {
		if got, ok := p.names.lookup("metrics." + ns + ".svc:443"); !ok || got != "127.0.0.1:9443" {
			t.Errorf("metrics.%s:443 -> %q (%v), want 127.0.0.1:9443 (no argument binds it: the process binds it itself)", ns, got, ok)
		}
	}
}
