package hub

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"runtime/debug"
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	v1alpha1 "github.com/opzero/opzero/api/v1alpha1"
	"github.com/opzero/opzero/internal/hub/bucket"
	"github.com/opzero/opzero/internal/wakeup/wakesource"
)

// This file is what makes the hub run as several replicas: each serves
// the Subscriptions of the buckets it holds (package bucket), takes a
// bucket over from the progress in the Subscriptions' status, and hands
// its buckets over when it stops.

// elector is what the hub needs of package bucket's Elector.
type elector interface {
	Run(ctx context.Context)
	Buckets() int
	Holds(i int) bool
	Held() []int
	Tried() bool
	Status() []bucket.Status
	OtherVersions() int
	Handoff(i int) string
	SetHandoff(i int, rv string)
}

// solo is the elector of a hub without Leases: one bucket, always held.
type solo struct{}

func (solo) Run(ctx context.Context)               { <-ctx.Done() }
func (solo) Buckets() int                          { return 1 }
func (solo) Holds(i int) bool                      { return i == 0 }
func (solo) Held() []int                           { return []int{0} }
func (solo) Tried() bool                           { return true }
func (solo) Status() []bucket.Status               { return []bucket.Status{{Bucket: 0, Held: true}} }
func (solo) OtherVersions() int                    { return 0 }
func (solo) Handoff(int) string                    { return "" }
func (solo) SetHandoff(int, string)                {}
func (h *Hub) bucketOf(k types.NamespacedName) int { return bucket.Of(k.String(), h.el.Buckets()) }

// LeasePrefix names the bucket Leases: <LeasePrefix>-<i>.
const LeasePrefix = "opzero-hub-bucket"

func (h *Hub) newElector() elector {
	if h.opts.Version == "" {
		h.opts.Version = BuildVersion()
	}
	if h.opts.LeaseNamespace == "" {
		return solo{}
	}
	if h.opts.Buckets <= 0 {
		h.opts.Buckets = 4
	}
	if h.opts.ReplicaID == "" {
		host, _ := os.Hostname()
		b := make([]byte, 4)
		_, _ = rand.Read(b)
		h.opts.ReplicaID = host + "_" + hex.EncodeToString(b)
	}
	h.opts.Log = h.opts.Log.WithValues("replica", h.opts.ReplicaID)
	return bucket.New(h.dyn, bucket.Options{Namespace: h.opts.LeaseNamespace, Name: LeasePrefix, Buckets: h.opts.Buckets,
		Identity: h.opts.ReplicaID, Version: h.opts.Version, LeaseDuration: h.opts.LeaseDuration, RenewDeadline: h.opts.RenewDeadline,
		RetryPeriod: h.opts.RetryPeriod, OnChange: h.onBucket, Log: h.opts.Log.WithName("buckets")})
}

// standBy is a light standby's wait (Options.LightStandby): it returns
// once this replica took bucket 0 (or holds a Lease already), or ctx's
// error when the replica is stopped first. A replica without Leases, or a full standby, returns at once.
func (h *Hub) standBy(ctx context.Context) error {
	el, ok := h.el.(*bucket.Elector)
	if !ok || !h.opts.LightStandby {
		return nil
	}
	defer h.standing.Store(false)
	f, err := el.Wait(ctx, func() {
		h.standing.Store(true)
		h.opts.Log.Info("light standby: every bucket is held by another replica; reading their Leases until this one takes bucket 0, nothing else is watched meanwhile",
			"leaseNamespace", h.opts.LeaseNamespace, "buckets", el.Buckets(), "every", el.RetryPeriod())
	})
	if err != nil {
		return err
	}
	if h.standing.Load() {
		h.opts.Log.Info("light standby: bucket 0 taken; starting to serve", "bucket", f.Bucket, "why", f.Why, "holder", f.Holder)
	}
	return nil
}

// BuildVersion is the binary's module version, else its VCS revision
// ("-dirty" if modified), else "devel".
func BuildVersion() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "devel"
	}
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	rev, dirty := "", false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev == "" {
		return "devel"
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if dirty {
		rev += "-dirty"
	}
	return rev
}

// Buckets lists the buckets as this replica last saw their Leases.
func (h *Hub) Buckets() []bucket.Status { return h.el.Status() }

// onBucket is the elector's news: a bucket lost stops its Subscriptions at
// once (another replica may take it from the Lease's expiry on; the loop
// forgets them), a bucket won is served by the loop.
func (h *Hub) onBucket(i int, held bool) {
	h.stats.bucketChanges.Add(1)
	if !held {
		h.mu.Lock()
		h.dropped[i] = true
		var stop []*sub
		for k, s := range h.subs {
			if h.bucketOf(k) == i {
				stop = append(stop, s)
			}
		}
		h.mu.Unlock()
		for _, s := range stop {
			s.stop()
		}
	}
	select {
	case h.changed <- struct{}{}:
	default:
	}
}

// serve makes held the buckets served, and returns those no longer
// served and those newly served (a bucket lost and won again since is
// both: its Subscriptions were stopped).
func (h *Hub) serve(held []int) (lost, won []int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := map[int]bool{}
	for _, b := range held {
		now[b] = true
	}
	for b := range h.served {
		if !now[b] || h.dropped[b] {
			lost = append(lost, b)
		}
	}
	for b := range now {
		if !h.served[b] || h.dropped[b] {
			won = append(won, b)
		}
	}
	h.served, h.dropped = now, map[int]bool{}
	return lost, won
}

// demote forgets the Subscriptions of the buckets lost, without writing
// anything: another replica may hold them already.
func (h *Hub) demote(lost []int) {
	if len(lost) == 0 {
		return
	}
	gone := map[int]bool{}
	for _, b := range lost {
		gone[b] = true
	}
	h.mu.Lock()
	var stop []*sub
	for k, s := range h.subs {
		if gone[h.bucketOf(k)] {
			stop = append(stop, s)
			delete(h.subs, k)
		}
	}
	h.mu.Unlock()
	for _, s := range stop {
		s.stop()
	}
	h.opts.Log.Info("buckets lost: their Subscriptions are no longer served here", "buckets", lost, "subscriptions", len(stop))
}

// rebucket serves the buckets the elector holds now: the Subscriptions of
// those lost are forgotten, those of the buckets won are read again (a
// quorum list: the progress their previous holder wrote before it released
// them) and served from their progress.
func (h *Hub) rebucket(ctx context.Context) error {
	lost, won := h.serve(h.el.Held())
	h.demote(lost)
	if len(won) > 0 {
		list, err := h.dyn.Resource(subscriptionsGVR).List(ctx, metav1.ListOptions{})
		if err != nil {
			return fmt.Errorf("listing the Subscriptions of the buckets won: %w", err) // the loop lists again
		}
		in := map[int]bool{}
		for _, b := range won {
			in[b] = true
		}
		fresh := map[types.NamespacedName]*v1alpha1.Subscription{}
		for i := range list.Items {
			if k := keyOf(&list.Items[i]); in[h.bucketOf(k)] {
				s, err := toSubscription(&list.Items[i])
				if err != nil {
					h.opts.Log.Error(err, "a Subscription the hub cannot read; skipped")
					continue
				}
				fresh[k] = s
			}
		}
		h.mu.Lock()
		for k := range h.all {
			if in[h.bucketOf(k)] && fresh[k] == nil {
				delete(h.all, k)
			}
		}
		for k, s := range fresh {
			h.all[k] = s
		}
		h.mu.Unlock()
		for _, s := range fresh {
			h.update(ctx, s, list.GetResourceVersion())
		}
		h.opts.Log.Info("buckets won: serving their Subscriptions from the progress in their status", "buckets", won, "subscriptions", len(fresh))
	}
	h.rewire(ctx)
	return nil
}

// handOff ends serving: the watches stop (nothing new is queued), the
// sends under way are given Options.Drain to settle (what is still queued
// then is left for the next holder: its progress did not move), and the
// progress of every Subscription of a bucket still held is written. The
// elector then releases the Leases.
func (h *Hub) handOff(ctx context.Context) {
	h.mu.Lock()
	watches, indexes, subs := h.watches, h.indexes, h.subs
	h.watches, h.indexes, h.subs = map[watchKey]*sharedWatch{}, map[indexKey]*refIndex{}, map[types.NamespacedName]*sub{}
	if h.stopWk != nil {
		h.stopWk()
		h.stopWk = nil
	}
	if h.stopRBAC != nil {
		h.stopRBAC()
		h.stopRBAC = nil
	}
	h.mu.Unlock()
	for _, w := range watches {
		w.stop()
	}
	for _, w := range watches {
		<-w.done
	}
	for _, ix := range indexes {
		ix.stop()
	}
	deadline := time.Now().Add(h.opts.Drain)
	var wg sync.WaitGroup
	for _, s := range subs {
		wg.Add(1)
		go func() { defer wg.Done(); s.drain(deadline) }()
	}
	wg.Wait()
	written := 0
	bound := map[int]string{} // per bucket: the newest change this replica, or one before it, may have sent
	for _, b := range h.el.Held() {
		bound[b] = "0"
	}
	for _, s := range subs {
		s.stop()
		b := h.bucketOf(s.key)
		if !h.el.Holds(b) {
			continue
		}
		s.writeStatus(ctx, s.generation())
		written++
		s.mu.Lock()
		for _, rv := range []string{s.takeover, s.attempted} {
			if newer(rv, bound[b]) && rv != "" {
				bound[b] = rv
			}
		}
		s.mu.Unlock()
	}
	for b, rv := range bound {
		h.el.SetHandoff(b, rv)
	}
	if len(subs) > 0 {
		h.opts.Log.Info("stopped: sends settled or left to the next holder, progress written; releasing the buckets", "subscriptions", written, "buckets", h.el.Held())
	}
}

// takeoverAt is where the changes a Subscription of a bucket just won may
// have been sent by the bucket's previous holder end: the version at which
// it was read (listRV), or before it the bound the holder that released
// the bucket wrote on its Lease.
func (h *Hub) takeoverAt(k types.NamespacedName, listRV string) string {
	if listRV == "" {
		return ""
	}
	if hf := h.el.Handoff(h.bucketOf(k)); hf != "" && !newer(hf, listRV) {
		return hf
	}
	return listRV
}

// wakeupOperators are the operators whose Wakeups this replica delivers:
// an operator's Wakeups go with the bucket of its first Subscription that
// takes them (by namespace/name), so that one replica serves them however
// its Subscriptions are spread; only those with somewhere to send them.
// Called with h.mu held.
func (h *Hub) wakeupOperators() []string {
	owner := map[string]types.NamespacedName{}
	for k, o := range h.all {
		if !o.Spec.Wakeups {
			continue
		}
		for _, op := range wakeupOperatorsOf(o.Spec) {
			if cur, ok := owner[op]; !ok || k.String() < cur.String() {
				owner[op] = k
			}
		}
	}
	var ops []string
	for op, k := range owner {
		if h.served[h.bucketOf(k)] && len(h.wakeupTargets(op)) > 0 {
			ops = append(ops, op)
		}
	}
	return ops
}

// wakeupOperatorsOf are the operators whose Wakeups go to spec's sink: the
// operator and the other controllers of its binary.
func wakeupOperatorsOf(spec v1alpha1.SubscriptionSpec) []string {
	return append([]string{spec.Operator}, spec.Operators...)
}

// wakeupTarget is a Ready Subscription's sink that takes Wakeups.
type wakeupTarget struct{ sink, audience string }

// wakeupTargets are the sinks of operator's Ready Subscriptions that take
// Wakeups: those served here as this replica checked them, the others as
// their holder wrote their status. Called with h.mu held.
func (h *Hub) wakeupTargets(operator string) []wakeupTarget {
	var out []wakeupTarget
	for _, s := range h.subs {
		if sp := s.spec(); sp.Wakeups && s.ready() && slices.Contains(wakeupOperatorsOf(sp), operator) {
			out = append(out, wakeupTarget{s.sinkURL(), sp.Sink.Audience})
		}
	}
	for k, o := range h.all {
		if h.served[h.bucketOf(k)] || !o.Spec.Wakeups || !slices.Contains(wakeupOperatorsOf(o.Spec), operator) {
			continue
		}
		if meta.IsStatusConditionTrue(o.Status.Conditions, v1alpha1.SubscriptionReady) && o.Status.SinkURI != "" {
			out = append(out, wakeupTarget{o.Status.SinkURI, o.Spec.Sink.Audience})
		}
	}
	return out
}

// routeWakeup sends a Wakeup of operator in namespace to its
// Subscription's sink: the one Ready Subscription of that operator, or of
// several, the one whose sink is the record's.
func (h *Hub) routeWakeup(ctx context.Context, operator, _, sink string) (string, string, error) {
	h.mu.Lock()
	ts := h.wakeupTargets(operator)
	h.mu.Unlock()
	var to *wakeupTarget
	if len(ts) == 1 {
		to = &ts[0]
	} else {
		for i := range ts {
			if ts[i].sink == sink {
				to = &ts[i]
			}
		}
	}
	if to == nil {
		return "", "", fmt.Errorf("no Ready Subscription of operator %q with sink %s takes wakeups: %w", operator, sink, wakesource.ErrNoRoute)
	}
	tok, err := h.token(ctx, to.audience)
	return to.sink, tok, err
}
