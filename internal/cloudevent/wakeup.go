package cloudevent

import (
	"fmt"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/google/uuid"
)

// WakeupType is the event opzero's wakeup source sends when a durable
// RequeueAfter or retry is due.
const WakeupType = "dev.opzero.wakeup"

// Wakeup is a due durable timer: reconcile the target.
type Wakeup struct {
	ID, Source string
	Operator   string
	APIVersion string
	Kind       string
	Namespace  string
	Name       string
	Reason     string
}

// NewWakeup builds the wakeup event for w (binary mode on the wire; the
// target is in extensions, the data is empty).
func NewWakeup(w Wakeup) *event.Event {
	ev := event.New()
	ev.SetID(uuid.NewString())
	ev.SetType(WakeupType)
	ev.SetSource(w.Source)
	ev.SetSubject(fmt.Sprintf("/apis/%s/namespaces/%s/%s/%s", w.APIVersion, w.Namespace, w.Kind, w.Name))
	for k, v := range map[string]string{"operator": w.Operator, "targetapiversion": w.APIVersion, "targetkind": w.Kind,
		"targetnamespace": w.Namespace, "targetname": w.Name, "reason": w.Reason} {
		ev.SetExtension(k, v)
	}
	return &ev
}

func decodeWakeup(ev *event.Event) (*Wakeup, error) {
	w := &Wakeup{ID: ev.ID(), Source: ev.Source()}
	for _, f := range []struct {
		name     string
		dst      *string
		required bool
	}{{"operator", &w.Operator, true}, {"targetapiversion", &w.APIVersion, true}, {"targetkind", &w.Kind, true},
		{"targetnamespace", &w.Namespace, false}, {"targetname", &w.Name, true}, {"reason", &w.Reason, false}} {
		v, err := extension(ev, f.name, f.required)
		if err != nil {
			return nil, err
		}
		*f.dst = v
	}
	return w, nil
}
