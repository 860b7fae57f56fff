package planner

import "reflect"

// compose is the object a write of an object the plan has already
// written would leave: the write was dry-run against the API server's
// object (server), which lacks what the plan's earlier writes did, and
// result is the API server's answer; planned is the object as those
// writes left it. A status write takes only the status (the planned
// metadata and spec stay: a finalizer added before is kept); a write of
// the object keeps the planned status; a patch applies what it changed
// on the API server's object to the planned one. server nil (unknown):
// the status is taken or kept whole.
func compose(verb, sub string, server, result, planned map[string]any) map[string]any {
	status := func() any {
		if server == nil || verb == "update" && sub == "status" {
			return field(result, "status")
		}
		return merge3(field(server, "status"), field(result, "status"), field(planned, "status"))
	}
	switch {
	case sub == "status":
		out := copyTop(planned)
		setField(out, "status", status())
		if md, ok := result["metadata"].(map[string]any); ok {
			keepVersion(out, md)
		}
		return out
	case verb == "update" || server == nil:
		out := copyTop(result)
		if server == nil {
			setField(out, "status", field(planned, "status"))
		} else {
			setField(out, "status", status())
		}
		return out
	}
	if m, ok := merge3(server, result, planned).(map[string]any); ok {
		return m
	}
	return result
}

// absent is a field a JSON object does not have.
type absent struct{}

func field(m map[string]any, k string) any {
	if v, ok := m[k]; ok {
		return v
	}
	return absent{}
}

func setField(m map[string]any, k string, v any) {
	if _, ok := v.(absent); ok {
		delete(m, k)
		return
	}
	m[k] = v
}

func copyTop(m map[string]any) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// keepVersion sets out's resourceVersion to md's (the API server's answer).
func keepVersion(out, md map[string]any) {
	rv, ok := md["resourceVersion"]
	if !ok {
		return
	}
	if om, ok := out["metadata"].(map[string]any); ok {
		om = copyTop(om)
		om["resourceVersion"] = rv
		out["metadata"] = om
	}
}

// merge3 applies the change from s to r onto p: where s and r agree, p
// stays; objects are merged key by key; anything else is r.
func merge3(s, r, p any) any {
	if reflect.DeepEqual(s, r) {
		return p
	}
	sm, ok1 := s.(map[string]any)
	rm, ok2 := r.(map[string]any)
	pm, ok3 := p.(map[string]any)
	if !ok1 || !ok2 || !ok3 {
		return r
	}
	out := map[string]any{}
	for _, m := range []map[string]any{sm, rm, pm} {
		for k := range m {
			if _, done := out[k]; done {
				continue
			}
			v := merge3(field(sm, k), field(rm, k), field(pm, k))
			if _, gone := v.(absent); !gone {
				out[k] = v
			}
		}
	}
	return out
}
