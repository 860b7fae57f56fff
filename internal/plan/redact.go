package plan

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
)

// lastApplied is kubectl apply's annotation: on a Secret it carries the
// Secret's data.
const lastApplied = "metadata.annotations.kubectl.kubernetes.io/last-applied-configuration"

// IsSecret reports whether ref is a core Secret.
func IsSecret(ref Ref) bool {
	return ref.Kind == "Secret" && (ref.APIVersion == "v1" || ref.APIVersion == "")
}

// RedactSecret, for a write of a Secret, replaces in cs the values of
// its data and stringData (and of kubectl's last-applied-configuration,
// which carries them) by their size: "(secret, 24 bytes)", and "(secret,
// 24 bytes, changed)" for a value that changes. Keys are kept; a plan
// never holds a Secret's value. Other writes' changes are returned as
// they are.
func RedactSecret(ref Ref, cs []Change) []Change {
	if !IsSecret(ref) {
		return cs
	}
	for i := range cs {
		c := &cs[i]
		if c.Secret || !secretPath(c.Path) {
			continue
		}
		data := strings.HasPrefix(c.Path, "data")
		changed := c.Before != nil && c.After != nil
		c.Before = redactValue(c.Before, data, false)
		c.After = redactValue(c.After, data, changed)
		c.Secret = true
	}
	return cs
}

func secretPath(p string) bool {
	for _, f := range []string{"data", "stringData"} {
		if p == f || strings.HasPrefix(p, f+".") || strings.HasPrefix(p, f+"[") {
			return true
		}
	}
	return p == lastApplied
}

// redactValue is raw's size in place of raw; an object (all of data)
// keeps its keys, each value redacted.
func redactValue(raw json.RawMessage, base64ed, changed bool) json.RawMessage {
	if raw == nil {
		return nil
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(raw, &m) == nil && m != nil {
		out := make(map[string]string, len(m))
		for k, v := range m {
			out[k] = marker(size(v, base64ed), false)
		}
		b, _ := json.Marshal(out)
		return b
	}
	b, _ := json.Marshal(marker(size(raw, base64ed), changed))
	return b
}

// size is the length of a value: of its bytes when base64ed (data).
func size(raw json.RawMessage, base64ed bool) int {
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return len(raw)
	}
	if base64ed {
		if b, err := base64.StdEncoding.DecodeString(s); err == nil {
			return len(b)
		}
	}
	return len(s)
}

func marker(n int, changed bool) string {
	if changed {
		return fmt.Sprintf("(secret, %d bytes, changed)", n)
	}
	return fmt.Sprintf("(secret, %d bytes)", n)
}

// RedactSecrets redacts, in place, every Secret's values r holds
// (RedactSecret): a report from an operator built with an older opzero
// prints none either.
func (r *Report) RedactSecrets() {
	for i := range r.Objects {
		for j := range r.Objects[i].Writes {
			w := &r.Objects[i].Writes[j]
			w.Changes = RedactSecret(w.Ref, w.Changes)
		}
	}
}

// secretText is a redacted value as printed: the marker without quotes.
func secretText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	return compact(raw)
}
