package dev_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opzero/opzero/internal/devenv/controlplane"
	"github.com/opzero/opzero/internal/devenv/dev"
	"github.com/opzero/opzero/internal/devenv/mountns"
	"github.com/opzero/opzero/internal/testkit"
	"github.com/opzero/opzero/testenv"
)

// secretHook is a hook hosted as Metacontroller's webhook-auth hosts its
// own: a python script of a ConfigMap that reads a Secret's keys at the
// Secret volume's absolute mount path, writing them to marker. secret
// is the Secret's YAML ("" for none).
func secretHook(ns, certs, marker, secret string) string {
	return secretHookScript(ns, certs, marker, secret, `open(sys.argv[1], "w").write(crt + ca)
    time.sleep(600)`)
}

// secretHookScript is secretHook with the script's last lines.
func secretHookScript(ns, certs, marker, secret, last string) string {
	return `
apiVersion: v1
kind: ConfigMap
metadata: {name: hooks, namespace: ` + ns + `}
data:
  sync.py: |
    import sys, time
    crt = open("` + certs + `/tls.crt").read()
    ca = open("` + certs + `/ca.crt").read()
    ` + last + `
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: hook, namespace: ` + ns + `}
spec:
  replicas: 1
  selector: {matchLabels: {app: hook}}
  template:
    metadata: {labels: {app: hook}}
    spec:
      containers:
      - name: hook
        image: python:3.11
        command: [python, /hooks/sync.py, ` + marker + `]
        volumeMounts:
        - {name: hooks, mountPath: /hooks}
        - {name: certs, mountPath: ` + certs + `, readOnly: true}
      volumes:
      - {name: hooks, configMap: {name: hooks}}
      - {name: certs, secret: {secretName: certs}}
` + secret
}

func randomPath(t *testing.T) string {
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return "/opzero-test-certs-" + hex.EncodeToString(b)
}

// TestSecretVolumeAtItsMountPath: a hook Deployment run on its
// interpreter reads a Secret's keys at the absolute mount path of its
// Secret volume, a path that does not exist on the host before, during
// or after (the process has a mount namespace of its own).
func TestSecretVolumeAtItsMountPath(t *testing.T) {
	if err := mountns.Available(); err != nil {
		t.Skip(err)
	}
	h := startSecretHook(t, func(ns, certs, marker string) string { return secretHook(ns, certs, marker, certsSecret(ns)) })
	certs, marker, p := h.certs, h.marker, h.p
	if h.err != nil {
		t.Fatal(h.err)
	}
	t.Cleanup(p.Stop)
	testkit.Eventually(t, 30*time.Second, "the hook read the Secret at "+certs, func(context.Context) (bool, error) {
		b, err := os.ReadFile(marker)
		return err == nil && string(b) == "CERT\nCA\n", nil
	})
	if _, err := os.Lstat(certs); !os.IsNotExist(err) {
		t.Errorf("%s on the host while the hook runs: %v", certs, err)
	}
	p.Stop()
	if _, err := os.Lstat(certs); !os.IsNotExist(err) {
		t.Errorf("%s on the host after: %v", certs, err)
	}
}

// TestSecretVolumeMissing: a hook whose Secret volume's Secret does not
// exist is not started, and dev says which Secret, as for a ConfigMap.
func TestSecretVolumeMissing(t *testing.T) {
	h := startSecretHook(t, func(ns, certs, marker string) string { return secretHook(ns, certs, marker, "") })
	certs, marker, p, err := h.certs, h.marker, h.p, h.err
	if err == nil {
		p.Stop()
		t.Fatal("dev started a hook whose Secret is missing")
	}
	if want := "Secret certs mounted at " + certs; !strings.Contains(err.Error(), want) {
		t.Errorf("error %q does not say %q", err, want)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Error("the hook ran")
	}
}

// TestSecretVolumeReadAgainOnRestart: a hook restarted (here: it exits)
// sees its Secret as it is now, as a pod recreated would.
func TestSecretVolumeReadAgainOnRestart(t *testing.T) {
	if err := mountns.Available(); err != nil {
		t.Skip(err)
	}
	h := startSecretHook(t, func(ns, certs, marker string) string {
		return secretHookScript(ns, certs, marker, certsSecret(ns), `open(sys.argv[1], "a").write(crt + ca)`)
	})
	env, ns, ctx, marker, p := h.env, h.ns, h.ctx, h.marker, h.p
	if h.err != nil {
		t.Fatal(h.err)
	}
	t.Cleanup(p.Stop)
	testkit.Eventually(t, 30*time.Second, "the hook read the Secret", func(context.Context) (bool, error) {
		b, _ := os.ReadFile(marker)
		return strings.HasPrefix(string(b), "CERT\nCA\n"), nil
	})
	s := &corev1.Secret{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "certs"}, s); err != nil {
		t.Fatal(err)
	}
	s.Data["tls.crt"] = []byte("NEW\n")
	if err := env.Client.Update(ctx, s); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 30*time.Second, "the restarted hook read the Secret changed", func(context.Context) (bool, error) {
		b, _ := os.ReadFile(marker)
		return strings.HasSuffix(string(b), "NEW\nCA\n"), nil
	})
}

// certsSecret is the Secret certs the hooks of these tests mount.
func certsSecret(ns string) string {
	return `---
apiVersion: v1
kind: Secret
metadata: {name: certs, namespace: ` + ns + `}
stringData: {tls.crt: "CERT\n", ca.crt: "CA\n"}
`
}

// secretHookRun is a dev started on a hook's manifests: its namespace, the
// hook's mount path and marker file, and what dev.Start returned.
type secretHookRun struct {
	env           *testenv.Env
	ns            string
	ctx           context.Context
	certs, marker string
	p             *dev.Platform
	err           error
}

// startSecretHook starts dev on the manifests manifest writes for a new
// namespace, a mount path that does not exist on the host and a marker
// file.
func startSecretHook(t *testing.T, manifest func(ns, certs, marker string) string) secretHookRun {
	t.Helper()
	env := testenv.Get(t)
	h := secretHookRun{env: env, ns: env.Namespace(t), certs: randomPath(t), marker: filepath.Join(t.TempDir(), "ran")}
	root, err := controlplane.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	objs, err := dev.ReadManifests("-", strings.NewReader(manifest(h.ns, h.certs, h.marker)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	h.ctx = ctx
	h.p, h.err = dev.Start(ctx, dev.Options{Kubeconfig: env.Kubeconfig, Objects: objs, Dir: t.TempDir(),
		CacheDir: cacheDir, BuildDir: root, Out: testkit.LogWriter(t)})
	return h
}
