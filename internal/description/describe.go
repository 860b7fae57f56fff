// Package description is the wire format of an operator's self-description: what
// an opzero operator binary prints when it runs with OPZERO_DESCRIBE set,
// and what `opzero manifests` reads to derive every deploy object from the
// operator itself instead of from a second, hand-kept list.
//
// # Guarantees
//
//   - Plain data, standard library only: the operator binary links nothing
//     for it, and readers need not link the operator.
//   - Versioned by APIVersion; Read rejects any other version with an error
//     that says which binary and which reader disagree.
//   - Lists are sorted (kinds by group, version, kind; flags by name) or
//     kept in the order the operator declared them (env: a later value may
//     refer to an earlier variable as $(NAME); events), so the same operator
//     always describes itself byte for byte the same way.
//   - Events carry each external-event filter in Knative Trigger JSON
//     (spec.filter.attributes, spec.filters), so a reader writes the
//     Trigger without translating it.
//
// # Caveats
//
// Resource is a guess from the kind (Kubernetes' own rule, e.g. Endpoints ->
// endpoints, Policy -> policies); a reader that has the CRD should prefer
// its spec.names.plural. Whether a kind is namespaced is not known to the
// binary (a scheme has no scopes); readers decide it.
package description

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
)

// APIVersion is the version of this format. v2 added Controller.Events
// (external CloudEvents through a Broker); Read still accepts v1, which is
// v2 without them.
//
// Optional fields added later within v2 (ServerlessOnly, Kind.ReferencedBy, Webhooks)
// are omitted when unset, so a description that does not use them is byte
// for byte what an older binary printed and older readers still read it.
// One that uses them is refused by an older reader (Read disallows unknown
// fields) with an error naming the field: loud, never silently dropped. A
// new version would refuse every description, used or not, and gain
// nothing, since decoding fails on the field before the version is read.
const APIVersion = "opzero.dev/describe/v2"

// apiVersionV1 is the previous version, a subset of this one.
const apiVersionV1 = "opzero.dev/describe/v1"

// Env is the environment variable that makes an operator binary describe
// itself instead of serving: "1" or "-" writes to stdout, anything else is a
// file path.
const Env = "OPZERO_DESCRIBE"

// ProbeAddressEnv, when set, is the address an adopted project's health
// checks are served on besides the serving port in serverless mode, in
// place of its ctrl.Options.HealthProbeBindAddress: opzero manifests sets
// it to "0" for a project whose own flag (not kubebuilder's) sets that
// address (Probes), so that instances side by side (opzero dev) do not
// all bind it.
const ProbeAddressEnv = "OPZERO_HEALTH_PROBE_BIND_ADDRESS"

// Description is what a binary prints.
type Description struct {
	APIVersion string `json:"apiVersion"`
	// Mode is the mode the binary was started in (serverless or classic).
	Mode string `json:"mode"`
	// ServerlessOnly: the binary cannot run --mode=classic (its main does
	// not import operator/classic). Absent in older binaries, which could.
	ServerlessOnly bool         `json:"serverlessOnly,omitempty"`
	Operators      []Controller `json:"operators"`
	// Flags are the command-line flags the binary accepts, by name.
	Flags []string `json:"flags,omitempty"`
	// Webhooks are what an adopted controller-runtime project registers on
	// its webhook server (served by the same binary with --mode=webhooks);
	// absent when it registers none.
	Webhooks *Webhooks `json:"webhooks,omitempty"`
	// Versions are the kinds the binary's scheme has in several versions
	// (outside k8s.io's packages), each version with its Go package:
	// `opzero manifests` writes their CRDs with every version, and refuses
	// versions that differ with no conversion.
	Versions []ConversionKind `json:"versions,omitempty"`
	// Cache is what an adopted controller-runtime project's manager cache
	// holds (its cache.Options): the hub watches no wider for it. Absent
	// when the project restricts nothing, and in binaries older than it.
	Cache *CacheScope `json:"cache,omitempty"`
	// Probes is the address an adopted project's manager serves /healthz
	// and /readyz on in classic mode (ctrl.Options.HealthProbeBindAddress
	// with its flags' defaults, e.g. ":8081"; "" or "0": none), whatever
	// flag sets it.
	Probes string `json:"probes,omitempty"`
}

// CacheScope is a project's cache.Options as filters the hub applies
// before it wakes the operator.
type CacheScope struct {
	// Namespaces are DefaultNamespaces' (empty: every namespace).
	Namespaces []string `json:"namespaces,omitempty"`
	// LabelSelector is DefaultLabelSelector in its string form.
	LabelSelector string `json:"labelSelector,omitempty"`
	// ByObject are the kinds with options of their own, which replace
	// the defaults for that kind, as controller-runtime's ByObject does.
	ByObject []CacheKind `json:"byObject,omitempty"`
	// Untranslated are the options the hub cannot apply (field
	// selectors, transforms, per-namespace selectors), each said as
	// "<kind or default>: <option>": the hub watches wider than the cache
	// there, and the operator's cache options apply after it is woken.
	Untranslated []string `json:"untranslated,omitempty"`
}

// CacheKind is one kind's ByObject entry: namespaces (empty: the
// defaults') and a label selector ("" with LabelSet false: the default's).
type CacheKind struct {
	Group         string   `json:"group"`
	Version       string   `json:"version"`
	Kind          string   `json:"kind"`
	Namespaces    []string `json:"namespaces,omitempty"`
	LabelSelector string   `json:"labelSelector,omitempty"`
	// LabelSet: the entry sets its own label selector (which may be
	// everything: "").
	LabelSet bool `json:"labelSet,omitempty"`
}

// For returns the namespaces (empty: all) and the label selector ("":
// everything) the cache holds of kind g/k.
func (c *CacheScope) For(group, kind string) (namespaces []string, selector string) {
	if c == nil {
		return nil, ""
	}
	namespaces, selector = c.Namespaces, c.LabelSelector
	for _, b := range c.ByObject {
		if b.Group == group && b.Kind == kind {
			if len(b.Namespaces) > 0 {
				namespaces = b.Namespaces
			}
			if b.LabelSet {
				selector = b.LabelSelector
			}
		}
	}
	return namespaces, selector
}

// Webhooks are an adopted project's admission and conversion webhooks.
type Webhooks struct {
	// Paths are the admission webhooks' paths, sorted (conversion's
	// /convert is not among them).
	Paths []string `json:"paths,omitempty"`
	// Port is the webhook server's port (controller-runtime's default 9443).
	Port int `json:"port"`
	// CertDir is the folder the server reads tls.crt and tls.key from when
	// the project set one ("": controller-runtime's default,
	// <temp>/k8s-webhook-server/serving-certs).
	CertDir string `json:"certDir,omitempty"`
	// Conversion are the kinds the binary's /convert webhook converts (its
	// scheme has a Hub and Convertible spokes for them, or a converter was
	// registered), sorted by group and kind.
	Conversion []ConversionKind `json:"conversion,omitempty"`
}

// ConversionKind is a kind with several versions converted by webhook.
type ConversionKind struct {
	Group string `json:"group"`
	Kind  string `json:"kind"`
	// Versions are the kind's versions in the scheme, sorted by version,
	// each with the Go package of its type (where its CRD markers are).
	Versions []Version `json:"versions"`
}

// Version is one version of a kind and its Go package.
type Version struct {
	Version   string `json:"version"`
	GoPackage string `json:"goPackage"`
}

// Controller is one registered operator (builder.Controller as data).
type Controller struct {
	Name    string `json:"name"`
	Primary Kind   `json:"primary"`
	Owned   []Kind `json:"owned,omitempty"`
	Watched []Kind `json:"watched,omitempty"`
	// ReconcilerPackage is the Go import path of the reconciler's type,
	// where `+kubebuilder:rbac` markers for what it reads and writes live.
	ReconcilerPackage      string `json:"reconcilerPackage,omitempty"`
	AutoObservedGeneration bool   `json:"autoObservedGeneration,omitempty"`
	// Skip is the operator's generation-aware skipping of Primary updates
	// (builder.SkipOptions); absent when disabled, and in binaries older
	// than the field. The hub wiring applies it before it sends.
	Skip   *Skip  `json:"skip,omitempty"`
	Deploy Deploy `json:"deploy"`
	// Env are the environment variables the operator declared it needs
	// (builder.WithEnv, WithSecretEnv), in the order declared.
	Env []EnvVar `json:"env,omitempty"`
	// Events are the external CloudEvents the operator takes from its
	// Broker (builder.WatchesEvents), in the order declared: one Trigger each.
	Events []EventWatch `json:"events,omitempty"`
	// Rules are RBAC rules the operator needs beyond what its kinds imply,
	// known only when it runs (opzero-metacontroller: the parent and child
	// resources its controllers name), where +kubebuilder:rbac markers
	// cannot say them.
	Rules []Rule `json:"rules,omitempty"`
	// SourceRules are what the operator's event sources must read beyond
	// its kinds, for kinds it learns to watch at run time
	// (opzero-metacontroller: what customize hooks name). The hub's
	// aggregated ClusterRole gets them; Knative's ApiServerSources made at
	// run time use the operator's own service account, which has Rules.
	SourceRules []Rule `json:"sourceRules,omitempty"`
	// Namespaces are namespaces the operator's environment expects to
	// exist, known only when it runs (opzero-metacontroller: those its
	// controllers' hook Services live in, e.g. metacontroller): `opzero
	// manifests` writes a Namespace object for each one it does not
	// otherwise have.
	Namespaces []string `json:"namespaces,omitempty"`
	// Warnings are what the operator found wrong in its input but can run
	// with (opzero-metacontroller: fields of its controllers it does not
	// implement); `opzero manifests` prints them.
	Warnings []string `json:"warnings,omitempty"`
	// Notes say how watches are served where that differs from how the
	// project wrote them (builder.Controller Notes).
	Notes []string `json:"notes,omitempty"`
	// Unserved are the operator's sources that nothing runs at zero
	// (builder.Controller Unserved).
	Unserved []Source `json:"unserved,omitempty"`
}

// Source is a source of events that watches no kind: its Go name
// (source.Func, a custom type) and where its code is declared.
type Source struct {
	Name string `json:"name"`
	File string `json:"file,omitempty"`
	Line int    `json:"line,omitempty"`
}

// Skip says which metadata besides finalizers makes an update of an
// already observed generation worth a reconcile.
type Skip struct {
	OnLabelChange      bool `json:"onLabelChange,omitempty"`
	OnAnnotationChange bool `json:"onAnnotationChange,omitempty"`
}

// EventWatch is one Trigger's filter: Knative's spec.filter.attributes or
// spec.filters, with Knative's JSON field names.
type EventWatch struct {
	// Name names the Trigger.
	Name       string            `json:"name"`
	Attributes map[string]string `json:"attributes,omitempty"`
	Filters    []TriggerFilter   `json:"filters,omitempty"`
}

// TriggerFilter is one entry of a Trigger's spec.filters (one dialect set).
type TriggerFilter struct {
	All    []TriggerFilter   `json:"all,omitempty"`
	Any    []TriggerFilter   `json:"any,omitempty"`
	Not    *TriggerFilter    `json:"not,omitempty"`
	Exact  map[string]string `json:"exact,omitempty"`
	Prefix map[string]string `json:"prefix,omitempty"`
	Suffix map[string]string `json:"suffix,omitempty"`
}

// Rule is one RBAC rule (rbac.authorization.k8s.io PolicyRule's fields).
type Rule struct {
	APIGroups []string `json:"apiGroups"`
	Resources []string `json:"resources"`
	Verbs     []string `json:"verbs"`
	// ResourceNames, if set, limit the rule to objects of these names.
	ResourceNames []string `json:"resourceNames,omitempty"`
}

// EnvVar is one environment variable of the operator's container: a
// literal Value, or the key of a Secret in the operator's namespace.
type EnvVar struct {
	Name   string  `json:"name"`
	Value  string  `json:"value,omitempty"`
	Secret *KeyRef `json:"secret,omitempty"`
}

// KeyRef names one key of a Secret (or ConfigMap).
type KeyRef struct {
	Name string `json:"name"`
	Key  string `json:"key"`
}

// Kind is one kind an operator reconciles or watches.
type Kind struct {
	Group    string `json:"group"`
	Version  string `json:"version"`
	Kind     string `json:"kind"`
	Resource string `json:"resource"`
	// GoPackage is the import path of the Go type (where its CRD markers are).
	GoPackage string `json:"goPackage"`
	// Selector is a label selector in its string form ("" = everything).
	Selector string `json:"selector,omitempty"`
	// ReferencedBy, on a watched kind, is the field path (dot separated,
	// e.g. spec.configMap) in which objects of the primary kind name
	// objects of this kind in their own namespace (builder.ReferencedBy);
	// "" makes no such promise.
	ReferencedBy string `json:"referencedBy,omitempty"`
	// UpdatedWhen names the parts of an object (generation, labels,
	// annotations) one of which an update must change to matter
	// (builder.UpdatedWhen, or an adopted controller's predicates); empty
	// is every update.
	UpdatedWhen []string `json:"updatedWhen,omitempty"`
	// Unfiltered names the operator's own filters of this kind that no
	// event source applies (builder.Kind.Unfiltered).
	Unfiltered []string `json:"unfiltered,omitempty"`
	// TypeFilters are, for each source of the kind (an adopted
	// controller's event handler), the functions its predicate.Funcs set
	// by type of change and where they are declared
	// (builder.Kind.TypeFilters); nil: not read.
	TypeFilters [][]FuncSite `json:"typeFilters,omitempty"`
	// Everywhere says this use of the kind is watched through a cache the
	// operator built, which the manager cache's scope (Description.Cache)
	// does not narrow (builder.Kind.Everywhere).
	Everywhere bool `json:"everywhere,omitempty"`
}

// FuncSite is a function a predicate sets for one type of change
// (created, updated, deleted), by the file and line of its declaration.
type FuncSite struct {
	Type string `json:"type"`
	File string `json:"file"`
	Line int    `json:"line"`
}

// APIVersion returns group/version (version alone for the core group).
func (k Kind) APIVersion() string {
	if k.Group == "" {
		return k.Version
	}
	return k.Group + "/" + k.Version
}

// Deploy is builder.DeploySettings as data.
type Deploy struct {
	Sweep       string `json:"sweep,omitempty"`
	FullSweep   string `json:"fullSweep,omitempty"`
	MinScale    int    `json:"minScale"`
	MaxScale    int    `json:"maxScale"`
	Concurrency int    `json:"concurrency"`
}

// Write writes d as indented JSON.
func Write(w io.Writer, d Description) error {
	d.APIVersion = APIVersion
	b, err := json.MarshalIndent(d, "", "  ")
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// Read decodes a description and checks its version.
func Read(r io.Reader) (Description, error) {
	var d Description
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&d); err != nil {
		if strings.HasPrefix(err.Error(), "json: unknown field") {
			return Description{}, fmt.Errorf("an opzero operator description (%s JSON) this opzero cannot read: %w; "+
				"build the operator and the opzero CLI from the same opzero version", APIVersion, err)
		}
		return Description{}, fmt.Errorf("not an opzero operator description (%s JSON): %w", APIVersion, err)
	}
	if d.APIVersion == apiVersionV1 {
		d.APIVersion = APIVersion
	}
	if d.APIVersion != APIVersion {
		return Description{}, fmt.Errorf("description version %q, this opzero reads %q: build the operator and the opzero CLI from the same opzero version", d.APIVersion, APIVersion)
	}
	return d, nil
}
