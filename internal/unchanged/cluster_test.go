package unchanged_test

import (
	"context"
	"os"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/opzero/opzero/internal/unchanged"
	"github.com/opzero/opzero/testenv"
)

func TestMain(m *testing.M) {
	os.Exit(testenv.Main(m, testenv.Options{NoControllerManager: true}))
}

func opts() unchanged.Options {
	return unchanged.Options{HubNamespace: "opzero-system", HubName: "opzero-hub", AggregateLabel: "opzero.dev/aggregate-to-hub"}
}

// TestFromCluster: an operator already installed (its Deployment, the
// RBAC bound to its service account), read from a real API server, gives
// the same Subscription as the same objects in a release file; a
// Deployment that is not there is an error naming it.
func TestFromCluster(t *testing.T) {
	env := testenv.Get(t)
	ctx := context.Background()
	ns := env.Namespace(t)
	l := map[string]string{"app": "op"}
	objs := []client.Object{
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "op"}},
		&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: ns + "-op"}, Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "list", "watch"}},
			{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create"}}}},
		&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: ns + "-op"}, RoleRef: rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: ns + "-op"},
			Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: ns, Name: "op"}}},
		&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "op"}, Spec: appsv1.DeploymentSpec{Replicas: ptr.To(int32(1)),
			Selector: &metav1.LabelSelector{MatchLabels: l}, Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: l},
				Spec: corev1.PodSpec{ServiceAccountName: "op", Containers: []corev1.Container{{Name: "manager", Image: "example.com/op:v1", Args: []string{"--metrics-bind-address=:8080", "--metrics-secure=false"}}}}}}},
	}
	var release []string
	for _, o := range objs {
		if err := env.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
		gvk, _ := env.Client.GroupVersionKindFor(o)
		o.GetObjectKind().SetGroupVersionKind(gvk)
		y, _ := yaml.Marshal(o)
		release = append(release, string(y))
	}
	got, err := unchanged.FromCluster(ctx, env.Config, ns+"/op")
	if err != nil {
		t.Fatal(err)
	}
	fromCluster, err := unchanged.Derive(got, opts())
	if err != nil {
		t.Fatal(err)
	}
	var file []map[string]any
	for _, y := range release {
		var o map[string]any
		if err := yaml.Unmarshal([]byte(y), &o); err != nil {
			t.Fatal(err)
		}
		file = append(file, o)
	}
	fromFile, err := unchanged.Derive(file, opts())
	if err != nil {
		t.Fatal(err)
	}
	a, _ := yaml.Marshal(fromCluster.Objects[0])
	b, _ := yaml.Marshal(fromFile.Objects[0])
	if string(a) != string(b) {
		t.Errorf("from the cluster:\n%s\nfrom the release:\n%s", a, b)
	}
	for _, w := range []string{"kind: ConfigMap", "name: op", "port: 8080", "scheme: http\n"} {
		if !strings.Contains(string(a), w) {
			t.Errorf("the Subscription lacks %q:\n%s", w, a)
		}
	}
	if _, err := unchanged.FromCluster(ctx, env.Config, ns+"/missing"); err == nil || !strings.Contains(err.Error(), "reading Deployment "+ns+"/missing") {
		t.Errorf("a missing Deployment: %v, want an error naming it", err)
	}
}
