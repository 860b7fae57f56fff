package cloudevent

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/cloudevents/sdk-go/v2/event"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
	"github.com/google/uuid"
)

// NewObjectEvent builds the event Knative's ApiServerSource sends for
// object (its JSON, with apiVersion, kind and metadata) in mode: for tests
// of operators, and for replaying events. plural is the resource name used
// in the subject (e.g. "configmaps").
func NewObjectEvent(mode Mode, action Action, object []byte, plural string) (*event.Event, error) {
	m, err := ParseMeta(object)
	if err != nil {
		return nil, err
	}
	pfx := resourcePfx
	data := object
	if mode == Reference {
		pfx = referencePfx
		ref := map[string]string{"apiVersion": m.APIVersion, "kind": m.Kind, "name": m.Name}
		if m.Namespace != "" {
			ref["namespace"] = m.Namespace
		}
		data, _ = json.Marshal(ref)
	}
	ev := event.New()
	ev.SetID(uuid.NewString())
	ev.SetType(pfx + string(action))
	ev.SetSource("https://127.0.0.1:6443")
	ev.SetSubject(fmt.Sprintf("/apis/%s/namespaces/%s/%s/%s", m.APIVersion, m.Namespace, plural, m.Name))
	ev.SetExtension("kind", m.Kind)
	ev.SetExtension("apiversion", m.APIVersion)
	ev.SetExtension("name", m.Name)
	ev.SetExtension("namespace", m.Namespace)
	if err := ev.SetData(event.ApplicationJSON, data); err != nil {
		return nil, err
	}
	return &ev, nil
}

// NewPing builds a PingSource tick carrying data.
func NewPing(source string, data []byte) *event.Event {
	ev := event.New()
	ev.SetID(uuid.NewString())
	ev.SetType(PingType)
	ev.SetSource(source)
	if data != nil {
		_ = ev.SetData(event.ApplicationJSON, data)
	}
	return &ev
}

// NewRequest encodes ev as an HTTP POST to url, in binary mode (as Knative
// sends) or structured mode.
func NewRequest(ctx context.Context, url string, ev *event.Event, structured bool) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(nil))
	if err != nil {
		return nil, err
	}
	if structured {
		ctx = binding.WithForceStructured(ctx)
	} else {
		ctx = binding.WithForceBinary(ctx)
	}
	if err := cehttp.WriteRequest(ctx, binding.ToMessage(ev), req); err != nil {
		return nil, err
	}
	return req, nil
}

// NewPingLike builds a minimal well-formed event of any type (tests).
func NewPingLike(typ string) *event.Event {
	ev := event.New()
	ev.SetID(uuid.NewString())
	ev.SetType(typ)
	ev.SetSource("/test")
	return &ev
}
