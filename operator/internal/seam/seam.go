// Package seam joins package operator and package operator/classic without
// widening operator's public API (a seam in the sense of a place where two
// parts are joined, and one can be left out: a binary without
// operator/classic has none of classic mode): operator/classic, which links
// controller-runtime's manager, registers classic mode here when a binary
// imports it, and reaches the two parts of a Runtime its NewManager needs.
// Package operator imports nothing of the manager, so a binary whose main
// does not import operator/classic does not link it.
//
// Both sides set their variables in package init (operator's runs first:
// operator/classic imports it); nothing else writes them. The two ends:
// operator/runtime.go (its init sets Engine and the Set* functions; New
// reads Classic) and operator/classic (mode.go's init sets Classic;
// manager.go and adopted_events.go call Engine and the Set* functions).
package seam

import (
	"context"
	"net/http"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opzero/opzero/builder"
	"github.com/opzero/opzero/internal/description"
	"github.com/opzero/opzero/reconcileutil"
)

// NewManager builds classic mode's manager: cfg serves the manager's
// watches, clientCfg (cfg with the API timeout) its client. O is
// operator.Options, a type parameter because seam cannot import operator.
type NewManager[O any] func(cfg, clientCfg *rest.Config, o O) (Manager, error)

// Manager is classic mode's controller-runtime manager as a Runtime uses it.
type Manager interface {
	GetClient() client.Client
	GetEventRecorder(name string) reconcileutil.Recorder
	GetEventRecorderFor(name string) record.EventRecorder
	Start(ctx context.Context) error
	// Setup adds op's controller; c is the client reconcilers get.
	Setup(op *builder.Controller, c client.Client) error
}

// Classic is a NewManager[operator.Options] once operator/classic is
// linked (its init sets it, operator/classic/mode.go); nil, the binary is
// serverless only. operator.New (operator/runtime.go) reads it.
var Classic any

// Set by package operator's init (operator/runtime.go); rt is an
// *operator.Runtime. Called by operator/classic (manager.go,
// adopted_events.go).
var (
	// Engine is the handler of the serverless engine of the operator
	// named name, nil before its Register.
	Engine func(rt any, name string) http.Handler
	// SetRoutes makes Start serve routes(handler) instead of the handler:
	// routes sees every request before authentication.
	SetRoutes func(rt any, routes func(http.Handler) http.Handler)
	// SetAuthenticatedRoutes makes Start serve routes(handler) behind
	// authentication: routes sees only requests whose sender was
	// accepted (an adopted project's webhooks, forwarded by the hub).
	SetAuthenticatedRoutes func(rt any, routes func(http.Handler) http.Handler)
	// SetWebhooks adds an adopted project's webhooks to the description
	// Start writes when describing.
	SetWebhooks func(rt any, w *description.Webhooks)
	// SetCache adds an adopted project's cache options, as the hub's
	// filters, to the description Start writes when describing.
	SetCache func(rt any, c *description.CacheScope)
	// SetProbes adds the address an adopted project's manager serves its
	// health probes on (ctrl.Options.HealthProbeBindAddress, as its flags
	// default it) to the description Start writes when describing.
	SetProbes func(rt any, addr string)
)

// InformerStuckAfter is how long an informer may fail to list or watch
// before classic mode's /healthz fails (classic.DefaultStuckAfter); tests
// shorten it.
var InformerStuckAfter = 2 * time.Minute
