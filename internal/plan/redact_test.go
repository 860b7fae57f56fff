package plan

import (
	"strings"
	"testing"
)

func TestRedactSecret(t *testing.T) {
	secret := Ref{APIVersion: "v1", Kind: "Secret", Namespace: "n", Name: "s"}
	cs := Diff(obj(t, `{"data":{"a":"c2VjcmV0"},"metadata":{"labels":{"l":"x"}}}`),
		obj(t, `{"data":{"a":"b3RoZXI=","b":"eHl6"},"stringData":{"t":"plain"},"metadata":{"labels":{"l":"y"}}}`))
	cs = append(cs, Change{Path: "data", After: []byte(`{"k":"c2VjcmV0"}`)})
	cs = RedactSecret(secret, cs)
	cs = RedactSecret(secret, cs) // twice: the same
	var lines []string
	for _, c := range cs {
		lines = append(lines, changeLine(c))
	}
	got := strings.Join(lines, "\n")
	want := strings.Join([]string{
		"~ data.a: (secret, 6 bytes) -> (secret, 5 bytes, changed)",
		"+ data.b: (secret, 3 bytes)",
		`~ metadata.labels.l: "x" -> "y"`,
		"+ stringData.t: (secret, 5 bytes)",
		`+ data: {"k":"(secret, 6 bytes)"}`,
	}, "\n")
	if got != want {
		t.Errorf("redacted:\n%s\nwant\n%s", got, want)
	}
	cm := RedactSecret(Ref{APIVersion: "v1", Kind: "ConfigMap", Name: "c"}, Diff(nil, obj(t, `{"data":{"a":"v"}}`)))
	if len(cm) != 1 || cm[0].Secret || string(cm[0].After) != `"v"` {
		t.Errorf("a ConfigMap's data is redacted: %+v", cm)
	}
}
