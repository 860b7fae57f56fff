package serverless

import (
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestAPIServerAwayClassifies(t *testing.T) {
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	gr := schema.GroupResource{Resource: "widgets"}
	for _, tc := range []struct {
		err  error
		away bool
	}{
		{nil, false},
		{fmt.Errorf("get w: %w", refused), true},
		{fmt.Errorf("failed to get server groups: %v", refused), true}, // discovery flattens the error
		{errors.New(`Get "https://127.0.0.1:6443/api": net/http: TLS handshake timeout`), true},
		{apierrors.NewServiceUnavailable("etcd is away"), true},
		{apierrors.NewTooManyRequests("slow down", 1), true},
		{apierrors.NewTimeoutError("took too long", 1), true},
		{apierrors.NewNotFound(gr, "w"), false},
		{apierrors.NewConflict(gr, "w", errors.New("changed")), false},
		{apierrors.NewForbidden(gr, "w", errors.New("no")), false},
		{errors.New("the reconcile's own failure"), false},
	} {
		if got := apiServerAway(tc.err); got != tc.away {
			t.Errorf("apiServerAway(%v) = %v, want %v", tc.err, got, tc.away)
		}
	}
}
