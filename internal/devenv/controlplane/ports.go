package controlplane

import (
	"fmt"
	"net"
	"strconv"
)

// checkPortFree reports an error that names the component and says what to
// do when port is already taken on the loopback interface.
func checkPortFree(component string, port int) error {
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return fmt.Errorf("port %d for %s is in use: stop what listens there (`ss -ltnp 'sport = :%d'` shows it; "+
			"another control plane? try `opzero controlplane status`) or choose other ports", port, component, port)
	}
	return l.Close()
}

// pickPorts fills every zero port in p with a free one, all different: each
// port's listener stays open until every port is chosen, since the kernel may
// hand a port it just released out again (it did: etcd's client port given to
// kube-controller-manager too, which then failed with "address already in use").
func pickPorts(ports ...*int) error {
	taken := map[int]bool{}
	for _, p := range ports {
		taken[*p] = *p != 0
	}
	var held []net.Listener
	defer func() {
		for _, l := range held {
			l.Close()
		}
	}()
	for _, p := range ports {
		for *p == 0 {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				return fmt.Errorf("finding a free port: %w", err)
			}
			held = append(held, l)
			if v := l.Addr().(*net.TCPAddr).Port; !taken[v] {
				taken[v], *p = true, v
			}
		}
	}
	return nil
}
