package cluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"text/template"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/opzero/opzero/internal/devenv/controlplane"
	"github.com/opzero/opzero/internal/devenv/image"
	"github.com/opzero/opzero/internal/devenv/pinned"
)

// controlPlane starts etcd, kube-apiserver (on HostIP) and
// kube-controller-manager (every default controller) on the host.
func (u *upper) controlPlane(ctx context.Context) error {
	u.c.PlaneDir = filepath.Join(u.c.Dir, "controlplane")
	u.c.save()
	p, err := controlplane.Up(ctx, controlplane.Options{
		Dir: u.c.PlaneDir, BinDir: filepath.Dir(u.bins[pinned.KubeAPIServer]),
		Address: HostIP, Controllers: []string{"*"}, Progress: u.opts.Progress,
		// The API server calls webhooks (Knative's) at their pods' IPs,
		// which the host reaches through the veth, not at ClusterIPs.
		APIServerArgs: []string{"--enable-aggregator-routing=true", "--kubelet-preferred-address-types=InternalIP"},
	})
	if err != nil {
		return err
	}
	u.c.Kubeconfig, u.c.Server, u.c.Config = p.Kubeconfig, p.Server, p.Config
	return nil
}

func (u *upper) sock() string { return u.c.sock() }

// sock is containerd's socket.
func (c *Cluster) sock() string { return filepath.Join(c.Dir, "containerd", "containerd.sock") }

// containerd writes containerd's configuration and starts it in the node's
// namespace.
func (u *upper) containerd(ctx context.Context) error {
	pause, err := image.Tag(u.bins[pinned.Pause])
	if err != nil {
		return err
	}
	u.c.Images["pause"] = fmt.Sprintf("%s/pause:%s", image.Registry, pause)
	cfg := filepath.Join(u.c.Dir, "containerd", "config.toml")
	if err := writeTemplate(cfg, containerdConfig, map[string]string{
		"Dir": filepath.Join(u.c.Dir, "containerd"), "Sock": u.sock(), "Pause": u.c.Images["pause"],
		"CNIBin": cniBinDir, "CNIConf": filepath.Join(u.c.Dir, "cni", "net.d"),
	}); err != nil {
		return err
	}
	if err := writeTemplate(filepath.Join(u.c.Dir, "cni", "net.d", "10-opzero.conflist"), cniConfig, map[string]string{
		"Bridge": bridge, "Subnet": NodePodCIDR, "Gateway": bridgeIP, "IPAMDir": filepath.Join(u.c.Dir, "cni", "ipam"),
	}); err != nil {
		return err
	}
	pr, err := u.start("containerd", NetNS, "--config", cfg)
	if err != nil {
		return err
	}
	if err := u.wait(ctx, "containerd", pr, func(ctx context.Context) error {
		_, err := output(ctx, "", "ctr", "--address", u.sock(), "version")
		return err
	}); err != nil {
		return err
	}
	u.step("containerd ready (pid %d, %s)", pr.PID, u.sock())
	return nil
}

// images builds the cluster's images (pause, CoreDNS, netcheck) from the
// pinned binaries and imports them into containerd's k8s.io namespace.
func (u *upper) images(ctx context.Context) error {
	return u.importImages(ctx, "images.tar",
		image.Spec{Name: "pause", Binary: u.bins[pinned.Pause]},
		image.Spec{Name: "coredns", Binary: u.bins[pinned.CoreDNS]},
		image.Spec{Name: "netcheck", Binary: u.bins[pinned.NetCheck]},
	)
}

// importImages imports specs' images (Cluster.Import) and records each
// reference under its name.
func (u *upper) importImages(ctx context.Context, tarName string, specs ...image.Spec) error {
	built, err := u.c.importImages(ctx, pinned.Resolver{Dir: u.opts.BinDir, Progress: u.opts.Progress}, tarName, specs...)
	if err != nil {
		return err
	}
	refs := make([]string, len(specs))
	for i, s := range specs {
		u.c.Images[s.Name], refs[i] = built[i].Ref, built[i].Ref
	}
	u.step("images imported: %s", strings.Join(refs, ", "))
	return nil
}

// Import builds specs' images, writes them into one tarball in the state
// folder and imports it into the node's containerd (k8s.io namespace, what
// kubelet runs from), as `kind load image-archive` does. It returns the
// references in the order of specs; a pod names them with any pull policy
// but Always, and nothing is pulled.
func (c *Cluster) Import(ctx context.Context, specs ...image.Spec) ([]image.Built, error) {
	return c.importImages(ctx, pinned.Resolver{}, "import.tar", specs...)
}

// importImages writes specs' images with the image builder r finds
// (pinned.ImageBuild) and imports them.
func (c *Cluster) importImages(ctx context.Context, r pinned.Resolver, tarName string, specs ...image.Spec) ([]image.Built, error) {
	tar := filepath.Join(c.Dir, tarName)
	built, err := image.WriteWith(ctx, r, tar, specs...)
	if err != nil {
		return nil, err
	}
	defer os.Remove(tar)
	if err := run(ctx, "", "ctr", "--address", c.sock(), "-n", "k8s.io", "images", "import", tar); err != nil {
		return nil, err
	}
	return built, nil
}

// kubelet creates the node's cgroup, writes kubelet's configuration and
// starts it in the node's namespace, then waits for the node to be Ready.
func (u *upper) kubelet(ctx context.Context) error {
	for _, d := range cgroupDirs() {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("creating the node's cgroup %s: %w", d, err)
		}
	}
	cfg := filepath.Join(u.c.Dir, "kubelet", "config.yaml")
	if err := writeTemplate(cfg, kubeletConfig, map[string]string{
		"NodeIP": NodeIP, "Sock": u.sock(), "DNS": DNSServiceIP, "CgroupRoot": "/" + cgroupName,
		"PodLogs": filepath.Join(u.c.Dir, "pod-logs"), "Plugins": filepath.Join(u.c.Dir, "kubelet", "volume-plugins"),
	}); err != nil {
		return err
	}
	pr, err := u.start(pinned.Kubelet, NetNS, "--config="+cfg, "--kubeconfig="+u.c.Kubeconfig,
		"--root-dir="+filepath.Join(u.c.Dir, "kubelet"), "--cert-dir="+filepath.Join(u.c.Dir, "kubelet", "pki"),
		"--hostname-override="+NodeName, "--node-ip="+NodeIP, "--v=1")
	if err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(u.c.Config)
	if err != nil {
		return err
	}
	if err := u.wait(ctx, "node "+NodeName, pr, func(ctx context.Context) error {
		n, err := cs.CoreV1().Nodes().Get(ctx, NodeName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady {
				if c.Status == corev1.ConditionTrue {
					return nil
				}
				return fmt.Errorf("Ready %s: %s", c.Status, c.Message)
			}
		}
		return fmt.Errorf("no Ready condition yet")
	}); err != nil {
		return err
	}
	u.step("kubelet ready (pid %d): node %s Ready", pr.PID, NodeName)
	return nil
}

// proxyAndScheduler starts kube-proxy (iptables mode, in the node's
// namespace) and kube-scheduler (on the host).
func (u *upper) proxyAndScheduler(ctx context.Context) error {
	cfg := filepath.Join(u.c.Dir, "kube-proxy.yaml")
	if err := writeTemplate(cfg, kubeProxyConfig, map[string]string{
		"Kubeconfig": u.c.Kubeconfig, "PodRange": PodRange, "NodeName": NodeName,
	}); err != nil {
		return err
	}
	proxy, err := u.start(pinned.KubeProxy, NetNS, "--config="+cfg)
	if err != nil {
		return err
	}
	if err := u.wait(ctx, "kube-proxy", proxy, func(ctx context.Context) error {
		out, err := output(ctx, NetNS, "iptables", "-w", "-t", "nat", "-S", "KUBE-SERVICES")
		if err == nil && !strings.Contains(out, "default/kubernetes:https") {
			err = fmt.Errorf("no rule for the kubernetes Service yet")
		}
		return err
	}); err != nil {
		return err
	}
	u.step("kube-proxy ready (pid %d): iptables rules for Services in %s", proxy.PID, NetNS)
	sched, err := u.start(pinned.KubeScheduler, "", "--kubeconfig="+u.c.Kubeconfig, "--leader-elect=false",
		"--bind-address=127.0.0.1", "--secure-port=0")
	if err != nil {
		return err
	}
	u.step("kube-scheduler started (pid %d)", sched.PID)
	return nil
}

func writeTemplate(file, text string, data any) error {
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		return err
	}
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	if err := template.Must(template.New(filepath.Base(file)).Parse(text)).Execute(f, data); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

const containerdConfig = `# containerd for opzero's cluster node: every path under the state folder,
# images imported (nothing pulled), the pause image pinned by tag.
version = 2
root = "{{.Dir}}/root"
state = "{{.Dir}}/state"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper"]

[grpc]
  address = "{{.Sock}}"

[ttrpc]
  address = "{{.Sock}}.ttrpc"

[plugins."io.containerd.internal.v1.opt"]
  path = "{{.Dir}}/opt"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{{.Pause}}"
  netns_mounts_under_state_dir = true
  disable_apparmor = true
  # Where root lacks CAP_SYS_RESOURCE (a sandboxed machine), no container
  # may go below containerd's own oom_score_adj.
  restrict_oom_score_adj = true
  stream_server_address = "127.0.0.1"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{{.CNIBin}}"
    conf_dir = "{{.CNIConf}}"
    max_conf_num = 1
`

// cniConfig: the pods' bridge, no masquerade (nothing is to leave), a
// default route only through the bridge.
const cniConfig = `{
  "cniVersion": "0.4.0",
  "name": "opzero",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "{{.Bridge}}",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": "{{.Subnet}}", "gateway": "{{.Gateway}}"}]],
        "routes": [{"dst": "0.0.0.0/0"}],
        "dataDir": "{{.IPAMDir}}"
      }
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
`

const kubeletConfig = `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: {{.NodeIP}}
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
authentication:
  anonymous:
    enabled: true
  webhook:
    enabled: false
authorization:
  mode: AlwaysAllow
containerRuntimeEndpoint: unix://{{.Sock}}
cgroupDriver: cgroupfs
cgroupRoot: {{.CgroupRoot}}
clusterDNS: [{{.DNS}}]
clusterDomain: cluster.local
resolvConf: ""
failSwapOn: false
failCgroupV1: false
podLogsDir: {{.PodLogs}}
volumePluginDir: {{.Plugins}}
# Imported images are never garbage collected (they cannot be pulled back).
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: 100Mi
  nodefs.available: 1%
  imagefs.available: 1%
  nodefs.inodesFree: 1%
serializeImagePulls: false
`

const kubeProxyConfig = `apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection:
  kubeconfig: {{.Kubeconfig}}
mode: iptables
clusterCIDR: {{.PodRange}}
hostnameOverride: {{.NodeName}}
metricsBindAddress: 127.0.0.1:10249
healthzBindAddress: 127.0.0.1:10256
# Leave the kernel's global conntrack settings alone.
conntrack:
  maxPerCore: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
iptables:
  localhostNodePorts: false
`

func parse(text string) *template.Template { return template.Must(template.New("").Parse(text)) }
