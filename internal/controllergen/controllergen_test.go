package controllergen

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestMissingOverrideSaysWhatToDo(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "controller-gen")
	t.Setenv(Env, missing)
	err := Run(context.Background(), t.TempDir(), "crd", "paths=./...")
	for _, want := range []string{Env + "=" + missing, "not an executable file", "unset it"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("Run with %s naming no file: %v, want an error with %q", Env, err, want)
		}
	}
}

func TestFailureCarriesItsStderr(t *testing.T) {
	fake := filepath.Join(t.TempDir(), "controller-gen")
	script := "#!/bin/sh\necho 'api/v1/types.go:12: unknown marker kubebuilder:bogus' >&2\nexit 1\n"
	if err := os.WriteFile(fake, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv(Env, fake)
	files, err := Generate(context.Background(), t.TempDir(), "crd:crdVersions=v1", "./api/...")
	for _, want := range []string{"controller-gen crd:crdVersions=v1 paths=./api/...", "exit status 1", "unknown marker kubebuilder:bogus"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("Generate with a failing controller-gen: %v (files %v), want an error with %q", err, files, want)
		}
	}
}

func TestBuildFailureSaysWhatToDo(t *testing.T) {
	t.Setenv("GOPROXY", "off") // the version is in no module cache: go install fails at once
	dir := t.TempDir()
	err := build(context.Background(), dir, "v0.0.0-opzero-missing")
	for _, want := range []string{"go install " + pkg + "@v0.0.0-opzero-missing", "GOPROXY", Env} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("build of a missing version: %v, want an error with %q", err, want)
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("a failed build left %v in %s", entries, dir)
	}
}
