package outcome

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

func TestDecide(t *testing.T) {
	boom := errors.New("boom")
	cases := []struct {
		name string
		res  reconcile.Result
		err  error
		want Decision
	}{
		{"success", reconcile.Result{}, nil, Decision{Action: Done}},
		{"requeue after", reconcile.Result{RequeueAfter: 3 * time.Second}, nil, Decision{Action: RequeueAfter, After: 3 * time.Second}},
		{"requeue", reconcile.Result{Requeue: true}, nil, Decision{Action: Retry}},
		{"error ignores result", reconcile.Result{RequeueAfter: time.Hour}, boom, Decision{Action: Retry, Err: boom}},
		{"terminal", reconcile.Result{}, reconcile.TerminalError(boom), Decision{Action: Terminal}},
		{"wrapped terminal", reconcile.Result{}, fmt.Errorf("ctx: %w", reconcile.TerminalError(boom)), Decision{Action: Terminal}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := Decide(tc.res, tc.err)
			if got.Action != tc.want.Action || got.After != tc.want.After {
				t.Fatalf("Decide = %v after %v, want %v after %v", got.Action, got.After, tc.want.Action, tc.want.After)
			}
			if (got.Err == nil) != (tc.err == nil) {
				t.Fatalf("Decide error = %v, want the reconcile's error %v", got.Err, tc.err)
			}
		})
	}
}
