package cloudevent

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/cloudevents/sdk-go/v2/event"
)

// Event types opzero routes.
const (
	PingType     = "dev.knative.sources.ping"
	resourcePfx  = "dev.knative.apiserver.resource."
	referencePfx = "dev.knative.apiserver.ref."
)

// Mode is the ApiServerSource mode an event was sent in.
type Mode string

// The two ApiServerSource modes.
const (
	Resource  Mode = "Resource"
	Reference Mode = "Reference"
)

// Action is what happened to the object.
type Action string

// The ApiServerSource actions.
const (
	Add    Action = "add"
	Update Action = "update"
	Delete Action = "delete"
)

// ObjectEvent is an ApiServerSource event.
type ObjectEvent struct {
	ID         string
	Action     Action
	Mode       Mode
	APIVersion string
	Kind       string
	Namespace  string
	Name       string
	// Object is the object's JSON as the watch saw it (Resource mode only).
	Object []byte
	// Meta is parsed from Object (Resource mode only).
	Meta *Meta
	// Ref is the metadata a Reference-mode event of the opzero hub carries
	// beside the reference (labels, annotations, owner references: what
	// the watch last saw, a delete's included), nil when there is none
	// (Knative's ApiServerSource sends the reference alone).
	Ref *RefMeta
	// Replay: the sender may have sent this change before (extension
	// ReplayExtension "true": the opzero hub resending what a bucket's
	// previous holder, or its own previous process, may have delivered).
	// Its object can be older than what a reconcile already acted on, even
	// one from before the object's deletion: it must not stand in for a
	// read.
	Replay bool
}

// ReplayExtension marks an object event the sender may have sent before
// (value "true"): see ObjectEvent.Replay.
const ReplayExtension = "opzeroreplay"

// Ping is a PingSource tick.
type Ping struct {
	ID     string
	Source string
	Data   []byte
}

// Other is any other well-formed CloudEvent (a Broker/Trigger delivery, a
// wakeup): the engine decides whether it can route it.
type Other struct {
	Event *event.Event
}

// Decode classifies ev: *ObjectEvent, *Ping, *Wakeup or *Other.
func Decode(ev *event.Event) (any, error) {
	t := ev.Type()
	switch {
	case t == PingType:
		return &Ping{ID: ev.ID(), Source: ev.Source(), Data: ev.Data()}, nil
	case t == WakeupType:
		return decodeWakeup(ev)
	case strings.HasPrefix(t, resourcePfx):
		return decodeObject(ev, Resource, strings.TrimPrefix(t, resourcePfx))
	case strings.HasPrefix(t, referencePfx):
		return decodeObject(ev, Reference, strings.TrimPrefix(t, referencePfx))
	}
	return &Other{Event: ev}, nil
}

func decodeObject(ev *event.Event, mode Mode, action string) (*ObjectEvent, error) {
	switch Action(action) {
	case Add, Update, Delete:
	default:
		return nil, fmt.Errorf("event type %q: unknown action %q (want add, update or delete)", ev.Type(), action)
	}
	oe := &ObjectEvent{ID: ev.ID(), Action: Action(action), Mode: mode}
	var err error
	if oe.Kind, err = extension(ev, "kind", true); err != nil {
		return nil, err
	}
	if oe.APIVersion, err = extension(ev, "apiversion", true); err != nil {
		return nil, err
	}
	if oe.Name, err = extension(ev, "name", true); err != nil {
		return nil, err
	}
	if oe.Namespace, err = extension(ev, "namespace", false); err != nil {
		return nil, err
	}
	replay, err := extension(ev, ReplayExtension, false)
	if err != nil {
		return nil, err
	}
	switch replay {
	case "", "false":
	case "true":
		oe.Replay = true
	default:
		return nil, fmt.Errorf("event %s: extension %q is %q, want \"true\" or \"false\"", ev.Type(), ReplayExtension, replay)
	}
	if err := checkContentType(ev); err != nil {
		return nil, err
	}
	if mode == Resource {
		err = oe.decodeResource(ev.Data())
	} else {
		err = oe.decodeReference(ev.Data())
	}
	if err != nil {
		return nil, err
	}
	return oe, checkSubject(ev.Subject(), oe)
}

func checkContentType(ev *event.Event) error {
	ct := ev.DataContentType()
	if ct == "" || strings.HasPrefix(ct, "application/json") || strings.HasSuffix(strings.SplitN(ct, ";", 2)[0], "+json") {
		return nil
	}
	return fmt.Errorf("event %s: data content type %q, want application/json", ev.Type(), ct)
}

func extension(ev *event.Event, name string, required bool) (string, error) {
	v, ok := ev.Extensions()[name]
	if !ok || v == nil {
		if required {
			return "", fmt.Errorf("event %s has no %q extension (ApiServerSource sets kind, apiversion, name, namespace)", ev.Type(), name)
		}
		return "", nil
	}
	s, ok := v.(string)
	if !ok {
		return "", fmt.Errorf("event %s: extension %q is %T, want a string", ev.Type(), name, v)
	}
	if required && s == "" {
		return "", fmt.Errorf("event %s: extension %q is empty", ev.Type(), name)
	}
	return s, nil
}

func (oe *ObjectEvent) decodeResource(data []byte) error {
	m, err := ParseMeta(data)
	if err != nil {
		return fmt.Errorf("%s %s: %w", oe.Kind, oe.key(), err)
	}
	got := [4]string{m.APIVersion, m.Kind, m.Namespace, m.Name}
	want := [4]string{oe.APIVersion, oe.Kind, oe.Namespace, oe.Name}
	if got != want {
		return fmt.Errorf("the object in the event (%s %s %s/%s) disagrees with the event's extensions (%s %s %s/%s)",
			got[0], got[1], got[2], got[3], want[0], want[1], want[2], want[3])
	}
	oe.Object, oe.Meta = data, m
	return nil
}

func (oe *ObjectEvent) decodeReference(data []byte) error {
	var ref struct {
		APIVersion, Kind, Namespace, Name string
		Metadata                          *RefMeta `json:"metadata"`
	}
	if err := json.Unmarshal(data, &ref); err != nil {
		return fmt.Errorf("Reference-mode data of %s %s is not a JSON reference: %w", oe.Kind, oe.key(), err)
	}
	got := [4]string{ref.APIVersion, ref.Kind, ref.Namespace, ref.Name}
	want := [4]string{oe.APIVersion, oe.Kind, oe.Namespace, oe.Name}
	if got != want {
		return fmt.Errorf("the reference in the event (%s %s %s/%s) disagrees with the event's extensions (%s %s %s/%s)",
			got[0], got[1], got[2], got[3], want[0], want[1], want[2], want[3])
	}
	oe.Ref = ref.Metadata
	return nil
}

// checkSubject verifies /apis/<apiVersion>/namespaces/<ns>/<plural>/<name>
// when a subject is present.
func checkSubject(subject string, oe *ObjectEvent) error {
	if subject == "" {
		return nil
	}
	prefix := "/apis/" + oe.APIVersion + "/namespaces/" + oe.Namespace + "/"
	rest, ok := strings.CutPrefix(subject, prefix)
	if ok {
		plural, name, found := strings.Cut(rest, "/")
		ok = found && plural != "" && name == oe.Name
	}
	if !ok {
		return fmt.Errorf("subject %q disagrees with the object %s %s (want %s<plural>/%s)", subject, oe.Kind, oe.key(), prefix, oe.Name)
	}
	return nil
}

func (oe *ObjectEvent) key() string {
	if oe.Namespace == "" {
		return oe.Name
	}
	return oe.Namespace + "/" + oe.Name
}
