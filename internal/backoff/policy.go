package backoff

import (
	"math"
	"math/rand/v2"
	"time"
)

// Policy is capped exponential backoff: Delay(n) = Base * Factor^n, at most
// Cap, shortened by up to Jitter of itself. Zero fields take the values of
// DefaultPolicy.
type Policy struct {
	// Base is the first delay (1 s).
	Base time.Duration
	// Cap bounds every delay (5 min). A Cap below Base makes every delay Cap.
	Cap time.Duration
	// Factor multiplies the delay after each failure (2). Below 1, or NaN,
	// means 2; 1 gives a constant delay.
	Factor float64
	// Jitter is the largest fraction by which a delay is randomly shortened,
	// from 0 (none, the default) to 1; values outside are clamped. Jitter
	// spreads the retries of keys that failed together.
	Jitter float64
}

// DefaultPolicy starts at 1 s, doubles, and caps at 5 min, without jitter.
//
// It starts slower than controller-runtime's 5 ms on purpose: in serverless
// mode a retry may cold-start a pod (seconds of CPU, a new connection to the
// API server), and what failed is usually an API server or a dependency that
// needs more than milliseconds to come back: quick retries would mostly
// fail the same way, each at the price of a wake-up. The cap bounds how long a recovered dependency goes unnoticed to 5 min and keeps a
// key that keeps failing to about 12 retries an hour.
func DefaultPolicy() Policy {
	return Policy{Base: time.Second, Cap: 5 * time.Minute, Factor: 2}
}

// withDefaults fills zero and invalid fields.
func (p Policy) withDefaults() Policy {
	d := DefaultPolicy()
	if p.Base <= 0 {
		p.Base = d.Base
	}
	if p.Cap <= 0 {
		p.Cap = d.Cap
	}
	if !(p.Factor >= 1) { // also NaN
		p.Factor = d.Factor
	}
	if !(p.Jitter > 0) { // also NaN
		p.Jitter = 0
	}
	p.Jitter = min(p.Jitter, 1)
	return p
}

// Delay is the wait before the retry that follows failure number attempt,
// counted from 0: Delay(0) is Base. A negative attempt counts as 0. Delay
// never exceeds Cap and never overflows, whatever attempt is.
func (p Policy) Delay(attempt int) time.Duration {
	p = p.withDefaults()
	attempt = max(attempt, 0)
	d := p.Cap
	// Base*Factor^attempt in float64: an overflow becomes +Inf, which the
	// comparison caps. Cap itself stays exact (no float round trip).
	if f := float64(p.Base) * math.Pow(p.Factor, float64(attempt)); f < float64(p.Cap) {
		d = time.Duration(f)
	}
	if p.Jitter > 0 {
		d -= scale(d, p.Jitter*rand.Float64())
	}
	return d
}

// scale is d*f for f in [0, 1), never more than d.
func scale(d time.Duration, f float64) time.Duration {
	s := float64(d) * f
	if s >= float64(d) {
		return d
	}
	return time.Duration(s)
}
