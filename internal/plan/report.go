package plan

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"time"
)

// APIVersion is the version of Request and Report.
const APIVersion = "opzero.dev/plan/v1"

// Env is the environment variable that carries a Request (JSON) to an
// operator binary run with --mode=plan. Unset, the binary plans every
// object for one round and prints the text report on standard output.
const Env = "OPZERO_PLAN"

// Request is what to plan.
type Request struct {
	// Namespace limits the plan to one namespace ("": all).
	Namespace string `json:"namespace,omitempty"`
	// Selector is a label selector on the primary objects ("": all).
	Selector string `json:"selector,omitempty"`
	// Name plans one object of each controller's primary kind by name
	// ("Kind/name" picks the controller by its primary kind).
	Name string `json:"name,omitempty"`
	// Watched also plans the keys every object of the controllers'
	// watched kinds maps to (their map functions; -n applies), for
	// operators whose keys are not their primary objects' names
	// (opzero-metacontroller: its keys are its parents).
	Watched bool `json:"watched,omitempty"`
	// Rounds bounds the follow-on rounds (default 3, at least 1).
	Rounds int `json:"rounds,omitempty"`
	// Timeout bounds one object's reconcile (default 30s).
	Timeout Duration `json:"timeout,omitempty"`
	// Out is the file the Report is written to as JSON ("" or "-": the
	// text report on standard output).
	Out string `json:"out,omitempty"`
}

// Duration is a time.Duration written as Go's duration string.
type Duration time.Duration

// MarshalJSON writes d as "1m30s".
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// UnmarshalJSON reads "1m30s".
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	v, err := time.ParseDuration(s)
	*d = Duration(v)
	return err
}

// Defaults for a Request.
const (
	DefaultRounds  = 3
	DefaultTimeout = 30 * time.Second
)

// ReadRequest reads the Request in $OPZERO_PLAN; unset, the default one.
func ReadRequest() (Request, error) {
	var r Request
	if s := os.Getenv(Env); s != "" {
		if err := json.Unmarshal([]byte(s), &r); err != nil {
			return r, fmt.Errorf("%s: %w", Env, err)
		}
	}
	if r.Rounds <= 0 {
		r.Rounds = DefaultRounds
	}
	if r.Timeout <= 0 {
		r.Timeout = Duration(DefaultTimeout)
	}
	return r, nil
}

// Report is a plan.
type Report struct {
	APIVersion string `json:"apiVersion"`
	// Controllers are the controllers planned, each with its primary kind.
	Controllers []Controller `json:"controllers"`
	// Objects are the planned reconciles: one per object and round.
	Objects []Object `json:"objects"`
	// Rounds is how many rounds ran.
	Rounds int `json:"rounds"`
	// Pending are the objects that would reconcile again after the last
	// round (follow-on effects past --rounds): the plan stops there.
	Pending []Ref `json:"pending,omitempty"`
	// Refused counts writes the plan's guard refused because they were
	// not dry-run (always 0 unless a client bypassed the dry-run wrapper).
	Refused int `json:"refused,omitempty"`
}

// Controller is one planned controller.
type Controller struct {
	Name    string `json:"name"`
	Primary string `json:"primary"` // group/version, Kind=...
	// Error is why its objects could not be listed (e.g. forbidden).
	Error string `json:"error,omitempty"`
	// Listed is how many primary objects the plan found.
	Listed int `json:"listed"`
}

// Ref names an object.
type Ref struct {
	APIVersion string `json:"apiVersion,omitempty"`
	Kind       string `json:"kind"`
	Namespace  string `json:"namespace,omitempty"`
	Name       string `json:"name"`
}

func (r Ref) String() string {
	if r.Namespace == "" {
		return r.Kind + " " + r.Name
	}
	return r.Kind + " " + r.Namespace + "/" + r.Name
}

// Object is one planned reconcile of one object.
type Object struct {
	Controller string `json:"controller"`
	Ref
	Round int `json:"round"`
	// Why it reconciles: "listed" in round 1; later, what wrote it.
	Why string `json:"why,omitempty"`
	// Writes are what the reconcile would send, in order.
	Writes []Write `json:"writes,omitempty"`
	// Events are the Events it would record.
	Events []Event `json:"events,omitempty"`
	// Requeue is what it would ask for next.
	Requeue string `json:"requeue,omitempty"`
	// Error is why the plan cannot say what it would do (its error, a
	// panic, a timeout); the real operator would retry it.
	Error string `json:"error,omitempty"`
	// Inexact are the reasons this object's plan may differ from what the
	// operator would do.
	Inexact []string `json:"inexact,omitempty"`
	// External are calls the reconcile made through a client opzero does
	// not own (a client built from rt.GetConfig(): its writes were sent as
	// dry-run too).
	External []string `json:"external,omitempty"`
	// Gone: the reconcile found its object deleted (after the plan
	// listed it): nothing more is done for it, as the engines settle it.
	Gone bool `json:"gone,omitempty"`
	// Planning: the reconciler asked operator.Planning(ctx), so it knows
	// it is planned and may have skipped its external writes.
	Planning bool `json:"planning,omitempty"`
}

// Write is one write a reconcile would send, answered by the API
// server's dry-run.
type Write struct {
	// Verb is create, update, patch, delete or deleteAllOf.
	Verb string `json:"verb"`
	// Subresource is "status" for a status write, "" for the object.
	Subresource string `json:"subresource,omitempty"`
	Ref
	// Changes are the fields that would change (update, patch; for a
	// create, every field of the object the API server would create).
	Changes []Change `json:"changes,omitempty"`
	// Error is the API server's answer to the dry-run when it refused it
	// (a conflict, a webhook's denial, forbidden).
	Error string `json:"error,omitempty"`
}

// Effective reports whether w would change the cluster: the API server
// accepted it and it is a create, a delete, or changes some field.
func (w Write) Effective() bool {
	if w.Error != "" {
		return false
	}
	switch w.Verb {
	case "create", "delete", "deleteAllOf":
		return true
	}
	return len(w.Changes) > 0
}

// Event is an Event a reconcile would record.
type Event struct {
	Regarding Ref    `json:"regarding"`
	Type      string `json:"type"`
	Reason    string `json:"reason"`
	Action    string `json:"action,omitempty"`
	Note      string `json:"note"`
}

// Changed reports whether o would change anything.
func (o Object) Changed() bool {
	if len(o.Events) > 0 {
		return true
	}
	for _, w := range o.Writes {
		if w.Effective() {
			return true
		}
	}
	return false
}

// Failed reports whether the plan of o could not be made.
func (o Object) Failed() bool { return o.Error != "" }

// Changed reports whether anything in r would change.
func (r *Report) Changed() bool {
	for _, o := range r.Objects {
		if o.Changed() {
			return true
		}
	}
	return false
}

// Failed reports whether the plan could not say what would happen for
// some object or controller.
func (r *Report) Failed() bool {
	if r.Refused > 0 {
		return true
	}
	for _, c := range r.Controllers {
		if c.Error != "" {
			return true
		}
	}
	for _, o := range r.Objects {
		if o.Failed() {
			return true
		}
	}
	return false
}

// ExitCode is `kubectl diff`'s: 0 nothing would change, 2 something
// would, 1 the plan failed somewhere.
func (r *Report) ExitCode() int {
	switch {
	case r.Failed():
		return 1
	case r.Changed():
		return 2
	}
	return 0
}

// Sort puts r in its canonical order.
func (r *Report) Sort() {
	sort.SliceStable(r.Objects, func(i, j int) bool {
		a, b := r.Objects[i], r.Objects[j]
		if a.Controller != b.Controller {
			return a.Controller < b.Controller
		}
		if a.Namespace != b.Namespace {
			return a.Namespace < b.Namespace
		}
		if a.Name != b.Name {
			return a.Name < b.Name
		}
		return a.Round < b.Round
	})
	sort.Slice(r.Pending, func(i, j int) bool { return r.Pending[i].String() < r.Pending[j].String() })
}

// Write writes r as indented JSON.
func (r *Report) Write(w io.Writer) error {
	r.APIVersion = APIVersion
	r.RedactSecrets()
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// Read reads a Report.
func Read(rd io.Reader) (*Report, error) {
	var r Report
	dec := json.NewDecoder(rd)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return nil, fmt.Errorf("reading a plan: %w", err)
	}
	if r.APIVersion != APIVersion {
		return nil, fmt.Errorf("a plan of version %q: this opzero reads %s (rebuild the operator with this opzero, or use the opzero it was built with)", r.APIVersion, APIVersion)
	}
	return &r, nil
}
