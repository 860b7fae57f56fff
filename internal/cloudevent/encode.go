package cloudevent

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/textproto"

	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/cloudevents/sdk-go/v2/binding/format"
	"github.com/cloudevents/sdk-go/v2/binding/spec"
	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/cloudevents/sdk-go/v2/types"
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
//
// The SDK's binding writes the event (binding.Write); the request side is
// requestWriter, not the SDK's protocol/http, whose package links a zap
// logger made at init (its sampler alone is 448 KiB of heap kept for the
// life of the process): the hub, always on, sends events and receives
// none. Read, which receives them, is in package receive.
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
	if _, err := binding.Write(ctx, binding.ToMessage(ev), (*requestWriter)(req), (*requestWriter)(req)); err != nil {
		return nil, err
	}
	return req, nil
}

// requestWriter writes an event into an HTTP request: the headers and body
// of the CloudEvents HTTP protocol binding (docs/knative-events.md), as the
// SDK's protocol/http does. A binary-mode attribute is the header
// Ce-<name>, datacontenttype is Content-Type; an extension is
// Ce-<name> too.
type requestWriter http.Request

var (
	_ binding.BinaryWriter     = (*requestWriter)(nil)
	_ binding.StructuredWriter = (*requestWriter)(nil)
)

func (w *requestWriter) SetStructuredEvent(_ context.Context, f format.Format, ev io.Reader) error {
	w.Header.Set("Content-Type", f.MediaType())
	return w.SetData(ev)
}

func (w *requestWriter) Start(context.Context) error { return nil }

func (w *requestWriter) End(context.Context) error { return nil }

// SetData sets the body, with its length: the writer reads the event's
// data into memory first, so it has one.
func (w *requestWriter) SetData(data io.Reader) error {
	b, err := io.ReadAll(data)
	if err != nil {
		return err
	}
	if len(b) == 0 {
		w.Body, w.ContentLength, w.GetBody = http.NoBody, 0, func() (io.ReadCloser, error) { return http.NoBody, nil }
		return nil
	}
	w.Body, w.ContentLength = io.NopCloser(bytes.NewReader(b)), int64(len(b))
	w.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }
	return nil
}

func (w *requestWriter) SetAttribute(a spec.Attribute, value any) error {
	key := textproto.CanonicalMIMEHeaderKey("ce-" + a.Name())
	if a.Kind() == spec.DataContentType {
		key = "Content-Type"
	}
	return w.set(key, value)
}

func (w *requestWriter) SetExtension(name string, value any) error {
	return w.set(textproto.CanonicalMIMEHeaderKey("ce-"+name), value)
}

func (w *requestWriter) set(key string, value any) error {
	if value == nil {
		w.Header.Del(key)
		return nil
	}
	s, err := types.Format(value)
	if err != nil {
		return err
	}
	w.Header.Set(key, s)
	return nil
}

// NewPingLike builds a minimal well-formed event of any type (tests).
func NewPingLike(typ string) *event.Event {
	ev := event.New()
	ev.SetID(uuid.NewString())
	ev.SetType(typ)
	ev.SetSource("/test")
	return &ev
}
