package cluster

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/opzero/opzero/internal/devenv/image"
	"github.com/opzero/opzero/internal/devenv/pinned"
)

// knativeNamespaces are where Knative Serving and Eventing run.
var knativeNamespaces = []string{"knative-serving", "knative-eventing"}

// knativeSources are the release YAMLs of Knative Serving and Eventing
// core: each module's config folder as the release is made from it.
// Serving's core links Knative networking's CRDs and config-network and
// the caching Image CRD, Eventing's the ConfigMaps naming the images of
// eventing-integrations (which only IntegrationSources and EventTransforms
// use, never pulled here); a Go module download has no links, so they are
// read from where the links point.
var knativeSources = []struct{ mod, dir string }{
	{"knative.dev/serving", "config/core"},
	{"knative.dev/networking", "config"},
	{"knative.dev/caching", "config"},
	{"knative.dev/eventing", "config/core"},
	{"knative.dev/eventing", "third_party/eventing-integrations-latest"},
}

// koRef matches the image references of Knative's YAMLs: ko://<package>.
var koRef = regexp.MustCompile(`ko://knative\.dev/(serving|eventing)/cmd/([a-z_]+)`)

// knativeImageName is the pinned binary (and image) of a Knative command:
// knative.dev/eventing/cmd/apiserver_receive_adapter is
// eventing-apiserver-receive-adapter.
func knativeImageName(repo, cmd string) string {
	return repo + "-" + strings.ReplaceAll(cmd, "_", "-")
}

// knative builds Knative's images, applies Serving's and Eventing's release
// YAMLs with the images rewritten to them, and waits for every component.
func (u *upper) knative(ctx context.Context) error {
	r := pinned.Resolver{Dir: u.opts.BinDir, Progress: u.opts.Progress}
	var names []string
	for _, g := range []string{"serving", "eventing"} {
		for _, c := range map[string][]string{
			"serving":  {"activator", "autoscaler", "controller", "webhook", "queue"},
			"eventing": {"controller", "webhook", "mtping", "jobsink", "requestreply", "apiserver_receive_adapter", "auth_proxy"},
		}[g] {
			names = append(names, knativeImageName(g, c))
		}
	}
	paths, err := r.Find(ctx, names...)
	if err != nil {
		return err
	}
	specs := make([]image.Spec, len(names))
	for i, n := range names {
		specs[i] = image.Spec{Name: "knative-" + n, Binary: paths[i]}
	}
	if err := u.importImages(ctx, "knative-images.tar", specs...); err != nil {
		return err
	}
	mods, err := r.KnativeModules(ctx, "knative.dev/serving", "knative.dev/networking", "knative.dev/caching", "knative.dev/eventing")
	if err != nil {
		return err
	}
	first, rest, err := u.knativeManifests(mods)
	if err != nil {
		return err
	}
	if err := u.apply(ctx, first); err != nil {
		return err
	}
	if err := u.apply(ctx, rest); err != nil {
		return err
	}
	if err := u.traefik(ctx); err != nil {
		return err
	}
	u.step("applied Knative Serving and Eventing %s (release YAMLs of the modules, images rewritten to opzero.local)", "v0.50.0")
	cs, err := kubernetes.NewForConfig(u.c.Config)
	if err != nil {
		return err
	}
	return u.wait(ctx, "Knative's deployments", nil, func(ctx context.Context) error {
		var waiting []string
		for _, ns := range knativeNamespaces {
			ds, err := cs.AppsV1().Deployments(ns).List(ctx, metav1.ListOptions{})
			if err != nil {
				return err
			}
			for _, d := range ds.Items {
				if want := *d.Spec.Replicas; d.Status.AvailableReplicas < want {
					waiting = append(waiting, fmt.Sprintf("%s/%s %d/%d", ns, d.Name, d.Status.AvailableReplicas, want))
				}
			}
		}
		if len(waiting) > 0 {
			return fmt.Errorf("not available: %s", strings.Join(waiting, ", "))
		}
		return nil
	})
}

// knativeManifests reads the release YAMLs and returns two manifests: the
// CRDs and namespaces, then everything else, with every ko:// reference
// rewritten to the imported images, tag resolution skipped for
// opzero.local (Serving's controller would otherwise ask the registry),
// Traefik as the ingress class and Eventing's OIDC feature enabled.
func (u *upper) knativeManifests(mods map[string]string) (first, rest string, err error) {
	var a, b bytes.Buffer
	for _, s := range knativeSources {
		root := filepath.Join(mods[s.mod], s.dir)
		var files []string
		err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
			if err == nil && !d.IsDir() && strings.HasSuffix(p, ".yaml") {
				files = append(files, p)
			}
			return err
		})
		if err != nil {
			return "", "", err
		}
		sort.Strings(files)
		for _, f := range files {
			raw, err := os.ReadFile(f)
			if err != nil {
				return "", "", err
			}
			for _, doc := range strings.Split(string(raw), "\n---") {
				var meta struct{ Kind string }
				if err := yaml.Unmarshal([]byte(doc), &meta); err != nil || meta.Kind == "" {
					continue
				}
				doc = u.rewriteKnative(doc)
				out := &b
				if meta.Kind == "CustomResourceDefinition" || meta.Kind == "Namespace" {
					out = &a
				}
				fmt.Fprintf(out, "---\n%s\n", strings.TrimPrefix(doc, "\n"))
			}
		}
	}
	if missing := koRef.FindAllString(b.String(), -1); len(missing) > 0 {
		return "", "", fmt.Errorf("knative YAMLs name images opzero has not built: %v", slices.Compact(missing))
	}
	return a.String(), b.String(), nil
}

func (u *upper) rewriteKnative(doc string) string {
	doc = koRef.ReplaceAllStringFunc(doc, func(ref string) string {
		m := koRef.FindStringSubmatch(ref)
		if img, ok := u.c.Images["knative-"+knativeImageName(m[1], m[2])]; ok {
			return img
		}
		return ref
	})
	doc = withIngressClass(doc)
	// Eventing's OIDC, as a user turns it on (the generated ApiServerSources
	// and PingSources expect it): config-features, authentication-oidc.
	doc = strings.Replace(doc, "\n  authentication-oidc: \"disabled\"", "\n  authentication-oidc: \"enabled\"", 1)
	return queueImage.ReplaceAllString(doc, "$0\n  registries-skipping-tag-resolving: \"kind.local,ko.local,dev.local,"+image.Registry+"\"")
}

// queueImage is config-deployment's queue-proxy image line, after which
// the list of registries whose tags are not resolved is set.
var queueImage = regexp.MustCompile(`(?m)^  queue-sidecar-image: .*$`)
