package controller

import (
	"context"
	"fmt"

	"github.com/cloudevents/sdk-go/v2/event"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1alpha1 "github.com/opzero/opzero/examples/postgres/api/v1alpha1"
)

// ChangedEventType is the type of the bridge's CloudEvents (./bridge):
// something changed in the server about a managed database or its role.
const ChangedEventType = "dev.opzero.example.postgres.changed"

// DatabaseExtension is the CloudEvents extension naming that database.
const DatabaseExtension = "pgdatabase"

// DatabasesForEvent maps a bridge event to the Databases managing the
// database it names, in every namespace. An event without the extension
// is bad input (a terminal error: answered 400, not retried); a database
// no Database manages maps to nothing (acknowledged).
func DatabasesForEvent(ctx context.Context, c client.Reader, e event.Event) ([]reconcile.Request, error) {
	name, _ := e.Extensions()[DatabaseExtension].(string)
	if name == "" {
		return nil, reconcile.TerminalError(fmt.Errorf("event %s (type %s, source %s) has no %s extension naming the database", e.ID(), e.Type(), e.Source(), DatabaseExtension))
	}
	var list v1alpha1.DatabaseList
	if err := c.List(ctx, &list); err != nil {
		return nil, fmt.Errorf("listing Databases for database %s: %w", name, err)
	}
	var out []reconcile.Request
	for _, db := range list.Items {
		if DatabaseNameFor(db.Spec.DatabaseName, db.Name) == name {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&db)})
		}
	}
	return out, nil
}
