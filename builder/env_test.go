package builder_test

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/opzero/opzero/builder"
)

func TestWithEnv(t *testing.T) {
	op, err := builder.New(scheme(t)).For(&corev1.ConfigMap{}).
		WithEnv("REGION", "eu").WithSecretEnv("API_KEY", "api", "key").WithEnv("REGION", "eu").Build(noop)
	if err != nil {
		t.Fatal(err)
	}
	want := []builder.EnvVar{{Name: "REGION", Value: "eu"}, {Name: "API_KEY", SecretName: "api", SecretKey: "key"}}
	if len(op.Env) != 2 || op.Env[0] != want[0] || op.Env[1] != want[1] {
		t.Fatalf("env %+v, want %+v (declared order, the same pair once)", op.Env, want)
	}
}

func TestWithEnvMisuseIsReported(t *testing.T) {
	for _, tc := range []struct {
		name string
		b    func(*builder.Builder) *builder.Builder
		want string
	}{
		{"Knative's", func(b *builder.Builder) *builder.Builder { return b.WithEnv("PORT", "1") }, "WithEnv: env PORT is reserved: Knative sets"},
		{"opzero's", func(b *builder.Builder) *builder.Builder { return b.WithEnv("OPZERO_MAX_SCALE", "1") }, "reserved"},
		{"invalid", func(b *builder.Builder) *builder.Builder { return b.WithEnv("A B", "1") }, "not a valid environment variable name"},
		{"twice", func(b *builder.Builder) *builder.Builder { return b.WithEnv("A", "1").WithSecretEnv("A", "s", "k") },
			`env A is declared twice with different values ("1" and Secret s key k)`},
		{"no key", func(b *builder.Builder) *builder.Builder { return b.WithSecretEnv("A", "s", "") }, "name the key"},
		{"bad secret", func(b *builder.Builder) *builder.Builder { return b.WithSecretEnv("A", "S_1", "k") }, `Secret name "S_1"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.b(builder.New(scheme(t)).For(&corev1.ConfigMap{})).Build(noop)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
}
