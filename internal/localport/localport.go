// Package localport picks loopback ports for processes that bind them
// later (a child given --health-addr=127.0.0.1:<port>, restarted on the
// same port).
//
// A port the kernel picks for a listener on :0 comes from its ephemeral
// range, the one outgoing connections take their local ports from: between
// the pick and the child's bind, or before the child's restart, any
// connection made on the machine (a watch, a client's keep-alive) may take
// it, and the bind fails with EADDRINUSE for as long as that connection
// lives. Free picks below the ephemeral range instead, where connect never
// goes, and checks that the port is free now.
package localport

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
)

// Below the ephemeral range and above the ports servers usually take;
// under 30000, where a cluster's NodePorts start.
const (
	low  = 20000
	high = 30000
)

// Free returns a loopback TCP port outside the kernel's ephemeral range
// that no socket holds now; where that range leaves no room, a port the
// kernel picks (as 127.0.0.1:0).
func Free() (int, error) {
	if lo, hi := window(); lo < hi {
		if p, ok := pick(lo, hi, 64, bindable); ok {
			return p, nil
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("finding a free loopback port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// window is [low, high) less the ephemeral range's part of it.
func window() (int, int) {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return low, high // not Linux: no range to avoid is known
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 0, 0
	}
	eLo, err1 := strconv.Atoi(f[0])
	eHi, err2 := strconv.Atoi(f[1])
	if err1 != nil || err2 != nil {
		return 0, 0
	}
	lo, hi := low, high
	switch {
	case eHi < lo || eLo >= hi: // apart
	case eLo > lo:
		hi = eLo
	default:
		lo = max(lo, eHi+1)
	}
	return lo, hi
}

// pick tries up to n random ports of [lo, hi) with free.
func pick(lo, hi, n int, free func(int) bool) (int, bool) {
	for range n {
		if p := lo + rand.IntN(hi-lo); free(p) {
			return p, true
		}
	}
	return 0, false
}

func bindable(port int) bool {
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return false
	}
	l.Close()
	return true
}
