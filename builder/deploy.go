package builder

import (
	"fmt"
	"strings"
)

// DeploySettings is how a serverless operator is deployed: what `opzero
// manifests` turns into PingSources and the Knative Service's bounds. The
// engines ignore it; it lives in the description so that the deploy YAML is
// derived from the operator itself.
type DeploySettings struct {
	// Sweep is the cron schedule of the anti-entropy sweep (a PingSource
	// with no data: objects whose generation is not observed, deletions
	// pending with finalizers, overdue wakeups); "" means none.
	Sweep string
	// FullSweep is the cron schedule of the full sweep ({"sweep":"all"}:
	// every object of the primary kind); "" means none.
	FullSweep string
	// MinScale and MaxScale bound the instances (Knative's min-scale and
	// max-scale; MaxScale 0 means unbounded).
	MinScale, MaxScale int
	// Concurrency is the number of requests one instance is sent at once
	// (Knative's containerConcurrency; 0 means unbounded).
	Concurrency int
}

// The defaults Build applies when WithSweep or WithScale was not called.
const (
	DefaultSweep     = "*/10 * * * *" // every 10 minutes
	DefaultFullSweep = "17 */6 * * *" // every 6 hours
	DefaultMaxScale  = 3
)

// WithSweep sets the cron schedules (5 fields, or @hourly, @daily, ...) of
// the anti-entropy sweep and of the rarer full sweep; "" turns one off.
// Without WithSweep the defaults are DefaultSweep and DefaultFullSweep.
func (b *Builder) WithSweep(schedule, fullSchedule string) *Builder {
	for _, s := range []string{schedule, fullSchedule} {
		if err := checkCron(s); err != nil {
			b.errs = append(b.errs, fmt.Errorf("WithSweep: %w", err))
		}
	}
	b.op.Deploy.Sweep, b.op.Deploy.FullSweep = schedule, fullSchedule
	b.sweepSet = true
	return b
}

// WithScale bounds the number of instances: min 0 scales to zero; max 0
// means unbounded. Without WithScale: 0 to DefaultMaxScale.
func (b *Builder) WithScale(minScale, maxScale int) *Builder {
	switch {
	case minScale < 0 || maxScale < 0:
		b.errs = append(b.errs, fmt.Errorf("WithScale(%d, %d): bounds cannot be negative", minScale, maxScale))
	case maxScale != 0 && maxScale < minScale:
		b.errs = append(b.errs, fmt.Errorf("WithScale(%d, %d): max is below min (0 means unbounded)", minScale, maxScale))
	}
	b.op.Deploy.MinScale, b.op.Deploy.MaxScale = minScale, maxScale
	b.scaleSet = true
	return b
}

// WithConcurrency sets how many requests one instance is sent at once
// (Knative's containerConcurrency; 0, the default, means unbounded: the
// engine bounds reconciles itself and answers 429 beyond --max-in-flight).
func (b *Builder) WithConcurrency(n int) *Builder {
	if n < 0 {
		b.errs = append(b.errs, fmt.Errorf("WithConcurrency(%d): cannot be negative (0 means unbounded)", n))
	}
	b.op.Deploy.Concurrency = n
	return b
}

func (b *Builder) deployDefaults() {
	if !b.sweepSet {
		b.op.Deploy.Sweep, b.op.Deploy.FullSweep = DefaultSweep, DefaultFullSweep
	}
	if !b.scaleSet {
		b.op.Deploy.MinScale, b.op.Deploy.MaxScale = 0, DefaultMaxScale
	}
}

var cronDescriptors = map[string]bool{"@yearly": true, "@annually": true, "@monthly": true,
	"@weekly": true, "@daily": true, "@midnight": true, "@hourly": true}

// checkCron accepts what a PingSource's schedule accepts in the common
// cases: "" (off), a descriptor, or five fields of [0-9*/,-] (an optional
// CRON_TZ= prefix allowed). It is a guard against typos, not a full parser.
func checkCron(s string) error {
	if s == "" || cronDescriptors[s] {
		return nil
	}
	fields := strings.Fields(s)
	if len(fields) > 0 && strings.HasPrefix(fields[0], "CRON_TZ=") {
		fields = fields[1:]
	}
	if len(fields) != 5 {
		return fmt.Errorf("schedule %q: want 5 cron fields (minute hour day month weekday) or @hourly, @daily, ...", s)
	}
	for _, f := range fields {
		if strings.Trim(f, "0123456789*/,-") != "" {
			return fmt.Errorf("schedule %q: field %q has characters other than 0-9 * / , -", s, f)
		}
	}
	return nil
}
