package builder

import (
	"errors"
	"fmt"
	"reflect"
	"slices"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// Runtime is what Complete registers an Controller with: opzero's runtime, in
// either mode.
type Runtime interface {
	GetScheme() *runtime.Scheme
	Register(*Controller) error
}

// Builder collects an Controller description. Its methods record misuse
// instead of panicking; Build and Complete report it.
type Builder struct {
	scheme *runtime.Scheme
	rt     Runtime
	op     Controller
	errs   []error
	forSet bool
	// sweepSet and scaleSet say WithSweep / WithScale were called (else Build
	// applies the defaults).
	sweepSet, scaleSet bool
}

// ControllerManagedBy starts a description that Complete registers with rt.
func ControllerManagedBy(rt Runtime) *Builder {
	b := &Builder{rt: rt}
	if rt == nil {
		b.errs = append(b.errs, errors.New("ControllerManagedBy: runtime is nil"))
		return b
	}
	b.scheme = rt.GetScheme()
	return b
}

// New starts a description that Build turns into an Controller without
// registering it (tests, manifest generation).
func New(scheme *runtime.Scheme) *Builder { return &Builder{scheme: scheme} }

// ForOption configures For.
type ForOption func(*Kind)

// WithLabelSelector limits the primary kind to objects matching sel.
func WithLabelSelector(sel labels.Selector) ForOption { return func(k *Kind) { k.Selector = sel } }

// Change is a part of an object whose change an update must bring to
// matter (UpdatedWhen).
type Change string

// The parts UpdatedWhen names, as controller-runtime's
// GenerationChangedPredicate, LabelChangedPredicate and
// AnnotationChangedPredicate compare them.
const (
	// GenerationChanged: metadata.generation, which the API server raises
	// on a change of the spec (and when deletion starts), not of the status.
	GenerationChanged  Change = "generation"
	LabelsChanged      Change = "labels"
	AnnotationsChanged Change = "annotations"
)

// UpdatedWhen says an update of the kind matters only when one of changes
// changed since the object's previous change: the opzero hub drops the
// others before it wakes the operator (most often the echo of the
// operator's own status write), and classic mode drops them as
// controller-runtime's predicates would. Creates and deletes always pass.
// With --source=knative every update is delivered: the reconcile must
// still be level-triggered. For For and Owns; WatchUpdatedWhen for Watches.
func UpdatedWhen(changes ...Change) ForOption {
	return func(k *Kind) { k.UpdatedWhen = appendChanges(k.UpdatedWhen, changes) }
}

// WatchUpdatedWhen is UpdatedWhen for a kind given to Watches.
func WatchUpdatedWhen(changes ...Change) WatchOption {
	return func(w *Watch) error {
		w.UpdatedWhen = appendChanges(w.UpdatedWhen, changes)
		return nil
	}
}

func appendChanges(have, more []Change) []Change {
	out := append(slices.Clone(have), more...)
	slices.Sort(out)
	return slices.Compact(out)
}

// For sets the primary kind: requests name its objects.
func (b *Builder) For(obj client.Object, opts ...ForOption) *Builder {
	if b.forSet {
		b.errs = append(b.errs, errors.New("For called twice: an operator reconciles one primary kind; use Owns or Watches for others"))
		return b
	}
	b.forSet = true
	k, err := b.kind("For", obj)
	if err != nil {
		b.errs = append(b.errs, err)
		return b
	}
	for _, o := range opts {
		o(&k)
	}
	b.op.Primary = k
	return b
}

// Owns adds a dependent kind: its events reconcile its controller owner of
// the primary kind. Options as For's (UpdatedWhen, WithLabelSelector).
func (b *Builder) Owns(obj client.Object, opts ...ForOption) *Builder {
	if k, err := b.kind("Owns", obj); err != nil {
		b.errs = append(b.errs, err)
	} else {
		for _, o := range opts {
			o(&k)
		}
		b.op.Owned = append(b.op.Owned, k)
	}
	return b
}

// Watches adds any other kind; fn maps its objects to requests. Options
// may declare how primaries name its objects (ReferencedBy).
func (b *Builder) Watches(obj client.Object, fn MapFunc, opts ...WatchOption) *Builder {
	k, err := b.kind("Watches", obj)
	if err != nil {
		b.errs = append(b.errs, err)
		return b
	}
	w := Watch{Kind: k, Map: fn}
	var errs []error
	if fn == nil {
		errs = append(errs, errors.New("the map function is nil"))
	}
	for _, o := range opts {
		if o == nil {
			errs = append(errs, errors.New("an option is nil"))
		} else if err := o(&w); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		for _, err := range errs {
			b.errs = append(b.errs, fmt.Errorf("Watches(%s): %w", k.GVK.Kind, err))
		}
		return b
	}
	b.op.Watched = append(b.op.Watched, w)
	return b
}

// WithEventFilter drops events for which f returns false, for every kind.
func (b *Builder) WithEventFilter(f Filter) *Builder {
	if f == nil {
		b.errs = append(b.errs, errors.New("WithEventFilter: the filter is nil"))
		return b
	}
	b.op.Filters = append(b.op.Filters, f)
	return b
}

// WithSkipOptions tunes generation-aware skipping of primary updates.
func (b *Builder) WithSkipOptions(o SkipOptions) *Builder { b.op.Skip = o; return b }

// WithAutoObservedGeneration makes the engine write status.observedGeneration
// after each successful reconcile, so reconcilers need not.
func (b *Builder) WithAutoObservedGeneration() *Builder { b.op.AutoObservedGeneration = true; return b }

// Named sets the operator's name (default: the primary kind, lower case).
func (b *Builder) Named(name string) *Builder { b.op.Name = name; return b }

// Build validates the description and returns it.
func (b *Builder) Build(r reconcile.Reconciler) (*Controller, error) {
	errs := append([]error(nil), b.errs...)
	if !b.forSet {
		errs = append(errs, errors.New("For was not called: set the primary kind"))
	}
	if r == nil {
		errs = append(errs, errors.New("the reconciler is nil"))
	}
	if b.op.Name == "" && b.op.Primary.Object != nil {
		b.op.Name = lower(b.op.Primary.GVK.Kind)
	}
	if b.op.Name != "" {
		for _, msg := range validation.IsDNS1123Subdomain(b.op.Name) {
			errs = append(errs, fmt.Errorf("name %q: %s", b.op.Name, msg))
		}
	}
	for _, k := range b.kinds() {
		for _, c := range k.UpdatedWhen {
			if c != GenerationChanged && c != LabelsChanged && c != AnnotationsChanged {
				errs = append(errs, fmt.Errorf("%s: UpdatedWhen(%q): want %q, %q or %q", k.GVK.Kind, c, GenerationChanged, LabelsChanged, AnnotationsChanged))
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("invalid operator description: %w", err)
	}
	b.deployDefaults()
	op := b.op
	op.Reconciler = r
	return &op, nil
}

// Complete builds the description and registers it with the runtime.
func (b *Builder) Complete(r reconcile.Reconciler) error {
	op, err := b.Build(r)
	if err != nil {
		return err
	}
	if b.rt == nil {
		return errors.New("Complete needs a runtime: start with ControllerManagedBy(rt), or use Build")
	}
	return b.rt.Register(op)
}

// kinds are every kind described so far.
func (b *Builder) kinds() []Kind {
	out := append([]Kind{b.op.Primary}, b.op.Owned...)
	for _, w := range b.op.Watched {
		out = append(out, w.Kind)
	}
	return out
}

func (b *Builder) kind(method string, obj client.Object) (Kind, error) {
	if obj == nil || (reflect.ValueOf(obj).Kind() == reflect.Pointer && reflect.ValueOf(obj).IsNil()) {
		return Kind{}, fmt.Errorf("%s: the object is nil (pass a pointer to an empty object, e.g. &v1.Thing{})", method)
	}
	if b.scheme == nil {
		return Kind{}, fmt.Errorf("%s: no scheme to resolve %T", method, obj)
	}
	gvk, err := apiutil.GVKForObject(obj, b.scheme)
	if err != nil {
		return Kind{}, fmt.Errorf("%s(%T): %w (add its package to the scheme)", method, obj, err)
	}
	return Kind{GVK: gvk, Object: obj}, nil
}

func lower(s string) string {
	out := []rune(s)
	for i, r := range out {
		if r >= 'A' && r <= 'Z' {
			out[i] = r + 'a' - 'A'
		}
	}
	return string(out)
}
