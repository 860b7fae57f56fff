package controller

import (
	"context"

	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	v1 "github.com/opzero/opzero/internal/manifests/testdata/widgets/api/v1"
)

// poller is a source of the project's own: it would poll something
// outside the cluster and enqueue the Widgets it names.
type poller struct{}

func (*poller) Start(context.Context, workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
	return nil
}

// setupUnserved is SetupWithManager with WIDGETS_UNSERVED set (a test):
// besides Widgets, a source.Func and a custom source feed the controller.
func (r *Reconciler) setupUnserved(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).For(&v1.Widget{}).
		WatchesRawSource(source.Func(func(context.Context, workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
			return nil
		})).
		WatchesRawSource(&poller{}).
		Named("widgets").Complete(r)
}
