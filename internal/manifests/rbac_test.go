package manifests_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	authzv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opzero/opzero/internal/manifests"
	"github.com/opzero/opzero/testenv"
)

// access is one request a party makes (or must not be able to make).
type access struct {
	verb, group, resource, namespace, name string
}

func (a access) String() string {
	return fmt.Sprintf("%s %s.%s %s/%s", a.verb, a.resource, a.group, a.namespace, a.name)
}

// applyRBAC creates the RBAC objects of objs for real (cluster-scoped ones
// and the hub's removed when the test ends).
func applyRBAC(t *testing.T, env *testenv.Env, objs []manifests.Object) {
	t.Helper()
	ctx := context.Background()
	for _, obj := range objs {
		switch obj.Kind() {
		case "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding":
		default:
			continue
		}
		u, err := unstructuredOf(obj)
		if err != nil {
			t.Fatal(err)
		}
		if err := env.Client.Create(ctx, u); err != nil {
			t.Fatalf("creating %s %s: %v", u.GetKind(), u.GetName(), err)
		}
		if u.GetNamespace() == "" || u.GetNamespace() == manifests.HubNamespace { // outlive the test's namespace
			t.Cleanup(func() { _ = env.Client.Delete(context.Background(), u.DeepCopyObject().(*unstructured.Unstructured)) })
		}
	}
}

func allowed(t *testing.T, c client.Client, ns, sa string, a access) bool {
	t.Helper()
	sar := &authzv1.SubjectAccessReview{Spec: authzv1.SubjectAccessReviewSpec{
		User:   "system:serviceaccount:" + ns + ":" + sa,
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"},
		ResourceAttributes: &authzv1.ResourceAttributes{Verb: a.verb, Group: a.group, Resource: resourceOnly(a.resource),
			Subresource: subresource(a.resource), Namespace: a.namespace, Name: a.name},
	}}
	if err := c.Create(context.Background(), sar); err != nil {
		t.Fatal(err)
	}
	return sar.Status.Allowed
}

func resourceOnly(r string) string { res, _, _ := strings.Cut(r, "/"); return res }

func subresource(r string) string { _, sub, _ := strings.Cut(r, "/"); return sub }

// TestRBACIsSufficientAndMinimal asks the API server (SubjectAccessReview)
// whether each party may make every request it makes, and may not make
// requests none of them needs. The lists below are written from what the
// code calls (engine, helpers, wakeup store and source, auth, the
// ConfigWatcher reconciler, Knative's ApiServerSource adapter), not from the
// generator.
func TestRBACIsSufficientAndMinimal(t *testing.T) {
	env := testenv.Get(t)
	const elsewhere = "some-other-namespace" // objects anywhere in the cluster
	for _, mode := range []string{manifests.Serverless, manifests.Classic} {
		t.Run(mode, func(t *testing.T) {
			ns := env.Namespace(t)
			objs := generate(t, manifests.Options{Mode: mode, Source: sourceOf(mode), Namespace: ns})
			applyRBAC(t, env, objs)

			operator := []access{
				{"get", "k8spatterns.io", "configwatchers", elsewhere, "cw"},
				{"list", "k8spatterns.io", "configwatchers", "", ""}, // sweeps list across namespaces
				{"list", "k8spatterns.io", "configwatchers", elsewhere, ""},
				{"watch", "k8spatterns.io", "configwatchers", "", ""},
				{"update", "k8spatterns.io", "configwatchers", elsewhere, "cw"},
				{"patch", "k8spatterns.io", "configwatchers", elsewhere, "cw"}, // finalizers, observedGeneration
				{"update", "k8spatterns.io", "configwatchers/status", elsewhere, "cw"},
				{"patch", "k8spatterns.io", "configwatchers/status", elsewhere, "cw"},
				{"update", "k8spatterns.io", "configwatchers/finalizers", elsewhere, "cw"},
				{"get", "", "configmaps", elsewhere, "cm"},
				{"list", "", "configmaps", "", ""},
				{"watch", "", "configmaps", "", ""},
				{"list", "", "pods", elsewhere, ""},      // +kubebuilder:rbac marker
				{"delete", "", "pods", elsewhere, "pod"}, // +kubebuilder:rbac marker
				{"create", "", "events", elsewhere, ""},
				{"create", "events.k8s.io", "events", elsewhere, ""},
				{"patch", "events.k8s.io", "events", elsewhere, "e"},
				{"get", "coordination.k8s.io", "leases", ns, "l"},
				{"create", "coordination.k8s.io", "leases", ns, ""},
				{"update", "coordination.k8s.io", "leases", ns, "l"},
			}
			operatorDenied := []access{
				{"delete", "", "configmaps", elsewhere, "cm"},
				{"update", "", "configmaps", elsewhere, "cm"},
				{"create", "", "secrets", elsewhere, ""},
				{"get", "", "secrets", elsewhere, "s"},
				{"create", "", "pods", elsewhere, ""},
				{"delete", "k8spatterns.io", "configwatchers", elsewhere, "cw"},
				{"create", "coordination.k8s.io", "leases", elsewhere, ""},
				{"create", "", "serviceaccounts/token", ns, "configwatcher"},
			}
			if mode == manifests.Serverless {
				operator = append(operator,
					access{"create", "authentication.k8s.io", "tokenreviews", "", ""},
					access{"get", "opzero.dev", "wakeups", elsewhere, "w"},
					access{"list", "opzero.dev", "wakeups", "", ""},
					access{"create", "opzero.dev", "wakeups", elsewhere, ""},
					access{"update", "opzero.dev", "wakeups", elsewhere, "w"},
					access{"delete", "opzero.dev", "wakeups", elsewhere, "w"},
					access{"delete", "coordination.k8s.io", "leases", ns, "l"},
					access{"list", "coordination.k8s.io", "leases", ns, ""}, // the sweep: expired Leases
				)
			} else {
				// the manager's client reads pods through an informer
				operator = append(operator, access{"watch", "", "pods", "", ""}, access{"list", "", "pods", "", ""})
				operatorDenied = append(operatorDenied,
					access{"create", "authentication.k8s.io", "tokenreviews", "", ""},
					access{"create", "opzero.dev", "wakeups", elsewhere, ""},
				)
			}
			check(t, env, ns, "configwatcher", operator, operatorDenied)
			if mode == manifests.Classic {
				return
			}

			// Knative's ApiServerSource adapter lists and watches its kind
			// in every namespace (namespaceSelector {}), and gets objects.
			read := func(group, res string) []access {
				return []access{{"get", group, res, elsewhere, "x"}, {"list", group, res, "", ""}, {"watch", group, res, "", ""},
					{"list", group, res, elsewhere, ""}, {"watch", group, res, elsewhere, ""}}
			}
			check(t, env, ns, "configwatcher-configwatcher", read("k8spatterns.io", "configwatchers"), []access{
				{"update", "k8spatterns.io", "configwatchers", elsewhere, "cw"},
				{"list", "", "configmaps", "", ""},
				{"list", "", "secrets", "", ""},
				{"create", "", "events", elsewhere, ""},
			})
			check(t, env, ns, "configwatcher-configmap", read("", "configmaps"), []access{
				{"update", "", "configmaps", elsewhere, "cm"},
				{"list", "k8spatterns.io", "configwatchers", "", ""},
				{"list", "", "secrets", "", ""},
			})
			check(t, env, ns, "configwatcher-wakeup-source", []access{
				{"list", "opzero.dev", "wakeups", "", ""},
				{"watch", "opzero.dev", "wakeups", "", ""},
				{"delete", "opzero.dev", "wakeups", elsewhere, "w"},
				{"create", "", "serviceaccounts/token", ns, "configwatcher-wakeup-source"},
			}, []access{
				{"create", "opzero.dev", "wakeups", elsewhere, ""},
				{"update", "opzero.dev", "wakeups", elsewhere, "w"},
				{"create", "", "serviceaccounts/token", ns, "configwatcher"},
				{"list", "", "configmaps", "", ""},
			})
		})
	}
}

func check(t *testing.T, env *testenv.Env, ns, sa string, allow, deny []access) {
	t.Helper()
	for _, a := range allow {
		if !allowed(t, env.Client, ns, sa, a) {
			t.Errorf("%s may not %s; it needs to", sa, a)
		}
	}
	for _, a := range deny {
		if allowed(t, env.Client, ns, sa, a) {
			t.Errorf("%s may %s; nothing needs that", sa, a)
		}
	}
}

// sourceOf is the wiring whose every service account the RBAC tests check:
// --source=knative (the sources' and the wakeup source's accounts);
// classic has none.
func sourceOf(mode string) string {
	if mode == manifests.Classic {
		return ""
	}
	return manifests.SourceKnative
}
