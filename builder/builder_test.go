package builder_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/opzero/opzero/builder"
)

type unknownKind struct{ corev1.ConfigMap }

var noop = reconcile.Func(func(context.Context, reconcile.Request) (reconcile.Result, error) { return reconcile.Result{}, nil })

func mapNone(context.Context, client.Reader, client.Object) ([]reconcile.Request, error) {
	return nil, nil
}

func scheme(t *testing.T) *runtime.Scheme {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	return s
}

func TestBuildDescribesTheOperator(t *testing.T) {
	sel := labels.SelectorFromSet(labels.Set{"team": "a"})
	op, err := builder.New(scheme(t)).
		For(&corev1.Service{}, builder.WithLabelSelector(sel)).
		Owns(&corev1.Endpoints{}).
		Watches(&corev1.ConfigMap{}, mapNone).
		WithEventFilter(func(builder.Event) bool { return true }).
		WithAutoObservedGeneration().
		Build(noop)
	if err != nil {
		t.Fatal(err)
	}
	if op.Name != "service" || op.Primary.GVK.Kind != "Service" || op.Primary.Selector.String() != "team=a" {
		t.Fatalf("primary: name %q kind %q selector %v", op.Name, op.Primary.GVK.Kind, op.Primary.Selector)
	}
	if len(op.Owned) != 1 || op.Owned[0].GVK.Kind != "Endpoints" || len(op.Watched) != 1 || op.Watched[0].GVK.Kind != "ConfigMap" {
		t.Fatalf("owned %v watched %v", op.Owned, op.Watched)
	}
	if len(op.Filters) != 1 || !op.AutoObservedGeneration || op.Reconciler == nil {
		t.Fatalf("filters %d auto %v reconciler %v", len(op.Filters), op.AutoObservedGeneration, op.Reconciler)
	}
}

// TestMisuseIsReportedNotPanicked: every misuse is returned by Build, all at
// once, and none panics.
func TestMisuseIsReportedNotPanicked(t *testing.T) {
	cases := []struct {
		name  string
		build func(*builder.Builder) *builder.Builder
		r     reconcile.Reconciler
		want  []string
	}{
		{"no For", func(b *builder.Builder) *builder.Builder { return b }, noop, []string{"For was not called"}},
		{"For twice", func(b *builder.Builder) *builder.Builder { return b.For(&corev1.Pod{}).For(&corev1.Service{}) }, noop, []string{"For called twice"}},
		{"nil object", func(b *builder.Builder) *builder.Builder { return b.For(nil) }, noop, []string{"object is nil"}},
		{"typed nil", func(b *builder.Builder) *builder.Builder { return b.For((*corev1.Pod)(nil)) }, noop, []string{"object is nil"}},
		{"unknown kind", func(b *builder.Builder) *builder.Builder { return b.For(&unknownKind{}) }, noop, []string{"add its package to the scheme"}},
		{"nil map function", func(b *builder.Builder) *builder.Builder {
			return b.For(&corev1.Pod{}).Watches(&corev1.ConfigMap{}, nil)
		}, noop, []string{"map function is nil"}},
		{"empty ReferencedBy", func(b *builder.Builder) *builder.Builder {
			return b.For(&corev1.Pod{}).Watches(&corev1.ConfigMap{}, mapNone, builder.ReferencedBy(""))
		}, noop, []string{"Watches(ConfigMap): ReferencedBy(\"\"): the field path is empty"}},
		{"bad ReferencedBy", func(b *builder.Builder) *builder.Builder {
			return b.For(&corev1.Pod{}).Watches(&corev1.ConfigMap{}, mapNone, builder.ReferencedBy("spec..configMap"))
		}, noop, []string{"field path element 2", "not an identifier"}},
		{"ReferencedBy twice", func(b *builder.Builder) *builder.Builder {
			return b.For(&corev1.Pod{}).Watches(&corev1.ConfigMap{}, mapNone, builder.ReferencedBy("spec.a"), builder.ReferencedBy("spec.b"))
		}, noop, []string{`already ReferencedBy("spec.a")`}},
		{"nil option", func(b *builder.Builder) *builder.Builder {
			return b.For(&corev1.Pod{}).Watches(&corev1.ConfigMap{}, mapNone, nil)
		}, noop, []string{"Watches(ConfigMap): an option is nil"}},
		{"nil filter", func(b *builder.Builder) *builder.Builder { return b.For(&corev1.Pod{}).WithEventFilter(nil) }, noop, []string{"filter is nil"}},
		{"bad name", func(b *builder.Builder) *builder.Builder { return b.For(&corev1.Pod{}).Named("Not_A_Name") }, noop, []string{`name "Not_A_Name"`}},
		{"nil reconciler", func(b *builder.Builder) *builder.Builder { return b.For(&corev1.Pod{}) }, nil, []string{"reconciler is nil"}},
		{"several at once", func(b *builder.Builder) *builder.Builder { return b.Owns(nil).Watches(&corev1.Secret{}, nil) }, nil,
			[]string{"object is nil", "map function is nil", "For was not called", "reconciler is nil"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			op, err := tc.build(builder.New(scheme(t))).Build(tc.r)
			if err == nil || op != nil {
				t.Fatalf("Build = %v, %v; want an error", op, err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

func TestCompleteNeedsARuntime(t *testing.T) {
	if err := builder.ControllerManagedBy(nil).For(&corev1.Pod{}).Complete(noop); err == nil || !strings.Contains(err.Error(), "runtime is nil") {
		t.Fatalf("Complete without a runtime: %v", err)
	}
	if err := builder.New(scheme(t)).For(&corev1.Pod{}).Complete(noop); err == nil || !strings.Contains(err.Error(), "needs a runtime") {
		t.Fatalf("Complete on New: %v", err)
	}
}

// TestReferencedBy: the declaration is kept on the Watch; valid paths pass
// and invalid ones are refused with the path named.
func TestReferencedBy(t *testing.T) {
	op, err := builder.New(scheme(t)).For(&corev1.Pod{}).
		Watches(&corev1.ConfigMap{}, mapNone, builder.ReferencedBy("spec.configMap")).
		Watches(&corev1.Secret{}, mapNone).
		Build(noop)
	if err != nil {
		t.Fatal(err)
	}
	if got := op.Watched[0].ReferencedBy; got != "spec.configMap" {
		t.Errorf("ConfigMap ReferencedBy = %q, want spec.configMap", got)
	}
	if got := op.Watched[1].ReferencedBy; got != "" {
		t.Errorf("Secret ReferencedBy = %q, want none", got)
	}
	for path, ok := range map[string]bool{
		"spec.configMap": true, "name": true, "spec.template.spec.serviceAccountName": true, "spec.config_map2": true, "_x": true,
		"": false, ".spec": false, "spec.": false, "spec..x": false, "spec.2x": false, "spec.config-map": false,
		"spec[0].name": false, "spec configMap": false, "spec.cönfig": false,
	} {
		_, err := builder.New(scheme(t)).For(&corev1.Pod{}).
			Watches(&corev1.ConfigMap{}, mapNone, builder.ReferencedBy(path)).Build(noop)
		if ok && err != nil {
			t.Errorf("ReferencedBy(%q): %v, want it accepted", path, err)
		}
		if !ok && (err == nil || !strings.Contains(err.Error(), fmt.Sprintf("ReferencedBy(%q)", path))) {
			t.Errorf("ReferencedBy(%q): %v, want an error naming it", path, err)
		}
	}
}

// TestUpdatedWhen: the parts an update must change to matter, per kind,
// sorted and once each; a part it does not know is an error naming it.
func TestUpdatedWhen(t *testing.T) {
	op, err := builder.New(scheme(t)).
		For(&corev1.Service{}, builder.UpdatedWhen(builder.LabelsChanged, builder.GenerationChanged, builder.LabelsChanged)).
		Owns(&corev1.Endpoints{}, builder.UpdatedWhen(builder.AnnotationsChanged)).
		Watches(&corev1.ConfigMap{}, mapNone, builder.WatchUpdatedWhen(builder.GenerationChanged)).
		Watches(&corev1.Secret{}, mapNone).
		Build(noop)
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(op.Primary.UpdatedWhen, op.Owned[0].UpdatedWhen, op.Watched[0].UpdatedWhen, op.Watched[1].UpdatedWhen); got != "[generation labels] [annotations] [generation] []" {
		t.Errorf("UpdatedWhen of Service, Endpoints, ConfigMap, Secret = %s", got)
	}
	_, err = builder.New(scheme(t)).For(&corev1.Service{}, builder.UpdatedWhen("status")).Build(noop)
	if err == nil || !strings.Contains(err.Error(), `Service: UpdatedWhen("status")`) {
		t.Errorf("UpdatedWhen(status): %v, want an error naming it", err)
	}
}
