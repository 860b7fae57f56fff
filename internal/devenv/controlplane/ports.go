package controlplane

import (
	"fmt"
	"net"
	"strconv"
)

// freePort asks the kernel for a free TCP port on the loopback interface.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("finding a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

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

// pickPorts fills every zero port in p with a free one.
func pickPorts(ports ...*int) error {
	for _, p := range ports {
		if *p != 0 {
			continue
		}
		v, err := freePort()
		if err != nil {
			return err
		}
		*p = v
	}
	return nil
}
