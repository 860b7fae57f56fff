package cluster

import (
	"context"
	_ "embed"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// cniPlugins are the CNI plugins the node uses, from Debian's
// containernetworking-plugins.
var cniPlugins = []string{"bridge", "host-local", "loopback", "portmap"}

const cniBinDir = "/usr/lib/cni"

// commands are the programs the node runs or the cluster's setup calls.
var commands = []string{"containerd", "containerd-shim-runc-v2", "ctr", "runc", "iptables", "ip"}

// Check reports, wrapping ErrUnsupported, why this machine or user cannot
// run the cluster: not root, a kernel without network namespaces, veth,
// bridge netfilter or overlayfs, no cgroups; or, without wrapping it, which
// node software is missing (`opzero install cluster` installs it).
func Check() error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("%w: it needs root (network namespaces, mounts, cgroups, iptables)", ErrUnsupported)
	}
	for _, c := range []struct{ path, what string }{
		{"/proc/self/ns/net", "network namespaces"},
		{"/proc/sys/net/bridge/bridge-nf-call-iptables", "bridge netfilter (br_netfilter)"},
		{"/sys/fs/cgroup", "cgroups"},
	} {
		if _, err := os.Stat(c.path); err != nil {
			return fmt.Errorf("%w: the kernel lacks %s (%s)", ErrUnsupported, c.what, c.path)
		}
	}
	fs, err := os.ReadFile("/proc/filesystems")
	if err != nil || !strings.Contains(string(fs), "\toverlay\n") {
		return fmt.Errorf("%w: the kernel lacks overlayfs (containerd's snapshotter)", ErrUnsupported)
	}
	var missing []string
	for _, c := range commands {
		if _, err := exec.LookPath(c); err != nil {
			missing = append(missing, c)
		}
	}
	for _, p := range cniPlugins {
		if _, err := os.Stat(filepath.Join(cniBinDir, p)); err != nil {
			missing = append(missing, filepath.Join(cniBinDir, p))
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("the node's software is missing (%s): run `opzero install cluster` as root (Debian's containerd, runc, containernetworking-plugins, iptables)", strings.Join(missing, ", "))
	}
	return nil
}

// InstallDeps runs the embedded install-deps.sh: Debian's containerd,
// runc, CNI plugins and iptables when a command is missing (as root).
func InstallDeps(ctx context.Context, out io.Writer) error {
	cmd := exec.CommandContext(ctx, "bash", "-s")
	cmd.Stdin = strings.NewReader(installDeps)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("installing the node's software (containerd, runc, CNI plugins, iptables): %w", err)
	}
	return nil
}

//go:embed install-deps.sh
var installDeps string
