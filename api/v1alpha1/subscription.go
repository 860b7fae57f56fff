package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Subscription modes, as an ApiServerSource's spec.mode.
const (
	ModeResource  = "Resource"
	ModeReference = "Reference"
)

// Subscription condition types. Ready is True when every other one is.
const (
	// SubscriptionReady: the hub delivers what the Subscription asks for.
	SubscriptionReady = "Ready"
	// SubscriptionValid: every resource names a known kind, every selector
	// and schedule parses.
	SubscriptionValid = "Valid"
	// SubscriptionSinkResolved: the sink resolved to a URL.
	SubscriptionSinkResolved = "SinkResolved"
	// SubscriptionAuthorized: the service account may itself get, list and
	// watch every resource it subscribes to (SubjectAccessReview).
	SubscriptionAuthorized = "Authorized"
	// SubscriptionTargetHealthy (a Deployment sink only): the hub scales
	// the Deployment as the spec says: it is not scaled by someone else
	// (by hand, an HPA) and its last wake made a pod ready in time. It
	// does not take part in Ready: a Deployment with trouble is still
	// woken by what changes.
	SubscriptionTargetHealthy = "TargetHealthy"
)

// States of a Deployment sink (TargetStatus.State).
const (
	// TargetZero: 0 replicas; the next change let through wakes it.
	TargetZero = "Zero"
	// TargetWaking: scaled to 1 by the hub, no pod ready yet.
	TargetWaking = "Waking"
	// TargetUp: a pod is ready and a change was let through, or work is
	// in flight, within spec.scaleToZero.idleAfter.
	TargetUp = "Up"
	// TargetIdle: a pod is ready, nothing was let through since
	// status.target.idleSince and no work is in flight: it goes back to
	// zero at idleSince + idleAfter.
	TargetIdle = "Idle"
	// TargetUnmanaged: scaled by someone else (more than one replica, an
	// HorizontalPodAutoscaler): left as it is.
	TargetUnmanaged = "Unmanaged"
)

// Destination is where events go: a reference to an addressable object in
// the Subscription's namespace (a Knative Service: its status.address.url),
// or a URI. Knative's duckv1.Destination, without the CA certificates.
//
// A reference to a Deployment (apps/v1) is an unchanged operator: the hub
// sends it no event; a change it lets through scales the Deployment to
// one replica, and the operator's own list and watch see the change
// (spec.scaleToZero).
type Destination struct {
	Ref *KReference `json:"ref,omitempty"`
	URI string      `json:"uri,omitempty"`
	// Audience is the OIDC audience of the tokens sent with each event.
	Audience string `json:"audience,omitempty"`
}

// KReference names an object in the Subscription's namespace.
type KReference struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Name       string `json:"name"`
}

// SubscribedResource is one kind the operator takes events of.
type SubscribedResource struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	// Mode is Resource (the event carries the object) or Reference (only
	// kind, namespace, name and apiVersion), as an ApiServerSource's.
	// +kubebuilder:validation:Enum=Resource;Reference
	// +kubebuilder:default=Reference
	Mode string `json:"mode,omitempty"`
	// Namespaces limits the events to these namespaces; empty is every
	// namespace.
	Namespaces []string `json:"namespaces,omitempty"`
	// LabelSelector in its string form (kubectl's -l); empty is everything.
	LabelSelector string `json:"labelSelector,omitempty"`
	// Owner keeps only objects whose controller ownerReference is of this
	// kind (an ApiServerSource's spec.owner).
	Owner *OwnerFilter `json:"owner,omitempty"`
	// ReferencedBy keeps only objects that some object of another kind
	// names in a field (a ConfigWatcher's spec.configMap names a ConfigMap
	// in its own namespace): the operator is not woken for the rest.
	ReferencedBy *Referrer `json:"referencedBy,omitempty"`
	// SkipObserved drops, in the hub, the updates the operator would
	// acknowledge without a reconcile (its generation-aware skipping of the
	// primary kind): metadata.generation <= status.observedGeneration, not
	// being deleted, and no change of the finalizers (nor of the labels or
	// annotations it names) since the object's previous change. Such an
	// update is most often the echo of the operator's own status write.
	// Resource mode only (a metadata watch carries no status).
	SkipObserved *SkipObserved `json:"skipObserved,omitempty"`
	// UpdatedWhen drops, in the hub, an update that changes none of these
	// parts of the object since the object's previous change the hub saw:
	// generation (a spec change), labels, annotations, as the operator's
	// own predicates (controller-runtime's GenerationChangedPredicate,
	// LabelChangedPredicate, AnnotationChangedPredicate) would drop it.
	// Creates and deletes are always sent, and so is an update of an
	// object the hub has not seen change before (after it starts, or
	// forgotten: it remembers a bounded number per watch). Empty sends
	// every update.
	// +listType=set
	UpdatedWhen []UpdatedPart `json:"updatedWhen,omitempty"`
	// Events drops, in the hub, a change of a type not listed (created,
	// updated, deleted), before it wakes the operator: an operator that
	// acts only on new Namespaces lists created and is not woken by their
	// updates. As the watch reports them: with a labelSelector, an object
	// that comes to match is a create and one that stops matching a
	// delete. A relist (the watch lost its resource version) cannot tell
	// a create from an update: what it finds changed is sent when created
	// or updated is listed, and the deletes it cannot see are left to the
	// sweep it asks for. Sweeps, Wakeups and a Deployment sink's longest
	// sleep are not changes and are not filtered. Empty sends every type.
	// +listType=set
	Events []EventType `json:"events,omitempty"`
}

// EventType is a type of change for SubscribedResource.Events.
// +kubebuilder:validation:Enum=created;updated;deleted
type EventType string

// The types Events names.
const (
	EventCreated EventType = "created"
	EventUpdated EventType = "updated"
	EventDeleted EventType = "deleted"
)

// UpdatedPart is a part of an object for SubscribedResource.UpdatedWhen.
// +kubebuilder:validation:Enum=generation;labels;annotations
type UpdatedPart string

// The parts UpdatedWhen names.
const (
	UpdatedGeneration  UpdatedPart = "generation"
	UpdatedLabels      UpdatedPart = "labels"
	UpdatedAnnotations UpdatedPart = "annotations"
)

// OwnerFilter is a controller owner's kind.
type OwnerFilter struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
}

// Referrer is a kind whose objects name objects of the subscribed kind, in
// their own namespace, in one string field.
type Referrer struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	// FieldPath is the field holding the referenced name, dot separated
	// (spec.configMap).
	FieldPath string `json:"fieldPath"`
}

// SkipObserved says which metadata besides finalizers counts as a change
// for SubscribedResource.SkipObserved (the operator's
// builder.SkipOptions).
type SkipObserved struct {
	// Labels: a change of the labels is delivered.
	Labels bool `json:"labels,omitempty"`
	// Annotations: a change of the annotations is delivered.
	Annotations bool `json:"annotations,omitempty"`
}

// Sweep is a periodic event, as a PingSource's: no data is the
// anti-entropy sweep, {"sweep":"all"} the full one.
type Sweep struct {
	// Name makes the event's source, /apis/v1/namespaces/<ns>/pingsources/<name>.
	Name string `json:"name"`
	// Schedule is a cron schedule (five fields, or @hourly, @daily, ...;
	// CRON_TZ= allowed).
	Schedule string `json:"schedule"`
	Data     string `json:"data,omitempty"`
}

// Delivery is how failed sends are retried (Knative's delivery spec).
type Delivery struct {
	// Retry is how many times a failed send is retried (10).
	Retry *int32 `json:"retry,omitempty"`
	// BackoffDelay is the first retry's delay, doubled each time (PT0.2S or
	// 200ms).
	BackoffDelay string `json:"backoffDelay,omitempty"`
	// DeadLetterSink gets what could not be delivered.
	DeadLetterSink *Destination `json:"deadLetterSink,omitempty"`
	// Concurrency bounds the events sent at once (16); events of one object
	// are always sent in order, one at a time.
	Concurrency *int32 `json:"concurrency,omitempty"`
}

// SubscriptionSpec is what one serverless operator asks the hub for.
type SubscriptionSpec struct {
	// Operator is the operator's name: the hub delivers the Wakeups of this
	// namespace whose spec.operator is it to the sink.
	Operator string `json:"operator"`
	// Operators are the other controllers of the operator's binary when it
	// runs several (serverless.Group, a kubebuilder multigroup project):
	// their Wakeups go to the sink too. Operator then names the binary's
	// Service.
	Operators []string `json:"operators,omitempty"`
	// ServiceAccountName is the operator's service account: the hub
	// delivers only what it may itself get, list and watch.
	ServiceAccountName string               `json:"serviceAccountName"`
	Sink               Destination          `json:"sink"`
	Resources          []SubscribedResource `json:"resources,omitempty"`
	Sweeps             []Sweep              `json:"sweeps,omitempty"`
	// Wakeups delivers the operator's durable Wakeups when due.
	Wakeups  bool      `json:"wakeups,omitempty"`
	Delivery *Delivery `json:"delivery,omitempty"`
	// ScaleToZero is how a Deployment sink is started and stopped (only
	// with one).
	ScaleToZero *ScaleToZero `json:"scaleToZero,omitempty"`
}

// ScaleToZero is how the hub serves an unchanged operator's Deployment:
// it stays at 0 replicas until a change the Subscription lets through,
// is scaled to 1 then (its own spec.replicas), and back to 0 once it has
// been idle for IdleAfter.
type ScaleToZero struct {
	// IdleAfter is how long a ready pod runs with nothing let through and
	// no work in flight before the Deployment goes back to 0 (60s). It
	// also covers the operator's start: counted from the pod's readiness.
	IdleAfter *metav1.Duration `json:"idleAfter,omitempty"`
	// MaxSleep is the longest the Deployment stays at 0 (1h): it is woken
	// then even if nothing changed, for what the hub cannot see (a
	// RequeueAfter, an external system). 0 is never.
	MaxSleep *metav1.Duration `json:"maxSleep,omitempty"`
	// ReadyTimeout: a woken pod not ready after it makes TargetHealthy
	// False (5m); the Deployment still goes back to 0 when idle.
	ReadyTimeout *metav1.Duration `json:"readyTimeout,omitempty"`
	// Metrics is where the operator serves controller-runtime's metrics:
	// the Deployment is not stopped while workqueue_depth,
	// workqueue_unfinished_work_seconds or controller_runtime_active_workers
	// is above 0. None: the idle period alone decides.
	Metrics *MetricsEndpoint `json:"metrics,omitempty"`
	// LeaderElectionLeases are the Leases (in the Deployment's namespace)
	// the operator elects its leader with: one still held by a pod of the
	// Deployment that is gone is released before the next pod waits on
	// it for its whole duration. Empty: any Lease held by a gone pod of
	// the Deployment (its holderIdentity is the pod's name, then "_").
	LeaderElectionLeases []string `json:"leaderElectionLeases,omitempty"`
}

// MetricsEndpoint is a pod's Prometheus endpoint.
type MetricsEndpoint struct {
	Port int32 `json:"port"`
	// Path (/metrics).
	Path string `json:"path,omitempty"`
	// Scheme is http or https (https: the certificate is not verified,
	// the hub's service account token is sent, as to
	// controller-runtime's secure metrics server).
	// +kubebuilder:validation:Enum=http;https
	Scheme string `json:"scheme,omitempty"`
}

// TargetStatus is what the hub does with a Deployment sink.
type TargetStatus struct {
	// State is Zero, Waking, Up, Idle or Unmanaged.
	State string `json:"state,omitempty"`
	// Replicas is the Deployment's spec.replicas as last read.
	Replicas int32 `json:"replicas"`
	// Wakes counts the scale-ups from 0 by this Subscription.
	Wakes int64 `json:"wakes,omitempty"`
	// LastWake is when it was last scaled up, LastWakeReason why (the
	// change, sweep or schedule that did it).
	LastWake       *metav1.Time `json:"lastWake,omitempty"`
	LastWakeReason string       `json:"lastWakeReason,omitempty"`
	// ReadyAfter is how long the last wake took until a pod was ready.
	ReadyAfter string `json:"readyAfter,omitempty"`
	// IdleSince is when the last change was let through or work was last
	// seen in flight.
	IdleSince *metav1.Time `json:"idleSince,omitempty"`
	// Metrics says what the last read of the operator's metrics found.
	Metrics string `json:"metrics,omitempty"`
}

// Progress is how far the hub has delivered one resource's changes.
type Progress struct {
	// Resource is apiVersion/kind.
	Resource string `json:"resource"`
	// ResourceVersion: every change up to it has been delivered.
	ResourceVersion string `json:"resourceVersion"`
}

// SubscriptionStatus is written by the hub.
type SubscriptionStatus struct {
	ObservedGeneration int64              `json:"observedGeneration,omitempty"`
	Conditions         []metav1.Condition `json:"conditions,omitempty"`
	SinkURI            string             `json:"sinkUri,omitempty"`
	Progress           []Progress         `json:"progress,omitempty"`
	// Target is the Deployment sink's state.
	Target *TargetStatus `json:"target,omitempty"`
}

// Subscription asks the opzero hub, one process per cluster, to deliver an
// operator's Kubernetes events, sweeps and wakeups (instead of one
// ApiServerSource adapter per kind, PingSources and a wakeup source per
// operator).
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=hubsub,categories=opzero
// +kubebuilder:printcolumn:name="Operator",type=string,JSONPath=`.spec.operator`
// +kubebuilder:printcolumn:name="Sink",type=string,JSONPath=`.status.sinkUri`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`
// +kubebuilder:printcolumn:name="State",type=string,JSONPath=`.status.target.state`
// +kubebuilder:printcolumn:name="Wakes",type=integer,JSONPath=`.status.target.wakes`,priority=1
// +kubebuilder:printcolumn:name="Last-Wake",type=string,JSONPath=`.status.target.lastWakeReason`,priority=1
// +kubebuilder:printcolumn:name="Idle-Since",type=date,JSONPath=`.status.target.idleSince`,priority=1
type Subscription struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   SubscriptionSpec   `json:"spec"`
	Status SubscriptionStatus `json:"status,omitempty"`
}

// SubscriptionList is a list of Subscriptions.
//
// +kubebuilder:object:root=true
type SubscriptionList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Subscription `json:"items"`
}

func init() { SchemeBuilder.Register(&Subscription{}, &SubscriptionList{}) }
