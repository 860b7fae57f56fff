package knativenames

import "testing"

// The names Knative v0.50.0 gives sources' OIDC service accounts, short and
// hashed; the wants were printed by
// knative.dev/eventing/pkg/auth.GetOIDCServiceAccountNameForResource.
func TestOIDCServiceAccount(t *testing.T) {
	for _, tc := range []struct{ kind, name, want string }{
		{"PingSource", "sweep", "sweep-oidc-sources.knative.dev-pingsource"},
		{"ApiServerSource", "cm", "cm-oidc-sources.knative.dev-apiserversource"},
		{"PingSource", "configwatcher-full-sweep", "configwatcher-full-sweep-oidc-sources.knative.dev-pingsource"},
		{"ApiServerSource", "configwatcher-configmap", "configwatcher-configmapa066e9411a5b0801485afb8430d22f10-oidc-so"},
		{"ApiServerSource", "configwatcher-configwatcher", "configwatcher-configwatcherfa1d03edd24c6709b69e550c3a58e835-oid"},
	} {
		if got := OIDCServiceAccount(tc.name, "sources.knative.dev", tc.kind); got != tc.want {
			t.Errorf("%s %s: %q, want %q", tc.kind, tc.name, got, tc.want)
		}
	}
}
