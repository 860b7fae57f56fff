// Package receive reads the CloudEvent of an HTTP request (binary or
// structured content mode) with the CloudEvents SDK's HTTP binding, and
// decodes it with package cloudevent. It is apart from cloudevent so that
// what only sends events (the opzero hub) does not link the SDK's
// protocol/http, whose package makes a zap logger at init that the process
// keeps (448 KiB of heap).
package receive

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/cloudevents/sdk-go/v2/event"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"

	"github.com/opzero/opzero/internal/cloudevent"
)

// Read decodes the CloudEvent in an HTTP request, binary or structured.
func Read(req *http.Request) (*event.Event, error) {
	ev, err := binding.ToEvent(req.Context(), cehttp.NewMessageFromHttpRequest(req))
	if err != nil {
		if errors.Is(err, binding.ErrUnknownEncoding) {
			return nil, errors.New("not a CloudEvent: expected binary mode (ce-specversion, ce-type, ce-source, ce-id headers) " +
				"or structured mode (Content-Type: application/cloudevents+json)")
		}
		return nil, fmt.Errorf("malformed CloudEvent: %w", err)
	}
	if err := ev.Validate(); err != nil {
		return nil, fmt.Errorf("invalid CloudEvent: %w", err)
	}
	return ev, nil
}

// DecodeRequest is Read then cloudevent.Decode.
func DecodeRequest(_ context.Context, req *http.Request) (any, error) {
	ev, err := Read(req)
	if err != nil {
		return nil, err
	}
	return cloudevent.Decode(ev)
}
