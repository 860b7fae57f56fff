package eventfilter

import (
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strings"
)

// Filter is one entry of a Trigger's spec.filters: exactly one dialect set.
type Filter struct {
	All    []Filter          `json:"all,omitempty"`
	Any    []Filter          `json:"any,omitempty"`
	Not    *Filter           `json:"not,omitempty"`
	Exact  map[string]string `json:"exact,omitempty"`
	Prefix map[string]string `json:"prefix,omitempty"`
	Suffix map[string]string `json:"suffix,omitempty"`
	// CESQL is read so that a Trigger using it is refused, not misread.
	CESQL string `json:"cesql,omitempty"`
}

// Spec is what a Trigger filters on.
type Spec struct {
	// Attributes is spec.filter.attributes.
	Attributes map[string]string `json:"attributes,omitempty"`
	// Filters is spec.filters; when set, Knative ignores Attributes.
	Filters []Filter `json:"filters,omitempty"`
}

// Empty says the spec filters nothing (every event passes).
func (s Spec) Empty() bool { return len(s.Attributes) == 0 && len(s.Filters) == 0 }

// validName is Knative's rule for attribute names in a Trigger.
var validName = regexp.MustCompile(`^[a-z][a-z0-9]*$`)

// Validate reports every problem of s at once, each with its path in the
// Trigger's spec (e.g. filters[0].all[1].exact).
func (s Spec) Validate() error {
	var errs []error
	if len(s.Attributes) > 0 && len(s.Filters) > 0 {
		errs = append(errs, errors.New("both attributes and filters are set: Knative ignores attributes when filters is set; move the attributes into filters as an exact filter"))
	}
	for _, k := range sortedKeys(s.Attributes) {
		if !validName.MatchString(k) {
			errs = append(errs, fmt.Errorf("attributes[%s]: attribute names start with a letter and hold only lower-case letters and digits", k))
		}
	}
	for i, f := range s.Filters {
		errs = append(errs, f.validate(fmt.Sprintf("filters[%d]", i))...)
	}
	return errors.Join(errs...)
}

func (f Filter) validate(path string) []error {
	var errs []error
	var dialects []string
	for _, d := range []struct {
		name string
		set  bool
	}{{"exact", len(f.Exact) > 0}, {"prefix", len(f.Prefix) > 0}, {"suffix", len(f.Suffix) > 0},
		{"all", len(f.All) > 0}, {"any", len(f.Any) > 0}, {"not", f.Not != nil}, {"cesql", f.CESQL != ""}} {
		if d.set {
			dialects = append(dialects, d.name)
		}
	}
	switch len(dialects) {
	case 0:
		errs = append(errs, fmt.Errorf("%s: no dialect set: set one of exact, prefix, suffix, all, any, not", path))
	case 1:
	default:
		errs = append(errs, fmt.Errorf("%s: %s are set: a filter has exactly one dialect; combine them with all", path, strings.Join(dialects, " and ")))
	}
	if f.CESQL != "" {
		errs = append(errs, fmt.Errorf("%s.cesql: the cesql dialect is not supported by opzero; use exact, prefix, suffix, all, any, not", path))
	}
	for _, m := range []struct {
		name string
		m    map[string]string
	}{{"exact", f.Exact}, {"prefix", f.Prefix}, {"suffix", f.Suffix}} {
		for _, k := range sortedKeys(m.m) {
			switch {
			case !validName.MatchString(k):
				errs = append(errs, fmt.Errorf("%s.%s[%s]: attribute names start with a letter and hold only lower-case letters and digits", path, m.name, k))
			case m.m[k] == "":
				errs = append(errs, fmt.Errorf("%s.%s[%s]: the value is empty (Knative skips such a filter); give the value to compare with", path, m.name, k))
			}
		}
	}
	for i, g := range f.All {
		errs = append(errs, g.validate(fmt.Sprintf("%s.all[%d]", path, i))...)
	}
	for i, g := range f.Any {
		errs = append(errs, g.validate(fmt.Sprintf("%s.any[%d]", path, i))...)
	}
	if f.Not != nil {
		errs = append(errs, f.Not.validate(path+".not")...)
	}
	return errs
}

func sortedKeys(m map[string]string) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// String is a short human form of s for logs and reasons, e.g.
// "type=com.example.drift" or "filters[prefix type=com.example.]".
func (s Spec) String() string {
	if len(s.Filters) > 0 {
		parts := make([]string, len(s.Filters))
		for i, f := range s.Filters {
			parts[i] = f.String()
		}
		return "filters[" + strings.Join(parts, ", ") + "]"
	}
	return pairs(s.Attributes, "=")
}

// String is a short human form of f.
func (f Filter) String() string {
	list := func(name string, fs []Filter) string {
		parts := make([]string, len(fs))
		for i, g := range fs {
			parts[i] = g.String()
		}
		return name + "(" + strings.Join(parts, ", ") + ")"
	}
	switch {
	case len(f.Exact) > 0:
		return "exact " + pairs(f.Exact, "=")
	case len(f.Prefix) > 0:
		return "prefix " + pairs(f.Prefix, "=")
	case len(f.Suffix) > 0:
		return "suffix " + pairs(f.Suffix, "=")
	case len(f.All) > 0:
		return list("all", f.All)
	case len(f.Any) > 0:
		return list("any", f.Any)
	case f.Not != nil:
		return "not(" + f.Not.String() + ")"
	case f.CESQL != "":
		return "cesql " + f.CESQL
	}
	return "none"
}

func pairs(m map[string]string, sep string) string {
	var b strings.Builder
	for i, k := range sortedKeys(m) {
		if i > 0 {
			b.WriteString(" ")
		}
		b.WriteString(k + sep + m[k])
	}
	return b.String()
}
