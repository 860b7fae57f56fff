package serverless_test

import (
	"context"
	"encoding/json"
	"net/http"
	"regexp"
	"sync"
	"testing"

	"github.com/go-logr/logr/funcr"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/opzero/opzero/internal/cloudevent"
	"github.com/opzero/opzero/internal/engine/serverless"
)

var uuidRE = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

// TestReconcilerLoggerCarriesTheKey: log.FromContext in a reconciler
// carries what controller-runtime's controller puts there (the controller,
// its group and kind, the key, a reconcile ID per reconcile), so a
// reconciler logs the same in both modes.
func TestReconcilerLoggerCarriesTheKey(t *testing.T) {
	var mu sync.Mutex
	var lines []map[string]any
	logger := funcr.NewJSON(func(obj string) {
		var m map[string]any
		if err := json.Unmarshal([]byte(obj), &m); err != nil {
			t.Errorf("log line %q: %v", obj, err)
			return
		}
		mu.Lock()
		lines = append(lines, m)
		mu.Unlock()
	}, funcr.Options{})
	r := reconcile.Func(func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
		log.FromContext(ctx).Info("from the reconciler")
		return reconcile.Result{}, nil
	})
	h := newHarness(t, r, nil, serverless.Options{Logger: logger})
	for i := 0; i < 2; i++ {
		if a := h.post(h.event(cloudevent.Reference, cloudevent.Update, newWidget(h.ns, "logged"), "widgets"), false); a.code != http.StatusOK {
			t.Fatalf("%d %s", a.code, a.body)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	ids := map[any]bool{}
	for _, l := range lines {
		if l["msg"] != "from the reconciler" {
			continue
		}
		want := map[string]any{"controller": "widget", "controllerGroup": "test.opzero.dev", "controllerKind": "Widget",
			"namespace": h.ns, "name": "logged"}
		for k, v := range want {
			if l[k] != v {
				t.Errorf("%s = %v, want %v (line %v)", k, l[k], v, l)
			}
		}
		if ref, _ := l["Widget"].(map[string]any); ref["name"] != "logged" || ref["namespace"] != h.ns {
			t.Errorf("Widget = %v, want {name: logged, namespace: %s} as controller-runtime logs it", l["Widget"], h.ns)
		}
		id, _ := l["reconcileID"].(string)
		if !uuidRE.MatchString(id) {
			t.Errorf("reconcileID %q is not a UUID", id)
		}
		ids[id] = true
	}
	if len(ids) != 2 {
		t.Errorf("%d distinct reconcile IDs in 2 reconciles' lines (%v), want 2", len(ids), lines)
	}
}
