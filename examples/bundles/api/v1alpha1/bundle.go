// Package v1alpha1 is the Bundle API of the bundles test project: a
// cluster-scoped Bundle names a ConfigMap of the trust namespace (the
// manager's --trust-namespace) whose key is copied into a ConfigMap of
// the Bundle's name in every namespace.
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupVersion is bundles.opzero.dev/v1alpha1.
var GroupVersion = schema.GroupVersion{Group: "bundles.opzero.dev", Version: "v1alpha1"}

// AddToScheme adds Bundle and BundleList.
func AddToScheme(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion, &Bundle{}, &BundleList{})
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}

// Source names the trust namespace's ConfigMap and its key.
type Source struct {
	ConfigMap string `json:"configMap"`
	Key       string `json:"key"`
}

// BundleSpec is what a Bundle distributes.
type BundleSpec struct {
	Source Source `json:"source"`
	// TargetKey is the key of each target ConfigMap (default: the source's).
	TargetKey string `json:"targetKey,omitempty"`
}

// BundleStatus is how many namespaces hold the Bundle's target.
type BundleStatus struct {
	Targets            int   `json:"targets,omitempty"`
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
}

// Bundle is cluster-scoped (its targets, in every namespace, have it as
// their controller owner).
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster
// +kubebuilder:subresource:status
type Bundle struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              BundleSpec   `json:"spec,omitempty"`
	Status            BundleStatus `json:"status,omitempty"`
}

// BundleList is a list of Bundles.
//
// +kubebuilder:object:root=true
type BundleList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Bundle `json:"items"`
}

// DeepCopyInto copies b into out.
func (b *Bundle) DeepCopyInto(out *Bundle) {
	*out = *b
	out.TypeMeta = b.TypeMeta
	b.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
}

// DeepCopy copies b.
func (b *Bundle) DeepCopy() *Bundle {
	if b == nil {
		return nil
	}
	out := new(Bundle)
	b.DeepCopyInto(out)
	return out
}

// DeepCopyObject copies b.
func (b *Bundle) DeepCopyObject() runtime.Object { return b.DeepCopy() }

// DeepCopyInto copies l into out.
func (l *BundleList) DeepCopyInto(out *BundleList) {
	*out = *l
	l.ListMeta.DeepCopyInto(&out.ListMeta)
	if l.Items != nil {
		out.Items = make([]Bundle, len(l.Items))
		for i := range l.Items {
			l.Items[i].DeepCopyInto(&out.Items[i])
		}
	}
}

// DeepCopy copies l.
func (l *BundleList) DeepCopy() *BundleList {
	if l == nil {
		return nil
	}
	out := new(BundleList)
	l.DeepCopyInto(out)
	return out
}

// DeepCopyObject copies l.
func (l *BundleList) DeepCopyObject() runtime.Object { return l.DeepCopy() }
