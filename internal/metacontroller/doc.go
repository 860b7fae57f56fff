// Package metacontroller serves Metacontroller's hooks with opzero: the
// CompositeController and DecoratorController API (package v1alpha1) and
// the sync/finalize/customize hook protocol, run by one
// reconcile.Reconciler that opzero's builder runs classic or serverless
// (cmd/opzero-metacontroller).
//
// # Expected flow
//
// Run reads every CompositeController and DecoratorController at start
// (Load) and resolves their resources by discovery. Describe registers one
// controller with opzero's builder: CompositeController is the primary
// kind; DecoratorControllers and every parent, decorated, child and
// attachment resource are watched, each kind once, with a map function that
// knows every role it plays; so are the related resources (what the
// controllers' customize hooks named: their status.relatedResources, and
// the optional annotation opzero.dev/related-resources, RelatedAnnotation).
// Requests have synthetic names:
// "composite/<controller>/<parent>", "decorator/<controller>/<resource.group>/<object>"
// (in the parent's namespace), a bare controller name or
// "decorator/<name>" for the controllers themselves.
//
// A sync reads the parent, keeps Metacontroller's finalizer on it while the
// controller has a finalize hook, lists its children (objects of the child
// resources whose controller ownerReference is the parent), calls the
// customize hook if there is one and reads the related objects it names
// from the API server (no cache), calls the sync hook (the finalize hook
// while the parent is being deleted) with them, checks the answer whole,
// applies the children, writes the status and returns the resync as
// RequeueAfter.
//
// # Guarantees
//
//   - A hook answer that cannot be used (HookClient: not JSON, not an
//     object, the wrong shape; desiredChildren: a kind the controller does
//     not manage, no name, another namespace, a duplicate; a customize
//     answer naming a resource the API server does not serve, a namespace
//     other than a namespaced parent's, both labelSelector and names, a
//     bad selector) changes nothing, and the sync hook is not called:
//     the parent gets Synced=False with reason HookAnswerInvalid, and the
//     sync is retried with the engine's backoff.
//   - A sync that fails leaves Metacontroller's Warning Event SyncError
//     on the parent (events.go: "Sync error: <reason>: ...", the reason
//     being the condition's), as Metacontroller does, except when the
//     parent is gone or changed meanwhile (a conflict).
//   - Children are written with server-side apply (field manager
//     opzero-metacontroller, forced) and carry a controller ownerReference
//     with blockOwnerDeletion, so the garbage collector removes them with
//     their parent. A child the hook stops answering is deleted, by UID.
//   - Update strategies: OnDelete (the default) never updates; InPlace
//     applies; Recreate deletes a child whose server-side dry-run apply
//     differs (or is refused: an immutable field), and its deletion's event
//     creates it again. Rolling variants behave as their plain ones.
//   - The hook's status replaces the parent's, with observedGeneration when
//     the parent's CRD schema has it, and is written only when it differs.
//   - A sync's own writes sync nothing (echo.go): an event of an object
//     still at the version a successful sync left it at maps to no sync.
//   - A related object that cannot be read (Forbidden) gives the parent
//     Synced=False RelatedUnreadable.
//   - A child the API server refuses to write (Forbidden: RBAC, a role or
//     binding granting what the operator does not hold) gives the parent
//     Synced=False ApplyForbidden; the sync fails and
//     is retried with the engine's backoff. `opzero manifests` grants bind
//     (children that are role bindings) and escalate (roles) as
//     Metacontroller's own ClusterRole allows (rbac.go).
//   - Hooks v2 (hooksv2.go): children, attachments and related are keyed
//     "<namespace>/<name>" (a cluster-scoped object by its name); a v2
//     customize hook may name a namespaced parent's related objects in any
//     namespace; answers are decoded strictly unless responseUnMarshallMode
//     is loose (v1: loose unless it is strict).
//   - A parent (decorated object) whose labels or annotations do not match
//     its controller's parentResource.labelSelector (resources[]
//     labelSelector, annotationSelector) is never synced; a kind that is
//     only such a parent gets the label selector in its generated source.
//   - Hooks are called with Metacontroller's TLS and credentials
//     (endpoints.go): a webhook's own caBundle, clientTLS, authorization,
//     basicAuth, else those of the first spec.endpointConfigs entry (then
//     spec.connections, the older name) whose host matches the URL's; the
//     Secrets and ConfigMaps they name are read at each call, and
//     `opzero manifests` grants get on exactly those names.
//   - Every field of Metacontroller's API is accepted; each one set that
//     opzero does not implement (Unsupported) is reported at start by
//     ReportUnsupported (condition FieldsSupported=False, a Warning Event
//     per field) and by `opzero manifests` (description warnings).
//   - A CompositeController or DecoratorController that differs from the
//     one loaded (created, changed, deleted) calls OnChange: Run returns
//     ErrRestart and the process exits for its supervisor to restart it.
//
// # Caveats
//
// A resource a customize hook names that the operator does not watch yet
// is learned (learn.go): the operator restarts to watch it, and the sync
// that learned is done again 5 s later; changes of it that reach the
// exiting process in between are seen by that sync. A related change syncs
// the parents whose last answer (kept in memory) selects it, and every
// parent whose answer the process has not seen. A parent created while the
// source of its resource is away (its CRD deleted and created again) is
// synced at its next change: the full sweep reconciles the controllers,
// not the parents.
// Orphans are not adopted by selector. Serverless, child events arrive in
// Reference mode: a deleted child whose owner cannot be read any more
// syncs every parent in its namespace that may own it. New resources need
// new ApiServerSources: run `opzero manifests` again after adding a
// controller (OPZERO_METACONTROLLER_FILES).
//
// # Why it is not a module of its own
//
// examples/postgres is a module of its own because it brings requirements
// of its own (pgx, newer Kubernetes and controller-runtime releases) that
// opzero's go.mod should not carry. This package brings none: every module
// cmd/opzero-metacontroller links is one the operator packages or the CLI
// require already (`go list -deps -f '{{with .Module}}{{.Path}}{{end}}'`
// of it, less that of every other package of the module, is empty), and
// the packages it imports are opzero's own (builder, operator,
// reconcileutil, internal/description, internal/knativenames,
// internal/clihelp). Nothing else links it: the CLI, the hub, the wakeup
// source and the examples' operators do not import it (the CLI repeats
// FilesEnv rather than import it; internal/depcheck keeps CLI-only
// packages out of it), so it costs them no byte; its own binary, built as
// the classic-linked ConfigWatcher is, is 0.8 MB larger than that one
// (66.5 against 65.7 MB). A module of its own would add a go.mod kept in
// step with opzero's, a replace directive and a second `go test` run, and
// it would still import opzero's internal packages (Go allows it by path,
// but they have no API kept stable between two modules), so it could not
// be versioned apart: it stays a package of the main module.
package metacontroller
