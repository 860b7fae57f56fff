package adopt_test

import (
	"context"
	"fmt"
	goruntime "runtime"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/opzero/opzero/internal/adopt"
)

// TestUpdatedWhen: the parts of an object whose change lets an update
// through are read from the types of controller-runtime's predicates of
// every source of a kind; a predicate of the project's own, or a source
// without predicates, lets every update through (no parts), and the
// former is named.
func TestUpdatedWhen(t *testing.T) {
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	own := predicate.NewPredicateFuncs(func(client.Object) bool { return true })
	cases := []struct {
		name    string
		sources [][]predicate.Predicate // one source each, its predicates
		want    []string                // nil: every update
		bad     string                  // in untranslated
	}{
		{"generation", [][]predicate.Predicate{{predicate.GenerationChangedPredicate{}}}, []string{"generation"}, ""},
		{"or of generation and labels", [][]predicate.Predicate{{predicate.Or[client.Object](predicate.GenerationChangedPredicate{}, predicate.LabelChangedPredicate{})}}, []string{"generation", "labels"}, ""},
		{"and: one that translates bounds it", [][]predicate.Predicate{{own, predicate.AnnotationChangedPredicate{}}}, []string{"annotations"}, "predicate.Funcs"},
		{"and inside", [][]predicate.Predicate{{predicate.And[client.Object](predicate.GenerationChangedPredicate{}, predicate.LabelChangedPredicate{})}}, []string{"generation"}, ""},
		{"two sources: the union", [][]predicate.Predicate{{predicate.GenerationChangedPredicate{}}, {predicate.LabelChangedPredicate{}}}, []string{"generation", "labels"}, ""},
		{"a source without predicates", [][]predicate.Predicate{{predicate.GenerationChangedPredicate{}}, nil}, nil, ""},
		{"or with the project's own", [][]predicate.Predicate{{predicate.Or[client.Object](predicate.GenerationChangedPredicate{}, own)}}, nil, "predicate.Funcs"},
		{"resource version", [][]predicate.Predicate{{predicate.ResourceVersionChangedPredicate{}}}, nil, ""},
		{"not", [][]predicate.Predicate{{predicate.Not[client.Object](predicate.GenerationChangedPredicate{})}}, nil, "predicate.not"},
		{"funcs of all types", [][]predicate.Predicate{{own}}, nil, "predicate.Funcs (functions: "},
		{"funcs of updates only", [][]predicate.Predicate{{predicate.Funcs{UpdateFunc: func(event.UpdateEvent) bool { return false }}}}, nil,
			"predicate.Funcs with only UpdateFunc set (a filter by type of change: if it drops every change of those types, --hub-events <Kind>=created,deleted"},
		{"funcs of creates and deletes", [][]predicate.Predicate{{predicate.Funcs{CreateFunc: func(event.CreateEvent) bool { return false },
			DeleteFunc: func(event.DeleteEvent) bool { return false }}}}, nil, "predicate.Funcs with only CreateFunc and DeleteFunc set (a filter by type of change: if it drops every change of those types, --hub-events <Kind>=updated "},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			parts, bad := configMapInformer(t, scheme, tc.sources).UpdatedWhen()
			if !slices.Equal(parts, tc.want) {
				t.Errorf("parts = %v, want %v", parts, tc.want)
			}
			if joined := strings.Join(bad, "; "); tc.bad == "" && joined != "" || !strings.Contains(joined, tc.bad) {
				t.Errorf("untranslated = %q, want it to name %q", joined, tc.bad)
			}
		})
	}
}

// TestTypeFilters: for each source of a kind, the functions its
// predicate.Funcs set, by type of change, with the file and line where
// each is declared; a source without any is an empty entry.
func TestTypeFilters(t *testing.T) {
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	_, file, line, _ := goruntime.Caller(0)
	up := func(event.UpdateEvent) bool { return false }
	del := func(event.DeleteEvent) bool { return false }
	inf := configMapInformer(t, scheme, [][]predicate.Predicate{{predicate.Funcs{UpdateFunc: up, DeleteFunc: del}}, {predicate.GenerationChangedPredicate{}}})
	sources, ok := inf.TypeFilters()
	slices.SortFunc(sources, func(a, b []adopt.FuncSite) int { return len(a) - len(b) }) // handlers come in no set order
	want := [][]adopt.FuncSite{{}, {{Type: "updated", File: file, Line: line + 1}, {Type: "deleted", File: file, Line: line + 2}}}
	if !ok || fmt.Sprint(sources) != fmt.Sprint(want) {
		t.Errorf("TypeFilters = %v, %v; want %v", sources, ok, want)
	}
}

// configMapInformer adopts a controller with one ConfigMap source for each
// entry of sources (its predicates), starts it until the test ends, and
// returns the adopted cache's one informer.
func configMapInformer(t *testing.T, scheme *runtime.Scheme, sources [][]predicate.Predicate) *adopt.Informer {
	t.Helper()
	r := reconcile.Func(func(context.Context, reconcile.Request) (reconcile.Result, error) { return reconcile.Result{}, nil })
	c, err := controller.NewUnmanaged("p", controller.Options{Reconciler: r, SkipNameValidation: ptr.To(true)})
	if err != nil {
		t.Fatal(err)
	}
	cache := adopt.NewCache(nil, scheme)
	for _, ps := range sources {
		if err := c.Watch(source.Kind(cache, client.Object(&corev1.ConfigMap{}), handler.EventHandler(&handler.EnqueueRequestForObject{}), ps...)); err != nil {
			t.Fatal(err)
		}
	}
	infs := startAdopted(t, c, cache).Cache().Informers()
	if len(infs) != 1 {
		t.Fatalf("%d informers", len(infs))
	}
	return infs[0]
}

// startAdopted adopts controller c over cache and starts it until the test
// ends.
func startAdopted(t *testing.T, c controller.Controller, cache *adopt.Cache) *adopt.Controller {
	t.Helper()
	a, ok, err := adopt.Adopt(c, cache, func(reconcile.Request, time.Duration) {})
	if err != nil || !ok {
		t.Fatalf("Adopt = %v, %v", ok, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done, err := a.Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); <-done })
	return a
}
