package receive_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"reflect"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/cloudevents/sdk-go/v2/event"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"

	"github.com/opzero/opzero/internal/cloudevent"
	"github.com/opzero/opzero/internal/cloudevent/receive"
)

// TestNewRequestAsTheSDKWrites: cloudevent.NewRequest (which the hub sends
// with, without the SDK's protocol/http) writes the headers and body the
// SDK's own HTTP binding writes for the same event, in binary and in
// structured mode, and what it writes reads back as the same event.
func TestNewRequestAsTheSDKWrites(t *testing.T) {
	obj := []byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c","namespace":"n","resourceVersion":"7"}}`)
	ev, err := cloudevent.NewObjectEvent(cloudevent.Resource, cloudevent.Update, obj, "configmaps")
	if err != nil {
		t.Fatal(err)
	}
	ev.SetExtension(cloudevent.ReplayExtension, "true")
	ev.SetTime(time.Date(2026, 12, 7, 19, 0, 0, 123, time.UTC))
	ping := cloudevent.NewPing("/opzero/sweep", nil) // no data: an empty body
	for _, structured := range []bool{false, true} {
		for name, in := range map[string]*event.Event{"object event": ev, "ping without data": ping} {
			got, err := cloudevent.NewRequest(context.Background(), "http://op/", in, structured)
			if err != nil {
				t.Fatalf("%s, structured %v: %v", name, structured, err)
			}
			want, _ := http.NewRequestWithContext(context.Background(), http.MethodPost, "http://op/", bytes.NewReader(nil))
			ctx := binding.WithForceBinary(context.Background())
			if structured {
				ctx = binding.WithForceStructured(context.Background())
			}
			if err := cehttp.WriteRequest(ctx, binding.ToMessage(in), want); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got.Header, want.Header) {
				t.Errorf("%s, structured %v: headers\n%v\nthe SDK writes\n%v", name, structured, got.Header, want.Header)
			}
			gb, wb := body(t, got), body(t, want)
			if !bytes.Equal(gb, wb) || got.ContentLength != want.ContentLength {
				t.Errorf("%s, structured %v: body %q (length %d), the SDK writes %q (length %d)", name, structured, gb, got.ContentLength, wb, want.ContentLength)
			}
			again, err := got.GetBody()
			if err != nil {
				t.Fatal(err)
			}
			got.Body = again
			back, err := receive.Read(got)
			if err != nil {
				t.Fatalf("%s, structured %v: read back: %v", name, structured, err)
			}
			if back.Context.String() != in.Context.String() || !bytes.Equal(back.Data(), in.Data()) {
				t.Errorf("%s, structured %v: read back\n%s\nwant\n%s", name, structured, back, in)
			}
		}
	}
}

func body(t *testing.T, r *http.Request) []byte {
	t.Helper()
	if r.Body == nil {
		return nil
	}
	b, err := io.ReadAll(r.Body)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
