package pinned

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

//go:generate bash gen.sh

//go:embed modules
var modules embed.FS

// The binaries a Resolver finds.
const (
	Etcd                  = "etcd"
	KubeAPIServer         = "kube-apiserver"
	KubeControllerManager = "kube-controller-manager"
	Kubectl               = "kubectl"
	// ApiServerSourceAdapter is Knative's ApiServerSource receive adapter.
	ApiServerSourceAdapter = "apiserver_receive_adapter"
	// PingAdapter is Knative's multi-tenant PingSource adapter.
	PingAdapter = "mtping"
	// OTLPReceiver is the OpenTelemetry Collector's OTLP receiver run on its
	// own, writing what arrives to JSON lines (tools/otelcol): the real
	// collector that tests and `opzero dev --otel` send telemetry to.
	OTLPReceiver = "otlp-receiver"
	// The node of `opzero cluster up`, from the control plane's module.
	Kubelet       = "kubelet"
	KubeProxy     = "kube-proxy"
	KubeScheduler = "kube-scheduler"
	// CoreDNS is CoreDNS with the plugins tools/coredns names, static.
	CoreDNS = "coredns"
	// Pause is the cluster's sandbox image's program, NetCheck the network
	// check its test runs in pods (tools/images), both static.
	Pause    = "pause"
	NetCheck = "netcheck"
	// Traefik is Knative Serving's ingress in the cluster (its Knative
	// provider), static.
	Traefik = "traefik"
	// ImageBuild writes the cluster's images as one docker-archive tarball
	// with go-containerregistry (tools/imagebuild): internal/devenv/image
	// runs it, so that opzero's module requires no go-containerregistry.
	ImageBuild = "imagebuild"
)

// Env is the environment variable naming a folder of pinned binaries.
const Env = "OPZERO_BIN_DIR"

// CRDFolder is the sub-folder of a binaries folder that holds Knative's CRDs.
const CRDFolder = "knative-crds"

// recipe is bumped when the way binaries are built changes (flags, layout),
// so that a new cache folder is used.
const recipe = "1"

// binary is one pinned program: its Go package inside its module and how
// long a build from a cold Go build cache takes on 2 cores.
type binary struct {
	name, pkg string
	minutes   float64
}

// group is binaries built from one pinned tools module.
type group struct {
	name string // "controlplane": stamp .<name>.pins
	// module is the folder under modules/ (and tools/) the binaries are
	// built in; empty means name.
	module   string
	files    []string // module files, relative to modules/<module>, without .txt
	binaries []binary
	// stampAll: the stamp hashes every file, not only go.mod and go.sum
	// (a main.go of ours that changes what is built).
	stampAll bool
	// set is the name `opzero install` knows the group by; empty means
	// name. The cluster set is three groups from three modules.
	set string
	// static builds without cgo: the binaries go into images with no libc.
	static bool
}

func (g *group) mod() string {
	if g.module != "" {
		return g.module
	}
	return g.name
}

func (g *group) setName() string {
	if g.set != "" {
		return g.set
	}
	return g.name
}

var groups = []group{
	{name: "controlplane", files: []string{"go.mod", "go.sum", "etcd/main.go"}, binaries: []binary{
		{Etcd, "./etcd", 1},
		{KubeAPIServer, "k8s.io/kubernetes/cmd/kube-apiserver", 5.5},
		{KubeControllerManager, "k8s.io/kubernetes/cmd/kube-controller-manager", 1.5},
		{Kubectl, "k8s.io/kubernetes/cmd/kubectl", 1},
	}},
	{name: "knative", files: []string{"go.mod", "go.sum"}, binaries: []binary{
		{ApiServerSourceAdapter, "knative.dev/eventing/cmd/apiserver_receive_adapter", 2.5},
		{PingAdapter, "knative.dev/eventing/cmd/mtping", 0.5},
	}},
	{name: "otelcol", files: []string{"go.mod", "go.sum", "main.go"}, stampAll: true, binaries: []binary{
		{OTLPReceiver, ".", 1.5},
	}},
	{name: "node", module: "controlplane", set: "cluster", files: []string{"go.mod", "go.sum", "etcd/main.go"}, binaries: []binary{
		{Kubelet, "k8s.io/kubernetes/cmd/kubelet", 2},
		{KubeProxy, "k8s.io/kubernetes/cmd/kube-proxy", 0.5},
		{KubeScheduler, "k8s.io/kubernetes/cmd/kube-scheduler", 0.5},
	}},
	{name: "coredns", set: "cluster", static: true, stampAll: true, files: []string{"go.mod", "go.sum", "main.go"}, binaries: []binary{
		{CoreDNS, ".", 4},
	}},
	{name: "knative-images", module: "knative", set: "knative-cluster", static: true, files: []string{"go.mod", "go.sum"}, binaries: []binary{
		{"serving-activator", "knative.dev/serving/cmd/activator", 1},
		{"serving-autoscaler", "knative.dev/serving/cmd/autoscaler", 0.5},
		{"serving-controller", "knative.dev/serving/cmd/controller", 1},
		{"serving-webhook", "knative.dev/serving/cmd/webhook", 0.5},
		{"serving-queue", "knative.dev/serving/cmd/queue", 0.5},
		{"eventing-controller", "knative.dev/eventing/cmd/controller", 1},
		{"eventing-webhook", "knative.dev/eventing/cmd/webhook", 0.5},
		{"eventing-mtping", "knative.dev/eventing/cmd/mtping", 0.3},
		{"eventing-jobsink", "knative.dev/eventing/cmd/jobsink", 0.3},
		{"eventing-requestreply", "knative.dev/eventing/cmd/requestreply", 0.3},
		{"eventing-apiserver-receive-adapter", "knative.dev/eventing/cmd/apiserver_receive_adapter", 0.3},
		{"eventing-auth-proxy", "knative.dev/eventing/cmd/auth_proxy", 0.3},
	}},
	{name: "traefik", set: "knative-cluster", static: true, files: []string{"go.mod", "go.sum"}, binaries: []binary{
		{Traefik, "github.com/traefik/traefik/v3/cmd/traefik", 8},
	}},
	{name: "images", set: "cluster", static: true, stampAll: true, files: []string{"go.mod", "go.sum", "pause/main.go", "netcheck/main.go"}, binaries: []binary{
		{Pause, "./pause", 0.2},
		{NetCheck, "./netcheck", 0.3},
	}},
	{name: "imagebuild", set: "cluster", stampAll: true, files: []string{"go.mod", "go.sum", "main.go"}, binaries: []binary{
		{ImageBuild, ".", 0.3},
	}},
}

// kubebuilderAssets are the binaries envtest's KUBEBUILDER_ASSETS holds.
var kubebuilderAssets = []string{Etcd, KubeAPIServer, Kubectl}

// Names lists every pinned binary, control plane first.
func Names() []string {
	var out []string
	for _, g := range groups {
		for _, b := range g.binaries {
			out = append(out, b.name)
		}
	}
	return out
}

func lookup(name string) (*group, *binary, error) {
	for gi := range groups {
		for bi := range groups[gi].binaries {
			if groups[gi].binaries[bi].name == name {
				return &groups[gi], &groups[gi].binaries[bi], nil
			}
		}
	}
	return nil, nil, fmt.Errorf("%q is not one of opzero's pinned binaries (%s)", name, strings.Join(Names(), ", "))
}

// groupByName returns the group called name ("controlplane" or "knative").
func groupByName(name string) (*group, error) {
	for i := range groups {
		if groups[i].name == name {
			return &groups[i], nil
		}
	}
	return nil, fmt.Errorf("%q is not a group of pinned binaries", name)
}

// Sets names the sets `opzero install` knows, in order.
var Sets = []string{"controlplane", "knative", "otelcol", "cluster", "knative-cluster"}

// setGroups returns the groups of a set.
func setGroups(set string) ([]*group, error) {
	var out []*group
	for i := range groups {
		if groups[i].setName() == set {
			out = append(out, &groups[i])
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%q is not a set of pinned binaries: want one of %s", set, strings.Join(Sets, ", "))
	}
	return out, nil
}

// SetOf names the set a pinned binary belongs to: controlplane, knative,
// otelcol or cluster ("" for none).
func SetOf(binary string) string {
	g, _, err := lookup(binary)
	if err != nil {
		return ""
	}
	return g.setName()
}

// file returns a module file of g (e.g. "go.mod").
func (g *group) file(name string) []byte {
	b, err := modules.ReadFile("modules/" + g.mod() + "/" + name + ".txt")
	if err != nil {
		panic(err) // the files are embedded: a missing one is a build mistake
	}
	return b
}

// stamp is the hash of g's go.mod and go.sum, as hack/build-bins.sh wrote
// it to bin/.<group>.pins: binaries carrying it were built from these pins.
func (g *group) stamp() string {
	h := sha256.New()
	h.Write(g.file("go.mod"))
	h.Write(g.file("go.sum"))
	if g.stampAll {
		for _, f := range g.files[2:] {
			h.Write(g.file(f))
		}
	}
	return hex.EncodeToString(h.Sum(nil))
}

func (g *group) stampFile(dir string) string { return filepath.Join(dir, "."+g.name+".pins") }

// require returns the version g's go.mod requires of module path.
func (g *group) require(path string) string {
	for _, line := range strings.Split(string(g.file("go.mod")), "\n") {
		f := strings.Fields(strings.TrimPrefix(strings.TrimSpace(line), "require "))
		if len(f) >= 2 && f[0] == path {
			return f[1]
		}
	}
	return "unknown"
}

// Version names the pins: the Kubernetes and Knative versions and a hash of
// every pinned module file and of how they are built. Any pin change gives
// a new Version, hence a new cache folder.
func Version() string {
	h := sha256.New()
	h.Write([]byte(recipe))
	_ = fs.WalkDir(modules, "modules", func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			b, _ := modules.ReadFile(p)
			fmt.Fprintf(h, "%s %d\n", p, len(b))
			h.Write(b)
		}
		return nil
	})
	cp, _ := groupByName("controlplane")
	kn, _ := groupByName("knative")
	return fmt.Sprintf("k8s-%s-knative-%s-%s", cp.require("k8s.io/kubernetes"), kn.require("knative.dev/eventing"), hex.EncodeToString(h.Sum(nil))[:8])
}

// CacheDir is the versioned user cache: $XDG_CACHE_HOME/opzero/<Version>,
// by default ~/.cache/opzero/<Version>.
func CacheDir() (string, error) {
	d, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("no user cache folder for opzero's pinned binaries (%v): set XDG_CACHE_HOME or HOME, or give --bin-dir / %s", err, Env)
	}
	return filepath.Join(d, "opzero", Version()), nil
}

// executable reports whether path is a regular file with an execute bit.
func executable(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0
}

func isDir(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.IsDir()
}
