package builder_test

import (
	"context"
	"fmt"

	cloudevents "github.com/cloudevents/sdk-go/v2/event"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/opzero/opzero/builder"
)

// An operator that also takes CloudEvents posted to its Broker: events of
// type com.example.db.changed name the object to heal in their subject.
func ExampleBuilder_WatchesEvents() {
	s := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(s)
	bySubject := func(_ context.Context, _ client.Reader, e cloudevents.Event) ([]reconcile.Request, error) {
		if e.Subject() == "" {
			return nil, nil // nothing to do: answered 2xx with a reason
		}
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: "default", Name: e.Subject()}}}, nil
	}
	op, err := builder.New(s).For(&corev1.Service{}).
		WatchesEvents("db-changed", builder.EventFilter{
			Filters: []builder.TriggerFilter{{Prefix: map[string]string{"type": "com.example.db."}}},
		}, bySubject).
		Build(reconcile.Func(func(context.Context, reconcile.Request) (reconcile.Result, error) { return reconcile.Result{}, nil }))
	fmt.Println(op.Events[0].Name, err)
	// Output: db-changed <nil>
}
