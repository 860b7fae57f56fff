package trim

import (
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestHandlerTrimsOnceWhenIdle: no trim before the first answer nor while
// a request is in flight; one after the first answer and Idle without a
// request; never again.
func TestHandlerTrimsOnceWhenIdle(t *testing.T) {
	var trims atomic.Int32
	old := trimNow
	trimNow = func() { trims.Add(1) }
	defer func() { trimNow = old }()
	release := make(chan struct{})
	h := Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			<-release
		}
	}))
	serve := func(path string) { h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("POST", path, nil)) }
	serve("/")
	done := make(chan struct{})
	go func() { serve("/slow"); close(done) }() // in flight through the idle period
	time.Sleep(3 * Idle)
	if n := trims.Load(); n != 0 {
		t.Fatalf("%d trims while a request was in flight, want 0", n)
	}
	close(release)
	<-done
	deadline := time.Now().Add(10 * time.Second)
	for trims.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := trims.Load(); n != 1 {
		t.Fatalf("%d trims once idle, want 1", n)
	}
	serve("/")
	time.Sleep(3 * Idle)
	if n := trims.Load(); n != 1 {
		t.Fatalf("%d trims after a later request, want still 1", n)
	}
}

func TestHandlerOff(t *testing.T) {
	old := Mode
	Mode = "off"
	defer func() { Mode = old }()
	next := http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})
	if h := Handler(next); h == nil || func() bool { _, wrapped := h.(http.HandlerFunc); return !wrapped }() {
		t.Fatalf("Handler with OPZERO_TRIM=off is %T, want next itself", h)
	}
}

// TestNowUnmapsTheImage: the test binary's resident file-backed pages
// drop, and the code runs on (its pages map again as it runs).
func TestNowUnmapsTheImage(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the image is trimmed on Linux only")
	}
	before := rssFileKiB(t)
	Now()
	after := rssFileKiB(t)
	t.Logf("RssFile %d -> %d KiB", before, after)
	if after >= before {
		t.Fatalf("RssFile %d KiB after the trim, was %d: nothing unmapped", after, before)
	}
	if s := strings.Repeat(strconv.Itoa(42), 2); s != "4242" { // code runs on
		t.Fatal(s)
	}
}

func rssFileKiB(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "RssFile:"); ok {
			n, err := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")))
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatal("no RssFile in /proc/self/status")
	return 0
}
