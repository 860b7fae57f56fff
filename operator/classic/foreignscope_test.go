package classic

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// TestForeignKindWatchedEverywhere: a kind the manager's cache restricts
// to one namespace (the project's sources) and a cache of its own
// watches everywhere (its targets, cache.New) is asked of the hub
// everywhere; the others keep the manager cache's namespaces.
func TestForeignKindWatchedEverywhere(t *testing.T) {
	trust := map[string]cache.Config{"trust": {}}
	o := cache.Options{ByObject: map[client.Object]cache.ByObject{&corev1.ConfigMap{}: {Namespaces: trust}, &corev1.Secret{}: {Namespaces: trust}}}
	s := cacheScope(o, clientgoscheme.Scheme, schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"})
	if nss, sel := s.For("", "ConfigMap"); nss != nil || sel != "" {
		t.Errorf("ConfigMap: namespaces %v, selector %q; want every namespace (its targets' cache)", nss, sel)
	}
	if nss, _ := s.For("", "Secret"); len(nss) != 1 || nss[0] != "trust" {
		t.Errorf("Secret: namespaces %v, want [trust]", nss)
	}
	d := cache.Options{DefaultNamespaces: trust}
	if nss, _ := cacheScope(d, clientgoscheme.Scheme, schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}).For("", "ConfigMap"); nss != nil {
		t.Errorf("ConfigMap with DefaultNamespaces [trust]: namespaces %v, want every namespace", nss)
	}
}
