// Package v1 is the ConfigWatcher API from Kubernetes Patterns, chapter
// "Operator" (Example 23-5), exactly as the book writes it:
// apiVersion k8spatterns.io/v1, kind ConfigWatcher, spec.configMap and
// spec.podSelector.
//
// +kubebuilder:object:generate=true
// +groupName=k8spatterns.io
package v1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

//go:generate go run sigs.k8s.io/controller-tools/cmd/controller-gen@v0.18.0 object paths=. crd:crdVersions=v1 output:crd:artifacts:config=../../config/crd

// GroupVersion is k8spatterns.io/v1.
var GroupVersion = schema.GroupVersion{Group: "k8spatterns.io", Version: "v1"}

var (
	// SchemeBuilder registers the types.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}
	// AddToScheme adds ConfigWatcher to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

// ConfigWatcherSpec names a ConfigMap and the pods to restart when it changes.
type ConfigWatcherSpec struct {
	// ConfigMap is the name of the ConfigMap to watch, in the same namespace.
	// +kubebuilder:validation:MinLength=1
	ConfigMap string `json:"configMap"`
	// PodSelector selects the pods to restart (by deleting them, so that
	// their ReplicaSet brings them back with the new configuration).
	// +kubebuilder:validation:MinProperties=1
	PodSelector map[string]string `json:"podSelector"`
}

// ConfigWatcherStatus is what the operator last did.
type ConfigWatcherStatus struct {
	// ObservedGeneration is the generation last reconciled.
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Conditions: Ready.
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// ConfigMapVersion is the resourceVersion of the ConfigMap last acted on:
	// a different one means the ConfigMap changed.
	ConfigMapVersion string `json:"configMapVersion,omitempty"`
	// Restarts counts the restarts of the selected pods.
	Restarts int64 `json:"restarts,omitempty"`
	// LastRestartTime is when the pods were last restarted.
	LastRestartTime *metav1.Time `json:"lastRestartTime,omitempty"`
}

// ConfigWatcher restarts pods when a ConfigMap changes.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=cw
// +kubebuilder:printcolumn:name="ConfigMap",type=string,JSONPath=`.spec.configMap`
// +kubebuilder:printcolumn:name="Restarts",type=integer,JSONPath=`.status.restarts`
// +kubebuilder:printcolumn:name="Last Restart",type=date,JSONPath=`.status.lastRestartTime`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type ConfigWatcher struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   ConfigWatcherSpec   `json:"spec,omitempty"`
	Status ConfigWatcherStatus `json:"status,omitempty"`
}

// ConfigWatcherList is a list of ConfigWatchers.
//
// +kubebuilder:object:root=true
type ConfigWatcherList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ConfigWatcher `json:"items"`
}

func init() { SchemeBuilder.Register(&ConfigWatcher{}, &ConfigWatcherList{}) }
