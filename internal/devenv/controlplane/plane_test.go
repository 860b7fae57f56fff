package controlplane_test

import (
	"context"
	"os"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opzero/opzero/internal/testkit"
	"github.com/opzero/opzero/testenv"
)

func TestMain(m *testing.M) {
	os.Exit(testenv.Main(m, testenv.Options{CRDDirs: []string{"testdata/crds"}}))
}

func TestDeploymentGetsReplicaSetAndPodsThenGarbageCollected(t *testing.T) {
	env := testenv.Get(t)
	ctx, ns := context.Background(), env.Namespace(t)
	sel := map[string]string{"app": "web"}
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](2),
			Selector: &metav1.LabelSelector{MatchLabels: sel},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: sel},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "nginx"}}},
			},
		},
	}
	if err := env.Client.Create(ctx, dep); err != nil {
		t.Fatal(err)
	}
	inNS := []client.ListOption{client.InNamespace(ns), client.MatchingLabelsSelector{Selector: labels.SelectorFromSet(sel)}}
	testkit.Eventually(t, 30*time.Second, "ReplicaSet and 2 Pods from kube-controller-manager", func(ctx context.Context) (bool, error) {
		var rs appsv1.ReplicaSetList
		var pods corev1.PodList
		if err := env.Client.List(ctx, &rs, inNS...); err != nil {
			return false, err
		}
		if err := env.Client.List(ctx, &pods, inNS...); err != nil {
			return false, err
		}
		return len(rs.Items) == 1 && len(pods.Items) == 2, nil
	})
	if err := env.Client.Delete(ctx, dep, client.PropagationPolicy(metav1.DeletePropagationBackground)); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 30*time.Second, "garbage collection of the ReplicaSet and Pods", func(ctx context.Context) (bool, error) {
		var rs appsv1.ReplicaSetList
		var pods corev1.PodList
		if err := env.Client.List(ctx, &rs, inNS...); err != nil {
			return false, err
		}
		if err := env.Client.List(ctx, &pods, inNS...); err != nil {
			return false, err
		}
		return len(rs.Items) == 0 && len(pods.Items) == 0, nil
	})
}

func newWidget(ns string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetAPIVersion("test.opzero.dev/v1")
	u.SetKind("Widget")
	u.SetNamespace(ns)
	u.SetName("w")
	_ = unstructured.SetNestedField(u.Object, int64(1), "spec", "size")
	return u
}

func TestStatusWriteKeepsGenerationSpecWriteBumpsIt(t *testing.T) {
	env := testenv.Get(t)
	ctx, ns := context.Background(), env.Namespace(t)
	w := newWidget(ns)
	if err := env.Client.Create(ctx, w); err != nil {
		t.Fatal(err)
	}
	if g := w.GetGeneration(); g != 1 {
		t.Fatalf("generation after create = %d, want 1", g)
	}
	_ = unstructured.SetNestedField(w.Object, int64(1), "status", "observedGeneration")
	if err := env.Client.Status().Update(ctx, w); err != nil {
		t.Fatal(err)
	}
	if g := w.GetGeneration(); g != 1 {
		t.Fatalf("generation after a status write = %d, want 1 (unchanged)", g)
	}
	_ = unstructured.SetNestedField(w.Object, int64(2), "spec", "size")
	if err := env.Client.Update(ctx, w); err != nil {
		t.Fatal(err)
	}
	if g := w.GetGeneration(); g != 2 {
		t.Fatalf("generation after a spec write = %d, want 2", g)
	}
	if og, _, _ := unstructured.NestedInt64(w.Object, "status", "observedGeneration"); og != 1 {
		t.Fatalf("status.observedGeneration after a spec write = %d, want 1 (the main resource ignores status)", og)
	}
}

func TestStaleResourceVersionConflicts(t *testing.T) {
	env := testenv.Get(t)
	ctx, ns := context.Background(), env.Namespace(t)
	w := newWidget(ns)
	if err := env.Client.Create(ctx, w); err != nil {
		t.Fatal(err)
	}
	stale := w.DeepCopy()
	_ = unstructured.SetNestedField(w.Object, int64(2), "spec", "size")
	if err := env.Client.Update(ctx, w); err != nil {
		t.Fatal(err)
	}
	_ = unstructured.SetNestedField(stale.Object, int64(3), "spec", "size")
	err := env.Client.Update(ctx, stale)
	if !apierrors.IsConflict(err) {
		t.Fatalf("update with a stale resourceVersion: got %v, want 409 Conflict", err)
	}
}

func TestTokenRequestAudienceIsCheckedByTokenReview(t *testing.T) {
	env := testenv.Get(t)
	ctx, ns := context.Background(), env.Namespace(t)
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "sender", Namespace: ns}}
	if err := env.Client.Create(ctx, sa); err != nil {
		t.Fatal(err)
	}
	tr := &authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{Audiences: []string{"opzero-sink"}, ExpirationSeconds: ptr.To[int64](600)}}
	if err := env.Client.SubResource("token").Create(ctx, sa, tr); err != nil {
		t.Fatalf("TokenRequest: %v", err)
	}
	if tr.Status.Token == "" {
		t.Fatal("TokenRequest returned no token")
	}
	review := func(aud string) *authnv1.TokenReview {
		r := &authnv1.TokenReview{Spec: authnv1.TokenReviewSpec{Token: tr.Status.Token, Audiences: []string{aud}}}
		if err := env.Client.Create(ctx, r); err != nil {
			t.Fatalf("TokenReview: %v", err)
		}
		return r
	}
	ok := review("opzero-sink")
	wantUser := "system:serviceaccount:" + ns + ":sender"
	if !ok.Status.Authenticated || ok.Status.User.Username != wantUser {
		t.Fatalf("right audience: authenticated=%v user=%q error=%q, want true %q", ok.Status.Authenticated, ok.Status.User.Username, ok.Status.Error, wantUser)
	}
	if bad := review("someone-else"); bad.Status.Authenticated {
		t.Fatalf("wrong audience authenticated as %q, want rejected", bad.Status.User.Username)
	}
}
