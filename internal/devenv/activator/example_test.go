package activator_test

import (
	"context"
	"net/http"
	"os/exec"
	"time"

	"github.com/opzero/opzero/internal/devenv/activator"
)

// An operator behind a scale-to-zero URL: up to three instances of 50
// requests each, stopped after 30 s without a request.
func Example() {
	a := activator.New(activator.Options{
		Command:     func() *exec.Cmd { return exec.Command("./configwatcher", "--mode=serverless") },
		Idle:        30 * time.Second,
		MaxScale:    3,
		Concurrency: 50,
	})
	go a.Run(context.Background())
	_ = http.ListenAndServe("127.0.0.1:18080", a)
}
