package eventfilter

import (
	"fmt"
	"strings"

	"github.com/cloudevents/sdk-go/v2/event"
)

// result is Knative's three-valued filter result: only fail drops an event.
type result int

const (
	pass result = iota
	fail
	none // the filter decided nothing (Knative's NoFilter)
)

// Match says whether e passes s, as Knative's broker filter decides. s must
// be valid (Validate); an invalid filter inside Filters is skipped, as
// Knative skips one it cannot build.
func (s Spec) Match(e event.Event) bool {
	switch {
	case len(s.Filters) > 0:
		return allOf(s.Filters, e) != fail
	case s.Attributes != nil:
		return attributes(s.Attributes, e) != fail
	}
	return true
}

// attributes is Knative's attributes filter: "" matches any non-empty value.
func attributes(attrs map[string]string, e event.Event) result {
	for k, v := range attrs {
		value, ok := Lookup(e, k)
		if !ok || (v == "" && value == "") {
			return fail
		}
		if v != "" && value != any(v) {
			return fail
		}
	}
	return pass
}

func (f Filter) match(e event.Event) (result, bool) {
	switch {
	case len(f.Exact) > 0:
		return compare(f.Exact, e, func(s, v string) bool { return s == v })
	case len(f.Prefix) > 0:
		return compare(f.Prefix, e, strings.HasPrefix)
	case len(f.Suffix) > 0:
		return compare(f.Suffix, e, strings.HasSuffix)
	case len(f.All) > 0:
		return allOf(f.All, e), true
	case len(f.Any) > 0:
		return anyOf(f.Any, e), true
	case f.Not != nil:
		r, ok := f.Not.match(e)
		if !ok {
			return none, true // Knative: a not around nothing decides nothing
		}
		switch r {
		case pass:
			return fail, true
		case fail:
			return pass, true
		}
		return none, true
	}
	return none, false // no dialect (or cesql): Knative drops such a filter
}

func compare(m map[string]string, e event.Event, ok func(s, v string) bool) (result, bool) {
	for k, v := range m {
		if k == "" || v == "" {
			return none, false
		}
	}
	for k, v := range m {
		value, found := Lookup(e, k)
		if !found {
			return fail, true
		}
		s, isString := value.(string)
		if !isString {
			s = fmt.Sprintf("%v", value)
		}
		if !ok(s, v) {
			return fail, true
		}
	}
	return pass, true
}

// materialize keeps the filters Knative would build (it skips the others).
func materialize(fs []Filter) []Filter {
	out := make([]Filter, 0, len(fs))
	for _, f := range fs {
		if _, ok := f.match(event.New()); ok {
			out = append(out, f)
		}
	}
	return out
}

// allOf: the first fail fails; else the last filter's result (none if empty).
func allOf(fs []Filter, e event.Event) result {
	r := none
	for _, f := range materialize(fs) {
		r, _ = f.match(e)
		if r == fail {
			return fail
		}
	}
	return r
}

// anyOf: the first pass passes; else the last filter's result (none if empty).
func anyOf(fs []Filter, e event.Event) result {
	r := none
	for _, f := range materialize(fs) {
		r, _ = f.match(e)
		if r == pass {
			return pass
		}
	}
	return r
}

// Lookup returns a context attribute or extension of e by its Trigger name,
// as Knative's attributes.LookupAttribute does: the optional attributes
// are present ("" when unset); an extension only when the event has it.
func Lookup(e event.Event, name string) (any, bool) {
	switch name {
	case "specversion":
		return e.SpecVersion(), true
	case "type":
		return e.Type(), true
	case "source":
		return e.Source(), true
	case "subject":
		return e.Subject(), true
	case "id":
		return e.ID(), true
	case "time":
		b, err := e.Time().MarshalText()
		if err != nil {
			return nil, false
		}
		return string(b), true
	case "dataschema", "schemaurl":
		return e.DataSchema(), true
	case "datacontenttype":
		return e.DataContentType(), true
	case "datamediatype":
		return e.DataMediaType(), true
	case "datacontentencoding":
		return e.DeprecatedDataContentEncoding(), true
	}
	v, ok := e.Extensions()[name]
	return v, ok
}
