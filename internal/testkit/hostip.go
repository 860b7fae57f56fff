package testkit

import (
	"net"
	"testing"
)

// HostListener listens on this machine's first IPv4 address that is not
// loopback (an address an EndpointSlice may hold, which refuses loopback
// ones), on a free port; it skips the test when there is none.
func HostListener(t testing.TB) (l net.Listener, ip string) {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLoopback() {
			l, err := net.Listen("tcp", net.JoinHostPort(n.IP.String(), "0"))
			if err != nil {
				t.Fatal(err)
			}
			return l, n.IP.String()
		}
	}
	t.Skip("no IPv4 address but loopback here, which an EndpointSlice may not hold")
	return nil, ""
}

// PrivateEndpointSlice is the object of the EndpointSlice Knative Serving
// keeps for a revision's private Service (what the hub reads to find a
// starting pod): named name, labelled for the Knative Service service,
// with one endpoint at ip, ready or not.
func PrivateEndpointSlice(ns, name, service, ip string, ready bool) map[string]any {
	return map[string]any{"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
		"metadata": map[string]any{"namespace": ns, "name": name, "labels": map[string]any{
			"serving.knative.dev/service": service, "networking.internal.knative.dev/serviceType": "Private"}},
		"addressType": "IPv4",
		"ports":       []any{map[string]any{"name": "http", "port": int64(8012), "protocol": "TCP"}},
		"endpoints":   []any{map[string]any{"addresses": []any{ip}, "conditions": map[string]any{"ready": ready}}}}
}
