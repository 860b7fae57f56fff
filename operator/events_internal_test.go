package operator

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// heldCreates is a client whose Creates each wait for their own release
// and then return its error.
type heldCreates struct {
	client.Client
	started chan string
	release map[string]chan error
}

func (h *heldCreates) Create(_ context.Context, obj client.Object, _ ...client.CreateOption) error {
	h.started <- obj.GetName()
	return <-h.release[obj.GetName()]
}

// TestEventFlushWaitsForWritesUnderWay: an answer waits for each Event
// write under way when it starts waiting, whether the write succeeds or
// fails (then logged, as a synchronous write's failure is), and not for a
// write begun after it started waiting: a busy instance's answers are not
// held back by later reconciles' Events.
func TestEventFlushWaitsForWritesUnderWay(t *testing.T) {
	var logged []string
	w := &eventWrites{log: funcr.New(func(_, args string) { logged = append(logged, args) }, funcr.Options{})}
	h := &heldCreates{started: make(chan string, 3), release: map[string]chan error{
		"first": make(chan error, 1), "second": make(chan error, 1), "later": make(chan error, 1)}}
	c := w.client(h)
	for _, name := range []string{"first", "second"} {
		var ev client.Object = &eventsv1.Event{ObjectMeta: metav1.ObjectMeta{Name: name}}
		if name == "second" {
			ev = &corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: name}} // the older API too
		}
		if err := c.Create(context.Background(), ev); err != nil {
			t.Fatal(err)
		}
		<-h.started
	}
	flushed := make(chan struct{})
	go func() { w.flush(); close(flushed) }()
	time.Sleep(50 * time.Millisecond) // let flush take its list (not a wait for an outcome)
	if err := c.Create(context.Background(), &eventsv1.Event{ObjectMeta: metav1.ObjectMeta{Name: "later"}}); err != nil {
		t.Fatal(err)
	}
	<-h.started

	h.release["first"] <- nil
	select {
	case <-flushed:
		t.Fatal("flushed while the second Event's write was under way")
	case <-time.After(100 * time.Millisecond):
	}
	h.release["second"] <- errors.New("the API server refused it")
	select {
	case <-flushed:
	case <-time.After(10 * time.Second):
		t.Fatal("flush still waiting once the writes under way ended (the later one is held)")
	}
	h.release["later"] <- nil
	w.flush()
	if len(logged) != 1 {
		t.Fatalf("want the failed write logged once, got %q", logged)
	}
}

// TestEventWritesPassOtherCreates: only Events are written in the
// background; any other Create is the wrapped client's, synchronously.
func TestEventWritesPassOtherCreates(t *testing.T) {
	w := &eventWrites{log: funcr.New(func(string, string) {}, funcr.Options{})}
	h := &heldCreates{started: make(chan string, 1), release: map[string]chan error{"cm": make(chan error, 1)}}
	h.release["cm"] <- errors.New("refused")
	if err := w.client(h).Create(context.Background(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cm"}}); err == nil {
		t.Fatal("a ConfigMap's Create returned before its write, without its error")
	}
}

// TestEventFlushBeforeAnImplicitAnswer: a handler that writes nothing is
// answered 200 by net/http once it returns; that answer too waits for the
// Event writes under way.
func TestEventFlushBeforeAnImplicitAnswer(t *testing.T) {
	w := &eventWrites{log: funcr.New(func(string, string) {}, funcr.Options{})}
	h := &heldCreates{started: make(chan string, 1), release: map[string]chan error{"e": make(chan error, 1)}}
	c := w.client(h)
	srv := httptest.NewServer(w.wrap(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		_ = c.Create(context.Background(), &eventsv1.Event{ObjectMeta: metav1.ObjectMeta{Name: "e"}})
		<-h.started
	})))
	defer srv.Close()
	answered := make(chan struct{})
	go func() {
		if resp, err := http.Get(srv.URL); err == nil {
			resp.Body.Close()
		}
		close(answered)
	}()
	select {
	case <-answered:
		t.Fatal("answered while the Event's write was under way")
	case <-time.After(200 * time.Millisecond):
	}
	h.release["e"] <- nil
	<-answered
}
