package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/opzero/opzero/internal/testkit"
)

// e2eEnv turns on TestCluster: it starts a real node (root, minutes, the
// machine's network namespaces and cgroups), so `make test` leaves it out
// and `make e2e-cluster` sets it.
const e2eEnv = "OPZERO_E2E_CLUSTER"

// knativeEnv adds Knative Serving and Eventing to TestCluster (make
// e2e-cluster-knative).
const knativeEnv = "OPZERO_E2E_KNATIVE"

// TestCluster starts the cluster, shows CoreDNS Running, reaches a pod of a
// locally built image through a ClusterIP Service by its DNS name from
// another pod (and sees a name outside the cluster refused), then takes the
// cluster down and finds the machine as it was.
func TestCluster(t *testing.T) {
	if os.Getenv(e2eEnv) == "" {
		t.Skipf("set %s=1 (make e2e-cluster) to start a real one-node cluster; it needs root", e2eEnv)
	}
	if err := Check(); errors.Is(err, ErrUnsupported) {
		t.Skipf("this machine cannot run the cluster: %v", err)
	} else if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "cluster")
	before := snapshot(t, dir)
	t0 := time.Now()
	withKnative := os.Getenv(knativeEnv) != ""
	c, err := Up(ctx, Options{Dir: dir, Progress: testkit.LogWriter(t), Knative: withKnative, Timeout: 5 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("cluster up in %s", time.Since(t0).Round(time.Second))
	downed := false
	defer func() {
		if !downed {
			if err := Down(dir, testkit.LogWriter(t)); err != nil {
				t.Error(err)
			}
		}
	}()
	cs, err := kubernetes.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("kubectl get pods -A:\n%s", kubectl(t, c, "get", "pods", "-A", "-o", "wide"))
	dns, err := cs.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: "k8s-app=kube-dns"})
	if err != nil || len(dns.Items) != 1 || dns.Items[0].Status.Phase != corev1.PodRunning {
		t.Fatalf("CoreDNS pods: %v, %+v", err, dns)
	}

	t.Run("service by DNS name from another pod", func(t *testing.T) {
		checkService(t, ctx, cs, c.Images["netcheck"])
	})

	if withKnative {
		t.Run("a Knative Service is Ready and answers through Traefik", func(t *testing.T) {
			checkKnativeService(t, ctx, cs, c)
		})
	}

	t.Run("down leaves nothing behind", func(t *testing.T) {
		downed = true
		if err := Down(dir, testkit.LogWriter(t)); err != nil {
			t.Fatal(err)
		}
		after := snapshot(t, dir)
		for k, v := range before {
			if after[k] != v {
				t.Errorf("%s after down:\n%s\nbefore up:\n%s", k, after[k], v)
			}
		}
	})
}

// checkKnativeService applies a Knative Service of the netcheck image
// (through Serving's real webhooks), waits until it is Ready (Serving made
// the revision's Deployment, its pod with queue-proxy runs, Traefik
// configured the route) and reaches it by its cluster-local URL from
// another pod, through Traefik.
func checkKnativeService(t *testing.T, ctx context.Context, cs kubernetes.Interface, c *Cluster) {
	ksvc := fmt.Sprintf(`apiVersion: serving.knative.dev/v1
kind: Service
metadata: {name: hello, namespace: default}
spec:
  template:
    spec:
      containers:
      - image: %s
        args: [serve, ":8080"]
        ports: [{containerPort: 8080}]
`, c.Images["netcheck"])
	cmd := exec.Command(c.Kubectl, "--kubeconfig", c.Kubeconfig, "apply", "-f", "-")
	cmd.Stdin = strings.NewReader(ksvc)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("kubectl apply: %v: %s", err, out)
	}
	defer func() {
		t.Logf("kubectl get pods -A:\n%s", kubectl(t, c, "get", "pods", "-A"))
		t.Logf("kubectl get ksvc,revisions,kingress:\n%s", kubectl(t, c, "get", "ksvc,revisions,ingresses.networking.internal.knative.dev"))
	}()
	testkit.Eventually(t, 3*time.Minute, "Knative Service hello Ready", func(ctx context.Context) (bool, error) {
		out, err := exec.CommandContext(ctx, c.Kubectl, "--kubeconfig", c.Kubeconfig, "get", "ksvc", "hello",
			"-o", `jsonpath={.status.conditions[?(@.type=="Ready")].status}`).CombinedOutput()
		return err == nil && string(out) == "True", fmt.Errorf("%v: %s", err, out)
	})
	logs := runClient(t, ctx, cs, "ksvc-client", c.Images["netcheck"], "get", "http://hello.default.svc.cluster.local/")
	if !strings.Contains(logs, ": netcheck hello-00001-deployment-") {
		t.Errorf("the Knative Service answered %q, want its pod's name", logs)
	}

	// Eventing with OIDC on: a PingSource to the Service gets its OIDC
	// identity (a ServiceAccount whose tokens it sends) and is Ready.
	ping := `apiVersion: sources.knative.dev/v1
kind: PingSource
metadata: {name: tick, namespace: default}
spec:
  schedule: "0 0 1 1 *"
  sink: {ref: {apiVersion: serving.knative.dev/v1, kind: Service, name: hello}}
`
	cmd = exec.Command(c.Kubectl, "--kubeconfig", c.Kubeconfig, "apply", "-f", "-")
	cmd.Stdin = strings.NewReader(ping)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("kubectl apply: %v: %s", err, out)
	}
	testkit.Eventually(t, 2*time.Minute, "PingSource tick Ready with its OIDC identity", func(ctx context.Context) (bool, error) {
		out, err := exec.CommandContext(ctx, c.Kubectl, "--kubeconfig", c.Kubeconfig, "get", "pingsource", "tick", "-o",
			`jsonpath={.status.conditions[?(@.type=="OIDCIdentityCreated")].status} {.status.conditions[?(@.type=="Ready")].status} {.status.auth.serviceAccountName}`).CombinedOutput()
		return err == nil && string(out) == "True True tick-oidc-sources.knative.dev-pingsource", fmt.Errorf("%v: %s", err, out)
	})

	// Knative's autoscaler takes the idle revision to zero pods (its
	// defaults: a 60 s stable window, then a 30 s grace period), and the
	// next request starts one again through the activator: a real cold
	// start.
	idle := time.Now()
	sel := metav1.ListOptions{LabelSelector: "serving.knative.dev/revision=hello-00001"}
	testkit.Eventually(t, 4*time.Minute, "revision hello-00001 at zero pods", func(ctx context.Context) (bool, error) {
		pods, err := cs.CoreV1().Pods("default").List(ctx, sel)
		if err != nil {
			return false, err
		}
		return len(pods.Items) == 0, fmt.Errorf("%d pods", len(pods.Items))
	})
	t.Logf("scaled to zero %s after the last request", time.Since(idle).Round(time.Second))
	logs = runClient(t, ctx, cs, "ksvc-cold", c.Images["netcheck"], "get", "http://hello.default.svc.cluster.local/")
	if !strings.Contains(logs, ": netcheck hello-00001-deployment-") {
		t.Errorf("the Knative Service at zero answered %q, want its new pod's name", logs)
	}
}

// runClient runs a netcheck pod with args to its end and returns its log;
// it fails t unless the pod succeeded.
func runClient(t *testing.T, ctx context.Context, cs kubernetes.Interface, name, img string, args ...string) string {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{
			{Name: "netcheck", Image: img, ImagePullPolicy: corev1.PullNever, Args: args},
		}},
	}
	if _, err := cs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var phase corev1.PodPhase
	testkit.Eventually(t, 2*time.Minute, "pod "+name+" ends", func(ctx context.Context) (bool, error) {
		p, err := cs.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		phase = p.Status.Phase
		return phase == corev1.PodSucceeded || phase == corev1.PodFailed, fmt.Errorf("pod %s %s", name, phase)
	})
	b, err := cs.CoreV1().Pods("default").GetLogs(name, &corev1.PodLogOptions{}).DoRaw(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: %s", name, b)
	if phase != corev1.PodSucceeded {
		t.Fatalf("pod %s %s", name, phase)
	}
	return string(b)
}

func checkService(t *testing.T, ctx context.Context, cs kubernetes.Interface, img string) {
	ns := "default"
	web := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Labels: map[string]string{"app": "web"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "web", Image: img, ImagePullPolicy: corev1.PullNever, Args: []string{"serve", ":8080"},
		}}},
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "web"},
			Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}}},
	}
	client := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "client"},
		Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{
			{Name: "get", Image: img, ImagePullPolicy: corev1.PullNever, Args: []string{"get", "http://web.default.svc.cluster.local/"}},
			{Name: "outside", Image: img, ImagePullPolicy: corev1.PullNever, Args: []string{"unresolvable", "example.com"}},
		}},
	}
	if _, err := cs.CoreV1().Pods(ns).Create(ctx, web, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	created, err := cs.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Pods(ns).Create(ctx, client, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var phase corev1.PodPhase
	testkit.Eventually(t, 2*time.Minute, "the client pod ends", func(ctx context.Context) (bool, error) {
		p, err := cs.CoreV1().Pods(ns).Get(ctx, "client", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if phase = p.Status.Phase; phase == corev1.PodSucceeded || phase == corev1.PodFailed {
			return true, nil
		}
		return false, fmt.Errorf("client pod %s", phase)
	})
	logs := map[string]string{}
	for _, c := range []string{"get", "outside"} {
		b, err := cs.CoreV1().Pods(ns).GetLogs("client", &corev1.PodLogOptions{Container: c}).DoRaw(ctx)
		if err != nil {
			t.Fatal(err)
		}
		logs[c] = string(b)
		t.Logf("client/%s: %s", c, b)
	}
	if phase != corev1.PodSucceeded {
		t.Fatalf("client pod %s", phase)
	}
	if want := "-> [" + created.Spec.ClusterIP + "]) in "; !strings.Contains(logs["get"], want) || !strings.Contains(logs["get"], "ms: netcheck web") {
		t.Errorf("client/get said %q, want the Service's ClusterIP and the web pod's answer (%q)", logs["get"], want)
	}
	if !strings.Contains(logs["outside"], "example.com does not resolve") {
		t.Errorf("client/outside said %q, want example.com unresolved (no forwarder)", logs["outside"])
	}
}

// snapshot is what Down must leave as Up found it: host routes, links,
// network namespaces, mounts, host iptables rules, the node's cgroups,
// folders the node's programs make, kernel settings, processes of the
// node's binaries, the state folder.
func snapshot(t *testing.T, dir string) map[string]string {
	t.Helper()
	cmd := func(argv ...string) string {
		out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v: %s", strings.Join(argv, " "), err, out)
		}
		return string(out)
	}
	s := map[string]string{
		"routes":   cmd("ip", "route", "show", "table", "all"),
		"links":    cmd("ip", "-o", "link", "show"),
		"netns":    cmd("ip", "netns", "list"),
		"iptables": stripComments(cmd("iptables-save")),
	}
	mounts, _ := os.ReadFile("/proc/self/mountinfo")
	var mps []string
	for _, l := range strings.Split(string(mounts), "\n") {
		if f := strings.Fields(l); len(f) > 4 {
			mps = append(mps, f[4])
		}
	}
	slices.Sort(mps)
	s["mounts"] = strings.Join(mps, "\n")
	var exist []string
	for _, p := range append(slices.Clone(outsidePaths), dir, "/run/netns/"+NetNS) {
		if _, err := os.Lstat(p); err == nil {
			exist = append(exist, p)
		}
	}
	exist = append(exist, cgroupExisting()...)
	s["paths"] = strings.Join(exist, "\n")
	for _, k := range kernelSettings {
		b, _ := os.ReadFile(filepath.Join("/proc/sys", k))
		s["sysctl "+k] = string(b)
	}
	var procs []string
	for _, name := range []string{"containerd", "containerd-shim-runc-v2", "kubelet", "kube-proxy", "kube-scheduler", "coredns", "netcheck", "pause"} {
		if out, err := exec.Command("pgrep", "-x", name).Output(); err == nil {
			procs = append(procs, name+": "+strings.TrimSpace(string(out)))
		}
	}
	s["processes"] = strings.Join(procs, "\n")
	return s
}

func cgroupExisting() []string {
	var out []string
	for _, d := range cgroupDirs() {
		if _, err := os.Stat(d); err == nil {
			out = append(out, d)
		}
	}
	return out
}

// stripComments drops iptables-save's comment lines (they carry times).
func stripComments(s string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if !strings.HasPrefix(l, "#") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

func kubectl(t *testing.T, c *Cluster, args ...string) string {
	t.Helper()
	out, err := exec.Command(c.Kubectl, append([]string{"--kubeconfig", c.Kubeconfig}, args...)...).CombinedOutput()
	if err != nil {
		t.Errorf("kubectl %s: %v", strings.Join(args, " "), err)
	}
	return string(out)
}

// TestLeftovers: what a killed cluster leaves of its network on the host
// is named with the command removing it; other routes and links are not.
func TestLeftovers(t *testing.T) {
	routes := "default via 10.0.0.1 dev eth0\nblackhole 10.244.0.0/16 \nblackhole 10.96.0.0/16 \nblackhole 192.168.0.0/16 \n10.244.0.0/24 via 10.243.0.2 dev opz-host \n10.0.0.0/24 dev eth0 proto kernel scope link src 10.0.0.5\n"
	links := "1: lo: <LOOPBACK,UP,LOWER_UP> mtu 65536\n5: opz-host@if2: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 1500\n6: opz-hostile: <BROADCAST> mtu 1500\n"
	got := leftovers(routes, links, true)
	want := []string{"ip netns delete opzero-node", "ip link delete opz-host", "ip route del blackhole 10.244.0.0/16", "ip route del blackhole 10.96.0.0/16", "ip route del 10.244.0.0/24"}
	if !slices.Equal(got, want) {
		t.Fatalf("leftovers:\n%q\nwant\n%q", got, want)
	}
	if got := leftovers("default via 10.0.0.1 dev eth0\n", "1: lo: <LOOPBACK>\n", false); len(got) != 0 {
		t.Fatalf("a clean host: %q, want nothing", got)
	}
}
