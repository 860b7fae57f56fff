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
