// Package dev is `opzero dev`: a local serverless platform. It applies an
// operator's manifests (normally from `opzero manifests`) to a control plane
// with Knative's CRDs and then plays Knative's part for the objects it reads
// back from the API server, so the wiring that runs is the wiring in the
// manifests, not a second configuration.
//
// # Expected flow
//
// Start checks what it can before touching the cluster (every Knative
// Service has one container with a ko:// image and sane scale bounds,
// every Service's local port is free) and builds each ko:// import path once
// with `go build` into a cache folder (images Options.Prebuilt knows, opzero's
// own, run without a build). It server-side applies the manifests
// (Namespaces and CRDs first), then, from the objects read back:
//
//   - Knative Service (serving.knative.dev/v1): an activator (package
//     activator) at a local URL. The first request starts the operator
//     process (the built binary with the container's args and env, see
//     Environment) and is buffered until it is ready (its container's
//     readinessProbe.httpGet.path answers 200; without one, its port takes
//     a TCP connection, as Knative probes it);
//     more instances start while every one is busy at containerConcurrency
//     (or the autoscaling target, 100 by default), up to max-scale (0: 10
//     locally); min-scale instances are kept running. A Service annotated
//     dev.opzero.dev/command (a JSON array: program, arguments; relative
//     paths from Options.BuildDir) runs that command instead of its image,
//     with the same environment and PORT: a hook in Python or JavaScript
//     scales to zero like an operator (examples/metacontroller). The Service's status gets url and address.url = the local
//     URL, the revision names and Ready=True, as Knative's controllers would
//     write, so sources resolve their sink from it.
//   - ApiServerSource: Knative's real receive adapter (knative.dev/eventing
//     v0.50.0, found by package pinned in Options.BinDir or the user cache),
//     configured from spec.resources, mode,
//     owner, namespaceSelector and ceOverrides. Like Knative's controller it
//     first asks SubjectAccessReviews whether spec.serviceAccountName may get,
//     list and watch every resource, and refuses the source if not. With
//     sink.audience it creates the source's OIDC ServiceAccount (Knative's
//     name, <name>-oidc-sources.knative.dev-apiserversource) and the adapter
//     sends its TokenRequest tokens. Status: every condition True, sinkUri,
//     sinkAudience, auth.serviceAccountName. An ApiServerSource made after
//     Start (polled every second) whose sink is a Knative Service dev runs
//     gets its adapter too: an operator may make sources at run time
//     (opzero-metacontroller, for what its customize hooks name).
//   - PingSource: the statuses mtping needs (Ready=True, sinkUri, OIDC
//     identity) are written first, then one real mtping runs for all of them
//     (SYSTEM_NAMESPACE knative-eventing, --disable-ha).
//   - Broker and Trigger (eventing.knative.dev/v1): package broker, in
//     memory like Knative's in-memory channel. One ingress on a free local
//     port serves every Broker at /<namespace>/<name>, its
//     status.address.url. Each Trigger of it gets the events that pass its
//     filter (Knative's semantics), delivered to its resolved subscriber
//     with its delivery (else its Broker's): retries, linear or exponential
//     backoff, dead-letter sink; with a subscriber audience dev creates the
//     Trigger's OIDC ServiceAccount (<name>-oidc-eventing.knative.dev-trigger)
//     and sends its TokenRequest tokens. Statuses as Knative's controllers
//     write them (every condition True; Broker address; Trigger
//     subscriberUri, deadLetterSinkUri, auth.serviceAccountName). Brokers
//     are played before the sources, so a source may sink to one.
//   - Deployment whose one container has a ko:// image (the wakeup source,
//     the opzero hub of `opzero manifests --source=hub`, which then reads the
//     Subscriptions dev applied and the Knative Services' addresses dev wrote):
//     one always-on process. So is a Deployment annotated
//     dev.opzero.dev/command (as a Knative Service; the container's image,
//     command and args are not used): a hook hosted as a Deployment and a
//     Service runs locally, and binds its container's port itself. So is a
//     Deployment whose image is python or node running a script from a
//     ConfigMap, as Metacontroller publishes hooks (package interp: the
//     local interpreter on the ConfigMap's files, under Options.Dir; a
//     ConfigMap or Secret its volumes name that does not exist, and is not
//     optional, holds its process back until it exists, as a kubelet
//     holds the pod in ContainerCreating: mountwait.go). Other
//     Deployments are only applied, with a line saying so. The pods
//     kube-controller-manager makes for an always-on Deployment dev runs
//     are marked Running and Ready at 127.0.0.1 while its process runs
//     (and answers its liveness probe), as a kubelet would (podready.go):
//     the Deployment becomes Available and `kubectl rollout status`
//     completes; a process that keeps exiting leaves them not Ready.
//   - Mutating/ValidatingWebhookConfiguration and a CRD's conversion
//     webhook whose clientConfig names a Service that selects a Deployment
//     dev runs (the opzero hub, which serves admission webhooks and wakes
//     the operator; the --mode=webhooks Deployment of `opzero manifests`): dev
//     makes a CA and a certificate for 127.0.0.1, gives that process a free
//     port and the certificate's folder (OPZERO_WEBHOOK_PORT,
//     OPZERO_WEBHOOK_CERT_DIR; arguments naming a Secret volume's mountPath
//     get the folder), and applies the clientConfigs as
//     https://127.0.0.1:<port><path> with the CA as caBundle. Start returns
//     once the webhook server answers TLS; Stop deletes those webhook
//     configurations (the API server would refuse every write they match
//     once the process is gone; a CRD keeps its local conversion URL).
//
// In-cluster names: every process dev starts gets HTTP_PROXY and
// HTTPS_PROXY, a local proxy that answers
// http(s)://<name>.<namespace>[.svc[.cluster.local]][:port] for
// each Knative Service dev runs (port 80) and each core Service that
// selects a Deployment run by its command (its ports, to the targetPort on
// 127.0.0.1), so a URL written for the cluster (a Metacontroller hook's
// url) works as written; other names are answered 502. An https URL is a
// CONNECT tunnel to the same local address, the TLS played end to end by
// the client and the process (its certificate must name the in-cluster
// name, as on a cluster); a CONNECT to any other host is tunnelled to that
// host. Loopback addresses bypass it: Go's and Python's clients never
// proxy them, and NO_PROXY (noProxy) names them for the others (Node.js's
// gaxios, the API server's address included).
//
// Like kubelet, dev restarts these processes (adapters, mtping, ko://
// Deployments) when they exit or their liveness probe fails 3 times in a
// row (probed every 2 s, 1 s timeout). A process that ran less than a
// minute is restarted after 1 s, then 2 s, ... up to 30 s (kubelet's
// CrashLoopBackOff), and a failed start is retried on the same scale.
//
// A Deployment's probe is its container's livenessProbe.httpGet, played on
// a free local port (processes share one network here, unlike pods:
// arguments ending in ":<probe port>", such as --health-addr=:8081, are
// rewritten to it); arguments ending in any other declared containerPort
// (the hub's --webhook-addr=:8443) get a free local port of their own too,
// so two sessions on one machine never collide. An ApiServerSource adapter's probe is its own metrics
// endpoint, a port per adapter: Knative's /health listens on a fixed :8080
// that a second adapter cannot bind, and fails only after SIGTERM.
//
// An ApiServerSource adapter is also restarted when its log shows a gap in
// a watch (client-go's "watch ended with error", or a list after the
// first): Knative's adapter sends nothing for what it lists, so a change
// made in the gap is never sent. After any restart of it, once the new
// adapter has listed, dev sends one tick of every PingSource with the same
// sink (the sweep) so the operator reconciles what the gap lost. Each
// restart is a line and a process-restarted event, each such tick a sweep
// event.
//
// In-cluster URLs of the Services (http://<name>.<ns>.svc[.cluster.local])
// in args and env are replaced by the local URLs, so --wakeup-sink and
// similar flags reach the activator.
//
// # Environment
//
// A process gets exactly the environment its container would get on a
// cluster, never opzero dev's own: a variable that is missing from the
// manifests is missing locally too, so it fails here as it would there.
// Like kubelet, dev builds it from the pod template when the process
// starts: envFrom first (every key of each ConfigMap and Secret, with its
// prefix; keys that are not variable names are skipped), then env (values
// with $(NAME) of earlier variables expanded; valueFrom.secretKeyRef and
// configMapKeyRef read from the cluster; fieldRef metadata.namespace,
// metadata.name, spec.serviceAccountName, status.podIP). A missing Secret,
// ConfigMap or key that is not optional is an error from Start, where a
// cluster would leave the pod in CreateContainerConfigError. $(NAME) in
// args is expanded with the result. Then dev adds:
//
//   - for a Knative Service, what Knative injects: PORT (per instance),
//     K_SERVICE, K_CONFIGURATION, K_REVISION (<name>-00001); a Service that
//     sets one of them itself is refused, as Knative's webhook does; and
//     OPZERO_ADVERTISE_ADDRESS, the instance's own URL (per instance: in a
//     pod the operator finds its pod IP itself), so that the instances of
//     an opzero operator forward each other the events of the keys whose
//     Leases they hold;
//   - KUBECONFIG, a kubeconfig with a token of the template's
//     serviceAccountName. It stands in for in-cluster config: in a pod,
//     client-go finds the API server from KUBERNETES_SERVICE_HOST/PORT and
//     the token kubelet mounts; a local process has neither, so dev gives it
//     the same identity through KUBECONFIG (it overrides a KUBECONFIG of the
//     template, which would name a path inside the container);
//   - HTTP_PROXY and HTTPS_PROXY, the proxy of the in-cluster names
//     (above): in a pod the cluster's DNS answers them; NO_PROXY, the
//     loopback addresses
//     (noProxy), the API server's among them.
//
// The only other variable is BaseEnv: PATH, as container images set it. A
// Go program needs nothing else (HOME, TMPDIR and the rest are not passed:
// os.TempDir falls back to /tmp as in a container).
//
// # Guarantees
//
//   - An error from Start names the object and the field at fault, and Start
//     stops whatever it had started.
//   - Stop stops the sources first (no new events), then the operators
//     (SIGTERM: they drain), then the other processes, and returns once every
//     process has exited; every child also gets SIGKILL from the kernel if
//     the platform's process dies.
//   - No request is lost to a cold start: it waits in the activator (see
//     package activator for the 503 + Retry-After answer to a failed start).
//   - What it made Ready does not stay Ready after it: Stop (and a failed
//     Start) turns every condition it wrote on Services and sources False
//     with reason DevSessionEnded and removes the local URLs (status.url,
//     address, sinkUri), unless the API server is gone.
//
// # Caveats
//
//   - Scale to zero after one idle period per Service, as real Knative
//     v0.50.0 does it: the window annotation (DefaultIdle, 60 s, without
//     one) plus the scale-to-zero-pod-retention-period annotation;
//     Options.Idle overrides. (Measured on a real cluster, make
//     e2e-knative: window 6s and retention 6s went to zero 13 s after the
//     last request.)
//   - Operator and ko:// Deployment processes run as their pod template's
//     serviceAccountName (a TokenRequest token valid 24 h, in a kubeconfig of
//     their own), so the manifests' RBAC is exercised; without one they run
//     with the platform's kubeconfig. Knative's adapters run with the
//     platform's kubeconfig; their sources' RBAC is checked by the
//     SubjectAccessReviews instead.
//   - Knative adapters send nothing for objects that exist when they start;
//     Start returns once every reflector of every ApiServerSource adapter
//     has listed (its "Caches populated" line), so their watches are open
//     before the caller changes objects.
//   - It acts on the objects as they are at start: changes applied while it
//     runs (a new Service, a new source, other annotations) are not picked
//     up; restart opzero dev. namespaceSelector is resolved once, at start,
//     and so are the Secrets and ConfigMaps of the env: a change is seen
//     after a restart of opzero dev (a cluster sees it at the next pod).
//     Sinks other than Knative Services, Brokers and plain URIs (Channels)
//     are refused, so is a Trigger whose subscriber is a core Service (a
//     classic operator's --events-addr): play those on a cluster. A
//     Trigger's spec.brokerRef and the cesql filter dialect are not
//     supported. valueFrom.resourceFieldRef is not supported.
//   - mtping is multi-tenant: a second opzero dev on the same cluster also
//     pings the first one's PingSources (their sends fail and are logged).
//     Use one opzero dev per control plane.
//   - Readiness is the container's readinessProbe.httpGet.path answering
//     200 (`opzero manifests` names /healthz for operators); a container
//     without an HTTP readinessProbe is ready once its port takes a TCP
//     connection, as Knative probes it. Other probe fields are not played. The Service's timeoutSeconds (default 300) bounds
//     each request once it reaches an instance: past it the answer is 504,
//     as from Knative.
//   - Reconciles are known from the operator's answers (Opzero-Result of a
//     2xx, the body of the others): the status line, -v and the event
//     stream count a failed reconcile whether it was answered 500, 422,
//     503 or 200 "retry recorded" (durable time), but retries an operator
//     without durable time runs on its own, between deliveries, reach no
//     answer and are not seen.
//   - Knative's adapters bind :8080 for health probes (only the first gets
//     it; dev does not probe it): do not run anything else on 8080.
package dev
