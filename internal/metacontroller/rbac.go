package metacontroller

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/opzero/opzero/internal/description"
)

// RBAC for what hooks return. The API server lets a client create a
// RoleBinding or ClusterRoleBinding only to a role whose permissions it
// holds, or when it may `bind` that role; and a Role or ClusterRole only
// with permissions it holds, or when it may `escalate`. Metacontroller's
// own ClusterRole grants every verb on every resource, so its hooks may
// return such children; opzero's derived role grants what they need, and
// no more: bind when children (attachments) include role bindings, escalate
// when they include roles.

const (
	rbacGroup = "rbac.authorization.k8s.io"
	bindWhy   = "bind roles and clusterroles"
)

// rbacRules are the bind and escalate rules the controllers' RBAC children
// need, with one line per controller saying why.
func rbacRules(cfg *Config) ([]description.Rule, []string) {
	bind, escalate := map[string]bool{}, map[string]bool{}
	var why []string
	for _, c := range cfg.Controllers {
		var names, may []string
		for _, ch := range c.Children {
			if ch.GVK.Group != rbacGroup {
				continue
			}
			switch r := ch.GVR.Resource; r {
			case "rolebindings", "clusterrolebindings":
				bind["roles"], bind["clusterroles"] = true, true
				if !slices.Contains(may, bindWhy) {
					may = append(may, bindWhy)
				}
			case "roles", "clusterroles":
				escalate[r] = true
				may = append(may, "escalate "+r)
			default:
				continue
			}
			names = append(names, ch.GVR.Resource)
		}
		if len(names) == 0 {
			continue
		}
		why = append(why, fmt.Sprintf("%s %s returns %s: the operator may %s, as Metacontroller's own ClusterRole (every verb on every resource) allows; "+
			"without it the API server refuses a binding or role that grants permissions the operator does not hold", c.Kind, c.Name, strings.Join(names, ", "), strings.Join(may, " and ")))
	}
	var rules []description.Rule
	if len(bind) > 0 {
		rules = append(rules, description.Rule{APIGroups: []string{rbacGroup}, Resources: keys(bind), Verbs: []string{"bind"}})
	}
	if len(escalate) > 0 {
		rules = append(rules, description.Rule{APIGroups: []string{rbacGroup}, Resources: keys(escalate), Verbs: []string{"escalate"}})
	}
	return rules, why
}

func keys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// applyFailed reports on the parent that its children could not be
// written because the API server refused the operator (Forbidden: RBAC,
// an escalation check, an admission policy): the condition Synced=False
// ApplyForbidden, named by the SyncError Event. The sync
// is retried with the engine's backoff. Other errors pass unchanged.
func (r *Reconciler) applyFailed(ctx context.Context, c *Controller, parent *unstructured.Unstructured, err error) error {
	if !apierrors.IsForbidden(err) {
		return err
	}
	msg := fmt.Sprintf("%s %s: %v", c.Kind, c.Name, err)
	if strings.Contains(err.Error(), "escalat") || strings.Contains(err.Error(), "RBAC") {
		msg += "; a role or binding the hook returns grants what the operator's service account does not hold: grant it bind (bindings) or escalate (roles) " +
			"on roles and clusterroles (opzero manifests does for controllers whose children include them)"
	}
	return r.failed(ctx, parent, ReasonApplyForbidden, msg, err)
}
