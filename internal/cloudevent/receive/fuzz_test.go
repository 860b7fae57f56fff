package receive_test

import (
	"bytes"
	"context"
	"net/http"
	"testing"

	"github.com/opzero/opzero/internal/cloudevent"
	"github.com/opzero/opzero/internal/cloudevent/receive"
)

// FuzzDecodeRequest: any body under any of the header sets Knative sends
// decodes or fails with an error; it never panics, and a decoded object
// event is self-consistent.
func FuzzDecodeRequest(f *testing.F) {
	obj := []byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c","namespace":"n","generation":1,"ownerReferences":[{"apiVersion":"x/v1","kind":"K","name":"o","uid":"u","controller":true}]},"status":{"observedGeneration":1}}`)
	f.Add(uint8(0), "dev.knative.apiserver.resource.update", "ConfigMap", "v1", "c", "n", "/apis/v1/namespaces/n/configmaps/c", obj)
	f.Add(uint8(0), "dev.knative.apiserver.ref.add", "ConfigMap", "v1", "c", "n", "", []byte(`{"kind":"ConfigMap","namespace":"n","name":"c","apiVersion":"v1"}`))
	f.Add(uint8(0), "dev.knative.sources.ping", "", "", "", "", "", []byte(`{"name":"x"}`))
	f.Add(uint8(1), "", "", "", "", "", "", []byte(`{"specversion":"1.0","id":"1","source":"s","type":"dev.knative.apiserver.resource.add","kind":"ConfigMap","apiversion":"v1","name":"c","namespace":"n","datacontenttype":"application/json","data":`+string(obj)+`}`))
	f.Add(uint8(2), "", "", "", "", "", "", []byte(`{"kind":"Widget"}`))
	f.Fuzz(func(t *testing.T, mode uint8, typ, kind, apiVersion, name, ns, subject string, body []byte) {
		req, _ := http.NewRequestWithContext(context.Background(), http.MethodPost, "http://x/", bytes.NewReader(body))
		switch mode % 3 {
		case 0: // binary, as ApiServerSource and PingSource send
			for k, v := range map[string]string{"ce-specversion": "1.0", "ce-id": "1", "ce-source": "s", "ce-type": typ,
				"ce-kind": kind, "ce-apiversion": apiVersion, "ce-name": name, "ce-namespace": ns, "ce-subject": subject} {
				req.Header[http.CanonicalHeaderKey(k)] = []string{v}
			}
			req.Header.Set("Content-Type", "application/json")
		case 1:
			req.Header.Set("Content-Type", "application/cloudevents+json")
		}
		ev, err := receive.DecodeRequest(context.Background(), req)
		if err != nil {
			return
		}
		if oe, ok := ev.(*cloudevent.ObjectEvent); ok {
			if oe.Name == "" || oe.Kind == "" || oe.APIVersion == "" {
				t.Fatalf("decoded an object event without identity: %+v", oe)
			}
			if oe.Mode == cloudevent.Resource && (oe.Meta == nil || oe.Meta.Name != oe.Name || oe.Meta.Namespace != oe.Namespace) {
				t.Fatalf("Resource-mode event whose object disagrees: %+v %+v", oe, oe.Meta)
			}
		}
	})
}
