package hub

import (
	"net/http"
	"strconv"
	"sync/atomic"

	"github.com/google/uuid"
)

// EpochHeader is on every request the hub sends (events, sweeps, wakeups):
// it changes when this hub starts and whenever it may have missed
// changes it would otherwise have told (a watch listed again after its
// resource version was gone, a referrer index listed again). An operator
// that caches what events told it (the serverless engine's event cache)
// drops it all when the value changes: an object that became referenced
// while the hub was not watching (refIndex.tell) is then read from the
// API server again.
const EpochHeader = "Opzero-Hub-Epoch"

// epoch is the hub's current epoch: a random prefix per process and a
// counter.
type epoch struct {
	prefix string
	n      atomic.Int64
}

func newEpoch() *epoch { return &epoch{prefix: uuid.NewString()[:8]} }

func (e *epoch) String() string { return e.prefix + "." + strconv.FormatInt(e.n.Load(), 10) }

// bump starts a new epoch (nil: a Hub made without New, in tests).
func (e *epoch) bump() {
	if e != nil {
		e.n.Add(1)
	}
}

// epochTransport sets EpochHeader on each request.
type epochTransport struct {
	base http.RoundTripper
	e    *epoch
}

func (t epochTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set(EpochHeader, t.e.String())
	return t.base.RoundTrip(r)
}

// withEpoch is c sending e's epoch.
func withEpoch(c *http.Client, e *epoch) *http.Client {
	cc := *c
	base := cc.Transport
	if base == nil {
		base = http.DefaultTransport
	}
	cc.Transport = epochTransport{base: base, e: e}
	return &cc
}
