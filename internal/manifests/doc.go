// Package manifests derives every object needed to deploy an opzero
// operator from the operator's own description (package description, printed by
// the operator binary itself), so there is no second, hand-kept list:
//
//   - CRDs of the kinds it reconciles, generated from their Go types with
//     controller-gen (and the Wakeup CRD when durable time is on);
//   - the operator's ServiceAccount and least-privilege RBAC: the primary
//     kind, owned and watched kinds, events, leases, wakeups, tokenreviews,
//     plus the reconciler package's +kubebuilder:rbac markers;
//   - serverless: a Knative Service (scale bounds, concurrency, timeout,
//     autoscaling annotations) and its events' wiring. By default
//     (Options.Source = SourceHub, also when unset) one Subscription
//     (opzero.dev/v1alpha1) named after the operator, asking the cluster's
//     hub for its kinds in their modes (owner filters, selectors, all
//     namespaces), a referencedBy
//     filter for each watched kind declared with builder.ReferencedBy, the
//     same sweeps under the PingSources' names, and the Wakeups when durable
//     time is on; a ClusterRole opzero-hub:<namespace>:<operator> letting
//     the hub read those kinds, aggregated (label
//     opzero.dev/aggregate-to-hub) into the hub's; and the hub itself in
//     hub.yaml: Namespace opzero-system, ServiceAccount, ClusterRoles
//     opzero-hub (aggregated) and opzero-hub-base, a Role for its own
//     tokens and its bucket Leases, its admission endpoint (a Service,
//     the ClusterRole opzero-hub-admission, a Role for the Secret of its
//     certificate: hubwebhooks.go), the Deployment (two replicas,
//     Options.HubImage, default DefaultHubImage), its PodDisruptionBudget
//     and the headless Service opzero-hub-peers; the Knative Service runs
//     with --event-cache when the binary has the flag (the engine's event
//     cache, which the hub's referenced updates and epoch keep sound; an
//     adopted project's own flag set may lack it). With Options.Source =
//     SourceKnative (--source=knative), instead: one ApiServerSource per
//     kind, each with its own ServiceAccount allowed only get/list/watch on
//     that kind, PingSources for the sweeps, the wakeup source;
//   - classic: a Deployment with leader election instead;
//   - when the operator takes external events (builder.WatchesEvents): its
//     Broker (the operator's name, or Options.Broker) and one Trigger per
//     filter, <operator>-<name>, with the filter as declared, the delivery
//     policy and the subscriber audience; in classic mode also --events-addr
//     and a Service in front of it, the Triggers' subscriber. Without
//     WatchesEvents, Options.Broker adds a Broker and one Trigger
//     (Options.TriggerType).
//   - when the binary registers webhooks (an adopted controller-runtime
//     project; description.Webhooks), webhooks.yaml: the
//     Mutating/ValidatingWebhookConfigurations of the project's
//     +kubebuilder:webhook markers (`controller-gen webhook`). Serverless
//     with Options.Webhooks = WebhooksHub (the default) they call the
//     cluster's opzero hub (hub.yaml, deployed even with --source=knative)
//     at /admission/<namespace>/<operator>/<token>/<path>, labelled and
//     annotated for it (internal/hub/admission), the operator's Knative
//     Service serves them (no ENABLE_WEBHOOKS=false) and the hub wakes it
//     inside each call (hubwebhooks.go). Otherwise (WebhooksAlwaysOn, or
//     only for /convert of a project that converts kinds) the same image
//     runs with --mode=webhooks as an always-on Deployment
//     <operator>-webhooks (in classic mode the operator's Deployment
//     serves them), with its Service, its certificate
//     (Options.WebhookCerts: a generated CA and certificate in a Secret,
//     the CA in every caBundle; or a cert-manager Issuer and Certificate
//     with inject-ca-from), the configurations pointed at the Service,
//     and spec.conversion on the CRDs of the kinds its /convert converts;
//     with WebhooksAlwaysOn the Knative Service gets ENABLE_WEBHOOKS=false.
//
// The operator's container gets the same environment and extra arguments in
// either mode: the generated variables (POD_NAMESPACE, OPZERO_MAX_SCALE),
// those the operator declares (builder.WithEnv, WithSecretEnv), then
// Options.Env, Options.EnvFrom and Options.Args (the command line's --env,
// --env-secret, --env-from-secret, --env-from-configmap and what follows --),
// then what an adopted project's config/ declares for its manager
// (Options.Project, read by ReadProject with internal/kustomize from
// ConfigDir: config/default): its container's env (a name declared or given
// on the command line is theirs; one opzero sets, or a fieldRef in the
// Knative Service, is left out with a warning), envFrom (before the
// command line's), resources and securityContext, the pod's
// securityContext (classic), and the namespace (unless Options.Namespace),
// namePrefix (before the name of every object named after the operator,
// unless the name starts with it or it is the name and a dash, as
// kubebuilder's default "<project>-" is; the Subscription's spec.operator stays the controller's name, which its
// Wakeups carry) and labels (not on the hub's objects, the CRDs or
// selectors). WriteOverlay also writes a kustomization.yaml listing the
// files.
//
// Start with Describe (build and run the operator binary), then Generate,
// then Write or WriteDir.
//
// # Guarantees
//
//   - Deterministic: the same description and Options give byte-identical
//     YAML (objects in a fixed order, map keys sorted, rules sorted); a
//     webhook certificate is new unless Options.WebhookCert still serves
//     (ReadWebhookCert reads a folder's), and so is the webhooks' hub path
//     token unless Options.WebhookToken is set (ReadWebhookToken).
//   - Webhooks that do not add up are refused before anything is written,
//     naming the file to fix where there is one: markers in a binary that
//     registers no webhook, a registered path no marker names, a marker
//     whose path is not registered or has url=, with --webhooks=always-on a
//     main that registers them even with ENABLE_WEBHOOKS=false (Describe
//     runs it twice), a converted kind whose CRD has one version, a kind in
//     several versions whose schemas differ and that the binary does not
//     convert (its CRD gets every version when they are the same).
//   - A webhook's timeoutSeconds left empty is written as the API
//     server's default (10); one under 5 s through the hub gets a warning
//     (a cold start may not fit it).
//   - An unknown Source or Mode, or hub with classic, is refused naming
//     the flag before the operator is even built (Build).
//   - Least privilege: every rule comes from a kind in the description, a
//     feature that is on, or a marker in the reconciler's package.
//   - Bad env or arguments are refused before anything is generated: an
//     invalid name, one Knative or opzero sets itself, one name with two
//     values, an argument for a flag opzero sets or the operator lacks.
//
// # Caveats
//
//   - The operator is cluster-wide: ClusterRoles, and sources with an empty
//     namespaceSelector (all namespaces). Leases live in the operator's
//     namespace.
//   - One operator per binary (one Service, one endpoint).
//   - CRDs are generated only for kinds whose Go types live in the
//     operator's own module; kinds of other modules (Kubernetes, other
//     projects) are installed by their owners.
//   - Resource names of built-in kinds come from Kubernetes' guessing rule
//     (describe.Kind.Resource); CRD kinds use the generated CRD's plural.
//   - The operator accepts only its own senders (--allowed-senders): the
//     OIDC service accounts Knative creates for its ApiServerSources,
//     PingSources and Triggers (named as Knative names them, internal/knativenames)
//     and the wakeup source's service account; with the hub, the hub's
//     service account (opzero-system/opzero-hub) and the Triggers'.
//   - One wakeup source per operator (--operator), watching that operator's
//     Wakeups in every namespace.
//   - The hub's objects (hub.yaml) are the same in every operator's
//     manifests and carry no operator's name: applying them again is
//     harmless, but deleting one operator's folder with kubectl delete -f
//     deletes the hub every other operator uses; leave hub.yaml out.
//   - --source=hub is serverless only: a classic operator watches with its
//     own informers.
package manifests
