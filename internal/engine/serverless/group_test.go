package serverless_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/opzero/opzero/builder"
	"github.com/opzero/opzero/internal/cloudevent"
	"github.com/opzero/opzero/internal/engine/serverless"
)

// TestGroupRoutesEachEventToItsControllers: two controllers of one binary
// (Widgets; ConfigMaps, which also watches Widgets) behind one endpoint. An
// object event reaches the controllers that watch its kind, a wakeup the
// one it names, a ping both; the answer is the worst of theirs; an event
// of a kind neither watches is refused.
func TestGroupRoutesEachEventToItsControllers(t *testing.T) {
	widgets := newProbe()
	h := newHarness(t, widgets, func(b *builder.Builder) *builder.Builder { return b.Named("widgets") }, serverless.Options{})
	cms := newProbe()
	fail := false
	cms.result = func(reconcile.Request, int) (reconcile.Result, error) {
		if fail {
			return reconcile.Result{}, errors.New("scripted failure")
		}
		return reconcile.Result{}, nil
	}
	op, err := builder.New(h.env.Scheme).Named("configmaps").For(&corev1.ConfigMap{}).
		Watches(newWidget("", ""), func(_ context.Context, _ client.Reader, obj client.Object) ([]reconcile.Request, error) {
			return []reconcile.Request{req(obj.GetNamespace(), obj.GetName()+"-config")}, nil
		}).Build(cms)
	if err != nil {
		t.Fatal(err)
	}
	second, err := serverless.New(op, h.client, serverless.Options{})
	if err != nil {
		t.Fatal(err)
	}
	g, err := serverless.NewGroup(h.engine, second)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(g)
	t.Cleanup(srv.Close)
	h.srv = srv

	w := newWidget(h.ns, "w")
	h.create(w)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: h.ns, Name: "c"}}
	if err := h.env.Client.Create(context.Background(), cm); err != nil {
		t.Fatal(err)
	}
	calls := func() (int64, int64) { return widgets.calls.Load(), cms.calls.Load() }
	step := func(what string, post func() answer, code int, dw, dc int64) answer {
		t.Helper()
		w0, c0 := calls()
		a := post()
		if a.code != code {
			t.Fatalf("%s: answered %d %q, want %d", what, a.code, a.body, code)
		}
		if w1, c1 := calls(); w1-w0 != dw || c1-c0 != dc {
			t.Fatalf("%s: %d Widget and %d ConfigMap reconciles, want %d and %d", what, w1-w0, c1-c0, dw, dc)
		}
		return a
	}
	step("a Widget event (both controllers watch Widgets)", func() answer {
		return h.post(h.event(cloudevent.Resource, cloudevent.Add, w, "widgets"), false)
	}, http.StatusOK, 1, 1)
	if len(cms.spansOf(req(h.ns, "w-config"))) != 1 {
		t.Fatal("the ConfigMap controller did not reconcile what its map function asked for")
	}
	step("a ConfigMap event (one controller)", func() answer {
		return h.post(h.event(cloudevent.Resource, cloudevent.Add, cm, "configmaps"), false)
	}, http.StatusOK, 0, 1)
	step("a wakeup for the widgets controller", func() answer {
		return h.post(cloudevent.NewWakeup(cloudevent.Wakeup{Source: "test", Operator: "widgets", APIVersion: "test.opzero.dev/v1", Kind: "Widget",
			Namespace: h.ns, Name: "w", Reason: "Retry"}), false)
	}, http.StatusOK, 1, 0)
	ping, _ := json.Marshal(map[string]string{"namespace": h.ns, "name": "c"})
	step("a ping for a key (every controller)", func() answer {
		return h.post(cloudevent.NewPing("test/ping", ping), false)
	}, http.StatusOK, 1, 1)
	fail = true
	a := step("a ping one controller fails", func() answer {
		return h.post(cloudevent.NewPing("test/ping", ping), false)
	}, http.StatusInternalServerError, 1, 1)
	if !strings.Contains(a.body, "scripted failure") {
		t.Errorf("the answer %q does not say what failed", a.body)
	}
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: h.ns, Name: "s"}}
	a = step("an event of a kind no controller watches", func() answer {
		return h.post(h.event(cloudevent.Resource, cloudevent.Add, sec, "secrets"), false)
	}, http.StatusBadRequest, 0, 0)
	if !strings.Contains(a.body, "watched by none of the controllers (widgets, configmaps)") {
		t.Errorf("the refusal %q does not name the controllers", a.body)
	}

	bad, err := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader("not a CloudEvent"))
	if err != nil {
		t.Fatal(err)
	}
	step("a request that is no CloudEvent", func() answer { return h.do(bad) }, http.StatusBadRequest, 0, 0)

	if _, err := serverless.NewGroup(h.engine, mustEngine(t, h, serverless.Options{})); err == nil || !strings.Contains(err.Error(), "two controllers named widgets") {
		t.Errorf("a group of two engines of one name: %v", err)
	}
}
