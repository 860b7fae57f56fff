// Package v1alpha1 is an older Widget version with another schema
// (spec.count) and no conversion: main registers it only with
// WIDGETS_OLD_VERSION=1, the bad input `opzero manifests` refuses.
//
// +kubebuilder:object:generate=true
// +groupName=widgets.opzero.dev
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

// GroupVersion is widgets.opzero.dev/v1alpha1.
var GroupVersion = schema.GroupVersion{Group: "widgets.opzero.dev", Version: "v1alpha1"}

var (
	// SchemeBuilder registers the types.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}
	// AddToScheme adds Widget to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

// WidgetSpec is an old widget's count.
type WidgetSpec struct {
	Count int32 `json:"count,omitempty"`
}

// Widget is the old version.
//
// +kubebuilder:object:root=true
type Widget struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              WidgetSpec `json:"spec,omitempty"`
}

// WidgetList is a list of Widgets.
//
// +kubebuilder:object:root=true
type WidgetList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Widget `json:"items"`
}

func init() { SchemeBuilder.Register(&Widget{}, &WidgetList{}) }

// DeepCopyObject implements runtime.Object.
func (w *Widget) DeepCopyObject() runtime.Object {
	out := *w
	w.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	return &out
}

// DeepCopyObject implements runtime.Object.
func (l *WidgetList) DeepCopyObject() runtime.Object {
	out := *l
	out.Items = make([]Widget, len(l.Items))
	for i := range l.Items {
		out.Items[i] = *l.Items[i].DeepCopyObject().(*Widget)
	}
	return &out
}
