package metacontroller

import (
	"fmt"
	"net/url"
	"sort"
	"strings"

	v1alpha1 "github.com/opzero/opzero/internal/metacontroller/api/v1alpha1"
)

// hookNamespaces are the namespaces the controllers' hooks live in: a
// webhook service's namespace, or the namespace of a url that names an
// in-cluster Service (http://<service>.<namespace>[.svc[.cluster.local]]),
// with a line saying which controller's hook is there. Metacontroller's
// published examples put theirs in the namespace its own install creates,
// metacontroller; `opzero manifests` writes a Namespace for each.
func (cfg *Config) hookNamespaces() (namespaces []string, why []string) {
	by := map[string][]string{}
	for _, c := range cfg.Controllers {
		for _, h := range []*v1alpha1.Hook{c.Sync, c.Finalize, c.Customize} {
			if ns := hookNamespace(h); ns != "" && !builtinNamespaces[ns] {
				who := c.Kind + " " + c.Name
				if l := by[ns]; len(l) == 0 || l[len(l)-1] != who {
					by[ns] = append(by[ns], who)
				}
			}
		}
	}
	for ns := range by {
		namespaces = append(namespaces, ns)
	}
	sort.Strings(namespaces)
	for _, ns := range namespaces {
		why = append(why, fmt.Sprintf("the hooks of %s live in namespace %s: a Namespace %s is written (unless it is the operator's own)", strings.Join(by[ns], ", "), ns, ns))
	}
	return namespaces, why
}

// hookNamespace is the namespace of a hook's Service, "" if it names none.
func hookNamespace(h *v1alpha1.Hook) string {
	if h == nil || h.Webhook == nil {
		return ""
	}
	w := h.Webhook
	if w.Service != nil {
		return w.Service.Namespace
	}
	if w.URL == nil {
		return ""
	}
	u, err := url.Parse(*w.URL)
	if err != nil {
		return ""
	}
	host := strings.TrimSuffix(strings.TrimSuffix(u.Hostname(), ".cluster.local"), ".svc")
	parts := strings.Split(host, ".")
	if len(parts) != 2 || parts[0] == "" || parts[1] == "" {
		return "" // not <service>.<namespace>: an address outside the cluster
	}
	return parts[1]
}

// builtinNamespaces exist in every cluster.
var builtinNamespaces = map[string]bool{"default": true, "kube-system": true, "kube-public": true, "kube-node-lease": true}
