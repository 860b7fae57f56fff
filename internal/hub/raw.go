package hub

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	kjson "k8s.io/apimachinery/pkg/runtime/serializer/json"
	"k8s.io/client-go/rest"
	sigsjson "sigs.k8s.io/json"

	"github.com/opzero/opzero/internal/genskip"
)

// rawObject is a watched object as the API server sent it: its JSON, kept
// to be sent on as a Resource-mode event's data, and the parts the hub
// looks at (metadata, status.observedGeneration) decoded beside it. A
// whole-object watch decodes nothing else: the API server's JSON is read
// once for the watch event, once for the metadata, and never re-encoded
// (client-go's dynamic client reads it four times into maps, and the hub
// then encoded the maps again).
type rawObject struct {
	metav1.TypeMeta
	metav1.ObjectMeta
	observed    int64
	hasObserved bool
	raw         []byte
	spec        []byte // the object's spec as sent (nil if none): field starts there
}

func (r *rawObject) DeepCopyObject() runtime.Object {
	c := &rawObject{TypeMeta: r.TypeMeta, observed: r.observed, hasObserved: r.hasObserved, raw: append([]byte(nil), r.raw...), spec: append([]byte(nil), r.spec...)}
	r.ObjectMeta.DeepCopyInto(&c.ObjectMeta)
	return c
}

// MarshalJSON is the object as the API server sent it.
func (r *rawObject) MarshalJSON() ([]byte, error) { return r.raw, nil }

// field is the string at a dotted path of the object ("" when absent or
// not a string), read from its JSON one level at a time.
func (r *rawObject) field(path string) string {
	level := r.raw
	if rest, ok := strings.CutPrefix(path, "spec."); ok && r.spec != nil {
		level, path = r.spec, rest // the spec is already apart: the whole object is not read again
	}
	for _, p := range strings.Split(path, ".") {
		var m map[string]json.RawMessage
		if err := sigsjson.UnmarshalCaseSensitivePreserveInts(level, &m); err != nil {
			return ""
		}
		if level = m[p]; level == nil {
			return ""
		}
	}
	var s string
	if err := sigsjson.UnmarshalCaseSensitivePreserveInts(level, &s); err != nil {
		return ""
	}
	return s
}

// observedGeneration is genskip.ObservedGeneration, without decoding a
// rawObject again.
func observedGeneration(obj runtime.Object) (int64, bool) {
	if r, ok := obj.(*rawObject); ok {
		return r.observed, r.hasObserved
	}
	return genskip.ObservedGeneration(obj)
}

// rawHead is what decodeRaw reads of an object: its status as raw JSON,
// because a kind's status need not be an object with an integer
// observedGeneration, and its spec as raw JSON, where referrer fields are.
type rawHead struct {
	APIVersion string          `json:"apiVersion"`
	Kind       string          `json:"kind"`
	Metadata   rawMeta         `json:"metadata"`
	Spec       json.RawMessage `json:"spec"`
	Status     json.RawMessage `json:"status"`
}

// rawMeta is an object's metadata without its managedFields, which the hub
// never reads (decoding them, their times most, was a third of decoding a
// watched object's head).
type rawMeta struct {
	metav1.ObjectMeta
	ManagedFields skipJSON `json:"managedFields"` // hides ObjectMeta's
}

// skipJSON decodes from any JSON value into nothing.
type skipJSON struct{}

func (*skipJSON) UnmarshalJSON([]byte) error { return nil }

// decodeRaw reads an object of a watch: a rawObject, or a Status (a watch's
// error event).
func decodeRaw(data []byte) (runtime.Object, error) {
	var h rawHead
	if err := sigsjson.UnmarshalCaseSensitivePreserveInts(data, &h); err != nil {
		return nil, fmt.Errorf("decoding a watched object: %w", err)
	}
	if h.Kind == "Status" && h.APIVersion == "v1" {
		var s metav1.Status
		if err := sigsjson.UnmarshalCaseSensitivePreserveInts(data, &s); err != nil {
			return nil, fmt.Errorf("decoding a watch's status: %w", err)
		}
		return &s, nil
	}
	r := &rawObject{TypeMeta: metav1.TypeMeta{APIVersion: h.APIVersion, Kind: h.Kind}, ObjectMeta: h.Metadata.ObjectMeta, raw: data, spec: h.Spec}
	if len(h.Status) > 0 {
		var st struct {
			ObservedGeneration *int64 `json:"observedGeneration"`
		}
		if sigsjson.UnmarshalCaseSensitivePreserveInts(h.Status, &st) == nil && st.ObservedGeneration != nil {
			r.observed, r.hasObserved = *st.ObservedGeneration, true
		}
	}
	return r, nil
}

// rawCodec is the decoder of a watch's objects (decodeRaw) and of its
// events (metav1.WatchEvent, the object kept as bytes). It cannot encode:
// the client built on it only watches.
type rawCodec struct{ event bool }

func (c rawCodec) Decode(data []byte, _ *schema.GroupVersionKind, into runtime.Object) (runtime.Object, *schema.GroupVersionKind, error) {
	if !c.event {
		obj, err := decodeRaw(data)
		if err != nil {
			return nil, nil, err
		}
		gvk := obj.GetObjectKind().GroupVersionKind()
		return obj, &gvk, nil
	}
	ev, ok := into.(*metav1.WatchEvent)
	if !ok {
		return nil, nil, fmt.Errorf("a watch event decodes into *metav1.WatchEvent, not %T", into)
	}
	var got struct {
		Type   string          `json:"type"`
		Object json.RawMessage `json:"object"`
	}
	if err := sigsjson.UnmarshalCaseSensitivePreserveInts(data, &got); err != nil {
		return nil, nil, fmt.Errorf("decoding a watch event: %w", err)
	}
	ev.Type, ev.Object = got.Type, runtime.RawExtension{Raw: got.Object} // got.Object is a copy: the stream reuses data
	return ev, nil, nil
}

func (rawCodec) Encode(runtime.Object, io.Writer) error {
	return fmt.Errorf("the hub's raw watch client does not encode")
}

func (rawCodec) Identifier() runtime.Identifier { return "opzero-hub-raw" }

// rawSerializer negotiates JSON only, with rawCodec.
type rawSerializer struct{}

func (rawSerializer) SupportedMediaTypes() []runtime.SerializerInfo {
	return []runtime.SerializerInfo{{
		MediaType: runtime.ContentTypeJSON, MediaTypeType: "application", MediaTypeSubType: "json",
		EncodesAsText: true, Serializer: rawCodec{},
		StreamSerializer: &runtime.StreamSerializerInfo{EncodesAsText: true, Serializer: rawCodec{event: true}, Framer: kjson.Framer},
	}}
}

func (rawSerializer) EncoderForVersion(e runtime.Encoder, _ runtime.GroupVersioner) runtime.Encoder {
	return e
}

func (rawSerializer) DecoderToVersion(d runtime.Decoder, _ runtime.GroupVersioner) runtime.Decoder {
	return d
}

// newRawClient is a REST client whose watches yield rawObjects.
func newRawClient(cfg *rest.Config) (*rest.RESTClient, error) {
	c := rest.CopyConfig(cfg)
	c.APIPath, c.GroupVersion = "", nil
	c.ContentType, c.AcceptContentTypes = runtime.ContentTypeJSON, runtime.ContentTypeJSON
	c.NegotiatedSerializer = rawSerializer{}
	return rest.UnversionedRESTClientFor(c)
}

// resourcePath is the REST path of a resource's collection, in ns ("" all).
func resourcePath(gvr schema.GroupVersionResource, ns string) string {
	p := "/apis/" + gvr.Group + "/" + gvr.Version
	if gvr.Group == "" {
		p = "/api/" + gvr.Version
	}
	if ns != "" {
		p += "/namespaces/" + ns
	}
	return p + "/" + gvr.Resource
}
