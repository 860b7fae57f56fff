// Command cronjob is the CronJob-style project's operator: CronJobs,
// whose status carries no observedGeneration (the bench's idle part).
package main

import (
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/opzero/opzero/bench/testdata/cronjob/app"
	"github.com/opzero/opzero/bench/testdata/cronjob/controller"
)

func main() {
	app.Main("cronjob.tutorial.opzero.dev", func(mgr ctrl.Manager) error {
		return (&controller.CronJobReconciler{Client: mgr.GetClient()}).SetupWithManager(mgr)
	})
}
