// Package v2 is the Gadget API's storage version and conversion hub:
// spec.length (v1 calls it spec.size).
//
// +kubebuilder:object:generate=true
// +groupName=gadgets.opzero.dev
package v2

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

// GroupVersion is gadgets.opzero.dev/v2.
var GroupVersion = schema.GroupVersion{Group: "gadgets.opzero.dev", Version: "v2"}

var (
	// SchemeBuilder registers the types.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}
	// AddToScheme adds Gadget to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

// GadgetSpec is a gadget's length and color.
type GadgetSpec struct {
	Length int32  `json:"length,omitempty"`
	Color  string `json:"color,omitempty"`
}

// Gadget is a test kind with two versions.
//
// +kubebuilder:object:root=true
// +kubebuilder:storageversion
type Gadget struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              GadgetSpec `json:"spec,omitempty"`
}

// GadgetList is a list of Gadgets.
//
// +kubebuilder:object:root=true
type GadgetList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Gadget `json:"items"`
}

// Hub marks v2 as the version every other converts through.
func (*Gadget) Hub() {}

func init() { SchemeBuilder.Register(&Gadget{}, &GadgetList{}) }

// DeepCopyObject implements runtime.Object.
func (g *Gadget) DeepCopyObject() runtime.Object {
	out := *g
	g.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	return &out
}

// DeepCopyObject implements runtime.Object.
func (l *GadgetList) DeepCopyObject() runtime.Object {
	out := *l
	out.Items = make([]Gadget, len(l.Items))
	for i := range l.Items {
		out.Items[i] = *l.Items[i].DeepCopyObject().(*Gadget)
	}
	return &out
}
