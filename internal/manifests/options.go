package manifests

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/opzero/opzero/internal/description"
	"github.com/opzero/opzero/internal/devenv/broker"
	"github.com/opzero/opzero/internal/kustomize"
)

// Modes of deployment.
const (
	Serverless = "serverless"
	Classic    = "classic"
)

// DefaultWakeupImage is the image of the wakeup source: cmd/wakeup-source,
// a small binary of its own (not the CLI).
const DefaultWakeupImage = "ko://github.com/opzero/opzero/cmd/wakeup-source"

// Options are the deploy choices the description does not make.
type Options struct {
	// Mode is serverless (Knative Service and sources, the default) or
	// classic (a Deployment with leader election).
	Mode string
	// Namespace of the operator's objects (default: Project's, else
	// "default").
	Namespace string
	// Image of the operator (default ko://<its import path>).
	Image string
	// Audience is the OIDC audience senders' tokens carry: the operator's
	// --audience and every source's sink.audience (default
	// opzero:<namespace>:<name>).
	Audience string
	// NoDurableTime leaves out durable time: no --wakeup-sink, no Wakeup CRD,
	// no wakeup source.
	NoDurableTime bool
	// WakeupImage runs the wakeup source: its entrypoint takes the wakeup
	// source's flags, as cmd/wakeup-source does (DefaultWakeupImage).
	WakeupImage string
	// Source is how a serverless operator gets its events: SourceHub (a
	// Subscription to the cluster's opzero hub, and the hub: the default)
	// or SourceKnative (ApiServerSources, PingSources, a wakeup source).
	Source string
	// NoHub leaves the hub itself (hub.yaml) out of the hub wiring: for a
	// cluster whose hub is installed once by `opzero hub manifests`.
	NoHub bool
	// HubImage runs the hub (DefaultHubImage): its entrypoint takes
	// cmd/opzero-hub's flags.
	HubImage string
	// ProjectManifests are files the project deploys from outside its
	// config/ folder (`helm template` of its chart, a release YAML): their
	// webhook configurations, CRDs and the roles bound to their
	// Deployments' service accounts are read as config/'s are.
	ProjectManifests []string
	// AllowUnserved writes the serverless manifests of an operator with
	// sources nothing runs at zero (description Controller Unserved: a
	// source.Func, a custom source.Source), each then a warning; without
	// it Build refuses them.
	AllowUnserved bool
	// Warnings, if set, gets the operator's warnings (description
	// Warnings), one "warning: ..." line each, from Build.
	Warnings io.Writer
	// TimeoutSeconds bounds one request to the Service (default 300).
	TimeoutSeconds int
	// Idle is how long an idle instance is kept before scaling to zero
	// (Knative keeps it for autoscaling.knative.dev/window, then
	// scale-to-zero-pod-retention-period: below 60 s the window alone, at
	// least 6 s; above, Knative's 60 s window and the rest as retention;
	// 0 leaves Knative's defaults).
	Idle time.Duration
	// Broker, if set, adds a Broker of this name and a Trigger that
	// subscribes the operator with Delivery.
	Broker string
	// TriggerType filters the Trigger to one CloudEvent type ("" = all).
	TriggerType string
	// Delivery is the Broker's and Trigger's delivery policy.
	Delivery Delivery
	// Env are environment variables of the operator's container (--env,
	// --env-secret), after those the operator declares (builder.WithEnv);
	// the same name twice must have the same value.
	Env []description.EnvVar
	// EnvFrom are Secrets and ConfigMaps whose every key becomes a variable
	// of the operator's container (--env-from-secret, --env-from-configmap).
	EnvFrom []EnvFrom
	// Args are extra arguments of the operator, after the generated ones
	// (what follows -- on the command line).
	Args []string
	// WebhookCerts is how the serving certificate of an adopted project's
	// webhooks is made: CertsSecret (the default) or CertsCertManager.
	WebhookCerts string
	// Webhooks is how an adopted project's admission webhooks are served
	// serverless: WebhooksHub (the default: called at the hub, which wakes
	// the operator) or WebhooksAlwaysOn (a --mode=webhooks Deployment).
	// Conversion is served always on either way.
	Webhooks string
	// WebhookToken is the random segment of the hub paths of the
	// operator's webhooks ("" a new one; a folder regenerated keeps its
	// configurations').
	WebhookToken string
	// Project is what an adopted project's config/ declares for its
	// manager (ReadProject): its container's env and envFrom (after the
	// operator's own and the command line's: a name either gives is
	// theirs), resources and securityContext, the pod's securityContext
	// (classic), the namespace (unless Namespace is set), the namePrefix
	// of every object's name and the labels; nil: none.
	Project *kustomize.Manager
	// HubEvents are the types of change (created, updated, deleted) the
	// hub wakes the operator for, by kind (Kind or group/Kind; a kind not
	// named: every type): the events of that kind's resource in the
	// Subscription (--hub-events). A kind the operator does not watch,
	// another type, or another source than the hub is an error.
	HubEvents map[string][]string
	// WebhookCert, with CertsSecret, is the certificate to keep (a folder
	// regenerated keeps its Secret's) if it still serves the webhooks
	// Service's names for 30 days; nil or not: a new one.
	WebhookCert *WebhookCert
}

// Delivery is Knative's delivery spec.
type Delivery struct {
	Retry int
	// BackoffPolicy is linear or exponential.
	BackoffPolicy string
	// BackoffDelay is an ISO-8601 duration (e.g. PT0.5S).
	BackoffDelay string
	// DeadLetterSink is a URI ("" = none).
	DeadLetterSink string
}

// checkModeSource checks --mode and --source, which decide what is
// generated (and which CRDs Prepare makes): before anything is built.
func (o Options) checkModeSource() error {
	if o.Mode != "" && o.Mode != Serverless && o.Mode != Classic {
		return fmt.Errorf("--mode=%q: want serverless or classic", o.Mode)
	}
	if o.Source != "" && o.Source != SourceKnative && o.Source != SourceHub {
		return fmt.Errorf("--source=%q: want %s or %s", o.Source, SourceKnative, SourceHub)
	}
	if o.Mode == Classic && o.Source == SourceHub {
		return fmt.Errorf("--source=%s: the hub delivers to serverless operators, and --mode=classic watches with its own informers; drop --source or use --mode=serverless", SourceHub)
	}
	return o.checkHubEvents()
}

// HubEventTypes are the types of change --hub-events may list, in the
// order they are written.
var HubEventTypes = []string{"created", "updated", "deleted"}

// checkHubEvents checks the types HubEvents lists, and that the hub
// delivers (the kinds are checked once they are known: gen.checkHubEvents).
func (o Options) checkHubEvents() error {
	if len(o.HubEvents) == 0 {
		return nil
	}
	if !o.hub() {
		other := "--source=" + o.Source
		if o.Mode == Classic {
			other = "--mode=classic"
		}
		return fmt.Errorf("--hub-events: the hub drops the changes it names, and with %s the operator gets its events another way; drop --hub-events, or use the hub (--source=%s)", other, SourceHub)
	}
	for _, key := range slices.Sorted(maps.Keys(o.HubEvents)) {
		vs := o.HubEvents[key]
		if len(vs) == 0 {
			return fmt.Errorf("--hub-events %s=: name the types of change that wake it: %s (comma-separated, any of them)", key, strings.Join(HubEventTypes, ", "))
		}
		for _, v := range vs {
			if !slices.Contains(HubEventTypes, v) {
				return fmt.Errorf("--hub-events %s=%s: %q is no type of change; want %s (comma-separated, any of them)", key, strings.Join(vs, ","), v, strings.Join(HubEventTypes, ", "))
			}
		}
	}
	return nil
}

// withDefaults fills in defaults and checks the options.
func (o Options) withDefaults(name, importPath string) (Options, error) {
	if err := o.checkModeSource(); err != nil {
		return o, err
	}
	if o.Mode == "" {
		o.Mode = Serverless
	}
	if o.Source == "" && o.Mode == Serverless {
		o.Source = SourceHub
	}
	if o.Namespace == "" && o.Project != nil {
		o.Namespace = o.Project.Namespace
	}
	if o.Namespace == "" {
		o.Namespace = "default"
	}
	for _, msg := range validation.IsDNS1123Label(o.Namespace) {
		return o, fmt.Errorf("--namespace=%q: %s", o.Namespace, msg)
	}
	if o.Image == "" {
		o.Image = "ko://" + importPath
	}
	if o.Audience == "" {
		o.Audience = "opzero:" + o.Namespace + ":" + name
	}
	if o.WakeupImage == "" {
		o.WakeupImage = DefaultWakeupImage
	}
	if o.HubImage == "" {
		o.HubImage = DefaultHubImage
	}
	if o.TimeoutSeconds == 0 {
		o.TimeoutSeconds = 300
	}
	if o.TimeoutSeconds < 0 {
		return o, fmt.Errorf("--timeout=%ds: must be positive", o.TimeoutSeconds)
	}
	if o.Idle < 0 {
		return o, fmt.Errorf("--idle=%s: must not be negative", o.Idle)
	}
	if o.Broker != "" {
		for _, msg := range validation.IsDNS1123Subdomain(o.Broker) {
			return o, fmt.Errorf("--broker=%q: %s", o.Broker, msg)
		}
	}
	d := &o.Delivery
	if d.BackoffPolicy == "" {
		d.BackoffPolicy = "exponential"
	}
	if d.BackoffPolicy != "exponential" && d.BackoffPolicy != "linear" {
		return o, fmt.Errorf("--backoff-policy=%q: want exponential or linear", d.BackoffPolicy)
	}
	if d.BackoffDelay == "" {
		d.BackoffDelay = "PT0.5S"
	}
	if _, err := broker.ParseDuration(d.BackoffDelay); err != nil { // as Knative parses it
		return o, fmt.Errorf("--backoff-delay: %w", err)
	}
	if d.Retry == 0 {
		d.Retry = 5
	}
	if d.Retry < 0 {
		return o, fmt.Errorf("--retry=%d: must not be negative", d.Retry)
	}
	switch o.Webhooks {
	case "", WebhooksHub, WebhooksAlwaysOn:
	default:
		return o, fmt.Errorf("--webhooks=%q: want %s or %s", o.Webhooks, WebhooksHub, WebhooksAlwaysOn)
	}
	if o.Mode == Classic && o.Webhooks == WebhooksHub {
		return o, fmt.Errorf("--webhooks=%s: a classic operator serves its webhooks itself, always on; drop --webhooks or use --mode=serverless", WebhooksHub)
	}
	if o.Mode != Classic && o.Webhooks == "" {
		o.Webhooks = WebhooksHub
	}
	if o.WebhookToken == "" {
		t, err := NewWebhookToken()
		if err != nil {
			return o, err
		}
		o.WebhookToken = t
	}
	for _, msg := range validation.IsDNS1123Label(o.WebhookToken) {
		return o, fmt.Errorf("webhook path token %q: %s", o.WebhookToken, msg)
	}
	switch o.WebhookCerts {
	case "", CertsSecret, CertsCertManager:
	default:
		return o, fmt.Errorf("--webhook-certs=%q: want %s or %s", o.WebhookCerts, CertsSecret, CertsCertManager)
	}
	if err := checkEnvFrom(o.EnvFrom); err != nil {
		return o, err
	}
	return o, nil
}

// durable says whether durable time is on.
func (o Options) durable() bool { return o.Mode == Serverless && !o.NoDurableTime }

// webhooksViaHub says whether a binary's admission webhooks would be
// served through the hub (before defaults: Prepare).
func (o Options) webhooksViaHub() bool { return o.Mode != Classic && o.Webhooks != WebhooksAlwaysOn }

// hub says whether the hub delivers the operator's events.
func (o Options) hub() bool {
	return o.Mode != Classic && (o.Source == SourceHub || o.Source == "")
}
