package wakeup_test

import (
	"context"
	"sync/atomic"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1alpha1 "github.com/opzero/opzero/api/v1alpha1"
	v1 "github.com/opzero/opzero/examples/configwatcher/api/v1"
	"github.com/opzero/opzero/internal/backoff"
	"github.com/opzero/opzero/internal/wakeup"
	"github.com/opzero/opzero/testenv"
)

// TestSharedStoreAlone: a Store shared by several instances looks for a
// record at every success (a GET), except while its instance runs alone
// (SetAlone): then it lists the records once and looks only at keys that
// had one, or that it wrote since. A record another instance wrote before
// is still cancelled by a success; after SetAlone(false) it looks again.
// PrimeAlone makes the list of a period alone ahead of its first success.
func TestSharedStoreAlone(t *testing.T) {
	env := testenv.Get(t)
	ns := env.Namespace(t)
	ctx := context.Background()
	var gets, lists atomic.Int32
	wc, err := client.NewWithWatch(env.Config, client.Options{Scheme: env.Client.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	counting := interceptor.NewClient(wc, interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			gets.Add(1)
			return c.Get(ctx, key, obj, opts...)
		},
		List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			lists.Add(1)
			return c.List(ctx, list, opts...)
		},
	})
	opts := wakeup.StoreOptions{Operator: "alone-" + ns, Target: v1.GroupVersion.WithKind("ConfigWatcher"),
		Sink: "http://unused", Policy: backoff.DefaultPolicy(), Shared: true}
	s := wakeup.NewStore(counting, opts)
	other := wakeup.NewStore(env.Client, opts) // another instance
	key := func(name string) reconcile.Request {
		return reconcile.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: name}}
	}
	exists := func(k reconcile.Request) bool {
		t.Helper()
		err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: wakeup.Name(opts.Operator, k.NamespacedName)}, &v1alpha1.Wakeup{})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
		return err == nil
	}
	step := func(what string, wantGets, wantLists int32, f func() error) {
		t.Helper()
		gets.Store(0)
		lists.Store(0)
		if err := f(); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if gets.Load() != wantGets || lists.Load() != wantLists {
			t.Fatalf("%s: %d GETs and %d lists, want %d and %d", what, gets.Load(), lists.Load(), wantGets, wantLists)
		}
	}
	if _, _, err := other.Failed(ctx, key("a")); err != nil { // a retry of a, before this one runs alone
		t.Fatal(err)
	}

	step("a success, shared", 1, 0, func() error { return s.Succeeded(ctx, key("b")) })
	s.SetAlone(true)
	step("the first success alone", 0, 1, func() error { return s.Succeeded(ctx, key("b")) })
	step("another success alone", 0, 0, func() error { return s.Succeeded(ctx, key("c")) })
	step("a success of a key with another instance's record", 1, 0, func() error { return s.Succeeded(ctx, key("a")) })
	if exists(key("a")) {
		t.Fatal("the success left a's retry in place")
	}
	step("a failure alone (read, then create)", 1, 0, func() error { _, _, err := s.Failed(ctx, key("d")); return err })
	step("its success", 1, 0, func() error { return s.Succeeded(ctx, key("d")) })
	if exists(key("d")) {
		t.Fatal("the success left d's retry in place")
	}
	step("a success after d's record is gone", 0, 0, func() error { return s.Succeeded(ctx, key("d")) })
	s.SetAlone(false)
	step("a success, shared again", 1, 0, func() error { return s.Succeeded(ctx, key("c")) })

	// PrimeAlone (a cold start, before its first event) lists what the
	// first success alone would: that success then looks at nothing.
	step("primed while shared", 0, 0, func() error { s.PrimeAlone(ctx); return nil })
	if _, _, err := other.Failed(ctx, key("e")); err != nil { // before this one runs alone again
		t.Fatal(err)
	}
	s.SetAlone(true)
	step("primed alone", 0, 1, func() error { s.PrimeAlone(ctx); return nil })
	step("primed again", 0, 0, func() error { s.PrimeAlone(ctx); return nil })
	step("the first success after priming", 0, 0, func() error { return s.Succeeded(ctx, key("b")) })
	step("a success of a key with a record listed by priming", 1, 0, func() error { return s.Succeeded(ctx, key("e")) })
	if exists(key("e")) {
		t.Fatal("the success left e's retry in place")
	}
}
