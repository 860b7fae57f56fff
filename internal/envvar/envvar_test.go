package envvar_test

import (
	"strings"
	"testing"

	"github.com/opzero/opzero/internal/envvar"
)

func TestCheckName(t *testing.T) {
	for _, ok := range []string{"LOG_LEVEL", "a", "_X1", "my.var-2"} {
		if err := envvar.CheckName(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for name, want := range map[string]string{
		"":                "needs a name",
		"1ABC":            "not a valid environment variable name",
		"A B":             "not a valid environment variable name",
		"A=B":             "not a valid environment variable name",
		"PORT":            "Knative sets",
		"K_SERVICE":       "Knative sets",
		"K_CONFIGURATION": "Knative sets",
		"K_REVISION":      "Knative sets",
		"POD_NAMESPACE":   "opzero manifests sets it",
		"OPZERO_DESCRIBE": "describe itself",
	} {
		if err := envvar.CheckName(name); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: got %v, want an error containing %q", name, err, want)
		}
	}
}

func TestCheckRef(t *testing.T) {
	if err := envvar.CheckRef("Secret", "github", "token"); err != nil {
		t.Error(err)
	}
	if err := envvar.CheckRef("ConfigMap", "settings", ""); err != nil {
		t.Error(err)
	}
	for _, tc := range []struct{ name, key, want string }{
		{"", "k", "no Secret name"},
		{"Bad_Name", "k", `Secret name "Bad_Name"`},
		{"ok", "a/b", `key "a/b"`},
	} {
		if err := envvar.CheckRef("Secret", tc.name, tc.key); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q %q: got %v, want %q", tc.name, tc.key, err, tc.want)
		}
	}
}
