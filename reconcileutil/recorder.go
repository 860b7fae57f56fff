package reconcileutil

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/record"
	ref "k8s.io/client-go/tools/reference"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

const eventTimeout = 5 * time.Second

// eventWriter creates Events for the two recorders.
type eventWriter struct {
	c         client.Client
	scheme    *runtime.Scheme
	component string
	instance  string
	log       logr.Logger
}

func newWriter(c client.Client, scheme *runtime.Scheme, component string) eventWriter {
	host, _ := os.Hostname()
	inst := component + "-" + host
	if len(inst) > 128 {
		inst = inst[:128]
	}
	return eventWriter{c: c, scheme: scheme, component: component, instance: inst, log: logr.Discard()}
}

func (w eventWriter) create(ev client.Object, what string) {
	ctx, cancel := context.WithTimeout(context.Background(), eventTimeout)
	defer cancel()
	if err := w.c.Create(ctx, ev); err != nil {
		w.log.Error(err, "writing a Kubernetes Event", "event", what)
	}
}

func (w eventWriter) reference(obj runtime.Object) (*corev1.ObjectReference, error) {
	if obj == nil {
		return nil, nil
	}
	return ref.GetReference(w.scheme, obj)
}

func eventName(base string) string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return base + "." + hex.EncodeToString(b)
}

func namespaceOf(r *corev1.ObjectReference) string {
	if r.Namespace == "" {
		return metav1.NamespaceDefault
	}
	return r.Namespace
}

// Recorder is controller-runtime's recorder.EventRecorder (v0.23 and
// later) by another name: the Eventf of client-go's events.EventRecorder
// and AnnotatedEventf. The method sets are the same, so a Recorder can be
// assigned to a field of either type. It is declared here because
// controller-runtime before v0.23 has no package recorder.
type Recorder interface {
	Eventf(regarding, related runtime.Object, eventtype, reason, action, note string, args ...interface{})
	AnnotatedEventf(regarding, related runtime.Object, annotations map[string]string, eventtype, reason, action, note string, args ...interface{})
}

// EventRecorder writes events.k8s.io/v1 Events synchronously; it is a
// Recorder.
type EventRecorder struct{ eventWriter }

var _ Recorder = (*EventRecorder)(nil)

// NewEventRecorder returns a recorder reporting as component.
func NewEventRecorder(c client.Client, scheme *runtime.Scheme, component string) *EventRecorder {
	return &EventRecorder{newWriter(c, scheme, component)}
}

// WithLogger returns a copy that logs write failures to log.
func (r *EventRecorder) WithLogger(log logr.Logger) *EventRecorder {
	cp := *r
	cp.log = log
	return &cp
}

// Eventf records an Event about regarding (and optionally related).
func (r *EventRecorder) Eventf(regarding, related runtime.Object, eventtype, reason, action, note string, args ...interface{}) {
	r.AnnotatedEventf(regarding, related, nil, eventtype, reason, action, note, args...)
}

// AnnotatedEventf is Eventf with annotations on the Event.
func (r *EventRecorder) AnnotatedEventf(regarding, related runtime.Object, annotations map[string]string, eventtype, reason, action, note string, args ...interface{}) {
	reg, err := r.reference(regarding)
	if err != nil || reg == nil {
		r.log.Error(err, "no reference for an Event's object", "reason", reason)
		return
	}
	rel, _ := r.reference(related)
	ev := &eventsv1.Event{
		ObjectMeta:          metav1.ObjectMeta{Name: eventName(reg.Name), Namespace: namespaceOf(reg), Annotations: annotations},
		EventTime:           metav1.NewMicroTime(time.Now()),
		ReportingController: r.component, ReportingInstance: r.instance,
		Action: action, Reason: reason, Type: eventtype, Note: fmt.Sprintf(note, args...),
		Regarding: *reg, Related: rel,
	}
	r.create(ev, reason)
}

// LegacyEventRecorder writes core/v1 Events synchronously; it is client-go's
// record.EventRecorder.
type LegacyEventRecorder struct{ eventWriter }

var _ record.EventRecorder = (*LegacyEventRecorder)(nil)

// NewLegacyEventRecorder returns a core/v1 recorder reporting as component.
func NewLegacyEventRecorder(c client.Client, scheme *runtime.Scheme, component string) *LegacyEventRecorder {
	return &LegacyEventRecorder{newWriter(c, scheme, component)}
}

// Event records an Event about object.
func (r *LegacyEventRecorder) Event(object runtime.Object, eventtype, reason, message string) {
	r.AnnotatedEventf(object, nil, eventtype, reason, "%s", message)
}

// Eventf is Event with a format.
func (r *LegacyEventRecorder) Eventf(object runtime.Object, eventtype, reason, messageFmt string, args ...interface{}) {
	r.AnnotatedEventf(object, nil, eventtype, reason, messageFmt, args...)
}

// AnnotatedEventf is Eventf with annotations on the Event.
func (r *LegacyEventRecorder) AnnotatedEventf(object runtime.Object, annotations map[string]string, eventtype, reason, messageFmt string, args ...interface{}) {
	inv, err := r.reference(object)
	if err != nil || inv == nil {
		r.log.Error(err, "no reference for an Event's object", "reason", reason)
		return
	}
	now := metav1.Now()
	ev := &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Name: eventName(inv.Name), Namespace: namespaceOf(inv), Annotations: annotations},
		InvolvedObject: *inv, Reason: reason, Message: fmt.Sprintf(messageFmt, args...), Type: eventtype,
		Source: corev1.EventSource{Component: r.component}, FirstTimestamp: now, LastTimestamp: now, Count: 1,
		ReportingController: r.component, ReportingInstance: r.instance,
	}
	r.create(ev, reason)
}

// WithLogger returns a copy that logs write failures to log.
func (r *LegacyEventRecorder) WithLogger(log logr.Logger) *LegacyEventRecorder {
	cp := *r
	cp.log = log
	return &cp
}
