package hub

import (
	"bytes"
	"io"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/serializer/streaming"
	"k8s.io/apimachinery/pkg/watch"
	restclientwatch "k8s.io/client-go/rest/watch"
)

// TestRawWatchDecoding: a whole-object watch stream, decoded as client-go's
// watch decoder does with the hub's codec, yields each object's bytes as
// sent, its metadata and observedGeneration, bookmarks, and a 410 as the
// API error it is; a malformed frame is an error, not a half object.
func TestRawWatchDecoding(t *testing.T) {
	obj := `{"apiVersion":"opzero.dev/v1","kind":"Widget","metadata":{"name":"a","namespace":"n","resourceVersion":"7","generation":3,"managedFields":[{"manager":"m","operation":"Update","time":"2026-01-01T00:00:00Z","fieldsType":"FieldsV1","fieldsV1":{"f:spec":{}}}],"labels":{"x":"y"}},"spec":{"ref":{"name":"cm"},"n":1},"status":{"observedGeneration":2}}`
	odd := `{"apiVersion":"v1","kind":"Odd","metadata":{"name":"b","resourceVersion":"8"},"status":"fine"}`
	stream := `{"type":"ADDED","object":` + obj + "}\n" +
		`{"type":"MODIFIED","object":` + odd + "}\n" +
		`{"type":"BOOKMARK","object":{"apiVersion":"v1","kind":"Odd","metadata":{"resourceVersion":"9"}}}` + "\n" +
		`{"type":"ERROR","object":{"apiVersion":"v1","kind":"Status","status":"Failure","message":"too old resource version: 2 (9)","reason":"Expired","code":410}}` + "\n"
	info := rawSerializer{}.SupportedMediaTypes()[0]
	r := io.NopCloser(bytes.NewBufferString(stream))
	dec := restclientwatch.NewDecoder(streaming.NewDecoder(info.StreamSerializer.Framer.NewFrameReader(r), info.StreamSerializer.Serializer), info.Serializer)

	typ, o, err := dec.Decode()
	if err != nil || typ != watch.Added {
		t.Fatalf("first event: %v %v", typ, err)
	}
	ro, ok := o.(*rawObject)
	if !ok {
		t.Fatalf("decoded %T, want *rawObject", o)
	}
	if string(ro.raw) != obj {
		t.Errorf("bytes %s, want them as sent: %s", ro.raw, obj)
	}
	if ro.GetName() != "a" || ro.GetNamespace() != "n" || ro.GetResourceVersion() != "7" || ro.GetGeneration() != 3 || ro.GetLabels()["x"] != "y" || ro.Kind != "Widget" {
		t.Errorf("metadata %+v %+v", ro.TypeMeta, ro.ObjectMeta)
	}
	if ro.ManagedFields != nil {
		t.Errorf("managedFields decoded: %+v (the hub never reads them)", ro.ManagedFields)
	}
	if g, has := observedGeneration(ro); g != 2 || !has {
		t.Errorf("observedGeneration %d %v, want 2 true", g, has)
	}
	for path, want := range map[string]string{"spec.ref.name": "cm", "spec.n": "", "spec.none": "", "metadata.name": "a", "spec.ref.name.x": ""} {
		if got := ro.field(path); got != want {
			t.Errorf("field %s = %q, want %q", path, got, want)
		}
	}
	if data, err := (&change{obj: ro}).json(); err != nil || string(data) != obj {
		t.Errorf("event data %s %v, want the bytes as sent", data, err)
	}

	typ, o, err = dec.Decode()
	if err != nil || typ != watch.Modified {
		t.Fatalf("second event: %v %v", typ, err)
	}
	if g, has := observedGeneration(o); has || g != 0 {
		t.Errorf("a string status gave observedGeneration %d %v", g, has)
	}
	if string(o.(*rawObject).raw) != odd {
		t.Errorf("the second object's bytes were overwritten: %s", o.(*rawObject).raw)
	}
	if string(ro.raw) != obj {
		t.Errorf("the first object's bytes changed after the next frame: %s", ro.raw)
	}

	typ, o, err = dec.Decode()
	if err != nil || typ != watch.Bookmark {
		t.Fatalf("third event: %v %v", typ, err)
	}
	if m, err := metaOf(o); err != nil || m.GetResourceVersion() != "9" {
		t.Errorf("bookmark %v %v", m, err)
	}

	typ, o, err = dec.Decode()
	if err != nil || typ != watch.Error {
		t.Fatalf("fourth event: %v %v", typ, err)
	}
	if _, ok := o.(*metav1.Status); !ok || !apierrors.IsResourceExpired(apierrors.FromObject(o)) {
		t.Errorf("error event %#v is not a 410", o)
	}

	bad := io.NopCloser(bytes.NewBufferString(`{"type":"ADDED","object":{"metadata":{"name":3}}}` + "\n"))
	dec = restclientwatch.NewDecoder(streaming.NewDecoder(info.StreamSerializer.Framer.NewFrameReader(bad), info.StreamSerializer.Serializer), info.Serializer)
	if _, o, err := dec.Decode(); err == nil {
		t.Errorf("a name that is a number decoded to %#v", o)
	}
}

// benchWatchObject is a ConfigWatcher as the API server sends it in the
// throughput benchmark: created by one client, its status written by the
// operator (two managedFields entries).
const benchWatchObject = `{"apiVersion":"k8spatterns.io/v1","kind":"ConfigWatcher","metadata":{"creationTimestamp":"2026-11-26T14:57:15Z","generation":1,"labels":{"bench":"tp","shard":"3"},"managedFields":[{"apiVersion":"k8spatterns.io/v1","fieldsType":"FieldsV1","fieldsV1":{"f:metadata":{"f:labels":{".":{},"f:bench":{},"f:shard":{}}},"f:spec":{".":{},"f:configMap":{},"f:podSelector":{".":{},"f:app":{}}}},"manager":"suite","operation":"Update","time":"2026-11-26T14:57:15Z"},{"apiVersion":"k8spatterns.io/v1","fieldsType":"FieldsV1","fieldsV1":{"f:status":{".":{},"f:observedGeneration":{},"f:conditions":{}}},"manager":"opzero","operation":"Update","subresource":"status","time":"2026-11-26T14:57:15Z"}],"name":"cw-01234","namespace":"tp-opzero-hub-admitted-0","resourceVersion":"123456","uid":"0b3e8f43-58a5-4f4b-9d1e-2f5a7c1d9e11"},"spec":{"configMap":"cfg","podSelector":{"app":"web"}},"status":{"observedGeneration":1}}`

// BenchmarkRawWatchDecoding: one watch event of benchWatchObject through
// the hub's whole-object watch decoding, and its referrer field read.
func BenchmarkRawWatchDecoding(b *testing.B) {
	frame := []byte(`{"type":"MODIFIED","object":` + benchWatchObject + "}\n")
	stream := bytes.Repeat(frame, b.N)
	info := rawSerializer{}.SupportedMediaTypes()[0]
	dec := restclientwatch.NewDecoder(streaming.NewDecoder(info.StreamSerializer.Framer.NewFrameReader(io.NopCloser(bytes.NewReader(stream))), info.StreamSerializer.Serializer), info.Serializer)
	b.SetBytes(int64(len(frame)))
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		_, o, err := dec.Decode()
		if err != nil {
			b.Fatal(err)
		}
		if o.(*rawObject).field("spec.configMap") != "cfg" {
			b.Fatal("spec.configMap not read")
		}
	}
}
