// away.go: when the API server is away (unreachable, overloaded, timing
// out) a failure is not the reconcile's verdict: it is answered 503 with
// Retry-After, which every sender retries (apiServerAway).

package serverless

import (
	"errors"
	"io"
	"net"
	"strings"
	"syscall"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	utilnet "k8s.io/apimachinery/pkg/util/net"
)

// apiServerAway reports whether err says the API server could not be
// reached or could not serve (connection refused or reset, a network
// timeout, 429, 503, 504, a server timeout) rather than what a reconcile
// decided. Such a failure is answered 503 with Retry-After: every Knative
// sender retries it, where ApiServerSource drops a 500.
func apiServerAway(err error) bool {
	var netErr net.Error
	var opErr *net.OpError
	switch {
	case err == nil:
		return false
	case errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET),
		errors.Is(err, io.ErrUnexpectedEOF), errors.As(err, &opErr):
		return true
	case errors.As(err, &netErr) && netErr.Timeout():
		return true
	case utilnet.IsProbableEOF(err):
		return true
	}
	// Some callers (discovery: "failed to get server groups") flatten the
	// error to text: client-go matches the same texts (utilnet).
	msg := err.Error()
	for _, s := range []string{"connection refused", "TLS handshake timeout", "i/o timeout"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return apierrors.IsServiceUnavailable(err) || apierrors.IsTooManyRequests(err) ||
		apierrors.IsServerTimeout(err) || apierrors.IsTimeout(err)
}
