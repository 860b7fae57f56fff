// Package v1 is the Widget API: spec.size and spec.color.
//
// +kubebuilder:object:generate=true
// +groupName=widgets.opzero.dev
//
// A marker outside the controller's package, as some projects keep them
// beside the types whose reconcile needs it:
//
// +kubebuilder:rbac:groups=apps,resources=deployments,verbs=get;list;watch;patch
package v1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

// GroupVersion is widgets.opzero.dev/v1.
var GroupVersion = schema.GroupVersion{Group: "widgets.opzero.dev", Version: "v1"}

var (
	// SchemeBuilder registers the types.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}
	// AddToScheme adds Widget to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

// WidgetSpec is a widget's size and color.
type WidgetSpec struct {
	Size  int32  `json:"size,omitempty"`
	Color string `json:"color,omitempty"`
}

// Widget is a test kind with admission webhooks only.
//
// +kubebuilder:object:root=true
// +kubebuilder:storageversion
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
