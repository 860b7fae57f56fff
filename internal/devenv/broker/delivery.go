package broker

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Delivery is a Knative DeliverySpec, parsed.
type Delivery struct {
	// Retry is how many times a failed delivery is retried (0: never).
	Retry int
	// Policy is "exponential" or "linear" ("" with no Delay: no wait).
	Policy string
	// Delay is backoffDelay.
	Delay time.Duration
	// DeadLetter receives an event whose retries are exhausted (URL "": none).
	DeadLetter Target
}

// Target is where events are sent: a URL and the OIDC audience of its
// tokens ("" sends none).
type Target struct {
	URL      string
	Audience string
}

// ParseDelivery checks a Trigger's (or Broker's) spec.delivery fields as
// Knative's webhook does and parses them; retry nil means 0.
func ParseDelivery(retry *int64, policy, delay string) (Delivery, error) {
	var d Delivery
	if retry != nil {
		if *retry < 0 {
			return d, fmt.Errorf("delivery.retry %d: must not be negative", *retry)
		}
		d.Retry = int(*retry)
	}
	switch policy {
	case "", "exponential", "linear":
		d.Policy = policy
	default:
		return d, fmt.Errorf("delivery.backoffPolicy %q: want exponential or linear", policy)
	}
	if delay != "" {
		v, err := ParseDuration(delay)
		if err != nil {
			return d, fmt.Errorf("delivery.backoffDelay: %w", err)
		}
		d.Delay = v
	}
	return d, nil
}

// Wait is how long Knative waits before retry n (1, 2, ...): its retry
// library passes the 0-based count of attempts made so far minus one to
// kncloudevents' backoff, so the first exponential wait is the delay and
// the first linear wait is zero. Knative uses these only when both
// backoffPolicy and backoffDelay are set; else it does not wait.
func (d Delivery) Wait(n int) time.Duration {
	if d.Policy == "" || d.Delay == 0 || n < 1 {
		return 0
	}
	switch d.Policy {
	case "exponential":
		return d.Delay * time.Duration(math.Exp2(float64(n-1)))
	default:
		return d.Delay * time.Duration(n-1)
	}
}

// ParseDuration parses an ISO-8601 duration as Knative's delivery fields
// take it: P[nW][nD][T[nH][nM][nS]], each number possibly fractional
// (PT0.5S, PT1M30S, P1DT2H). Years and months, whose length varies, are
// refused.
func ParseDuration(s string) (time.Duration, error) {
	bad := func(why string) error {
		return fmt.Errorf("%q is not an ISO-8601 duration such as PT0.5S or PT2M (%s)", s, why)
	}
	rest, ok := strings.CutPrefix(strings.ToUpper(s), "P")
	if !ok || rest == "" || rest == "T" {
		return 0, bad("it starts with P and has at least one number and unit")
	}
	var total float64
	inTime := false
	units := map[bool]map[byte]float64{
		false: {'W': 7 * 24 * 3600, 'D': 24 * 3600},
		true:  {'H': 3600, 'M': 60, 'S': 1},
	}
	for rest != "" {
		if rest[0] == 'T' {
			if inTime {
				return 0, bad("T twice")
			}
			inTime, rest = true, rest[1:]
			if rest == "" {
				return 0, bad("nothing after T")
			}
			continue
		}
		i := strings.IndexFunc(rest, func(r rune) bool { return (r < '0' || r > '9') && r != '.' && r != ',' })
		if i <= 0 {
			return 0, bad("a number before each unit")
		}
		n, err := strconv.ParseFloat(strings.ReplaceAll(rest[:i], ",", "."), 64)
		if err != nil {
			return 0, bad(err.Error())
		}
		u := rest[i]
		sec, ok := units[inTime][u]
		switch {
		case !ok && !inTime && (u == 'Y' || u == 'M'):
			return 0, bad("years and months vary in length; use W, D, H, M or S")
		case !ok:
			return 0, bad(fmt.Sprintf("unit %c", u))
		}
		total += n * sec
		rest = rest[i+1:]
	}
	if total*1e9 > math.MaxInt64 {
		return 0, errors.New("duration " + s + " is too long")
	}
	return time.Duration(math.Round(total * 1e9)), nil
}
