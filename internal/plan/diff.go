package plan

import (
	"encoding/json"
	"reflect"
	"sort"
	"strconv"
	"strings"
)

// Change is one field that would change: Before absent is an added
// field, After absent a removed one.
type Change struct {
	// Path is the field's path, dot separated, list indexes in brackets
	// (spec.template.metadata.annotations.restartedAt, status.conditions[0].reason).
	Path   string          `json:"path"`
	Before json.RawMessage `json:"before,omitempty"`
	After  json.RawMessage `json:"after,omitempty"`
	// Secret: the field is a Secret's value (data, stringData): Before
	// and After are its size, never the value (RedactSecret).
	Secret bool `json:"secret,omitempty"`
}

// derived are the fields the API server sets on every write: left out of
// diffs (a create's change list too).
var derived = []string{
	"apiVersion", "kind", // a typed client's decoding may or may not set them
	"metadata.managedFields", "metadata.resourceVersion", "metadata.generation",
	"metadata.creationTimestamp", "metadata.uid",
}

// Diff returns the fields that differ between before and after (JSON
// objects as encoding/json decodes them), sorted by path; a nil before
// lists every field of after. Maps are compared key by key, lists index
// by index (a list of another length is one change of the whole list).
func Diff(before, after map[string]any) []Change {
	var out []Change
	if before == nil {
		diffLeaf("", nil, after, &out)
	} else {
		diff("", before, after, &out)
	}
	out = dropDerived(out)
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out
}

func diff(path string, a, b any, out *[]Change) {
	if reflect.DeepEqual(a, b) {
		return
	}
	if am, ok := a.(map[string]any); ok {
		if bm, ok := b.(map[string]any); ok {
			for k, av := range am {
				if bv, in := bm[k]; in {
					diff(join(path, k), av, bv, out)
				} else {
					diffLeaf(join(path, k), av, nil, out)
				}
			}
			for k, bv := range bm {
				if _, in := am[k]; !in {
					diffLeaf(join(path, k), nil, bv, out)
				}
			}
			return
		}
	}
	if al, ok := a.([]any); ok {
		if bl, ok := b.([]any); ok && len(al) == len(bl) {
			for i := range al {
				diff(path+"["+strconv.Itoa(i)+"]", al[i], bl[i], out)
			}
			return
		}
	}
	*out = append(*out, Change{Path: path, Before: raw(a), After: raw(b)})
}

// diffLeaf records a field present on one side only, one change per leaf
// so that a create lists its fields.
func diffLeaf(path string, a, b any, out *[]Change) {
	if m, ok := b.(map[string]any); ok && a == nil && len(m) > 0 {
		for k, v := range m {
			diffLeaf(join(path, k), nil, v, out)
		}
		return
	}
	if m, ok := a.(map[string]any); ok && b == nil && len(m) > 0 {
		for k, v := range m {
			diffLeaf(join(path, k), v, nil, out)
		}
		return
	}
	*out = append(*out, Change{Path: path, Before: raw(a), After: raw(b)})
}

func join(path, k string) string {
	if path == "" {
		return k
	}
	return path + "." + k
}

func raw(v any) json.RawMessage {
	if v == nil {
		return nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return json.RawMessage(strconv.Quote(err.Error()))
	}
	return b
}

func dropDerived(cs []Change) []Change {
	out := cs[:0]
	for _, c := range cs {
		if !isDerived(c.Path) {
			out = append(out, c)
		}
	}
	return out
}

func isDerived(path string) bool {
	for _, d := range derived {
		if path == d || strings.HasPrefix(path, d+".") || strings.HasPrefix(path, d+"[") {
			return true
		}
	}
	return false
}
