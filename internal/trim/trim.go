// Package trim gives back, once a serverless operator has answered its
// first event and gone idle, the memory that start-up left resident and a
// warm instance does not use: the heap's garbage from package init
// (debug.FreeOSMemory), and (Linux) the binary's code and read-only data
// pages that only start-up touched.
//
// # Expected flow
//
// Wrap the operator's HTTP handler with Handler. After the first request
// has been answered and none has arrived for Idle, it trims once.
//
// # Guarantees
//
//   - It trims at most once per process, never while a request is in
//     flight, and never touches writable memory: the executable's code
//     (r-x) and read-only data (r--) mappings are unmapped from this
//     process with madvise(MADV_DONTNEED), which for a clean private file
//     mapping only drops the page table entries. The pages stay in the page
//     cache; the next access maps them again (a minor fault, no I/O unless
//     the kernel has reclaimed them).
//
// # Caveats
//
// What it lowers is RSS (pages mapped into the process), not the page
// cache the pages stay in: a cgroup's memory.current still counts them
// until the kernel reclaims them, which it does more readily once no
// process maps them. The first events after the trim fault back the code
// they run (tens to hundreds of microseconds, once).
package trim

import (
	"net/http"
	"os"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"
)

// Idle is how long no request may arrive after the first answer before the
// trim.
const Idle = 100 * time.Millisecond

// Mode is OPZERO_TRIM: "" (the default) trims the heap and the binary's
// pages, "heap" only the heap, "off" nothing.
var Mode = os.Getenv("OPZERO_TRIM")

// Handler calls next and trims once after the first answer and Idle
// without a request.
func Handler(next http.Handler) http.Handler {
	if Mode == "off" {
		return next
	}
	t := &trimmer{}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.inflight.Add(1)
		t.last.Store(time.Now().UnixNano())
		defer func() {
			t.last.Store(time.Now().UnixNano())
			t.inflight.Add(-1)
			t.once.Do(func() { time.AfterFunc(Idle, t.try) })
		}()
		next.ServeHTTP(w, r)
	})
}

type trimmer struct {
	inflight atomic.Int64
	last     atomic.Int64 // unix ns of the last request's start or end
	once     sync.Once
}

func (t *trimmer) try() {
	if idle := time.Since(time.Unix(0, t.last.Load())); t.inflight.Load() > 0 || idle < Idle {
		time.AfterFunc(Idle, t.try)
		return
	}
	trimNow()
}

// trimNow is Now; tests count the calls.
var trimNow = Now

// Now trims at once.
func Now() {
	debug.FreeOSMemory()
	if Mode == "heap" {
		return
	}
	dropImage()
}

// NowAlwaysOn is Now for a process that stays up (the hub), which then
// also drops from the page cache the pages of its executable that no
// process maps any more (Linux: POSIX_FADV_DONTNEED). They are charged to
// the memory cgroup of the container that read them first, where kubelet
// counts them in its working set (about 2 MiB of a hub's 11 seen on the
// node); the kernel keeps every page a process still maps. The next use of
// a dropped page reads it from disk again. Not for serverless operators:
// the page cache is what makes the next cold start of the same binary
// quick.
func NowAlwaysOn() {
	Now()
	if Mode != "heap" {
		evictImage()
	}
}
