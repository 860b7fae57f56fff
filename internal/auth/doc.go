// Package auth authenticates event deliveries to a serverless operator. A
// serverless operator is an HTTP endpoint that can delete pods: whoever can
// reach it must not be able to drive it.
//
// Knative's OIDC feature (authentication-oidc) makes every sender attach
// `Authorization: Bearer <jwt>`: a Kubernetes service-account token from the
// TokenRequest API whose audience is the sink's. Middleware checks it with a
// TokenReview carrying that audience (the API server verifies signature,
// issuer, expiry and audience), then an optional allow-list of senders.
//
// # Guarantees
//
//   - No token, a malformed header, or a token the API server rejects (bad
//     signature, other audience, expired) gets 401 with a body that says
//     why; an authenticated sender outside the allow-list gets 403. Neither
//     reaches the operator.
//   - If the API server cannot be asked, the answer is 503 (every sender
//     retries), never a pass.
//   - Accepted tokens are cached by their SHA-256 until they expire, at most
//     Options.CacheTTL, so a burst costs one TokenReview.
//
// # Caveats
//
// The operator's service account needs `create` on tokenreviews
// (authentication.k8s.io), e.g. the system:auth-delegator ClusterRole.
package auth
