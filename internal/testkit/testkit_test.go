package testkit_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/opzero/opzero/internal/testkit"
)

// recorder is a testing.TB whose Fatalf records the message and ends the
// goroutine, as the real one does.
type recorder struct {
	testing.TB
	msg string
}

func (r *recorder) Helper() {}
func (r *recorder) Fatalf(format string, args ...any) {
	r.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// fatal runs f on a recorder in its own goroutine and returns what Fatalf
// was told ("" if f returned).
func fatal(t *testing.T, f func(tb testing.TB)) string {
	r := &recorder{TB: t}
	done := make(chan struct{})
	go func() { defer close(done); f(r) }()
	<-done
	return r.msg
}

func TestEventuallyReportsTheLastError(t *testing.T) {
	n := 0
	msg := fatal(t, func(tb testing.TB) {
		testkit.Eventually(tb, 100*time.Millisecond, "the widget", func(context.Context) (bool, error) {
			n++
			return false, fmt.Errorf("attempt %d", n)
		})
	})
	if !strings.HasPrefix(msg, "the widget: not within 100ms; last error: attempt ") || !strings.HasSuffix(msg, fmt.Sprint(n)) {
		t.Fatalf("message %q, want what, the timeout and the last error (attempt %d)", msg, n)
	}
}

func TestEventuallyKeepsPollingAfterAnError(t *testing.T) {
	n := 0
	msg := fatal(t, func(tb testing.TB) {
		testkit.Eventually(tb, 10*time.Second, "third time", func(context.Context) (bool, error) {
			n++
			if n < 3 {
				return false, errors.New("not yet")
			}
			return true, nil
		})
	})
	if msg != "" || n != 3 {
		t.Fatalf("message %q after %d calls, want none after 3", msg, n)
	}
}

func TestWait(t *testing.T) {
	if testkit.Wait(50*time.Millisecond, func() bool { return false }) {
		t.Fatal("Wait reported a condition that never held")
	}
	var n atomic.Int32
	if !testkit.Wait(10*time.Second, func() bool { return n.Add(1) == 2 }) {
		t.Fatal("Wait missed a condition that held")
	}
}

func TestPollStopsWithTheContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := testkit.Poll(ctx, time.Hour, func(context.Context) (bool, error) { return false, nil }); err == nil {
		t.Fatal("Poll on an ended context returned nil")
	}
}

func TestOnFreePortRetriesATakenPort(t *testing.T) {
	var tried []int
	port := testkit.OnFreePort(t, func(port int) error {
		tried = append(tried, port)
		if len(tried) == 1 {
			return fmt.Errorf("child said: listen tcp 127.0.0.1:%d: bind: address already in use", port)
		}
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			return err
		}
		return l.Close()
	})
	if len(tried) != 2 || port != tried[1] {
		t.Fatalf("tried %v, returned %d; want a second port after the collision", tried, port)
	}
}

func TestOnFreePortFailsOnOtherErrors(t *testing.T) {
	calls := 0
	msg := fatal(t, func(tb testing.TB) {
		testkit.OnFreePort(tb, func(int) error { calls++; return errors.New("bad flag") })
	})
	if calls != 1 || !strings.Contains(msg, "bad flag") {
		t.Fatalf("%d calls, message %q; want one call and the error", calls, msg)
	}
}

func TestPortTakenByARealBind(t *testing.T) {
	l := testkit.Listen(t)
	_, err := net.Listen("tcp", l.Addr().String())
	if !testkit.PortTaken(err) {
		t.Fatalf("binding a listened port: %v, want PortTaken", err)
	}
}

func TestBackgroundCancelsWhenTheTestEnds(t *testing.T) {
	var stopped atomic.Bool
	t.Run("inner", func(t *testing.T) {
		testkit.Background(t, func(ctx context.Context) error {
			<-ctx.Done()
			stopped.Store(true)
			return nil
		})
	})
	if !stopped.Load() {
		t.Fatal("the goroutine still ran after its test ended")
	}
}

// TestMain doubles as the child of the StartChild tests: with
// TESTKIT_CHILD=listen it serves HTTP on $PORT, with =exit it fails at once
// as a server whose port was taken does.
func TestMain(m *testing.M) {
	switch os.Getenv("TESTKIT_CHILD") {
	case "listen":
		l, err := net.Listen("tcp", "127.0.0.1:"+os.Getenv("PORT"))
		if err != nil {
			fmt.Println(err)
			os.Exit(1)
		}
		_ = http.Serve(l, http.NotFoundHandler())
		os.Exit(0)
	case "exit":
		fmt.Println("listen tcp: address already in use")
		os.Exit(1)
	}
	os.Exit(m.Run())
}

func child(mode string, port int) *exec.Cmd {
	c := exec.Command(os.Args[0])
	c.Env = append(os.Environ(), "TESTKIT_CHILD="+mode, fmt.Sprintf("PORT=%d", port))
	return c
}

func TestStartChildRetriesOnATakenPort(t *testing.T) {
	taken := testkit.Listen(t)
	var ch *testkit.Child
	tries := 0
	port := testkit.OnFreePort(t, func(port int) error {
		tries++
		if tries == 1 {
			port = testkit.Port(taken) // as if another process took it meanwhile
		}
		var err error
		ch, err = testkit.StartChild(t, child("listen", port), fmt.Sprintf("http://127.0.0.1:%d/", port), 10*time.Second)
		return err
	})
	if tries != 2 || port == testkit.Port(taken) {
		t.Fatalf("%d tries, port %d; want a second try on another port", tries, port)
	}
	ch.Kill()
	select {
	case <-ch.Exited():
	default:
		t.Fatal("Kill returned before the child exited")
	}
}

func TestStartChildQuotesTheLog(t *testing.T) {
	_, err := testkit.StartChild(t, child("exit", 0), "http://127.0.0.1:1/", 10*time.Second)
	if !testkit.PortTaken(err) || !strings.Contains(err.Error(), "exited before answering") {
		t.Fatalf("StartChild of a child that exits: %v, want the exit and its log", err)
	}
}

// recordingTB is a testing.TB that records Log calls and runs its
// cleanups when told.
type recordingTB struct {
	testing.TB
	logs     []string
	cleanups []func()
}

func (r *recordingTB) Log(args ...any)  { r.logs = append(r.logs, fmt.Sprint(args...)) }
func (r *recordingTB) Cleanup(f func()) { r.cleanups = append(r.cleanups, f) }
func (r *recordingTB) end() {
	for i := len(r.cleanups) - 1; i >= 0; i-- {
		r.cleanups[i]()
	}
}

// TestLogWriterAfterTheTest: what a process writes while the test runs
// reaches t.Log; what a goroutine that outlived the test writes is dropped
// (t.Log would panic: "Log in goroutine after ... has completed").
func TestLogWriterAfterTheTest(t *testing.T) {
	r := &recordingTB{}
	w := testkit.LogWriter(r)
	fmt.Fprintln(w, "during")
	r.end()
	if n, err := fmt.Fprintln(w, "after"); n != len("after\n") || err != nil {
		t.Fatalf("write after the test: %d, %v; want it taken whole", n, err)
	}
	if !slices.Equal(r.logs, []string{"during"}) {
		t.Fatalf("logged %q, want only the write made during the test", r.logs)
	}
}
