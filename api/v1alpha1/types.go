// Package v1alpha1 is opzero's own API: the durable wakeup record (one per
// operator and key, saying when that key must be reconciled again, for
// RequeueAfter or a retry after a failure, even if no instance of the
// operator is running then) and the Subscription an operator gives the
// opzero hub (what it takes events of, sweeps, wakeups, and where they go).
//
// +kubebuilder:object:generate=true
// +groupName=opzero.dev
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

//go:generate go run sigs.k8s.io/controller-tools/cmd/controller-gen@v0.18.0 object paths=. crd:crdVersions=v1 output:crd:artifacts:config=../../config/crd

// GroupVersion is opzero.dev/v1alpha1.
var GroupVersion = schema.GroupVersion{Group: "opzero.dev", Version: "v1alpha1"}

var (
	// SchemeBuilder registers the types.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}
	// AddToScheme adds Wakeup and Subscription to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

// Target is the object to reconcile.
type Target struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Namespace  string `json:"namespace,omitempty"`
	Name       string `json:"name"`
}

// Reasons a wakeup exists.
const (
	ReasonRequeueAfter = "RequeueAfter"
	ReasonRetry        = "Retry"
	// ReasonAccepted: an event was accepted in async mode and its reconcile
	// has not finished yet; if the instance dies first, the wakeup redelivers.
	ReasonAccepted = "Accepted"
)

// WakeupSpec says what to wake, where, and when.
type WakeupSpec struct {
	// Operator is the name of the operator (builder.Controller.Name).
	Operator string `json:"operator"`
	Target   Target `json:"target"`
	// Sink is the URL the wakeup source delivers the event to.
	Sink string `json:"sink"`
	// Due is when to deliver (microsecond precision).
	Due metav1.MicroTime `json:"due"`
	// Reason is RequeueAfter, Retry or Accepted.
	// +kubebuilder:validation:Enum=RequeueAfter;Retry;Accepted
	Reason string `json:"reason"`
	// Attempts counts failed reconciles since the last success: the backoff
	// survives scale to zero.
	Attempts int32 `json:"attempts,omitempty"`
}

// Wakeup is a durable timer for one key of one operator.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:shortName=wk,categories=opzero
// +kubebuilder:printcolumn:name="Operator",type=string,JSONPath=`.spec.operator`
// +kubebuilder:printcolumn:name="Target",type=string,JSONPath=`.spec.target.name`
// +kubebuilder:printcolumn:name="Kind",type=string,JSONPath=`.spec.target.kind`
// +kubebuilder:printcolumn:name="Due",type=string,JSONPath=`.spec.due`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.spec.reason`
// +kubebuilder:printcolumn:name="Attempts",type=integer,JSONPath=`.spec.attempts`
type Wakeup struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec WakeupSpec `json:"spec"`
}

// WakeupList is a list of Wakeups.
//
// +kubebuilder:object:root=true
type WakeupList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Wakeup `json:"items"`
}

func init() { SchemeBuilder.Register(&Wakeup{}, &WakeupList{}) }
