// Package v1alpha1 is the Database API (postgres.example.opzero.dev/v1alpha1):
// a PostgreSQL database, the role that owns it and a Secret with its
// credentials, in the Database's namespace.
//
// +kubebuilder:object:generate=true
// +groupName=postgres.example.opzero.dev
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

//go:generate go run sigs.k8s.io/controller-tools/cmd/controller-gen@v0.23.0 object paths=. crd:crdVersions=v1 output:crd:artifacts:config=../../config/crd

// GroupVersion is postgres.example.opzero.dev/v1alpha1.
var GroupVersion = schema.GroupVersion{Group: "postgres.example.opzero.dev", Version: "v1alpha1"}

var (
	// SchemeBuilder registers the types.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}
	// AddToScheme adds Database to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

// DatabaseSpec is the database PostgreSQL should have.
type DatabaseSpec struct {
	// DatabaseName is the name of the database and of the role that owns it.
	// Empty: the Database's name with "-" and "." replaced by "_". It must
	// be a lower-case PostgreSQL identifier (a-z, 0-9, _; not starting with
	// a digit or "pg_"; at most 63 bytes); the operator checks it, so a bad
	// name is reported in the status and changes nothing in the server.
	// +optional
	DatabaseName string `json:"databaseName,omitempty"`
	// ConnectionLimit is the database's CONNECTION LIMIT; -1 (the default)
	// is no limit.
	// +kubebuilder:default=-1
	// +kubebuilder:validation:Minimum=-1
	// +optional
	ConnectionLimit int32 `json:"connectionLimit,omitempty"`
	// Extensions are created in the database (CREATE EXTENSION); one
	// removed from the list is dropped.
	// +listType=set
	// +optional
	Extensions []string `json:"extensions,omitempty"`
	// SecretName is the Secret the credentials are written to (keys host,
	// port, user, password, database, uri). Empty: "<name>-credentials".
	// +optional
	SecretName string `json:"secretName,omitempty"`
}

// DatabaseStatus is what the operator last found and did.
type DatabaseStatus struct {
	// ObservedGeneration is the generation last reconciled.
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Conditions: Ready.
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// DatabaseName is the database (and role) the operator manages.
	DatabaseName string `json:"databaseName,omitempty"`
	// SecretName is the Secret holding the credentials.
	SecretName string `json:"secretName,omitempty"`
	// Extensions are the extensions the operator created and keeps.
	// +listType=set
	Extensions []string `json:"extensions,omitempty"`
	// Heals counts the times the operator found the server differing from
	// the spec (drift) and put it back.
	Heals int64 `json:"heals,omitempty"`
	// LastHealTime is when it last did.
	LastHealTime *metav1.Time `json:"lastHealTime,omitempty"`
}

// Database is a PostgreSQL database, its owner role and a credentials Secret.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=pgdb
// +kubebuilder:printcolumn:name="Database",type=string,JSONPath=`.status.databaseName`
// +kubebuilder:printcolumn:name="Secret",type=string,JSONPath=`.status.secretName`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`
// +kubebuilder:printcolumn:name="Heals",type=integer,JSONPath=`.status.heals`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Database struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   DatabaseSpec   `json:"spec,omitempty"`
	Status DatabaseStatus `json:"status,omitempty"`
}

// DatabaseList is a list of Databases.
//
// +kubebuilder:object:root=true
type DatabaseList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Database `json:"items"`
}

func init() { SchemeBuilder.Register(&Database{}, &DatabaseList{}) }
