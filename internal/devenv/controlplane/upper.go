package controlplane

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/opzero/opzero/internal/devenv/pinned"
)

// kcmControllers are the kube-controller-manager controllers the plane runs:
// what operators rely on without a kubelet or scheduler, and the
// aggregation of ClusterRoles (the bootstrap view/edit/admin roles, and the
// opzero hub's role, which gathers each operator's read rules).
var kcmControllers = []string{
	"garbagecollector", "deployment", "replicaset", "namespace", "serviceaccount", "serviceaccount-token",
	"clusterrole-aggregation",
}

// upper carries one Up from step to step.
type upper struct {
	opts                 Options
	plane                *Plane
	etcd, apiserver, kcm string // binary paths
	adminToken, kcmToken string
	saKey, saPub, tokens string
	logs                 string
}

func newUpper(ctx context.Context, dir string, opts Options) (*upper, error) {
	bins := pinned.Resolver{Dir: opts.BinDir, Progress: opts.Progress} // a build is reported even without Progress (os.Stderr)
	if opts.Progress == nil {
		opts.Progress = io.Discard
	}
	if opts.StartTimeout == 0 {
		opts.StartTimeout = time.Minute
	}
	u := &upper{opts: opts, plane: &Plane{State: State{Dir: dir}}}
	names := []string{pinned.Etcd, pinned.KubeAPIServer}
	if !opts.NoControllerManager {
		names = append(names, pinned.KubeControllerManager)
	}
	paths, err := bins.Find(ctx, names...)
	if err != nil {
		return nil, err
	}
	u.etcd, u.apiserver = paths[0], paths[1]
	if !opts.NoControllerManager {
		u.kcm = paths[2]
	}
	for name, port := range map[string]int{"kube-apiserver": opts.APIServerPort, "etcd": opts.EtcdPort,
		"etcd peer": opts.EtcdPeerPort, "kube-controller-manager": opts.ControllerManagerPort} {
		if port != 0 {
			if err := checkPortFree(name, port); err != nil {
				return nil, err
			}
		}
	}
	o := &u.opts
	if err := pickPorts(&o.APIServerPort, &o.EtcdPort, &o.EtcdPeerPort, &o.ControllerManagerPort); err != nil {
		return nil, err
	}
	u.logs = filepath.Join(dir, "logs")
	if err := os.MkdirAll(u.logs, 0o755); err != nil {
		return nil, fmt.Errorf("creating the state folder: %w", err)
	}
	return u, u.writeSecrets(dir)
}

func (u *upper) writeSecrets(dir string) (err error) {
	if u.saKey, u.saPub, err = writeServiceAccountKeys(dir); err != nil {
		return err
	}
	if u.adminToken, err = randomToken(); err != nil {
		return err
	}
	if u.kcmToken, err = randomToken(); err != nil {
		return err
	}
	u.tokens, err = writeTokenFile(dir, u.adminToken, u.kcmToken)
	return err
}

// start launches one component and records it in the plane at once, so a
// failure later in Up still stops it.
func (u *upper) start(name, path string, args ...string) (*Process, time.Time, error) {
	fmt.Fprintf(u.opts.Progress, "  starting %s ...\n", name)
	pr, err := startProcess(name, path, args, filepath.Join(u.logs, name+".log"), u.opts.DieWithParent)
	if err != nil {
		return nil, time.Time{}, err
	}
	u.plane.Processes = append(u.plane.Processes, pr)
	return pr, time.Now(), nil
}

func (u *upper) ready(pr *Process, t0 time.Time, where string) {
	fmt.Fprintf(u.opts.Progress, "  %s ready in %.1fs (pid %d, %s)\n", pr.Name, time.Since(t0).Seconds(), pr.PID, where)
}

func (u *upper) startEtcd(ctx context.Context) error {
	client, peer := url("http", u.opts.EtcdPort, ""), url("http", u.opts.EtcdPeerPort, "")
	pr, t0, err := u.start("etcd", u.etcd,
		"--name=opzero", "--data-dir="+filepath.Join(u.plane.Dir, "etcd"),
		"--listen-client-urls="+client, "--advertise-client-urls="+client,
		"--listen-peer-urls="+peer, "--initial-advertise-peer-urls="+peer,
		"--initial-cluster=opzero="+peer, "--unsafe-no-fsync", "--log-level=warn",
		"--quota-backend-bytes=8589934592") // 8 GiB, etcd's suggested maximum: `make bench` keeps 1M Wakeups (~1.5 GiB; the default quota is 2 GiB)
	if err != nil {
		return err
	}
	u.plane.EtcdURL = client
	if err := waitHTTP(ctx, pr, client+"/health", "", u.opts.StartTimeout); err != nil {
		return err
	}
	u.ready(pr, t0, client)
	return nil
}

func (u *upper) startAPIServer(ctx context.Context) error {
	port := u.opts.APIServerPort
	addr := u.opts.Address
	if addr == "" {
		addr = "127.0.0.1"
	}
	server := fmt.Sprintf("https://%s:%d", addr, port)
	certs := filepath.Join(u.plane.Dir, "certs")
	args := []string{
		"--etcd-servers=" + u.plane.EtcdURL,
		fmt.Sprintf("--secure-port=%d", port), "--bind-address=" + addr, "--advertise-address=" + addr,
		"--cert-dir=" + certs, "--token-auth-file=" + u.tokens, "--authorization-mode=RBAC",
		"--service-account-issuer=" + server, "--service-account-key-file=" + u.saPub,
		"--service-account-signing-key-file=" + u.saKey,
		"--service-cluster-ip-range=10.96.0.0/16", "--allow-privileged=true", fmt.Sprintf("--profiling=%t", u.opts.Profiling)}
	pr, t0, err := u.start("kube-apiserver", u.apiserver, append(args, u.opts.APIServerArgs...)...)
	if err != nil {
		return err
	}
	if err := waitHTTP(ctx, pr, server+"/readyz", u.adminToken, u.opts.StartTimeout); err != nil {
		return err
	}
	u.plane.Server, u.plane.Issuer = server, server
	u.plane.Kubeconfig = filepath.Join(u.plane.Dir, "kubeconfig")
	ca := filepath.Join(certs, "apiserver.crt")
	if err := writeKubeconfig(u.plane.Kubeconfig, server, ca, u.adminToken); err != nil {
		return err
	}
	if u.plane.Config, err = clientcmd.BuildConfigFromFlags("", u.plane.Kubeconfig); err != nil {
		return err
	}
	u.ready(pr, t0, server)
	return nil
}

func (u *upper) startControllerManager(ctx context.Context) error {
	if u.opts.NoControllerManager {
		return nil
	}
	kubeconfig := filepath.Join(u.plane.Dir, "kube-controller-manager.kubeconfig")
	ca := filepath.Join(u.plane.Dir, "certs", "apiserver.crt")
	if err := writeKubeconfig(kubeconfig, u.plane.Server, ca, u.kcmToken); err != nil {
		return err
	}
	controllers := kcmControllers
	if len(u.opts.Controllers) > 0 {
		controllers = u.opts.Controllers
	}
	pr, t0, err := u.start("kube-controller-manager", u.kcm,
		"--kubeconfig="+kubeconfig, "--controllers="+strings.Join(controllers, ","),
		"--service-account-private-key-file="+u.saKey, "--root-ca-file="+ca,
		"--leader-elect=false", "--use-service-account-credentials=false",
		fmt.Sprintf("--secure-port=%d", u.opts.ControllerManagerPort), "--bind-address=127.0.0.1")
	if err != nil {
		return err
	}
	// Ready means controllers run: the serviceaccount controller has made
	// the default ServiceAccount of namespace default.
	sa := u.plane.Server + "/api/v1/namespaces/default/serviceaccounts/default"
	if err := waitHTTP(ctx, pr, sa, u.adminToken, u.opts.StartTimeout); err != nil {
		return err
	}
	u.ready(pr, t0, fmt.Sprintf("controllers %s", strings.Join(controllers, ",")))
	return nil
}
