package dev

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/opzero/opzero/internal/localport"
)

// clusterNames answers the in-cluster names of the Services opzero dev
// runs, as the cluster's DNS and Service proxy would: http://<name>.<ns>
// (also .svc and .svc.cluster.local) and a port (80 if none) go to the
// local address of what serves them (a Knative Service's activator, a
// Deployment run by its local command). Processes opzero dev starts get
// it as their HTTP_PROXY and HTTPS_PROXY, so a URL written for the
// cluster (a Metacontroller hook's `url: http://hook.ns/sync`, or
// https://hook.ns/sync, whose TLS the client and the process play end to
// end through a CONNECT tunnel) works as written.
type clusterNames struct {
	mu    sync.RWMutex
	addrs map[string]string // "<name>.<ns>:<port>" -> "127.0.0.1:<port>"
}

// add makes name.ns:port reach addr.
func (n *clusterNames) add(name, ns string, port int, addr string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.addrs == nil {
		n.addrs = map[string]string{}
	}
	n.addrs[name+"."+ns+":"+strconv.Itoa(port)] = addr
}

// lookup is the local address of host ("name.ns[.svc[.cluster.local]][:port]").
func (n *clusterNames) lookup(host string) (string, bool) {
	h, port, err := net.SplitHostPort(host)
	if err != nil {
		h, port = host, "80"
	}
	h = strings.TrimSuffix(strings.TrimSuffix(h, "."), ".cluster.local")
	h = strings.TrimSuffix(h, ".svc")
	n.mu.RLock()
	defer n.mu.RUnlock()
	a, ok := n.addrs[h+":"+port]
	return a, ok
}

func (n *clusterNames) known() []string {
	n.mu.RLock()
	defer n.mu.RUnlock()
	out := make([]string, 0, len(n.addrs))
	for k := range n.addrs {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// ServeHTTP is the forward proxy: a request for a known name is sent to
// its local address; another one is answered 502, naming what is known.
// A CONNECT (an https URL) to a known name is tunnelled to its local
// address; to another host, to that host, as the process would reach it
// without HTTPS_PROXY.
func (n *clusterNames) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodConnect {
		n.tunnel(w, r)
		return
	}
	if r.URL.Host == "" {
		http.Error(w, "opzero dev's cluster-name proxy plays proxy requests to in-cluster Service names only", http.StatusMethodNotAllowed)
		return
	}
	addr, ok := n.lookup(r.URL.Host)
	if !ok {
		http.Error(w, fmt.Sprintf("opzero dev runs no Service %s (it answers %s); outside the cluster no other name resolves",
			r.URL.Host, strings.Join(n.known(), ", ")), http.StatusBadGateway)
		return
	}
	target := &url.URL{Scheme: "http", Host: addr}
	(&httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) {
		pr.SetURL(target)
		pr.Out.Host = pr.In.Host
	}}).ServeHTTP(w, r)
}

// tunnel answers a CONNECT: the bytes of both sides are copied to and from
// the local address of the name (or the host itself) until either closes.
func (n *clusterNames) tunnel(w http.ResponseWriter, r *http.Request) {
	addr, ok := n.lookup(r.Host)
	if !ok {
		addr = r.Host
	}
	up, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		http.Error(w, fmt.Sprintf("opzero dev's cluster-name proxy: %s (%s): %v", r.Host, addr, err), http.StatusBadGateway)
		return
	}
	hj, ok := w.(http.Hijacker)
	if !ok {
		up.Close()
		http.Error(w, "opzero dev's cluster-name proxy cannot tunnel on this connection", http.StatusInternalServerError)
		return
	}
	down, buf, err := hj.Hijack()
	if err != nil {
		up.Close()
		return
	}
	if _, err := down.Write([]byte("HTTP/1.1 200 Connection Established\r\n\r\n")); err != nil {
		up.Close()
		down.Close()
		return
	}
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(up, buf); done <- struct{}{} }() // buf holds what the client sent after its CONNECT
	go func() { _, _ = io.Copy(down, up); done <- struct{}{} }()
	<-done
	up.Close()
	down.Close()
	<-done
}

// serveNames starts the proxy of clusterNames.
func (p *Platform) serveNames() error {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("a local port for the in-cluster names proxy: %w", err)
	}
	srv := &http.Server{Handler: &p.names, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(l) }()
	p.servers = append(p.servers, srv)
	p.namesURL = "http://" + l.Addr().String()
	return nil
}

// nameCommandServices makes the in-cluster names of each core Service that
// selects the pods of a Deployment run by its local command (annCommand,
// or its interpreter on its ConfigMaps' files: package interp) reach that
// process: port -> 127.0.0.1:<targetPort> (the process binds the
// container's port itself, as in its pod). Before that it plans the ports
// such processes share one network for (planPorts).
func (p *Platform) nameCommandServices() error {
	type name struct {
		service, ns  string
		port, target int
	}
	type deployment struct {
		key    string
		ns     string
		labels map[string]string
		c      map[string]any
		args   []string // the annotation's arguments
		names  []name   // of the Services selecting its pods
	}
	var deps []*deployment
	for _, u := range p.opts.Objects {
		if !isKind(u, "apps", "Deployment") || (u.GetAnnotations()[annCommand] == "" && !interpreted(u)) {
			continue
		}
		if u.GetNamespace() == "" {
			u.SetNamespace(p.opts.Namespace)
		}
		cs, _, _ := unstructured.NestedSlice(u.Object, "spec", "template", "spec", "containers")
		if len(cs) != 1 {
			return fmt.Errorf("Deployment %s: %d containers; opzero dev runs a Deployment by its local command (%s) with exactly one", key(u), len(cs), annCommand)
		}
		l, _, _ := unstructured.NestedStringMap(u.Object, "spec", "template", "metadata", "labels")
		c, _ := cs[0].(map[string]any)
		var args []string
		if cmd, err := localCommand(u, "Deployment "+key(u)); err == nil && len(cmd) > 1 {
			args = cmd[1:]
		}
		deps = append(deps, &deployment{key: key(u), ns: u.GetNamespace(), labels: l, c: c, args: args})
	}
	for _, u := range p.opts.Objects {
		if !isKind(u, "", "Service") || len(deps) == 0 {
			continue
		}
		ns := u.GetNamespace()
		if ns == "" {
			ns = p.opts.Namespace
		}
		sel, _, _ := unstructured.NestedStringMap(u.Object, "spec", "selector")
		for _, d := range deps {
			if d.ns != ns || len(sel) == 0 || !labels.SelectorFromSet(sel).Matches(labels.Set(d.labels)) {
				continue
			}
			ports, _, _ := unstructured.NestedSlice(u.Object, "spec", "ports")
			for _, x := range ports {
				m, _ := x.(map[string]any)
				port, ok := number(m["port"])
				if !ok {
					return fmt.Errorf("Service %s: port %v is not a number", key(u), m["port"])
				}
				target, err := targetPort(m["targetPort"], d.c, port)
				if err != nil {
					return fmt.Errorf("Service %s: %w", key(u), err)
				}
				d.names = append(d.names, name{u.GetName(), ns, int(port), target})
			}
		}
	}
	p.moved = map[string]map[int]int{}
	bound := map[int]string{} // port -> the first Deployment whose arguments bind it
	for _, d := range deps {
		ports := containerPorts(d.c)
		for _, n := range d.names {
			ports = append(ports, n.target)
		}
		if get, ok, _ := unstructured.NestedMap(d.c, "livenessProbe", "httpGet"); ok {
			if port, err := probePort(&unstructured.Unstructured{}, d.c, get); err == nil {
				ports = append(ports, port)
			}
		}
		slices.Sort(ports)
		for _, port := range slices.Compact(ports) {
			if !binds(d.args, port) {
				continue
			}
			if _, taken := bound[port]; !taken {
				bound[port] = d.key
				continue
			}
			l, err := localport.Free()
			if err != nil {
				return err
			}
			if p.moved[d.key] == nil {
				p.moved[d.key] = map[int]int{}
			}
			p.moved[d.key][port] = l
		}
		for _, n := range d.names {
			target := n.target
			if l, ok := p.moved[d.key][target]; ok {
				target = l
			}
			p.names.add(n.service, n.ns, n.port, "127.0.0.1:"+strconv.Itoa(target))
		}
	}
	return nil
}

// containerPorts are a container's declared containerPorts.
func containerPorts(c map[string]any) []int {
	var out []int
	ports, _, _ := unstructured.NestedSlice(c, "ports")
	for _, x := range ports {
		m, _ := x.(map[string]any)
		if n, ok := number(m["containerPort"]); ok && n > 0 {
			out = append(out, int(n))
		}
	}
	return out
}

// binds says whether an argument binds port (ends in ":<port>", as
// movePort reads it).
func binds(args []string, port int) bool {
	suffix := fmt.Sprintf(":%d", port)
	return slices.ContainsFunc(args, func(a string) bool { return strings.HasSuffix(a, suffix) })
}

// targetPort is a Service port's targetPort: a number, a container port's
// name, or (unset) the port itself.
func targetPort(v any, c map[string]any, port int64) (int, error) {
	if n, ok := number(v); ok {
		return int(n), nil
	}
	switch t := v.(type) {
	case nil:
		return int(port), nil
	case string:
		if n, err := strconv.Atoi(t); err == nil {
			return n, nil
		}
		ports, _, _ := unstructured.NestedSlice(c, "ports")
		for _, x := range ports {
			m, _ := x.(map[string]any)
			if n, ok := number(m["containerPort"]); ok && m["name"] == t {
				return int(n), nil
			}
		}
		return 0, fmt.Errorf("targetPort %q names no port of the container", t)
	}
	return 0, fmt.Errorf("targetPort %v: want a number or a port name", v)
}

// number reads a JSON or YAML number (int64, float64 or int, as decoders
// give them).
func number(v any) (int64, bool) {
	switch t := v.(type) {
	case int64:
		return t, true
	case int:
		return int64(t), true
	case float64:
		return int64(t), t == float64(int64(t))
	}
	return 0, false
}

// noProxy is the NO_PROXY of every process dev starts beside HTTP_PROXY
// and HTTPS_PROXY: the loopback addresses, where the API server and every
// local process listen. Go's net/http never proxies them; clients that
// would (Node.js's gaxios) reach them directly, as from a pod.
const noProxy = "NO_PROXY=127.0.0.1,localhost,::1,[::1]"
