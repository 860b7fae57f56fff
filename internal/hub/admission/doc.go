// Package admission is the opzero hub's admission endpoint: the one
// always-on TLS server that the API server calls for every serverless
// operator's admission webhooks (defaulting, validating), which forwards
// each AdmissionReview to the operator's Knative Service with the hub's
// OIDC token, waking it if it is at zero. An operator's webhooks then cost
// no process of their own while nothing is admitted. docs/webhooks.md says
// why and what it costs.
//
// # Expected flow
//
// `opzero manifests` writes the operator's Mutating and
// ValidatingWebhookConfigurations from its +kubebuilder:webhook markers,
// unchanged in meaning (rules, failurePolicy, sideEffects, matchPolicy,
// timeoutSeconds, selectors), labelled LabelViaHub, annotated with the
// operator (AnnotationOperator), and each webhook calling the hub's
// Service at
//
//	/admission/<namespace>/<operator>/<token>/<the project's webhook path>
//
// where token is a random string of the install (see Guarantees). The hub
// watches the labelled configurations and keeps a table of those paths.
// A call:
//
//  1. must name a path in the table (else 404: nothing is said about
//     which operators exist; a path of the table's shape is first given
//     up to two seconds for the table to learn it, as the API server may
//     call a configuration just created before the hub's watch brings it);
//  2. must carry an AdmissionReview whose request (operation, group,
//     version, resource, subresource) one of the path's webhooks declares
//     in its rules (else 403): one operator's path cannot carry another
//     operator's kinds, and a forged review of anything else is refused;
//  3. is forwarded as is to <the Knative Service's address><webhook path>
//     with a token of the hub's service account for the operator's
//     audience (the operator checks it as it checks deliveries), and the
//     operator's answer (code and body) goes back to the API server.
//
// The operator's serverless binary serves the handlers its project
// registered on controller-runtime's webhook server at their paths, behind
// that authentication (operator/classic).
//
// # Guarantees
//
//   - The API server's semantics are unchanged: a call the hub could not
//     complete (operator failing, not answering in time, too many calls in
//     flight) is answered with a non-200 status and a Status saying why
//     (503; 429 for too many in flight, which the API server retries),
//     never with a verdict, so the webhook's own failurePolicy decides, as
//     if the operator had been called directly. A call is answered before
//     the webhook's timeoutSeconds (less a margin of a tenth, at most
//     0.5 s), so the API server shows the hub's reason.
//   - Operators are isolated: no lock is shared between calls of different
//     operators (routes are an immutable table swapped whole, each
//     operator has its own address cache entry, token and in-flight
//     bound), so a slow or dead operator holds only its own calls, and at
//     most InFlight of them (32) at once.
//   - Only the API server can get a call forwarded: the path's token is
//     random per install and is only in the webhook configurations, which
//     only cluster administrators read. Where the platform lets the API
//     server present a client certificate to webhooks (an
//     AdmissionConfiguration kubeconfig), Options.ClientCA makes the TLS
//     handshake require it too.
//   - Stateless per call: every replica of the hub serves every call.
//
// # Certificates
//
// In a cluster the hub keeps its own CA and serving certificate in a
// Secret (CertSecret; made on first start, the leaf renewed 30 days before
// it expires, by whichever replica sees it first, from the same CA) and
// writes the CA into the caBundle of every labelled webhook that calls its
// Service, as knative/pkg's webhook certificate controller does; every
// replica reads the Secret again each minute. The CA lasts 10 years; when
// it is made again the caBundles are rewritten at once and replicas still
// serving the old leaf fail handshakes for up to a minute. Under opzero dev
// (CertDir) the certificate is dev's, which also wrote the caBundles.
//
// # Caveats
//
//   - An operator at zero pays its cold start inside the admission call:
//     a webhook whose timeoutSeconds is shorter than the cold start fails
//     its first call (failurePolicy decides); docs/webhooks.md says what to
//     do about it.
//   - Conversion webhooks are not served here: a converted kind's reads
//     and watches call them all the time (docs/webhooks.md has the
//     figure); the project's --mode=webhooks Deployment serves them.
package admission
