package manifests_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opzero/opzero/internal/manifests"
	"github.com/opzero/opzero/internal/testkit"
	"github.com/opzero/opzero/testenv"
)

// TestHubRBACIsSufficientAndMinimal asks the API server whether the hub may
// make the requests internal/hub makes (Subscriptions and their status,
// Wakeups, Events, SubjectAccessReviews, sinks, RBAC watches, its own
// tokens, its bucket Leases) and read the operator's kinds once the operator's ClusterRole is
// aggregated into the hub's (by its label); and not more.
func TestHubRBACIsSufficientAndMinimal(t *testing.T) {
	env := testenv.Get(t)
	const elsewhere = "some-other-namespace"
	ns := env.Namespace(t)
	ensureNamespace(t, env, manifests.HubNamespace)
	applyRBAC(t, env, generate(t, manifests.Options{Mode: manifests.Serverless, Source: manifests.SourceHub, Namespace: ns}))

	hubNS, hub := manifests.HubNamespace, manifests.HubName
	kinds := []access{
		{"get", "k8spatterns.io", "configwatchers", elsewhere, "cw"},
		{"list", "k8spatterns.io", "configwatchers", "", ""}, // the referencedBy index reads the referrers
		{"watch", "k8spatterns.io", "configwatchers", "", ""},
		{"get", "", "configmaps", elsewhere, "cm"},
		{"list", "", "configmaps", "", ""},
		{"watch", "", "configmaps", "", ""},
	}
	aggregate(t, env, hub)
	testkit.Eventually(t, 30*time.Second, "the operator's ClusterRole aggregated into opzero-hub", func(context.Context) (bool, error) {
		for _, a := range kinds {
			if !allowed(t, env.Client, hubNS, hub, a) {
				return false, nil
			}
		}
		return true, nil
	})
	check(t, env, hubNS, hub, []access{
		{"get", "opzero.dev", "subscriptions", elsewhere, "s"},
		{"list", "opzero.dev", "subscriptions", "", ""},
		{"watch", "opzero.dev", "subscriptions", "", ""},
		{"patch", "opzero.dev", "subscriptions/status", elsewhere, "s"},
		{"update", "opzero.dev", "subscriptions/status", elsewhere, "s"},
		{"list", "opzero.dev", "wakeups", "", ""},
		{"watch", "opzero.dev", "wakeups", "", ""},
		{"delete", "opzero.dev", "wakeups", elsewhere, "w"},
		{"create", "", "events", elsewhere, ""},
		{"create", "events.k8s.io", "events", elsewhere, ""},
		{"patch", "events.k8s.io", "events", elsewhere, "e"},
		{"create", "authorization.k8s.io", "subjectaccessreviews", "", ""},
		{"get", "serving.knative.dev", "services", elsewhere, "op"},
		{"list", "rbac.authorization.k8s.io", "clusterrolebindings", "", ""},
		{"watch", "rbac.authorization.k8s.io", "roles", "", ""},
		{"create", "", "serviceaccounts/token", hubNS, hub},
		{"create", "coordination.k8s.io", "leases", hubNS, ""}, // its replicas' bucket Leases
		{"get", "coordination.k8s.io", "leases", hubNS, "opzero-hub-bucket-0"},
		{"update", "coordination.k8s.io", "leases", hubNS, "opzero-hub-bucket-0"},
	}, []access{
		{"update", "opzero.dev", "subscriptions", elsewhere, "s"}, // the spec is the operator's
		{"create", "opzero.dev", "subscriptions", elsewhere, ""},
		{"create", "opzero.dev", "wakeups", elsewhere, ""},
		{"update", "", "configmaps", elsewhere, "cm"},
		{"list", "", "secrets", "", ""},
		{"list", "", "pods", "", ""}, // the operator's marker rules are its own, not the hub's
		{"update", "rbac.authorization.k8s.io", "clusterroles", "", "opzero-hub"},
		{"create", "", "serviceaccounts/token", hubNS, "default"},
		{"create", "", "serviceaccounts/token", ns, "configwatcher"},
		{"update", "serving.knative.dev", "services", elsewhere, "op"},
		{"update", "coordination.k8s.io", "leases", elsewhere, "opzero-hub-bucket-0"}, // Leases in its namespace only
		{"create", "coordination.k8s.io", "leases", elsewhere, ""},
		{"delete", "coordination.k8s.io", "leases", hubNS, "opzero-hub-bucket-0"},
	})
}

// aggregate does what kube-controller-manager's clusterrole-aggregation
// controller does, in case the test control plane does not run it: it sets
// the rules of ClusterRole name to those of every ClusterRole its
// aggregationRule selects (so the generated labels and selector are what is
// tested). Where the controller runs, both write the same rules; a conflict
// with its write is retried.
func aggregate(t *testing.T, env *testenv.Env, name string) {
	t.Helper()
	ctx := context.Background()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var agg rbacv1.ClusterRole
		if err := env.Client.Get(ctx, client.ObjectKey{Name: name}, &agg); err != nil {
			return err
		}
		if agg.AggregationRule == nil || len(agg.AggregationRule.ClusterRoleSelectors) == 0 {
			return fmt.Errorf("ClusterRole %s has no aggregationRule", name)
		}
		var union []rbacv1.PolicyRule
		for _, ls := range agg.AggregationRule.ClusterRoleSelectors {
			sel, err := metav1.LabelSelectorAsSelector(&ls)
			if err != nil {
				return err
			}
			var roles rbacv1.ClusterRoleList
			if err := env.Client.List(ctx, &roles, client.MatchingLabelsSelector{Selector: sel}); err != nil {
				return err
			}
			for _, r := range roles.Items {
				if r.Name != name {
					union = append(union, r.Rules...)
				}
			}
		}
		agg.Rules = union
		return env.Client.Update(ctx, &agg)
	})
	if err != nil {
		t.Fatal(err)
	}
}
