package classic

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/opzero/opzero/builder"
)

// TestUpdatedWhenInClassicMode: builder.UpdatedWhen drops, in classic
// mode, the updates that change none of the named parts, as the hub does
// serverless; no parts lets every update through.
func TestUpdatedWhenInClassicMode(t *testing.T) {
	obj := func(gen int64, labels, annotations map[string]string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Generation: gen, Labels: labels, Annotations: annotations}}
	}
	old := obj(1, map[string]string{"l": "1"}, nil)
	cases := []struct {
		name  string
		parts []builder.Change
		new   *corev1.ConfigMap
		pass  bool
	}{
		{"no parts: every update", nil, obj(1, map[string]string{"l": "1"}, nil), true},
		{"generation, unchanged", []builder.Change{builder.GenerationChanged}, obj(1, nil, map[string]string{"a": "1"}), false},
		{"generation, changed", []builder.Change{builder.GenerationChanged}, obj(2, map[string]string{"l": "1"}, nil), true},
		{"generation or labels, labels changed", []builder.Change{builder.GenerationChanged, builder.LabelsChanged}, obj(1, map[string]string{"l": "2"}, nil), true},
		{"annotations, changed", []builder.Change{builder.AnnotationsChanged}, obj(1, map[string]string{"l": "1"}, map[string]string{"a": "1"}), true},
		{"annotations, labels changed", []builder.Change{builder.AnnotationsChanged}, obj(1, nil, nil), false},
	}
	for _, tc := range cases {
		pass := true
		for _, p := range updatedWhen(builder.Kind{UpdatedWhen: tc.parts}) {
			pass = pass && p.Update(event.UpdateEvent{ObjectOld: old, ObjectNew: tc.new})
		}
		if pass != tc.pass {
			t.Errorf("%s: passes %v, want %v", tc.name, pass, tc.pass)
		}
	}
}
