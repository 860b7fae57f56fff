// warm.go: the engine's part of the warm-up before the first event
// (Engine.Warm: the sole Lease and the Wakeups' list); operator/warm.go is
// the runtime's part (the API connection and discovery), and calls this.

package serverless

import "context"

// alonePrimer is a Durable that can look up, ahead of the first event,
// what it would otherwise look up at the first success of a period alone
// (wakeup.Store.PrimeAlone: the list of the operator's records).
type alonePrimer interface {
	PrimeAlone(ctx context.Context)
}

// Warm does, before any event arrives, the writes and reads that a
// cold-started instance's first event would otherwise wait for. With
// sole Leases (a Locker with Sole, more than one instance possible), it
// takes the operator's sole Lease if no other instance holds it, without
// asking a holder to step down (sole.warm), then lists the Durable's
// records once (alonePrimer). The first event's runs then reconcile alone
// at once: no Lease create and list before the reconcile, and its
// Resource-mode objects are served by the event cache (which serves only
// alone). Nothing changes otherwise: another instance's sole Lease is
// left alone, and a sole Lease taken here is released after soleIdle
// without a run, as after one.
//
// Call it once listening (the runtime does, while Knative probes the
// pod); it returns when done. Errors are the API server's, for the log:
// the first event tries again as it would have.
func (e *Engine) Warm(ctx context.Context) (alone bool, err error) {
	if e.sole == nil {
		return false, nil
	}
	if alone, err = e.sole.warm(ctx); !alone || err != nil {
		return alone, err
	}
	if p, ok := e.opts.Durable.(alonePrimer); ok {
		p.PrimeAlone(ctx)
	}
	return true, nil
}
