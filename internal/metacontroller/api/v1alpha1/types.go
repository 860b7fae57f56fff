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

//go:generate go run sigs.k8s.io/controller-tools/cmd/controller-gen@v0.18.0 object paths=. crd:crdVersions=v1 output:crd:artifacts:config=../../../../config/metacontroller

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
	// GenerateSelector: opzero finds children by their controller
	// ownerReference, never by a selector, as Metacontroller does with
	// true; false (the parent's spec.selector, adoption) is reported as
	// unsupported.
	GenerateSelector *bool `json:"generateSelector,omitempty"`

	// EndpointConfigs are the TLS and credentials of the webhooks of each
	// host: a hook whose URL's host (host:port) matches an entry's, and
	// which sets none of caBundle, clientTLS, authorization, basicAuth
	// itself, is called with the first matching entry's.
	EndpointConfigs []EndpointConfig `json:"endpointConfigs,omitempty"`
	// Connections is the name Metacontroller gave EndpointConfigs before
	// (same entries, same meaning): matched after them.
	Connections []EndpointConfig `json:"connections,omitempty"`
}

// ResourceRule names a resource: apiVersion (group/version) and its plural.
type ResourceRule struct {
	APIVersion string `json:"apiVersion"`
	Resource   string `json:"resource"`
}

// CompositeControllerParentResourceRule is the parent resource.
type CompositeControllerParentResourceRule struct {
	ResourceRule `json:",inline"`
	// RevisionHistory is reported as unsupported (opzero keeps no ControllerRevisions).
	RevisionHistory *CompositeControllerRevisionHistory `json:"revisionHistory,omitempty"`
	// LabelSelector limits the parents to the objects whose labels match:
	// others are not synced, and the generated event sources filter by it.
	LabelSelector *metav1.LabelSelector `json:"labelSelector,omitempty"`
	// IgnoreStatusChanges is reported as unsupported: every change of a
	// parent syncs it.
	IgnoreStatusChanges *bool `json:"ignoreStatusChanges,omitempty"`
}

// CompositeControllerRevisionHistory lists the parent's fields a revision covers.
type CompositeControllerRevisionHistory struct {
	FieldPaths []string `json:"fieldPaths,omitempty"`
}

// ChildUpdateMethod is how a child that differs from the hook's answer is updated.
//
// +kubebuilder:validation:Enum=OnDelete;Recreate;InPlace;RollingRecreate;RollingInPlace
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
	// StatusChecks are reported as unsupported (they pace rolling updates).
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
	// PreUpdateChild and PostUpdateChild are reported as unsupported (not
	// called: rolling updates are not built).
	PreUpdateChild  *Hook `json:"preUpdateChild,omitempty"`
	PostUpdateChild *Hook `json:"postUpdateChild,omitempty"`
}

// Hook is one hook: a webhook.
type Hook struct {
	// Version is the hook protocol: v1 (unset means v1) or v2 (children,
	// attachments and related keyed "<namespace>/<name>"; a customize hook
	// may name related objects of a namespaced parent in other namespaces).
	Version *HookVersion `json:"version,omitempty"`
	Webhook *Webhook     `json:"webhook,omitempty"`
}

// HookVersion is a version of the hook protocol.
//
// +kubebuilder:validation:Enum=v1;v2
type HookVersion string

// The hook versions.
const (
	HookVersionV1 HookVersion = "v1"
	HookVersionV2 HookVersion = "v2"
)

// ResponseUnmarshallMode is how strictly a hook's answer is decoded.
//
// +kubebuilder:validation:Enum=loose;strict
type ResponseUnmarshallMode string

// The decoding modes.
const (
	ResponseUnmarshallLoose  ResponseUnmarshallMode = "loose"
	ResponseUnmarshallStrict ResponseUnmarshallMode = "strict"
)

// Webhook is where a hook is called: a URL, or a Service in the cluster
// (http://<name>.<namespace>:<port><path>).
type Webhook struct {
	URL *string `json:"url,omitempty"`
	// Timeout bounds one call (default 10s).
	//
	// +kubebuilder:validation:Format=duration
	Timeout *metav1.Duration `json:"timeout,omitempty"`

	Path    *string           `json:"path,omitempty"`
	Service *ServiceReference `json:"service,omitempty"`
	// Etag with enabled: true is reported as unsupported (opzero does not
	// cache hook answers).
	Etag *WebhookEtagConfig `json:"etag,omitempty"`
	// ResponseUnmarshallMode (Metacontroller spells the field
	// responseUnMarshallMode): loose ignores unknown fields of an answer;
	// strict (the default of v2 hooks) refuses them.
	ResponseUnmarshallMode *ResponseUnmarshallMode `json:"responseUnMarshallMode,omitempty"`
	// CABundle, ClientTLS, Authorization and BasicAuth are this hook's
	// TLS and credentials; any of them set, the controller's
	// endpointConfigs are not consulted for it. Without authorization or
	// basicAuth, opzero's own bearer token is sent, if it has one
	// (--hook-token-file, $METACONTROLLER_HOOK_TOKEN).
	CABundle      *CABundle      `json:"caBundle,omitempty"`
	ClientTLS     *ClientTLS     `json:"clientTLS,omitempty"`
	Authorization *Authorization `json:"authorization,omitempty"`
	BasicAuth     *BasicAuth     `json:"basicAuth,omitempty"`
}

// EndpointConfig is TLS and credentials for the webhooks of one host.
// Authorization and BasicAuth exclude each other.
type EndpointConfig struct {
	// Host is host or host:port, as in a webhook's URL (compared without
	// case; a host without port also matches the scheme's default port).
	Host          string         `json:"host"`
	CABundle      *CABundle      `json:"caBundle,omitempty"`
	ClientTLS     *ClientTLS     `json:"clientTLS,omitempty"`
	Authorization *Authorization `json:"authorization,omitempty"`
	BasicAuth     *BasicAuth     `json:"basicAuth,omitempty"`
}

// CABundle is where the CA certificates of a webhook's server are: inline
// PEM, or a key of a Secret or ConfigMap (one of the three).
type CABundle struct {
	Inline       *string         `json:"inline,omitempty"`
	SecretRef    *ResourceKeyRef `json:"secretRef,omitempty"`
	ConfigMapRef *ResourceKeyRef `json:"configMapRef,omitempty"`
}

// ResourceKeyRef is a key of a Secret or ConfigMap.
type ResourceKeyRef struct {
	Name      string `json:"name"`
	Namespace string `json:"namespace"`
	Key       string `json:"key,omitempty"`
}

// ClientTLS is a client certificate and key, from one Secret.
type ClientTLS struct {
	SecretRef     SecretRef `json:"secretRef"`
	CertKey       string    `json:"certKey,omitempty"`
	PrivateKeyKey string    `json:"privateKeyKey,omitempty"`
}

// Authorization is an Authorization header: a scheme (Bearer by default)
// and a credential from a Secret's key.
type Authorization struct {
	Type      string       `json:"type,omitempty"`
	SecretRef SecretKeyRef `json:"secretRef"`
}

// BasicAuth is a user name and password from one Secret.
type BasicAuth struct {
	SecretRef   SecretRef `json:"secretRef"`
	UsernameKey string    `json:"usernameKey,omitempty"`
	PasswordKey string    `json:"passwordKey,omitempty"`
}

// SecretRef names a Secret.
type SecretRef struct {
	Name      string `json:"name"`
	Namespace string `json:"namespace"`
}

// SecretKeyRef names a key of a Secret.
type SecretKeyRef struct {
	Name      string `json:"name"`
	Namespace string `json:"namespace"`
	Key       string `json:"key"`
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

// CompositeControllerStatus is opzero's: Metacontroller writes none.
type CompositeControllerStatus struct {
	// Conditions: FieldsSupported is False, naming each field, when the
	// controller sets fields opzero does not implement (written when the
	// operator starts).
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// RelatedResources are the resources the customize hook has named so
	// far (opzero's record of what it learned): the operator watches them,
	// as Metacontroller watches what customize answers.
	RelatedResources []RelatedResource `json:"relatedResources,omitempty"`
}

// RelatedResource is one resource a customize hook named.
type RelatedResource struct {
	APIVersion string `json:"apiVersion"`
	Resource   string `json:"resource"`
}

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

	// EndpointConfigs and Connections: as a CompositeController's.
	EndpointConfigs []EndpointConfig `json:"endpointConfigs,omitempty"`
	Connections     []EndpointConfig `json:"connections,omitempty"`
}

// DecoratorControllerResourceRule is one decorated resource and which of its objects.
type DecoratorControllerResourceRule struct {
	ResourceRule       `json:",inline"`
	LabelSelector      *metav1.LabelSelector `json:"labelSelector,omitempty"`
	AnnotationSelector *AnnotationSelector   `json:"annotationSelector,omitempty"`
	// IgnoreStatusChanges is reported as unsupported: every change of a
	// decorated object syncs it.
	IgnoreStatusChanges *bool `json:"ignoreStatusChanges,omitempty"`
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

// DecoratorControllerStatus is opzero's, as CompositeControllerStatus.
type DecoratorControllerStatus struct {
	Conditions       []metav1.Condition `json:"conditions,omitempty"`
	RelatedResources []RelatedResource  `json:"relatedResources,omitempty"`
}

// DecoratorControllerList is a list of DecoratorControllers.
//
// +kubebuilder:object:root=true
type DecoratorControllerList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata"`
	Items           []DecoratorController `json:"items"`
}
