// Package v1 is the Gadget API's first version: spec.size, converted
// to and from v2 (the hub) by the conversion webhook.
//
// +kubebuilder:object:generate=true
// +groupName=gadgets.opzero.dev
package v1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/conversion"
	"sigs.k8s.io/controller-runtime/pkg/scheme"

	v2 "github.com/opzero/opzero/internal/manifests/testdata/gadgets/api/v2"
)

// GroupVersion is gadgets.opzero.dev/v1.
var GroupVersion = schema.GroupVersion{Group: "gadgets.opzero.dev", Version: "v1"}

var (
	// SchemeBuilder registers the types.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}
	// AddToScheme adds Gadget to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

// GadgetSpec is a gadget's size and color.
type GadgetSpec struct {
	Size  int32  `json:"size,omitempty"`
	Color string `json:"color,omitempty"`
}

// Gadget is a test kind with two versions.
//
// +kubebuilder:object:root=true
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

var _ conversion.Convertible = (*Gadget)(nil)

// ConvertTo converts to the hub: size is v2's length.
func (g *Gadget) ConvertTo(dst conversion.Hub) error {
	h := dst.(*v2.Gadget)
	h.ObjectMeta = g.ObjectMeta
	h.Spec = v2.GadgetSpec{Length: g.Spec.Size, Color: g.Spec.Color}
	return nil
}

// ConvertFrom converts from the hub.
func (g *Gadget) ConvertFrom(src conversion.Hub) error {
	h := src.(*v2.Gadget)
	g.ObjectMeta = h.ObjectMeta
	g.Spec = GadgetSpec{Size: h.Spec.Length, Color: h.Spec.Color}
	return nil
}

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
