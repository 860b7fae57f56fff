package backoff_test

import (
	"math"
	"testing"
	"time"

	"github.com/opzero/opzero/internal/backoff"
)

func TestDelay(t *testing.T) {
	const maxD = time.Duration(math.MaxInt64)
	s, ms := time.Second, time.Millisecond
	tests := []struct {
		name   string
		policy backoff.Policy
		want   []time.Duration // Delay(0), Delay(1), ...
	}{
		{"zero is the default", backoff.Policy{}, []time.Duration{s, 2 * s, 4 * s, 8 * s, 16 * s, 32 * s, 64 * s, 128 * s, 256 * s, 300 * s, 300 * s}},
		{"base, 2x, 4x, capped", backoff.Policy{Base: s, Cap: 8 * s}, []time.Duration{s, 2 * s, 4 * s, 8 * s, 8 * s, 8 * s}},
		{"factor 3", backoff.Policy{Base: 10 * ms, Cap: s, Factor: 3}, []time.Duration{10 * ms, 30 * ms, 90 * ms, 270 * ms, 810 * ms, s}},
		{"factor 1 is constant", backoff.Policy{Base: 5 * ms, Cap: s, Factor: 1}, []time.Duration{5 * ms, 5 * ms, 5 * ms}},
		{"factor below 1 means 2", backoff.Policy{Base: ms, Cap: s, Factor: 0.5}, []time.Duration{ms, 2 * ms, 4 * ms}},
		{"NaN factor means 2", backoff.Policy{Base: ms, Cap: s, Factor: math.NaN()}, []time.Duration{ms, 2 * ms, 4 * ms}},
		{"cap below base", backoff.Policy{Base: time.Minute, Cap: s}, []time.Duration{s, s}},
		{"cap at the largest duration", backoff.Policy{Base: 1, Cap: maxD}, []time.Duration{1, 2, 4}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for n, want := range tc.want {
				if got := tc.policy.Delay(n); got != want {
					t.Errorf("Delay(%d) = %s, want %s", n, got, want)
				}
			}
		})
	}
}

// TestDelayBounds: whatever the attempt, Delay is in [Base, Cap] (for
// Base <= Cap) and never overflows.
func TestDelayBounds(t *testing.T) {
	const maxD = time.Duration(math.MaxInt64)
	policies := []backoff.Policy{
		{Base: time.Second, Cap: 5 * time.Minute},
		{Base: 1, Cap: maxD},
		{Base: maxD / 2, Cap: maxD, Factor: 1e300},
		{Base: time.Hour, Cap: maxD, Factor: math.Inf(1)},
	}
	attempts := []int{-5, 0, 1, 61, 62, 63, 64, 1000, 1 << 40, math.MaxInt}
	for _, p := range policies {
		for _, n := range attempts {
			if got := p.Delay(n); got < p.Base || got > p.Cap {
				t.Errorf("%+v.Delay(%d) = %d, want within [%d, %d]", p, n, got, p.Base, p.Cap)
			}
		}
		if got := p.Delay(math.MaxInt); got != p.Cap {
			t.Errorf("%+v.Delay(MaxInt) = %d, want the cap", p, got)
		}
	}
	if got := (backoff.Policy{Base: time.Second}).Delay(-1); got != time.Second {
		t.Errorf("Delay(-1) = %s, want Base", got)
	}
}

// TestJitter: jitter shortens a delay by at most its fraction, and varies.
func TestJitter(t *testing.T) {
	for _, tc := range []struct {
		jitter, lowest float64 // lowest: the smallest fraction of the delay allowed
	}{{0.2, 0.8}, {0.5, 0.5}, {1, 0}, {7, 0}, {-1, 1}, {math.NaN(), 1}} {
		p := backoff.Policy{Base: time.Second, Cap: time.Minute, Jitter: tc.jitter}
		for n := range 8 {
			want := (backoff.Policy{Base: time.Second, Cap: time.Minute}).Delay(n)
			low := time.Duration(math.Ceil(float64(want) * tc.lowest))
			seen := map[time.Duration]bool{}
			for range 200 {
				got := p.Delay(n)
				if got < low || got > want {
					t.Fatalf("jitter %v: Delay(%d) = %s, want within [%s, %s]", tc.jitter, n, got, low, want)
				}
				seen[got] = true
			}
			if varies := len(seen) > 1; varies != (tc.lowest < 1) {
				t.Fatalf("jitter %v: %d distinct delays for attempt %d", tc.jitter, len(seen), n)
			}
		}
	}
}
