package controlplane

import (
	"fmt"
	"net"
	"strconv"

	"github.com/opzero/opzero/internal/localport"
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

// pickPorts fills every zero port in p with a free one, all different,
// chosen below the kernel's ephemeral range (internal/localport): a port the
// kernel hands out for :0 may be taken by any outgoing connection between
// the pick and the component's bind (kube-controller-manager once failed
// with "address already in use" on a port picked so).
func pickPorts(ports ...*int) error {
	taken := map[int]bool{}
	for _, p := range ports {
		taken[*p] = *p != 0
	}
	for _, p := range ports {
		for try := 0; *p == 0; try++ {
			v, err := localport.Free()
			if err != nil {
				return err
			}
			if !taken[v] {
				taken[v], *p = true, v
			} else if try > 100 {
				return fmt.Errorf("finding %d different free loopback ports: port %d came up again and again", len(ports), v)
			}
		}
	}
	return nil
}
