package metacontroller

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/opzero/opzero/builder"
	"github.com/opzero/opzero/internal/cloudevent"
	"github.com/opzero/opzero/internal/engine/classic"
	"github.com/opzero/opzero/internal/engine/serverless"
	v1alpha1 "github.com/opzero/opzero/internal/metacontroller/api/v1alpha1"
	"github.com/opzero/opzero/internal/standin"
	"github.com/opzero/opzero/internal/testkit"
	"github.com/opzero/opzero/testenv"
)

// selectingController is a CompositeController of HelloWorlds labelled
// tier=a (parentResource.labelSelector), each with one ConfigMap child
// named after it, resolved as the operator resolves it.
func selectingController(t *testing.T, env *testenv.Env, url string) *Controller {
	t.Helper()
	sync := url + "/sync"
	cc := &v1alpha1.CompositeController{ObjectMeta: metav1.ObjectMeta{Name: "hello"}, Spec: v1alpha1.CompositeControllerSpec{
		ParentResource: v1alpha1.CompositeControllerParentResourceRule{
			ResourceRule:  v1alpha1.ResourceRule{APIVersion: "example.com/v1", Resource: "helloworlds"},
			LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "a"}}},
		ChildResources: []v1alpha1.CompositeControllerChildResourceRule{{ResourceRule: v1alpha1.ResourceRule{APIVersion: "v1", Resource: "configmaps"}}},
		Hooks:          &v1alpha1.CompositeControllerHooks{Sync: &v1alpha1.Hook{Webhook: &v1alpha1.Webhook{URL: &sync}}},
	}}
	c, err := resolveComposite(cc, env.Client.RESTMapper())
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func labelledHelloWorld(t *testing.T, env *testenv.Env, ns, name, tier string) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(helloGVK)
	u.SetNamespace(ns)
	u.SetName(name)
	u.SetLabels(map[string]string{"tier": tier})
	u.Object["spec"] = map[string]any{"who": name}
	if err := env.Client.Create(context.Background(), u); err != nil {
		t.Fatal(err)
	}
	return u
}

func childPerParent(req map[string]any) []any {
	p, _ := req["parent"].(map[string]any)
	md, _ := p["metadata"].(map[string]any)
	return []any{map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": md["name"].(string) + "-child"}}}
}

// TestParentLabelSelectorBothModes: a CompositeController's
// parentResource.labelSelector, run by each engine as opzero-metacontroller
// runs it: the parent whose labels do not match gets no sync and no child,
// the matching one its child. Serverless, the non-matching parent's event
// is delivered anyway (as an unfiltered source would) and changes nothing.
func TestParentLabelSelectorBothModes(t *testing.T) {
	env := testenv.Get(t)
	for _, mode := range []string{"serverless", "classic"} {
		t.Run(mode, func(t *testing.T) {
			ns := env.Namespace(t)
			h := &hooks{children: childPerParent}
			c := selectingController(t, env, h.serve(t))
			cfg := &Config{Controllers: []*Controller{c}}
			r := &Reconciler{Client: env.Client, Config: cfg, Hooks: &HookClient{}}
			op, err := Describe(builder.New(env.Scheme), cfg).Build(r)
			if err != nil {
				t.Fatal(err)
			}
			op.Name = uniqueName("parents-" + mode)
			no := labelledHelloWorld(t, env, ns, "not-selected", "b")
			yes := labelledHelloWorld(t, env, ns, "selected", "a")
			if mode == "serverless" {
				e, err := serverless.New(op, standin.NewClient(env.Client), serverless.Options{})
				if err != nil {
					t.Fatal(err)
				}
				srv := httptest.NewServer(e)
				t.Cleanup(srv.Close)
				for _, o := range []*unstructured.Unstructured{no, yes} {
					deliver(t, srv.URL, o)
				}
			} else {
				runClassic(t, env, ns, op)
			}
			testkit.Eventually(t, 30*time.Second, "the selected HelloWorld's child", func(ctx context.Context) (bool, error) {
				err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "selected-child"}, &corev1.ConfigMap{})
				return err == nil, client.IgnoreNotFound(err)
			})
			if mode == "classic" {
				time.Sleep(time.Second) // the initial list's events of both parents are handled by now
			}
			err = env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "not-selected-child"}, &corev1.ConfigMap{})
			if err == nil || client.IgnoreNotFound(err) != nil {
				t.Fatalf("the HelloWorld not matching parentResource.labelSelector got a child (or the read failed): %v", err)
			}
			// Its key reconciled anyway (a child's event names its owner): no sync.
			if _, err := r.Reconcile(context.Background(), CompositeKey("hello", ns, "not-selected")); err != nil {
				t.Fatal(err)
			}
			h.mu.Lock()
			defer h.mu.Unlock()
			for _, req := range h.syncs {
				p, _ := req["parent"].(map[string]any)
				if md, _ := p["metadata"].(map[string]any); md["name"] == "not-selected" {
					t.Fatal("the sync hook was called for the HelloWorld not matching parentResource.labelSelector")
				}
			}
		})
	}
}

// deliver posts o's event as an ApiServerSource in Reference mode sends it
// and expects the answer that the event was handled.
func deliver(t *testing.T, url string, o *unstructured.Unstructured) {
	t.Helper()
	raw, err := o.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	ev, err := cloudevent.NewObjectEvent(cloudevent.Reference, cloudevent.Add, raw, "helloworlds")
	if err != nil {
		t.Fatal(err)
	}
	req, err := cloudevent.NewRequest(context.Background(), url, ev, false)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		t.Fatalf("event of %s answered %d (%s)", o.GetName(), resp.StatusCode, resp.Header.Get(serverless.ResultHeader))
	}
}

func runClassic(t *testing.T, env *testenv.Env, ns string, op *builder.Controller) {
	t.Helper()
	mgr, err := manager.New(env.Config, manager.Options{Scheme: env.Scheme, Metrics: metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0", Cache: cache.Options{DefaultNamespaces: map[string]cache.Config{ns: {}}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := classic.Setup(mgr, op, classic.Options{}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
	})
}

// TestDecoratorSelectorsBothModes: a DecoratorController's
// resources[].labelSelector and annotationSelector, run by each engine:
// only the object matching both gets its attachment.
func TestDecoratorSelectorsBothModes(t *testing.T) {
	env := testenv.Get(t)
	for _, mode := range []string{"serverless", "classic"} {
		t.Run(mode, func(t *testing.T) {
			ns := env.Namespace(t)
			var mu sync.Mutex
			var synced []string
			url := hookServer(t, func(w http.ResponseWriter, r *http.Request) {
				var req struct {
					Object struct {
						Metadata struct{ Name string } `json:"metadata"`
					} `json:"object"`
				}
				_ = json.NewDecoder(r.Body).Decode(&req)
				mu.Lock()
				synced = append(synced, req.Object.Metadata.Name)
				mu.Unlock()
				_ = json.NewEncoder(w).Encode(map[string]any{"attachments": []any{map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
					"metadata": map[string]any{"name": req.Object.Metadata.Name + "-attachment"}}}})
			}) + "/sync"
			dc := &v1alpha1.DecoratorController{ObjectMeta: metav1.ObjectMeta{Name: "deco"}, Spec: v1alpha1.DecoratorControllerSpec{
				Resources: []v1alpha1.DecoratorControllerResourceRule{{ResourceRule: v1alpha1.ResourceRule{APIVersion: "example.com/v1", Resource: "helloworlds"},
					LabelSelector:      &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "a"}},
					AnnotationSelector: &v1alpha1.AnnotationSelector{MatchAnnotations: map[string]string{"team": "x"}}}},
				Attachments: []v1alpha1.DecoratorControllerAttachmentRule{{ResourceRule: v1alpha1.ResourceRule{APIVersion: "v1", Resource: "configmaps"}}},
				Hooks:       &v1alpha1.DecoratorControllerHooks{Sync: &v1alpha1.Hook{Webhook: &v1alpha1.Webhook{URL: &url}}},
			}}
			c, err := resolveDecorator(dc, env.Client.RESTMapper())
			if err != nil {
				t.Fatal(err)
			}
			cfg := &Config{Controllers: []*Controller{c}}
			r := &Reconciler{Client: env.Client, Config: cfg, Hooks: &HookClient{}}
			op, err := Describe(builder.New(env.Scheme), cfg).Build(r)
			if err != nil {
				t.Fatal(err)
			}
			op.Name = uniqueName("decorated-" + mode)
			objs := []*unstructured.Unstructured{
				labelledHelloWorld(t, env, ns, "no-labels", "b"),
				annotated(t, env, labelledHelloWorld(t, env, ns, "label-only", "a"), "y"),
				annotated(t, env, labelledHelloWorld(t, env, ns, "both", "a"), "x"),
			}
			if mode == "serverless" {
				e, err := serverless.New(op, standin.NewClient(env.Client), serverless.Options{})
				if err != nil {
					t.Fatal(err)
				}
				srv := httptest.NewServer(e)
				t.Cleanup(srv.Close)
				for _, o := range objs {
					deliver(t, srv.URL, o)
				}
			} else {
				runClassic(t, env, ns, op)
			}
			testkit.Eventually(t, 30*time.Second, "the matching HelloWorld's attachment", func(ctx context.Context) (bool, error) {
				err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "both-attachment"}, &corev1.ConfigMap{})
				return err == nil, client.IgnoreNotFound(err)
			})
			if mode == "classic" {
				time.Sleep(time.Second)
			}
			for _, o := range objs[:2] {
				if _, err := r.Reconcile(context.Background(), DecoratorKey("deco", c.Parents[0], ns, o.GetName())); err != nil {
					t.Fatal(err)
				}
				err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: o.GetName() + "-attachment"}, &corev1.ConfigMap{})
				if client.IgnoreNotFound(err) != nil || err == nil {
					t.Fatalf("%s (not selected) got an attachment, or the read failed: %v", o.GetName(), err)
				}
			}
			mu.Lock()
			defer mu.Unlock()
			for _, name := range synced {
				if name != "both" {
					t.Fatalf("the sync hook was called for %s, which the selectors do not select", name)
				}
			}
		})
	}
}

func annotated(t *testing.T, env *testenv.Env, u *unstructured.Unstructured, team string) *unstructured.Unstructured {
	t.Helper()
	u.SetAnnotations(map[string]string{"team": team})
	if err := env.Client.Update(context.Background(), u); err != nil {
		t.Fatal(err)
	}
	return u
}

var names atomic.Int32

// uniqueName: controller-runtime refuses two controllers of one name in a
// process (-count=2 runs a test twice).
func uniqueName(prefix string) string { return fmt.Sprintf("%s-%d", prefix, names.Add(1)) }
