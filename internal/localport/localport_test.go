package localport

import (
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
)

// TestFreeIsOutsideTheEphemeralRange: the port is free (it binds) and
// outside the range the kernel gives connections their local ports from.
func TestFreeIsOutsideTheEphemeralRange(t *testing.T) {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		t.Skip("no ephemeral range to read:", err)
	}
	f := strings.Fields(string(b))
	eLo, _ := strconv.Atoi(f[0])
	eHi, _ := strconv.Atoi(f[1])
	for range 20 {
		p, err := Free()
		if err != nil {
			t.Fatal(err)
		}
		if lo, hi := window(); lo < hi && p >= eLo && p <= eHi {
			t.Fatalf("port %d is in the ephemeral range %d-%d", p, eLo, eHi)
		}
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			t.Fatalf("port %d does not bind: %v", p, err)
		}
		l.Close()
	}
}

// TestPickSkipsHeldPorts: a port a socket holds is never picked.
func TestPickSkipsHeldPorts(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	held := l.Addr().(*net.TCPAddr).Port
	for range 50 {
		if p, ok := pick(held, held+1, 3, bindable); ok {
			t.Fatalf("picked port %d, which a listener holds", p)
		}
	}
	if _, ok := pick(held, held+1, 3, func(int) bool { return true }); !ok {
		t.Fatal("a free port was not picked")
	}
}
