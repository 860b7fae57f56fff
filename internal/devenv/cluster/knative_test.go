package cluster

import (
	"context"
	"strings"
	"testing"

	"github.com/opzero/opzero/internal/devenv/pinned"
)

// TestKnativeManifests: the release YAMLs of the pinned modules, with every
// ko:// image rewritten to an opzero.local one, CRDs and namespaces first,
// and Serving told not to resolve opzero.local tags at a registry.
func TestKnativeManifests(t *testing.T) {
	if testing.Short() {
		t.Skip("reads Knative's modules (go mod download)")
	}
	mods, err := pinned.Resolver{Dir: t.TempDir()}.KnativeModules(context.Background(),
		"knative.dev/serving", "knative.dev/networking", "knative.dev/caching", "knative.dev/eventing")
	if err != nil {
		t.Fatal(err)
	}
	u := &upper{c: &Cluster{State: State{Images: map[string]string{}}}}
	for _, n := range []string{"serving-activator", "serving-autoscaler", "serving-controller", "serving-webhook", "serving-queue",
		"eventing-controller", "eventing-webhook", "eventing-mtping", "eventing-jobsink", "eventing-requestreply",
		"eventing-apiserver-receive-adapter", "eventing-auth-proxy"} {
		u.c.Images["knative-"+n] = "opzero.local/knative-" + n + ":0123456789ab"
	}
	first, rest, err := u.knativeManifests(mods)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"name: services.serving.knative.dev", "name: ingresses.networking.internal.knative.dev",
		"name: images.caching.internal.knative.dev", "name: apiserversources.sources.knative.dev", "name: knative-serving", "name: knative-eventing"} {
		if !strings.Contains(first, want) {
			t.Errorf("the first manifest lacks %q", want)
		}
	}
	for _, want := range []string{
		"image: opzero.local/knative-serving-activator:0123456789ab",
		"queue-sidecar-image: opzero.local/knative-serving-queue:0123456789ab\n  registries-skipping-tag-resolving: \"kind.local,ko.local,dev.local,opzero.local\"",
		"value: opzero.local/knative-eventing-apiserver-receive-adapter:0123456789ab",
		"data:\n  ingress-class: \"traefik.ingress.networking.knative.dev\"\n",
		"\n  authentication-oidc: \"enabled\"",
	} {
		if !strings.Contains(rest, want) {
			t.Errorf("the second manifest lacks %q", want)
		}
	}
	if strings.Contains(first+rest, "ko://") || strings.Contains(rest, "kind: CustomResourceDefinition") {
		t.Error("a ko:// reference is left, or a CRD is in the second manifest")
	}
}
