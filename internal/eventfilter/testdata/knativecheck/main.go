// Command knativecheck decides each case of ../knative-cases.json with
// Knative Eventing's own filter code (the broker filter handler's rule:
// spec.filters when set, else spec.filter.attributes) and writes the
// verdicts to ../knative-verdicts.json, which eventfilter's tests compare
// with. It lives in testdata because it needs knative.dev, which the opzero
// module must not link: hack/knative-filter-verdicts.sh builds it in a
// throwaway module with the pins of internal/devenv/pinned/modules/knative.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	"go.uber.org/zap"
	eventingv1 "knative.dev/eventing/pkg/apis/eventing/v1"
	"knative.dev/eventing/pkg/eventfilter"
	"knative.dev/eventing/pkg/eventfilter/attributes"
	"knative.dev/eventing/pkg/eventfilter/subscriptionsapi"
)

type testCase struct {
	Name string `json:"name"`
	Spec struct {
		Attributes map[string]string                   `json:"attributes"`
		Filters    []eventingv1.SubscriptionsAPIFilter `json:"filters"`
	} `json:"spec"`
	Event json.RawMessage `json:"event"`
}

func main() {
	in, out := os.Args[1], os.Args[2]
	b, err := os.ReadFile(in)
	if err != nil {
		panic(err)
	}
	var cases []testCase
	if err := json.Unmarshal(b, &cases); err != nil {
		panic(err)
	}
	verdicts := map[string]bool{}
	for _, c := range cases {
		var e cloudevents.Event
		if err := json.Unmarshal(c.Event, &e); err != nil {
			panic(fmt.Sprintf("%s: %v", c.Name, err))
		}
		var r eventfilter.FilterResult
		switch {
		case len(c.Spec.Filters) > 0:
			r = subscriptionsapi.CreateSubscriptionsAPIFilters(zap.NewNop(), c.Spec.Filters).Filter(context.Background(), e)
		case c.Spec.Attributes != nil:
			r = attributes.NewAttributesFilter(c.Spec.Attributes).Filter(context.Background(), e)
		default:
			r = eventfilter.NoFilter
		}
		verdicts[c.Name] = r != eventfilter.FailFilter
	}
	b, _ = json.MarshalIndent(verdicts, "", " ")
	if err := os.WriteFile(out, append(b, '\n'), 0o644); err != nil {
		panic(err)
	}
}
