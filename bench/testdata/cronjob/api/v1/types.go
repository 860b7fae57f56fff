// Package v1 is the API of the bench's CronJob-style project:
// kubebuilder's CronJob tutorial in shape, whose status is what the
// reconciler lists of its children (status.active) and carries no
// observedGeneration; and ObservedCronJob, the same kind with
// status.observedGeneration, the idle part's baseline.
//
// +kubebuilder:object:generate=true
// +groupName=tutorial.opzero.dev
package v1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

// GroupVersion is tutorial.opzero.dev/v1.
var GroupVersion = schema.GroupVersion{Group: "tutorial.opzero.dev", Version: "v1"}

var (
	// SchemeBuilder registers the types.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}
	// AddToScheme adds the kinds to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

// CronJobSpec is the tutorial's, shortened: a schedule and suspend.
type CronJobSpec struct {
	Schedule string `json:"schedule"`
	Suspend  bool   `json:"suspend,omitempty"`
}

// CronJobStatus is the tutorial's: the children it found running. No
// observedGeneration.
type CronJobStatus struct {
	Active []string `json:"active,omitempty"`
}

// CronJob is the tutorial's kind: its status has no observedGeneration.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
type CronJob struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              CronJobSpec   `json:"spec,omitempty"`
	Status            CronJobStatus `json:"status,omitempty"`
}

// CronJobList is a list of CronJobs.
//
// +kubebuilder:object:root=true
type CronJobList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []CronJob `json:"items"`
}

// ObservedCronJobStatus is CronJobStatus with the generation it was
// written for.
type ObservedCronJobStatus struct {
	Active             []string `json:"active,omitempty"`
	ObservedGeneration int64    `json:"observedGeneration,omitempty"`
}

// ObservedCronJob is CronJob whose status carries observedGeneration.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
type ObservedCronJob struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              CronJobSpec           `json:"spec,omitempty"`
	Status            ObservedCronJobStatus `json:"status,omitempty"`
}

// ObservedCronJobList is a list of ObservedCronJobs.
//
// +kubebuilder:object:root=true
type ObservedCronJobList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ObservedCronJob `json:"items"`
}

func init() {
	SchemeBuilder.Register(&CronJob{}, &CronJobList{}, &ObservedCronJob{}, &ObservedCronJobList{})
}

// DeepCopyObject implements runtime.Object.
func (c *CronJob) DeepCopyObject() runtime.Object {
	out := *c
	c.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	out.Status.Active = append([]string(nil), c.Status.Active...)
	return &out
}

// DeepCopyObject implements runtime.Object.
func (l *CronJobList) DeepCopyObject() runtime.Object {
	out := *l
	l.ListMeta.DeepCopyInto(&out.ListMeta)
	out.Items = make([]CronJob, len(l.Items))
	for i := range l.Items {
		out.Items[i] = *l.Items[i].DeepCopyObject().(*CronJob)
	}
	return &out
}

// DeepCopyObject implements runtime.Object.
func (c *ObservedCronJob) DeepCopyObject() runtime.Object {
	out := *c
	c.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	out.Status.Active = append([]string(nil), c.Status.Active...)
	return &out
}

// DeepCopyObject implements runtime.Object.
func (l *ObservedCronJobList) DeepCopyObject() runtime.Object {
	out := *l
	l.ListMeta.DeepCopyInto(&out.ListMeta)
	out.Items = make([]ObservedCronJob, len(l.Items))
	for i := range l.Items {
		out.Items[i] = *l.Items[i].DeepCopyObject().(*ObservedCronJob)
	}
	return &out
}
