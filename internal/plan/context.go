package plan

import "context"

// Asked is told when a reconcile asks whether it is planned, so that the
// Report can say the reconciler knew (Object.Planning).
type Asked interface{ AskedPlanning() }

type planningKey struct{}

// WithPlanning returns ctx marked as a planned reconcile's; a, if not
// nil, is told each time the reconcile asks.
func WithPlanning(ctx context.Context, a Asked) context.Context {
	return context.WithValue(ctx, planningKey{}, planning{a})
}

type planning struct{ a Asked }

// Planning reports whether ctx is a planned reconcile's (operator.Planning).
func Planning(ctx context.Context) bool {
	p, ok := ctx.Value(planningKey{}).(planning)
	if ok && p.a != nil {
		p.a.AskedPlanning()
	}
	return ok
}
