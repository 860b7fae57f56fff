package builder_test

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/opzero/opzero/builder"
)

func TestDeploymentDefaultsAndOptions(t *testing.T) {
	op, err := builder.New(scheme(t)).For(&corev1.ConfigMap{}).Build(noop)
	if err != nil {
		t.Fatal(err)
	}
	want := builder.DeploySettings{Sweep: builder.DefaultSweep, FullSweep: builder.DefaultFullSweep, MaxScale: builder.DefaultMaxScale}
	if op.Deploy != want {
		t.Fatalf("defaults: got %+v, want %+v", op.Deploy, want)
	}
	op, err = builder.New(scheme(t)).For(&corev1.ConfigMap{}).
		WithSweep("@hourly", "").WithScale(1, 10).WithConcurrency(4).Build(noop)
	if err != nil {
		t.Fatal(err)
	}
	want = builder.DeploySettings{Sweep: "@hourly", MinScale: 1, MaxScale: 10, Concurrency: 4}
	if op.Deploy != want {
		t.Fatalf("set: got %+v, want %+v", op.Deploy, want)
	}
}

func TestDeploymentMisuseIsReported(t *testing.T) {
	for _, tc := range []struct {
		name string
		b    func(*builder.Builder) *builder.Builder
		want string
	}{
		{"four cron fields", func(b *builder.Builder) *builder.Builder { return b.WithSweep("* * * *", "") }, "want 5 cron fields"},
		{"letters", func(b *builder.Builder) *builder.Builder { return b.WithSweep("", "0 x * * *") }, `field "x"`},
		{"negative scale", func(b *builder.Builder) *builder.Builder { return b.WithScale(-1, 2) }, "cannot be negative"},
		{"max below min", func(b *builder.Builder) *builder.Builder { return b.WithScale(3, 2) }, "max is below min"},
		{"negative concurrency", func(b *builder.Builder) *builder.Builder { return b.WithConcurrency(-1) }, "WithConcurrency(-1)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.b(builder.New(scheme(t)).For(&corev1.ConfigMap{})).Build(noop)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
	// CRON_TZ and descriptors pass.
	if _, err := builder.New(scheme(t)).For(&corev1.ConfigMap{}).WithSweep("CRON_TZ=Europe/Berlin 0 3 * * *", "@daily").Build(noop); err != nil {
		t.Fatal(err)
	}
}
