package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/opzero/opzero/internal/devenv/prune"
)

// ApplyFieldManager is the field manager `opzero cluster apply` applies
// as: what it applied, and only that, is pruned when another wiring of the
// same operator is applied next.
const ApplyFieldManager = "opzero-cluster-apply"

// ApplyPruning is Apply as `opzero cluster apply` does it: Apply, then it
// deletes what an earlier apply of another wiring of the manifest's
// operators left (prune.Earlier): after a switch from --source=knative to
// the hub, the ApiServerSources and the wakeup source stop, after a switch
// to classic the Knative Service and its Subscription go. It returns
// kubectl's output and what it deleted.
func (c *Cluster) ApplyPruning(ctx context.Context, manifest string) (out string, pruned []string, _ error) {
	out, err := c.Apply(ctx, manifest)
	if err != nil {
		return out, nil, err
	}
	if c.Config == nil {
		return out, nil, fmt.Errorf("no kubeconfig for the cluster (%s): cannot prune an earlier wiring", c.Kubeconfig)
	}
	pruned, err = PruneEarlier(ctx, c.Config, manifest, kubeconfigNamespace(c.Kubeconfig))
	return out, pruned, err
}

// PruneEarlier reads the objects of manifest (a namespaced one without a
// namespace in ns, as kubectl applied it) and prunes what ApplyFieldManager
// applied before of another wiring of their operators.
func PruneEarlier(ctx context.Context, cfg *rest.Config, manifest, ns string) ([]string, error) {
	dyn, mapper, err := prune.Clients(cfg)
	if err != nil {
		return nil, err
	}
	var objs []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader([]byte(manifest)), 4096)
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, fmt.Errorf("reading the applied manifests: %w", err)
		}
		if len(u.Object) == 0 {
			continue
		}
		if u.GetNamespace() == "" {
			gvk := u.GroupVersionKind()
			m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
			if err != nil {
				return nil, fmt.Errorf("%s %s: %w", gvk.Kind, u.GetName(), err)
			}
			if m.Scope.Name() == meta.RESTScopeNameNamespace {
				u.SetNamespace(ns)
			}
		}
		objs = append(objs, u)
	}
	return prune.Earlier(ctx, dyn, mapper, objs, ApplyFieldManager)
}

// kubeconfigNamespace is the namespace kubectl puts an object without one
// in: the kubeconfig's current context's, or default.
func kubeconfigNamespace(kubeconfig string) string {
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(&clientcmd.ClientConfigLoadingRules{ExplicitPath: kubeconfig}, &clientcmd.ConfigOverrides{})
	if ns, _, err := cc.Namespace(); err == nil && ns != "" {
		return ns
	}
	return "default"
}
