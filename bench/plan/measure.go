package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/opzero/opzero/builder"
	v1 "github.com/opzero/opzero/examples/configwatcher/api/v1"
	"github.com/opzero/opzero/examples/configwatcher/controller"
	"github.com/opzero/opzero/internal/cloudevent"
	"github.com/opzero/opzero/internal/plan"
	"github.com/opzero/opzero/operator"
)

type planned struct{ objects, changed int }

// planAll plans every ConfigWatcher of ns in this process (as the
// binary would with OPZERO_PLAN) and returns the etcd keys written
// meanwhile (the API server's own apart) and the plan's time.
func (b *bench) planAll(ctx context.Context, ns string) (writes, self []string, p planned, d time.Duration, err error) {
	rep, d, err := b.plan(ctx, plan.Request{Namespace: ns, Rounds: 1}, func(rt *operator.Runtime) error {
		r := &controller.ConfigWatcherReconciler{Client: rt.GetClient(), Recorder: rt.GetEventRecorder("configwatcher")}
		return builder.ControllerManagedBy(rt).Named("configwatcher").For(&v1.ConfigWatcher{}).Complete(r)
	}, func(start, end int64) error {
		keys, err := b.etcdWritten(ctx, start)
		for _, k := range keys {
			if strings.HasPrefix(k, "/registry/leases/kube-system/") || strings.HasPrefix(k, "/registry/masterleases/") {
				self = append(self, k)
			} else {
				writes = append(writes, k)
			}
		}
		return err
	})
	if err != nil {
		return nil, nil, p, 0, err
	}
	p.objects = len(rep.Objects)
	for _, o := range rep.Objects {
		if o.Changed() {
			p.changed++
		}
		if o.Error != "" {
			return nil, nil, p, 0, fmt.Errorf("%s: %s", o.Ref, o.Error)
		}
	}
	return writes, self, p, d, nil
}

// plan runs one plan in this process; measured, if not nil, gets the
// etcd revisions before and after it.
func (b *bench) plan(ctx context.Context, req plan.Request, register func(*operator.Runtime) error, measured func(start, end int64) error) (*plan.Report, time.Duration, error) {
	dir, err := os.MkdirTemp("", "opzero-bench-plan-")
	if err != nil {
		return nil, 0, err
	}
	defer os.RemoveAll(dir)
	req.Out = filepath.Join(dir, "plan.json")
	enc, _ := json.Marshal(req)
	os.Setenv(plan.Env, string(enc))
	defer os.Unsetenv(plan.Env)
	start, err := b.etcdRevision(ctx)
	if err != nil {
		return nil, 0, err
	}
	t0 := time.Now()
	rt, err := operator.New(operator.Options{Scheme: b.scheme, Config: b.cfg, Logger: logr.Discard()})
	if err != nil {
		return nil, 0, err
	}
	if err := register(rt); err != nil {
		return nil, 0, err
	}
	if err := rt.Start(ctx); err != nil {
		return nil, 0, err
	}
	d := time.Since(t0)
	if measured != nil {
		end, err := b.etcdRevision(ctx)
		if err != nil {
			return nil, 0, err
		}
		if err := measured(start, end); err != nil {
			return nil, 0, err
		}
	}
	f, err := os.Open(req.Out)
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	rep, err := plan.Read(f)
	return rep, d, err
}

// converge runs the same operator serverless in this process and times a
// full sweep of ns's n ConfigWatchers, from its start to the sweep's
// answer (every object reconciled, its status and Events written).
func (b *bench) converge(ctx context.Context, ns string, n int) (time.Duration, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	addr := l.Addr().String()
	l.Close()
	t0 := time.Now()
	rt, err := operator.New(operator.Options{Mode: operator.Serverless, Scheme: b.scheme, Config: b.cfg, Addr: addr, InsecureNoAuth: true, Logger: logr.Discard()})
	if err != nil {
		return 0, err
	}
	r := &controller.ConfigWatcherReconciler{Client: rt.GetClient(), Recorder: rt.GetEventRecorder("configwatcher")}
	if err := builder.ControllerManagedBy(rt).Named("configwatcher").For(&v1.ConfigWatcher{}).Complete(r); err != nil {
		return 0, err
	}
	done := make(chan error, 1)
	go func() { done <- rt.Start(ctx) }()
	sender := &http.Client{Timeout: 10 * time.Minute}
	for {
		req, err := cloudevent.NewRequest(ctx, "http://"+addr, cloudevent.NewPing("/apis/v1/namespaces/"+ns+"/pingsources/sweep", []byte(`{"sweep":"all"}`)), false)
		if err != nil {
			return 0, err
		}
		resp, err := sender.Do(req)
		if err != nil {
			if time.Since(t0) > time.Minute {
				return 0, err
			}
			time.Sleep(5 * time.Millisecond) // not listening yet
			continue
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return 0, fmt.Errorf("the sweep was answered %s: %s", resp.Status, body)
		}
		break
	}
	d := time.Since(t0)
	cancel()
	<-done
	// Every object converged: a second plan would change nothing.
	var ws v1.ConfigWatcherList
	if err := b.c.List(context.Background(), &ws); err != nil {
		return 0, err
	}
	converged := 0
	for _, w := range ws.Items {
		if w.Namespace == ns && w.Status.ConfigMapVersion != "" {
			converged++
		}
	}
	if converged != n {
		return 0, fmt.Errorf("the sweep converged %d of %d ConfigWatchers", converged, n)
	}
	return d, nil
}

// etcdRevision is etcd's current revision (its HTTP gateway).
func (b *bench) etcdRevision(ctx context.Context) (int64, error) {
	var out struct {
		Header struct {
			Revision string `json:"revision"`
		} `json:"header"`
	}
	if err := b.etcd(ctx, map[string]any{"key": b64("health"), "count_only": true}, &out); err != nil {
		return 0, err
	}
	return strconv.ParseInt(out.Header.Revision, 10, 64)
}

// etcdWritten lists the keys under /registry/ modified after revision.
func (b *bench) etcdWritten(ctx context.Context, after int64) ([]string, error) {
	var out struct {
		Kvs []struct {
			Key string `json:"key"`
		} `json:"kvs"`
	}
	q := map[string]any{"key": b64("/registry/"), "range_end": b64("/registry0"), "keys_only": true, "min_mod_revision": strconv.FormatInt(after+1, 10)}
	if err := b.etcd(ctx, q, &out); err != nil {
		return nil, err
	}
	var keys []string
	for _, kv := range out.Kvs {
		k, _ := base64.StdEncoding.DecodeString(kv.Key)
		keys = append(keys, string(k))
	}
	sort.Strings(keys)
	return keys, nil
}

func (b *bench) etcd(ctx context.Context, body any, out any) error {
	raw, _ := json.Marshal(body)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSuffix(b.etcdURL, "/")+"/v3/kv/range", bytes.NewReader(raw))
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("etcd %s: %s", resp.Status, data)
	}
	return json.Unmarshal(data, out)
}

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

func objectMeta(ns, name string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Namespace: ns, Name: name}
}

// parallel runs f(0..n-1), 32 at once, and returns the first error.
func parallel(n int, f func(int) error) error {
	var mu sync.Mutex
	var first error
	sem := make(chan struct{}, 32)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if err := f(i); err != nil {
				mu.Lock()
				if first == nil {
					first = err
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return first
}

func median(xs []float64) float64 {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	if len(s) == 0 {
		return 0
	}
	return s[len(s)/2]
}

func format(xs []float64) string {
	var parts []string
	for _, x := range xs {
		parts = append(parts, fmt.Sprintf("%.2fx", x))
	}
	return strings.Join(parts, ", ")
}
