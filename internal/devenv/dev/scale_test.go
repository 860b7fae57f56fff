package dev_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/opzero/opzero/internal/devenv/dev"
	"github.com/opzero/opzero/internal/testkit"
	"github.com/opzero/opzero/testenv"
)

const slowService = `
apiVersion: serving.knative.dev/v1
kind: Service
metadata: {name: slow}
spec:
  template:
    metadata:
      annotations:
        autoscaling.knative.dev/max-scale: "3"
    spec:
      containerConcurrency: 1
      containers:
      - image: ko://github.com/opzero/opzero/internal/devenv/dev/testdata/slowop
        env: [{name: GREETING, value: hi}]
`

// TestScaleUpThroughDev: the Service's containerConcurrency 1 and
// max-scale 3 give three instances (no more) for six slow requests at once,
// every one answered; an idle period of 500 ms (Options.Idle: Knative's
// least, a 6 s window, would only slow the test) scales them to zero.
func TestScaleUpThroughDev(t *testing.T) {
	if testing.Short() {
		t.Skip("needs a control plane")
	}
	env := testenv.Get(t)
	ns := env.Namespace(t)
	objs, err := dev.ReadManifests("-", strings.NewReader(slowService))
	if err != nil {
		t.Fatal(err)
	}
	objs[0].SetNamespace(ns)
	p := start(t, env, objs, 500*time.Millisecond)
	svc := p.Services[0]
	var wg sync.WaitGroup
	var mu sync.Mutex
	pids := map[string]bool{}
	for i := 0; i < 6; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := http.Get(svc.URL + "/?sleep=600ms")
			if err != nil {
				t.Error(err)
				return
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			pid, greeting, _ := strings.Cut(string(b), " ")
			if resp.StatusCode != 200 || greeting != "hi" {
				t.Errorf("answer %d %q, want 200 with the env's greeting", resp.StatusCode, b)
			}
			mu.Lock()
			pids[pid] = true
			mu.Unlock()
		}()
	}
	wg.Wait()
	if len(pids) != 3 || svc.Activator.Starts.Load() != 3 {
		t.Fatalf("%d instances answered, %d started; want 3 and 3 (max-scale)", len(pids), svc.Activator.Starts.Load())
	}
	t0 := time.Now()
	testkit.Eventually(t, 10*time.Second, "scale to zero", func(context.Context) (bool, error) { return svc.Activator.Instances() == 0, nil })
	if d := time.Since(t0); d > 5*time.Second {
		t.Errorf("scaled to zero %s after the last answer; the idle period is 500ms", d)
	}
}
