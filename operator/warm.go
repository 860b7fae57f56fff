// warm.go: the runtime's warm-up before the first event (the API connection
// and discovery); internal/engine/serverless/warm.go is the engine's part
// (Engine.Warm), which warmEngines calls.

package operator

import (
	"context"
	"slices"
	"sync"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	v1alpha1 "github.com/opzero/opzero/api/v1alpha1"
)

// warm prepares, once the listener is up, what the first event's calls
// would otherwise wait for: the connection to the API server (its TLS
// handshake) and the discovery of each group-version the first event
// touches (warmGroupVersions). On a cold start the pod's first event
// arrives only after the readiness probe, the endpoints' update and the
// activator's own probe: this runs meanwhile, instead of before the
// reconcile's first calls. The first group-version is discovered alone
// (it opens the connection the others share), the others concurrently.
// Failures are not kept: the call that needs a mapping looks again.
// Then the engines warm (warmEngines).
func (r *Runtime) warm(ctx context.Context) {
	if r.mapper == nil {
		return
	}
	t0 := time.Now()
	gvs := r.warmGroupVersions()
	if len(gvs) == 0 || ctx.Err() != nil {
		return
	}
	r.mapper.groupVersion(gvs[0])
	var wg sync.WaitGroup
	for _, gv := range gvs[1:] {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.mapper.groupVersion(gv)
		}()
	}
	wg.Wait()
	names := make([]string, len(gvs))
	for i, gv := range gvs {
		names[i] = gv.String()
	}
	r.opts.Logger.Info("API discovery warm", "groupVersions", names, "took", time.Since(t0).String())
	r.warmEngines(ctx)
}

// warmEngines lets each engine take, before its first event, what that
// event would otherwise write and read first (serverless Engine.Warm: the
// operator's sole Lease when nobody holds it, and the list of its
// Wakeups), concurrently.
func (r *Runtime) warmEngines(ctx context.Context) {
	var wg sync.WaitGroup
	for _, e := range r.engines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t0 := time.Now()
			alone, err := e.Warm(ctx)
			switch {
			case err != nil:
				r.opts.Logger.Error(err, "taking the operator's sole lease before the first event; the first event tries again", "controller", e.Operator())
			case alone:
				r.opts.Logger.Info("running alone before the first event: the sole lease taken", "controller", e.Operator(), "took", time.Since(t0).String())
			}
		}()
	}
	wg.Wait()
}

// warmGroupVersions are the group-versions the first event's calls map,
// in the order they come: the TokenReview of its sender (unless
// --insecure-no-auth), the operators' kinds (For, Owns, Watches: the
// event's object, the mapping's list, the reconcile's reads), the per-key
// Lease (more than one instance), the Wakeups (--wakeup-sink) and Events
// (both APIs: the recorder a reconciler uses is not known here).
func (r *Runtime) warmGroupVersions() []schema.GroupVersion {
	var gvs []schema.GroupVersion
	add := func(gv schema.GroupVersion) {
		if !slices.Contains(gvs, gv) {
			gvs = append(gvs, gv)
		}
	}
	if !r.opts.InsecureNoAuth {
		add(authnv1.SchemeGroupVersion)
	}
	for _, op := range r.ops {
		add(op.Primary.GVK.GroupVersion())
		for _, k := range op.Owned {
			add(k.GVK.GroupVersion())
		}
		for _, w := range op.Watched {
			add(w.GVK.GroupVersion())
		}
	}
	if r.opts.manyInstances() {
		add(coordinationv1.SchemeGroupVersion)
	}
	if r.opts.WakeupSink != "" {
		add(v1alpha1.GroupVersion)
	}
	add(eventsv1.SchemeGroupVersion)
	add(corev1.SchemeGroupVersion)
	return gvs
}
