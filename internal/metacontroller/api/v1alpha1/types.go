// Package v1alpha1 is Metacontroller's API (metacontroller.k8s.io/v1alpha1)
// as opzero serves it: CompositeController and DecoratorController with
// Metacontroller's own field names, so that existing objects apply
// unchanged. Users write these objects as YAML; no Go code imports them
// outside opzero.
//
// Fields opzero reads are documented on their types; fields it accepts but
// does not act on say so (examples/metacontroller/README.md has the table).
//
// +kubebuilder:object:generate=true
// +groupName=metacontroller.k8s.io
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

//go:generate go tool controller-gen object paths=. crd:crdVersions=v1 output:crd:artifacts:config=../../../../config/metacontroller

// GroupVersion is metacontroller.k8s.io/v1alpha1.
var GroupVersion = schema.GroupVersion{Group: "metacontroller.k8s.io", Version: "v1alpha1"}

var (
	// SchemeBuilder registers the types.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}
	// AddToScheme adds the types to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func init() {
	SchemeBuilder.Register(&CompositeController{}, &CompositeControllerList{},
		&DecoratorController{}, &DecoratorControllerList{})
}

// CompositeController manages a set of children for each object of a parent
// resource: a sync hook answers the children (and the parent's status) the
// parent should have.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:metadata:annotations="api-approved.kubernetes.io=unapproved, request not yet submitted"
// +kubebuilder:resource:path=compositecontrollers,scope=Cluster,shortName=cc;cctl
type CompositeController struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`

	Spec   CompositeControllerSpec   `json:"spec"`
	Status CompositeControllerStatus `json:"status,omitempty"`
}

// CompositeControllerSpec is what a CompositeController manages and which hooks it calls.
type CompositeControllerSpec struct {
	ParentResource CompositeControllerParentResourceRule  `json:"parentResource"`
	ChildResources []CompositeControllerChildResourceRule `json:"childResources,omitempty"`

	Hooks *CompositeControllerHooks `json:"hooks,omitempty"`

	// ResyncPeriodSeconds: every parent is synced again this long after its
	// last sync (a durable wakeup when the operator runs serverless).
	ResyncPeriodSeconds *int32 `json:"resyncPeriodSeconds,omitempty"`
	// GenerateSelector: accepted; opzero finds children by their controller
	// ownerReference, never by a selector, so it changes nothing.
	GenerateSelector *bool `json:"generateSelector,omitempty"`
}

// ResourceRule names a resource: apiVersion (group/version) and its plural.
type ResourceRule struct {
	APIVersion string `json:"apiVersion"`
	Resource   string `json:"resource"`
}

// CompositeControllerParentResourceRule is the parent resource.
type CompositeControllerParentResourceRule struct {
	ResourceRule `json:",inline"`
	// RevisionHistory is accepted and ignored (opzero keeps no ControllerRevisions).
	RevisionHistory *CompositeControllerRevisionHistory `json:"revisionHistory,omitempty"`
}

// CompositeControllerRevisionHistory lists the parent's fields a revision covers.
type CompositeControllerRevisionHistory struct {
	FieldPaths []string `json:"fieldPaths,omitempty"`
}

// ChildUpdateMethod is how a child that differs from the hook's answer is updated.
type ChildUpdateMethod string

// The update methods. opzero implements OnDelete, Recreate and InPlace; the
// rolling ones are applied as their non-rolling counterparts (all at once).
const (
	ChildUpdateOnDelete        ChildUpdateMethod = "OnDelete"
	ChildUpdateRecreate        ChildUpdateMethod = "Recreate"
	ChildUpdateInPlace         ChildUpdateMethod = "InPlace"
	ChildUpdateRollingRecreate ChildUpdateMethod = "RollingRecreate"
	ChildUpdateRollingInPlace  ChildUpdateMethod = "RollingInPlace"
)

// CompositeControllerChildResourceRule is one child resource.
type CompositeControllerChildResourceRule struct {
	ResourceRule   `json:",inline"`
	UpdateStrategy *CompositeControllerChildUpdateStrategy `json:"updateStrategy,omitempty"`
}

// CompositeControllerChildUpdateStrategy says how children of the resource are updated.
type CompositeControllerChildUpdateStrategy struct {
	Method ChildUpdateMethod `json:"method,omitempty"`
	// StatusChecks are accepted and ignored (they pace rolling updates).
	StatusChecks ChildUpdateStatusChecks `json:"statusChecks,omitempty"`
}

// ChildUpdateStatusChecks are the checks a rolling update waits for.
type ChildUpdateStatusChecks struct {
	Conditions []StatusConditionCheck `json:"conditions,omitempty"`
}

// StatusConditionCheck is one condition a rolled child must have.
type StatusConditionCheck struct {
	Type   string  `json:"type"`
	Status *string `json:"status,omitempty"`
	Reason *string `json:"reason,omitempty"`
}

// CompositeControllerHooks are the hooks of a CompositeController.
type CompositeControllerHooks struct {
	// Customize names the related objects sent to sync and finalize.
	Customize *Hook `json:"customize,omitempty"`
	Sync      *Hook `json:"sync,omitempty"`
	Finalize  *Hook `json:"finalize,omitempty"`
	// PreUpdateChild and PostUpdateChild are accepted and not called.
	PreUpdateChild  *Hook `json:"preUpdateChild,omitempty"`
	PostUpdateChild *Hook `json:"postUpdateChild,omitempty"`
}

// Hook is one hook: a webhook.
type Hook struct {
	Webhook *Webhook `json:"webhook,omitempty"`
}

// Webhook is where a hook is called: a URL, or a Service in the cluster
// (http://<name>.<namespace>:<port><path>).
type Webhook struct {
	URL *string `json:"url,omitempty"`
	// Timeout bounds one call (default 10s).
	Timeout *metav1.Duration `json:"timeout,omitempty"`

	Path    *string           `json:"path,omitempty"`
	Service *ServiceReference `json:"service,omitempty"`
	// Etag is accepted and ignored (opzero does not cache hook answers).
	Etag *WebhookEtagConfig `json:"etag,omitempty"`
}

// WebhookEtagConfig is Metacontroller's hook answer cache.
type WebhookEtagConfig struct {
	Enabled             *bool  `json:"enabled,omitempty"`
	CacheTimeoutSeconds *int32 `json:"cacheTimeoutSeconds,omitempty"`
	CacheCleanupSeconds *int32 `json:"cacheCleanupSeconds,omitempty"`
}

// ServiceReference names a Service that serves a hook.
type ServiceReference struct {
	Name      string `json:"name"`
	Namespace string `json:"namespace"`
	Port      *int32 `json:"port,omitempty"`
	// Protocol is http (default) or https.
	Protocol *string `json:"protocol,omitempty"`
}

// CompositeControllerStatus is empty, as in Metacontroller.
type CompositeControllerStatus struct{}

// CompositeControllerList is a list of CompositeControllers.
//
// +kubebuilder:object:root=true
type CompositeControllerList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata"`
	Items           []CompositeController `json:"items"`
}

// DecoratorController attaches children (attachments) to existing objects of
// one or more resources, selected by labels and annotations.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:metadata:annotations="api-approved.kubernetes.io=unapproved, request not yet submitted"
// +kubebuilder:resource:path=decoratorcontrollers,scope=Cluster,shortName=dec;decorators
type DecoratorController struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`

	Spec   DecoratorControllerSpec   `json:"spec"`
	Status DecoratorControllerStatus `json:"status,omitempty"`
}

// DecoratorControllerSpec is what a DecoratorController decorates and which hooks it calls.
type DecoratorControllerSpec struct {
	Resources   []DecoratorControllerResourceRule   `json:"resources"`
	Attachments []DecoratorControllerAttachmentRule `json:"attachments,omitempty"`

	Hooks *DecoratorControllerHooks `json:"hooks,omitempty"`

	ResyncPeriodSeconds *int32 `json:"resyncPeriodSeconds,omitempty"`
}

// DecoratorControllerResourceRule is one decorated resource and which of its objects.
type DecoratorControllerResourceRule struct {
	ResourceRule       `json:",inline"`
	LabelSelector      *metav1.LabelSelector `json:"labelSelector,omitempty"`
	AnnotationSelector *AnnotationSelector   `json:"annotationSelector,omitempty"`
}

// AnnotationSelector selects objects by annotations, as a label selector does by labels.
type AnnotationSelector struct {
	MatchAnnotations map[string]string                 `json:"matchAnnotations,omitempty"`
	MatchExpressions []metav1.LabelSelectorRequirement `json:"matchExpressions,omitempty"`
}

// DecoratorControllerAttachmentRule is one attachment resource.
type DecoratorControllerAttachmentRule struct {
	ResourceRule   `json:",inline"`
	UpdateStrategy *DecoratorControllerAttachmentUpdateStrategy `json:"updateStrategy,omitempty"`
}

// DecoratorControllerAttachmentUpdateStrategy says how attachments are updated.
type DecoratorControllerAttachmentUpdateStrategy struct {
	Method ChildUpdateMethod `json:"method,omitempty"`
}

// DecoratorControllerHooks are the hooks of a DecoratorController.
type DecoratorControllerHooks struct {
	// Customize names the related objects sent to sync and finalize.
	Customize *Hook `json:"customize,omitempty"`
	Sync      *Hook `json:"sync,omitempty"`
	Finalize  *Hook `json:"finalize,omitempty"`
}

// DecoratorControllerStatus is empty, as in Metacontroller.
type DecoratorControllerStatus struct{}

// DecoratorControllerList is a list of DecoratorControllers.
//
// +kubebuilder:object:root=true
type DecoratorControllerList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata"`
	Items           []DecoratorController `json:"items"`
}
