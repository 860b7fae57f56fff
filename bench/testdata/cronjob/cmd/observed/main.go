// Command observed is the CronJob-style project's operator of
// ObservedCronJobs, whose status carries observedGeneration: the idle
// part's baseline beside cmd/cronjob.
package main

import (
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/opzero/opzero/bench/testdata/cronjob/app"
	"github.com/opzero/opzero/bench/testdata/cronjob/controller"
)

func main() {
	app.Main("observedcronjob.tutorial.opzero.dev", func(mgr ctrl.Manager) error {
		return (&controller.ObservedCronJobReconciler{Client: mgr.GetClient()}).SetupWithManager(mgr)
	})
}
