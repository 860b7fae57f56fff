package hub

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/robfig/cron/v3"

	v1alpha1 "github.com/opzero/opzero/api/v1alpha1"
	"github.com/opzero/opzero/internal/cloudevent"
)

// cronParser reads what a PingSource's schedule takes: five fields, an
// optional sixth for seconds in front, or a descriptor (@hourly).
var cronParser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// parseSchedule reads a PingSource schedule, CRON_TZ= allowed; @every is
// refused as Knative refuses it, and so is a schedule that never fires (30
// February): cron's Next is then the zero time, which the sweeper would
// wait for no time at all, ticking without end.
func parseSchedule(s string) (cron.Schedule, error) {
	if len(s) >= 6 && s[:6] == "@every" {
		return nil, fmt.Errorf("@every is not a PingSource schedule: use cron fields")
	}
	sched, err := cronParser.Parse(s)
	if err == nil && sched.Next(time.Now()).IsZero() {
		return nil, fmt.Errorf("the schedule never fires")
	}
	return sched, err
}

// sweeper sends a Subscription's sweep ticks on their schedules.
type sweeper struct {
	sweeps []v1alpha1.Sweep
	cancel context.CancelFunc
}

func newSweeper(s *sub, sweeps []v1alpha1.Sweep) *sweeper {
	ctx, cancel := context.WithCancel(context.Background())
	sw := &sweeper{sweeps: append([]v1alpha1.Sweep(nil), sweeps...), cancel: cancel}
	for _, p := range sw.sweeps {
		sched, err := parseSchedule(p.Schedule)
		if err != nil {
			continue // plan refused it already
		}
		go func() {
			for {
				next := sched.Next(time.Now())
				if next.IsZero() {
					return // no more ticks (checked when parsed; cron looks 5 years ahead)
				}
				select {
				case <-ctx.Done():
					return
				case <-time.After(time.Until(next)):
					s.scheduledTick(p)
				}
			}
		}()
	}
	return sw
}

func (sw *sweeper) stop() { sw.cancel() }

func (sw *sweeper) same(sweeps []v1alpha1.Sweep) bool {
	return sw != nil && slices.Equal(sw.sweeps, sweeps)
}

// scheduledTick sends p's tick, unless p is the anti-entropy sweep (no
// data) and the hub vouches that it would find nothing: every event since
// the last one was answered as reconciled, or recorded durably (a Wakeup,
// an acceptance), and none was dropped. What that sweep heals (events
// lost on the way, a retry that died with its instance, a reconcile cut
// short after an early answer) then did not happen, and the operator is
// not woken for it; a full sweep (data) is sent on its schedule whatever.
func (s *sub) scheduledTick(p v1alpha1.Sweep) {
	if p.Data == "" {
		s.mu.Lock()
		vouched := s.vouched
		s.mu.Unlock()
		if vouched {
			s.h.stats.sweepsSkipped.Inc()
			return
		}
	}
	s.tick(p)
}

// unvouch says why the next anti-entropy sweep must be sent.
func (s *sub) unvouch(why string) {
	s.mu.Lock()
	was := s.vouched
	s.vouched = false
	s.mu.Unlock()
	if was {
		s.h.opts.Log.V(1).Info("the next anti-entropy sweep will be sent", "subscription", s.key.String(), "why", why)
	}
}

// tick sends one PingSource event of p.
func (s *sub) tick(p v1alpha1.Sweep) {
	if p.Data == "" {
		s.mu.Lock()
		s.vouched = true // until an event says otherwise
		s.mu.Unlock()
	}
	ns := s.key.Namespace
	var data []byte
	if p.Data != "" {
		data = []byte(p.Data)
	}
	s.h.stats.sweeps.Inc()
	s.disp.put("sweep/"+p.Name, &delivery{build: func() (*event.Event, error) {
		return cloudevent.NewPing("/apis/v1/namespaces/"+ns+"/pingsources/"+p.Name, data), nil
	}})
}

// sweepNow sends the anti-entropy sweep (the sweep without data, or one
// named <operator>-sweep) at once: the hub lost a stretch of a watch and
// cannot see the deletions in it.
func (s *sub) sweepNow() {
	spec := s.spec()
	p := v1alpha1.Sweep{Name: spec.Operator + "-sweep"}
	for _, sw := range spec.Sweeps {
		if sw.Data == "" {
			p = sw
			break
		}
	}
	s.tick(p)
}
