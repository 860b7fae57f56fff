package reconcileutil_test

import (
	"k8s.io/client-go/tools/events"

	"github.com/opzero/opzero/reconcileutil"
)

// A Recorder is client-go's events.EventRecorder, and, with
// controller-runtime v0.23 and later, its recorder.EventRecorder (the same
// two methods: assignable both ways).
var _ events.EventRecorder = reconcileutil.Recorder(nil)
