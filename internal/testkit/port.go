package testkit

import (
	"errors"
	"net"
	"strings"
	"syscall"
	"testing"
)

// Listen returns a TCP listener on a free loopback port, closed when t
// ends. Hand it to the server under test (http.Server.Serve, httptest): the
// port stays bound from the kernel's choice to the server's use.
func Listen(t testing.TB) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("testkit: listening on a free loopback port: %v", err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// Port returns the port of a listener from Listen.
func Port(l net.Listener) int { return l.Addr().(*net.TCPAddr).Port }

// attempts bounds OnFreePort's retries.
const attempts = 5

// OnFreePort calls start with a loopback port the kernel just reported
// free, for servers that must bind the port themselves (a child process
// given $PORT, an address option). Between the kernel's answer and start's
// bind another process may take the port: when start's error says so
// (PortTaken), OnFreePort tries again with a new port, up to 5 times. Any
// other error fails t. It returns the port start succeeded on.
func OnFreePort(t testing.TB, start func(port int) error) int {
	t.Helper()
	var err error
	for range attempts {
		l, lerr := net.Listen("tcp", "127.0.0.1:0")
		if lerr != nil {
			t.Fatalf("testkit: finding a free loopback port: %v", lerr)
		}
		port := Port(l)
		_ = l.Close()
		if err = start(port); err == nil {
			return port
		}
		if !PortTaken(err) {
			t.Fatalf("starting on port %d: %v", port, err)
		}
		t.Logf("port %d was taken meanwhile; trying another: %v", port, err)
	}
	t.Fatalf("testkit: %d ports in a row were taken before the server bound them; last: %v", attempts, err)
	return 0
}

// PortTaken reports whether err says an address was already in use: the
// bind's own error (EADDRINUSE), or a child's output quoted in err.
func PortTaken(err error) bool {
	return err != nil && (errors.Is(err, syscall.EADDRINUSE) || strings.Contains(err.Error(), "address already in use"))
}

// FreePort returns a loopback port the kernel reported free a moment ago.
// Another process may take it before the caller binds it: prefer Listen or
// OnFreePort. It is for the cases neither fits, such as a child restarted
// on the same port (a URL already handed out names it).
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("testkit: finding a free loopback port: %v", err)
	}
	defer l.Close()
	return Port(l)
}
