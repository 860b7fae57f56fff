package activator

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"sync"
	"testing"
	"time"
)

// TestMain doubles as the backend: with ACTIVATOR_BACKEND=1 the test binary
// is a tiny operator that answers on $PORT after a short start-up.
func TestMain(m *testing.M) {
	if os.Getenv("ACTIVATOR_BACKEND") == "1" {
		time.Sleep(50 * time.Millisecond) // start-up work
		mux := http.NewServeMux()
		mux.HandleFunc("/healthz", func(http.ResponseWriter, *http.Request) {})
		mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintf(w, "pid %d", os.Getpid()) })
		_ = http.ListenAndServe("127.0.0.1:"+os.Getenv("PORT"), mux)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func TestScaleFromAndToZero(t *testing.T) {
	a := New(Options{Idle: 300 * time.Millisecond, Command: func() *exec.Cmd {
		c := exec.Command(os.Args[0])
		c.Env = []string{"ACTIVATOR_BACKEND=1"}
		return c
	}})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { a.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	srv := httptest.NewServer(a)
	defer srv.Close()

	if a.Instances() != 0 {
		t.Fatal("an instance runs before any request")
	}
	var wg sync.WaitGroup
	codes := make([]int, 20)
	for i := range codes { // a burst during the cold start is buffered, not lost
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			resp, err := http.Get(srv.URL)
			if err == nil {
				codes[i] = resp.StatusCode
				resp.Body.Close()
			}
		}(i)
	}
	wg.Wait()
	for i, c := range codes {
		if c != 200 {
			t.Fatalf("request %d during the cold start: %d, want 200", i, c)
		}
	}
	if a.ColdStarts.Load() != 1 || a.Instances() != 1 {
		t.Fatalf("cold starts %d, instances %d; want 1 and 1", a.ColdStarts.Load(), a.Instances())
	}
	deadline := time.Now().Add(5 * time.Second)
	for a.Instances() != 0 {
		if time.Now().After(deadline) {
			t.Fatal("not scaled to zero after the idle period")
		}
		time.Sleep(20 * time.Millisecond)
	}
	resp, err := http.Get(srv.URL)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("request after scale to zero: %v %v", resp, err)
	}
	resp.Body.Close()
	if a.ColdStarts.Load() != 2 {
		t.Fatalf("cold starts %d, want 2", a.ColdStarts.Load())
	}
}
