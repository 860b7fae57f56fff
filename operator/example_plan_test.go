package operator_test

import (
	"context"

	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/opzero/opzero/operator"
)

// database is a system other than the API server, which a plan cannot
// dry-run.
type database interface {
	CreateDatabase(ctx context.Context, name string) error
}

type dbReconciler struct{ db database }

// A reconciler that writes to a system other than the API server skips
// those writes when it is planned (`opzero plan`): its Kubernetes writes
// are dry-run by opzero, the database's are its own to skip. The plan
// says the reconcile asked.
func ExamplePlanning() {
	r := &dbReconciler{}
	_ = reconcile.Func(func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
		if !operator.Planning(ctx) {
			if err := r.db.CreateDatabase(ctx, req.Name); err != nil {
				return reconcile.Result{}, err
			}
		}
		return reconcile.Result{}, nil
	})
}
