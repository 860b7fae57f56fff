package cluster

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// kernelSettings are the global (not per network namespace) settings
// kubelet sets at start; Up records them, Down puts them back.
var kernelSettings = []string{
	"vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops",
	"kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes",
}

// outsidePaths are folders outside the state folder that the node's
// programs create at fixed places (containerd's shim sockets and runc
// state under /run/containerd, libcni's cache, kubelet's container log
// links, ip's /run/netns): those absent before Up are removed by Down.
var outsidePaths = []string{
	"/run/containerd", "/var/lib/cni", "/var/log/containers", "/var/log/pods", "/run/netns",
	"/var/lib/kubelet", "/etc/cni", "/var/lib/containerd", "/opt/containerd",
	"/usr/libexec/kubernetes", "/var/run/kubernetes", "/etc/kubernetes",
}

// record notes the kernel settings and the absent folders before anything
// changes them.
func (u *upper) record() {
	u.c.Sysctls = map[string]string{}
	for _, k := range kernelSettings {
		if b, err := os.ReadFile(filepath.Join("/proc/sys", k)); err == nil {
			u.c.Sysctls[k] = strings.TrimSpace(string(b))
		}
	}
	for _, p := range append(outsidePaths, filepath.Dir(u.c.Dir)) {
		if _, err := os.Lstat(p); os.IsNotExist(err) {
			u.c.Created = append(u.c.Created, p)
		}
	}
}

// network lays the node's network (see the package doc): host blackholes
// first, then the namespace, the veth pair, the node's blackholes, its
// forwarding and filtering, and the host's route to the node's pods.
func (u *upper) network(ctx context.Context) error {
	u.step("network: namespace %s, veth %s (%s) <-> %s (%s), pods %s, Services %s, blackholes beyond them", NetNS, hostVeth, HostIP, nodeVeth, NodeIP, NodePodCIDR, ServiceRange)
	for _, r := range [][]string{{"blackhole", PodRange}, {"blackhole", ServiceRange}} {
		if err := u.hostRoute(ctx, r...); err != nil {
			return err
		}
	}
	link := fmt.Sprintf("/%d", linkPrefix)
	for _, cmd := range [][]string{
		{"ip", "netns", "add", NetNS},
		{"ip", "link", "add", hostVeth, "type", "veth", "peer", "name", nodeVeth, "netns", NetNS},
		{"ip", "addr", "add", HostIP + link, "dev", hostVeth},
		{"ip", "link", "set", hostVeth, "up"},
	} {
		if err := run(ctx, "", cmd...); err != nil {
			return err
		}
	}
	for _, cmd := range [][]string{
		{"ip", "link", "set", "lo", "up"},
		{"ip", "addr", "add", NodeIP + link, "dev", nodeVeth},
		{"ip", "link", "set", nodeVeth, "up"},
		{"ip", "route", "add", "blackhole", PodRange},
		{"ip", "route", "add", "blackhole", ServiceRange},
		// Per-namespace settings: routing between the pods (through
		// Services) and iptables on bridged traffic (kube-proxy's DNAT).
		{"sysctl", "-qw", "net.ipv4.ip_forward=1"},
		{"sysctl", "-qw", "net.bridge.bridge-nf-call-iptables=1"},
		{"sysctl", "-qw", "net.bridge.bridge-nf-call-ip6tables=1"},
		// Forward only pod <-> pod and pod <-> the API server's host end.
		{"iptables", "-w", "-N", "OPZERO-FORWARD"},
		{"iptables", "-w", "-A", "OPZERO-FORWARD", "-i", bridge, "-o", bridge, "-j", "RETURN"},
		{"iptables", "-w", "-A", "OPZERO-FORWARD", "-i", bridge, "-o", nodeVeth, "-d", HostIP, "-j", "RETURN"},
		{"iptables", "-w", "-A", "OPZERO-FORWARD", "-i", nodeVeth, "-o", bridge, "-s", HostIP, "-j", "RETURN"},
		{"iptables", "-w", "-A", "OPZERO-FORWARD", "-j", "DROP"},
		{"iptables", "-w", "-I", "FORWARD", "1", "-j", "OPZERO-FORWARD"},
		// Pods must not reach kubelet's API (it allows anonymous access).
		{"iptables", "-w", "-N", "OPZERO-INPUT"},
		{"iptables", "-w", "-A", "OPZERO-INPUT", "-s", PodRange, "-p", "tcp", "--dport", "10250", "-j", "DROP"},
		{"iptables", "-w", "-I", "INPUT", "1", "-j", "OPZERO-INPUT"},
		{"ip6tables", "-w", "-P", "FORWARD", "DROP"},
	} {
		if err := run(ctx, NetNS, cmd...); err != nil {
			return err
		}
	}
	return u.hostRoute(ctx, NodePodCIDR, "via", NodeIP, "dev", hostVeth)
}

// hostRoute adds a route on the host and records it for Down.
func (u *upper) hostRoute(ctx context.Context, route ...string) error {
	if err := run(ctx, "", append([]string{"ip", "route", "add"}, route...)...); err != nil {
		return err
	}
	u.c.HostRoutes = append(u.c.HostRoutes, route)
	return u.c.save()
}

// run runs a command on the host, or in the named network namespace (with
// `ip netns exec`), and returns its output in the error.
func run(ctx context.Context, netns string, argv ...string) error {
	_, err := output(ctx, netns, argv...)
	return err
}

func output(ctx context.Context, netns string, argv ...string) (string, error) {
	if netns != "" {
		argv = append([]string{"ip", "netns", "exec", netns}, argv...)
	}
	out, err := exec.CommandContext(ctx, argv[0], argv[1:]...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s: %w: %s", strings.Join(argv, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// leftovers lists the commands that remove what a cluster killed without
// Down left of its network on the host (its namespace, its veth, its
// routes), given `ip route show` and `ip -o link show` of the host: Up
// refuses to start over them, naming these commands.
func leftovers(routes, links string, netnsExists bool) []string {
	var out []string
	if netnsExists {
		out = append(out, "ip netns delete "+NetNS)
	}
	for _, l := range strings.Split(links, "\n") {
		if f := strings.Fields(l); len(f) > 1 && strings.SplitN(strings.TrimSuffix(f[1], ":"), "@", 2)[0] == hostVeth {
			out = append(out, "ip link delete "+hostVeth)
		}
	}
	for _, l := range strings.Split(routes, "\n") {
		f := strings.Fields(l)
		switch {
		case len(f) >= 2 && f[0] == "blackhole" && (f[1] == PodRange || f[1] == ServiceRange):
			out = append(out, "ip route del blackhole "+f[1])
		case len(f) >= 3 && f[0] == NodePodCIDR && f[1] == "via" && f[2] == NodeIP:
			out = append(out, "ip route del "+NodePodCIDR)
		}
	}
	return out
}

// checkLeftovers fails if a cluster killed without Down left its network.
func checkLeftovers(ctx context.Context, dir string) error {
	routes, err := output(ctx, "", "ip", "route", "show")
	if err != nil {
		return err
	}
	links, err := output(ctx, "", "ip", "-o", "link", "show")
	if err != nil {
		return err
	}
	_, statErr := os.Stat(filepath.Join("/run/netns", NetNS))
	cmds := leftovers(routes, links, statErr == nil)
	if len(cmds) == 0 {
		return nil
	}
	return fmt.Errorf("the host has the network of a cluster not recorded in %s (a cluster killed without `opzero cluster down`, or one of another state folder: `opzero cluster down --dir ...`); if none runs, remove it with:\n  %s",
		dir, strings.Join(cmds, "\n  "))
}
