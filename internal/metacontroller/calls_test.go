package metacontroller

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opzero/opzero/builder"
	"github.com/opzero/opzero/internal/cloudevent"
	"github.com/opzero/opzero/internal/engine/serverless"
	"github.com/opzero/opzero/internal/standin"
	"github.com/opzero/opzero/internal/testkit"
	"github.com/opzero/opzero/testenv"
)

// forward stands in for one ApiServerSource per resource in Reference
// mode: every change of the resource's objects in ns, in order, one event
// at a time, posted to url, until the test ends.
func forward(t *testing.T, env *testenv.Env, url, ns string, gvr schema.GroupVersionResource, clusterScoped bool) {
	t.Helper()
	dc := dynamic.NewForConfigOrDie(env.Config)
	ri := dc.Resource(gvr).Namespace(ns)
	var list *unstructured.UnstructuredList
	var err error
	if clusterScoped {
		list, err = dc.Resource(gvr).List(context.Background(), metav1.ListOptions{})
	} else {
		list, err = ri.List(context.Background(), metav1.ListOptions{})
	}
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var w watch.Interface
	if clusterScoped {
		w, err = dc.Resource(gvr).Watch(ctx, metav1.ListOptions{ResourceVersion: list.GetResourceVersion()})
	} else {
		w, err = ri.Watch(ctx, metav1.ListOptions{ResourceVersion: list.GetResourceVersion()})
	}
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); w.Stop(); <-done })
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			u, ok := ev.Object.(*unstructured.Unstructured)
			if !ok {
				continue
			}
			action := map[watch.EventType]cloudevent.Action{watch.Added: cloudevent.Add, watch.Modified: cloudevent.Update, watch.Deleted: cloudevent.Delete}[ev.Type]
			raw, _ := u.MarshalJSON()
			e, err := cloudevent.NewObjectEvent(cloudevent.Reference, action, raw, gvr.Resource)
			if err != nil {
				continue
			}
			req, err := cloudevent.NewRequest(ctx, url, e, false)
			if err != nil {
				continue
			}
			if resp, err := httpClient.Do(req); err == nil {
				resp.Body.Close()
			}
		}
	}()
}

var httpClient = http.DefaultClient

// quiet waits until the hooks have not been called for a second.
func quiet(t *testing.T, calls func() int) {
	t.Helper()
	last, since := calls(), time.Now()
	testkit.Eventually(t, 60*time.Second, "the hook calls to end", func(context.Context) (bool, error) {
		if n := calls(); n != last {
			last, since = n, time.Now()
		}
		return time.Since(since) > time.Second, nil
	})
}

// TestHookCallsServerlessNoMoreThanClassic runs the same steps with our
// propagation example (a customize hook naming one ConfigMap and the
// Namespace; a copy child) under each engine, serverless fed one event per
// change as ApiServerSources send them, and counts the hook calls: create
// the parent, change the related ConfigMap, change the parent, delete the
// child. Serverless must call the hooks no more than classic.
func TestHookCallsServerlessNoMoreThanClassic(t *testing.T) {
	env := testenv.Get(t)
	ctx := context.Background()
	calls := map[string][]int{}
	for _, mode := range []string{"classic", "serverless"} {
		ns := env.Namespace(t)
		configMap(t, env, ns, "source-a", nil, map[string]string{"v": "one"})
		configMap(t, env, ns, "source-b", nil, map[string]string{"v": "b"})
		hooks := &propagation{}
		name := uniqueName("calls-" + mode)
		c := learningController(t, env, name, hooks.serve(t))
		// What customize names is already learned: the count is of syncs
		// alone, not of the restart that learning costs once.
		c.Learned = []Resource{mustResolve(t, env, "v1", "configmaps"), mustResolve(t, env, "v1", "namespaces")}
		cfg := &Config{Controllers: []*Controller{c}}
		r := &Reconciler{Client: env.Client, Config: cfg, Hooks: &HookClient{}}
		op, err := Describe(builder.New(env.Scheme), cfg).Build(r)
		if err != nil {
			t.Fatal(err)
		}
		op.Name = uniqueName("calls-op-" + mode)
		if mode == "serverless" {
			e, err := serverless.New(op, standin.NewClient(env.Client), serverless.Options{})
			if err != nil {
				t.Fatal(err)
			}
			srv := httptest.NewServer(e)
			t.Cleanup(srv.Close)
			forward(t, env, srv.URL, ns, schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "helloworlds"}, false)
			forward(t, env, srv.URL, ns, schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}, false)
		} else {
			runClassic(t, env, ns, op)
		}
		copyIs := func(want string) {
			testkit.Eventually(t, 30*time.Second, "p-copy holds "+want, func(ctx context.Context) (bool, error) {
				cm := &corev1.ConfigMap{}
				err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "p-copy"}, cm)
				return err == nil && cm.Data["v"] == want, client.IgnoreNotFound(err)
			})
		}
		step := func(what string, do func(), want string) {
			before := hooks.count()
			do()
			copyIs(want)
			quiet(t, hooks.count)
			calls[mode] = append(calls[mode], hooks.count()-before)
			t.Logf("%s, %s: %d hook calls", mode, what, hooks.count()-before)
		}
		step("create the parent", func() { helloWho(t, env, ns, "p", "source-a") }, "one")
		step("change the related ConfigMap", func() {
			patch(t, env, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "source-a"}}, `{"data":{"v":"two"}}`)
		}, "two")
		step("change the parent", func() {
			u := &unstructured.Unstructured{}
			u.SetGroupVersionKind(helloGVK)
			u.SetNamespace(ns)
			u.SetName("p")
			patch(t, env, u, `{"spec":{"who":"source-b"}}`)
		}, "b")
		step("delete the child", func() {
			if err := env.Client.Delete(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "p-copy"}}); err != nil {
				t.Fatal(err)
			}
			testkit.Eventually(t, 30*time.Second, "the copy recreated", func(ctx context.Context) (bool, error) {
				cm := &corev1.ConfigMap{}
				err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "p-copy"}, cm)
				return err == nil, client.IgnoreNotFound(err)
			})
		}, "b")
	}
	total := func(xs []int) int {
		n := 0
		for _, x := range xs {
			n += x
		}
		return n
	}
	if s, c := total(calls["serverless"]), total(calls["classic"]); s > c {
		t.Fatalf("serverless called the hooks %d times (%v), classic %d (%v), for the same steps", s, calls["serverless"], c, calls["classic"])
	}
}

func patch(t *testing.T, env *testenv.Env, o client.Object, body string) {
	t.Helper()
	if err := env.Client.Patch(context.Background(), o, client.RawPatch("application/merge-patch+json", []byte(body))); err != nil {
		t.Fatal(err)
	}
}
