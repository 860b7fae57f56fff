package bucket

import (
	"strconv"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// The Leases are coordination.k8s.io/v1, read and written with the dynamic
// client: client-go's tools/leaderelection links the typed clientset and
// every informer (about 290 more packages in the hub), which the hub's
// dependency budget forbids (internal/depcheck).
var leasesGVR = schema.GroupVersionResource{Group: "coordination.k8s.io", Version: "v1", Resource: "leases"}

// Annotations a replica writes on the Leases it holds.
const (
	// VersionAnnotation is the holder's hub version: a replica that sees a
	// bucket held by another version says so (two installs, or a rolling
	// upgrade in progress).
	VersionAnnotation = "opzero.dev/hub-version"
	// BucketsAnnotation is how many buckets the holder divides the
	// Subscriptions into: replicas that disagree would serve some
	// Subscriptions twice and others not at all.
	BucketsAnnotation = "opzero.dev/hub-buckets"
	// HandoffAnnotation is written by a holder that releases the Lease:
	// the newest resourceVersion of a change it (or a holder before it)
	// may have sent for the bucket's Subscriptions (Elector.SetHandoff).
	// The next holder counts what it sends up to there as possible
	// duplicates; after an expiry it knows no such bound.
	HandoffAnnotation = "opzero.dev/hub-handoff-rv"
	// Label marks the hub's bucket Leases.
	Label = "opzero.dev/hub-bucket"
)

// microTime is the layout of a Lease's MicroTime fields.
const microTime = "2006-01-02T15:04:05.000000Z07:00"

// record is what a replica reads of a bucket's Lease.
type record struct {
	holder      string
	version     string // "" when the holder wrote none: not a hub
	buckets     string
	handoff     string // HandoffAnnotation, on a released Lease
	renew       string // as written: compared, never trusted as a clock
	acquire     string
	transitions int64
	duration    int64
}

func readRecord(u *unstructured.Unstructured) record {
	r := record{}
	r.holder, _, _ = unstructured.NestedString(u.Object, "spec", "holderIdentity")
	r.renew, _, _ = unstructured.NestedString(u.Object, "spec", "renewTime")
	r.acquire, _, _ = unstructured.NestedString(u.Object, "spec", "acquireTime")
	r.transitions, _, _ = unstructured.NestedInt64(u.Object, "spec", "leaseTransitions")
	r.duration, _, _ = unstructured.NestedInt64(u.Object, "spec", "leaseDurationSeconds")
	a := u.GetAnnotations()
	r.version, r.buckets, r.handoff = a[VersionAnnotation], a[BucketsAnnotation], a[HandoffAnnotation]
	return r
}

// write puts r into u (a Lease read, or a new one).
func (r record) write(u *unstructured.Unstructured) {
	spec := map[string]any{"holderIdentity": r.holder, "leaseDurationSeconds": r.duration,
		"leaseTransitions": r.transitions}
	if r.renew != "" {
		spec["renewTime"] = r.renew
	}
	if r.acquire != "" {
		spec["acquireTime"] = r.acquire
	}
	if r.holder == "" {
		delete(spec, "holderIdentity")
	}
	u.Object["spec"] = spec
	a := u.GetAnnotations()
	if a == nil {
		a = map[string]string{}
	}
	a[VersionAnnotation], a[BucketsAnnotation], a[HandoffAnnotation] = r.version, r.buckets, r.handoff
	for k, v := range map[string]string{VersionAnnotation: r.version, HandoffAnnotation: r.handoff} {
		if v == "" {
			delete(a, k)
		}
	}
	u.SetAnnotations(a)
}

// newLease is a Lease of bucket i, not yet written.
func newLease(ns, name string, i int) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "coordination.k8s.io/v1", "kind": "Lease"}}
	u.SetNamespace(ns)
	u.SetName(name)
	u.SetLabels(map[string]string{Label: strconv.Itoa(i), "app.kubernetes.io/name": "opzero-hub"})
	return u
}

func formatMicro(t time.Time) string { return t.UTC().Format(microTime) }
