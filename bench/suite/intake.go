package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cloudevents/sdk-go/v2/binding"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
	corev1 "k8s.io/api/core/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/opzero/opzero/builder"
	"github.com/opzero/opzero/internal/cloudevent"
	"github.com/opzero/opzero/internal/engine/serverless"
)

// offline answers every read with an error: intake must need none.
type offline struct {
	client.Client
	scheme *k8sruntime.Scheme
}

func (o offline) Get(context.Context, client.ObjectKey, client.Object, ...client.GetOption) error {
	return errors.New("offline")
}
func (o offline) Scheme() *k8sruntime.Scheme { return o.scheme }

func engineFor(r reconcile.Reconciler) (*serverless.Engine, error) {
	return engineWith(r, serverless.Options{})
}

func engineWith(r reconcile.Reconciler, o serverless.Options) (*serverless.Engine, error) {
	scheme := k8sruntime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	op, err := builder.New(scheme).For(&corev1.Service{}).Build(r)
	if err != nil {
		return nil, err
	}
	o.MaxInFlight = 100_000
	return serverless.New(op, offline{scheme: scheme}, o)
}

// request is a binary-mode ApiServerSource event, ready to replay.
type request struct {
	header http.Header
	body   []byte
}

func eventRequest(mode cloudevent.Mode, obj map[string]any) (request, error) {
	raw, _ := json.Marshal(obj)
	ev, err := cloudevent.NewObjectEvent(mode, cloudevent.Update, raw, "services")
	if err != nil {
		return request{}, err
	}
	req := httptest.NewRequest(http.MethodPost, "/", nil)
	if err := cehttp.WriteRequest(binding.WithForceBinary(context.Background()), binding.ToMessage(ev), req); err != nil {
		return request{}, err
	}
	var body bytes.Buffer
	if req.Body != nil {
		_, _ = body.ReadFrom(req.Body)
	}
	return request{req.Header, body.Bytes()}, nil
}

func (q request) serve(h http.Handler) int {
	req := httptest.NewRequest(http.MethodPost, "/", bytes.NewReader(q.body))
	req.Header = q.header.Clone()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec.Code
}

// intake measures skipped (status-only) events per second on one core, and
// reconciles per 1000-event burst on one key.
func intake(r *report, runs int) error {
	svc := map[string]any{"apiVersion": "v1", "kind": "Service",
		"metadata": map[string]any{"name": "s", "namespace": "n", "generation": 3, "resourceVersion": "7", "labels": map[string]any{"app": "x"}},
		"spec":     map[string]any{"ports": []any{map[string]any{"port": 80}}}, "status": map[string]any{"observedGeneration": 3}}
	skipped, err := eventRequest(cloudevent.Resource, svc)
	if err != nil {
		return err
	}
	prev := runtime.GOMAXPROCS(1)
	var rates []float64
	for i := 0; i < runs; i++ {
		var reconciles atomic.Int64
		e, err := engineFor(reconcile.Func(func(context.Context, reconcile.Request) (reconcile.Result, error) {
			reconciles.Add(1)
			return reconcile.Result{}, nil
		}))
		if err != nil {
			return err
		}
		skipped.serve(e) // first sight reconciles; the rest are status-only
		const n = 50_000
		t0 := time.Now()
		for j := 0; j < n; j++ {
			if code := skipped.serve(e); code != 200 {
				return fmt.Errorf("skipped event answered %d", code)
			}
		}
		rates = append(rates, n/time.Since(t0).Seconds())
		if e.Stats().Skipped.Load() != n || reconciles.Load() != 1 {
			return fmt.Errorf("intake: %d skipped, %d reconciles; want %d and 1", e.Stats().Skipped.Load(), reconciles.Load(), n)
		}
	}
	runtime.GOMAXPROCS(prev)

	ref, err := eventRequest(cloudevent.Reference, svc)
	if err != nil {
		return err
	}
	settled, spread, p50, p100, err := bursts(ref, runs, serverless.Options{})
	if err != nil {
		return err
	}
	unsettled, spreadOff, p50Off, p100Off, err := bursts(ref, runs, serverless.Options{FollowUpSettle: -1})
	if err != nil {
		return err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "In-process, over the engine's http.Handler (CloudEvent decoding included), median (min-max) of %d runs.\n\n", runs)
	fmt.Fprintf(&b, "| figure | opzero serverless | target |\n|---|---|---|\n")
	fmt.Fprintf(&b, "| skipped (status-only) events per second, GOMAXPROCS=1 | %s | >= 20k |\n", fstatsInt(rates))
	fmt.Fprintf(&b, "| reconciles per burst of 1000 concurrent events on one key (10 ms reconcile) | %s | <= 2 |\n", fstatsInt(settled))
	fmt.Fprintf(&b, "| the same, follow-ups not held (FollowUpSettle -1, the engine before the hold) | %s | |\n", fstatsInt(unsettled))
	fmt.Fprintf(&b, "\nBurst detail (medians): the 1000 requests enter the handler over %.1f ms (%.1f ms without the hold); answer latency p50 %.1f ms, max %.1f ms (without the hold: %.1f / %.1f ms). The hold (default 2 ms of quiet, at most 20 ms after the previous reconcile) delays only follow-ups.\n",
		fmedian(spread), fmedian(spreadOff), fmedian(p50), fmedian(p100), fmedian(p50Off), fmedian(p100Off))
	r.add("Intake", b.String())
	return nil
}

func fstatsInt(v []float64) string {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	if len(s) == 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f (%.0f-%.0f)", fmedian(s), s[0], s[len(s)-1])
}

// bursts sends runs bursts of 1000 concurrent events on one key to an engine
// whose reconcile takes 10 ms: reconciles per burst, how long the requests
// took to enter the handler (first to last), and answer latency (p50, max),
// in ms.
func bursts(ref request, runs int, o serverless.Options) (reconciles, spread, p50, p100 []float64, err error) {
	for i := 0; i < runs; i++ {
		var n atomic.Int64
		e, err := engineWith(reconcile.Func(func(context.Context, reconcile.Request) (reconcile.Result, error) {
			n.Add(1)
			time.Sleep(10 * time.Millisecond) // a reconcile that takes some time
			return reconcile.Result{}, nil
		}), o)
		if err != nil {
			return nil, nil, nil, nil, err
		}
		var mu sync.Mutex
		var first, last time.Time
		lat := make([]float64, 0, 1000)
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			t := time.Now()
			mu.Lock()
			if first.IsZero() || t.Before(first) {
				first = t
			}
			if t.After(last) {
				last = t
			}
			mu.Unlock()
			e.ServeHTTP(w, r)
			mu.Lock()
			lat = append(lat, float64(time.Since(t))/1e6)
			mu.Unlock()
		})
		var wg sync.WaitGroup
		for j := 0; j < 1000; j++ {
			wg.Add(1)
			go func() { defer wg.Done(); ref.serve(h) }()
		}
		wg.Wait()
		sort.Float64s(lat)
		reconciles = append(reconciles, float64(n.Load()))
		spread = append(spread, float64(last.Sub(first))/1e6)
		p50, p100 = append(p50, lat[len(lat)/2]), append(p100, lat[len(lat)-1])
	}
	return reconciles, spread, p50, p100, nil
}
