package builder

import (
	"context"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// Controller is the mode-agnostic description Build returns.
type Controller struct {
	// Name names the operator: the controller name in classic mode, the
	// prefix of generated resources, the reporting component of Events.
	Name string
	// Primary is the kind reconciled: a Request's key is one of its objects.
	Primary Kind
	// Owned kinds map to the key of their controller owner of the Primary kind.
	Owned []Kind
	// Watched kinds map to keys through their MapFunc.
	Watched []Watch
	// Events are external CloudEvents (WatchesEvents): one Knative Trigger
	// each on the operator's Broker, mapped to keys through their EventMapFunc.
	Events []EventWatch
	// Filters drop events before they reach the queue; all must pass.
	Filters []Filter
	// Skip says which updates of the Primary kind are acknowledged without a
	// reconcile (generation-aware skipping).
	Skip SkipOptions
	// AutoObservedGeneration makes the engine set status.observedGeneration
	// to the reconciled generation after a successful reconcile.
	AutoObservedGeneration bool
	// Deploy is how it is deployed (sweeps, instance bounds); only the
	// manifest generator reads it.
	Deploy DeploySettings
	// Env are the environment variables the operator needs (WithEnv,
	// WithSecretEnv), in the order declared; only the manifest generator
	// reads them.
	Env []EnvVar
	// Warnings are what the operator can run with but serves only in part
	// (an adopted controller's source that watches no kind); opzero
	// manifests prints them.
	Warnings []string
	// Notes are what opzero manifests says of how an adopted controller's
	// watches are served where that differs from how the project wrote
	// them (a source on a cache the project built); not a fault.
	Notes []string
	// Unserved are the sources an adopted controller runs code of its own
	// for (source.Func, a custom source.Source), which nothing runs at
	// zero: opzero manifests refuses to write the serverless manifests
	// unless told to serve the rest (--allow-unserved).
	Unserved   []Source
	Reconciler reconcile.Reconciler
}

// Source is a source of events that watches no kind, and where its code is
// (File empty when it has none of its own).
type Source struct {
	Name string
	File string
	Line int
}

// Kind is one watched kind.
type Kind struct {
	GVK schema.GroupVersionKind
	// Object is a prototype of the Go type (never mutated).
	Object client.Object
	// Selector limits events by labels; nil means everything.
	Selector labels.Selector
	// UpdatedWhen, if set, says an update of the kind matters only when
	// one of these parts of the object changed (UpdatedWhen); nil means
	// every update.
	UpdatedWhen []Change
	// Unfiltered names filters of the operator's own on this kind that no
	// event source can apply before waking it (an adopted controller's
	// predicates that are functions): `opzero manifests` says each.
	Unfiltered []string
	// TypeFilters are, for each source of the kind (an adopted
	// controller's event handler), the functions its predicate.Funcs set,
	// by type of change: `opzero manifests` reads them in the project's
	// source, and a type of change every source drops with a function that
	// always returns false is dropped by the hub before the wake. Nil: not
	// read; only the manifest generator reads it.
	TypeFilters [][]FuncSite
	// Everywhere says the kind is watched through a cache the operator
	// built itself (an adopted controller's WatchesRawSource on a
	// cache.New), which the manager cache's options do not narrow; only
	// the manifest generator reads it.
	Everywhere bool
}

// FuncSite is a function a predicate sets for one type of change
// ("created", "updated", "deleted") and where it is declared.
type FuncSite struct {
	Type string
	File string
	Line int
}

// Watch is a watched kind and how its events map to primary keys.
type Watch struct {
	Kind
	Map MapFunc
	// ReferencedBy is the field path (dot separated) in which objects of
	// the Primary kind name objects of this kind in their own namespace;
	// "" makes no promise. Only event sources read it (ReferencedBy).
	ReferencedBy string
}

// MapFunc maps an object of a watched kind to the requests to reconcile.
// There may be no cache: c reads from the API server. In Reference mode obj
// carries only its name and namespace; Get it when more is needed. An error
// (the API server could not be read) makes a serverless operator answer 503
// so that the sender retries the event; a classic one logs it.
type MapFunc func(ctx context.Context, c client.Reader, obj client.Object) ([]reconcile.Request, error)

// EventType is what happened to an object.
type EventType string

// The event types filters see.
const (
	Added   EventType = "add"
	Updated EventType = "update"
	Deleted EventType = "delete"
)

// Event is what a Filter decides on. Object may be a prototype holding only
// name and namespace (Reference mode). There is no old object: a serverless
// operator only gets the new state.
type Event struct {
	Type   EventType
	Object client.Object
}

// Filter keeps an event when it returns true.
type Filter func(Event) bool

// SkipOptions tunes generation-aware skipping of Primary updates. An update
// whose metadata.generation <= status.observedGeneration, that is not a
// deletion and changes no finalizer, is acknowledged with no reconcile.
type SkipOptions struct {
	// Disabled reconciles every update.
	Disabled bool
	// OnLabelChange and OnAnnotationChange also reconcile when labels or
	// annotations changed.
	OnLabelChange      bool
	OnAnnotationChange bool
}
