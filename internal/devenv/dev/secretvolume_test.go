package dev_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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

// TestSecretVolumeMissing: a hook whose Secret volume names a Secret that
// does not exist is not started, as a kubelet keeps its pod
// ContainerCreating, and dev does not stop for it: dev says once which
// Secret it waits for (a line, a process-waiting event), its pod is not
// marked Ready; once the Secret is created the hook starts and reads its
// keys at the mount path.
func TestSecretVolumeMissing(t *testing.T) {
	if err := mountns.Available(); err != nil {
		t.Skip(err)
	}
	h := startSecretHook(t, func(ns, certs, marker string) string { return secretHook(ns, certs, marker, "") })
	env, ns, ctx, certs, marker, p := h.env, h.ns, h.ctx, h.certs, h.marker, h.p
	if h.err != nil {
		t.Fatalf("dev stopped for a missing Secret: %v", h.err)
	}
	t.Cleanup(p.Stop)
	waiting := "Deployment " + ns + "/hook: not started"
	missing := "Secret certs mounted at " + certs + " (volume certs) not found"
	testkit.Eventually(t, 10*time.Second, "dev says it waits for Secret certs", func(context.Context) (bool, error) {
		return strings.Contains(h.out.String(), waiting) && strings.Contains(h.out.String(), missing), nil
	})
	pods := &corev1.PodList{}
	testkit.Eventually(t, 30*time.Second, "a pod of the hook's Deployment", func(ctx context.Context) (bool, error) {
		err := env.Client.List(ctx, pods, client.InNamespace(ns), client.MatchingLabels{"app": "hook"})
		return err == nil && len(pods.Items) > 0, err
	})
	time.Sleep(5 * time.Second) // several polls, and ticks of its supervisor
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the hook ran while its Secret is missing")
	}
	if n := strings.Count(h.out.String(), waiting); n != 1 {
		t.Errorf("dev said %d times that it waits, want once", n)
	}
	if err := env.Client.List(ctx, pods, client.InNamespace(ns), client.MatchingLabels{"app": "hook"}); err != nil {
		t.Fatal(err)
	}
	for _, pod := range pods.Items {
		for _, c := range pod.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
				t.Errorf("pod %s marked Ready while its Secret is missing", pod.Name)
			}
		}
	}
	var waited bool
	for _, e := range h.events.events(t) {
		waited = waited || e.Event == dev.EventProcessWaiting && e.Deployment == ns+"/hook" && e.Message == missing
		if e.Event == dev.EventProcessStarted && e.Deployment == ns+"/hook" {
			t.Errorf("a process-started event while its Secret is missing: %+v", e)
		}
	}
	if !waited {
		t.Errorf("no process-waiting event naming %q", missing)
	}

	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "certs"}, StringData: map[string]string{"tls.crt": "CERT\n", "ca.crt": "CA\n"}}
	if err := env.Client.Create(ctx, s); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 30*time.Second, "the hook started once its Secret exists and read it at "+certs, func(context.Context) (bool, error) {
		b, err := os.ReadFile(marker)
		return err == nil && string(b) == "CERT\nCA\n", nil
	})
	testkit.Eventually(t, 30*time.Second, "its pod marked Ready", func(ctx context.Context) (bool, error) {
		if err := env.Client.List(ctx, pods, client.InNamespace(ns), client.MatchingLabels{"app": "hook"}); err != nil {
			return false, err
		}
		for _, pod := range pods.Items {
			for _, c := range pod.Status.Conditions {
				if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
					return true, nil
				}
			}
		}
		return false, nil
	})
	if _, err := os.Lstat(certs); !os.IsNotExist(err) {
		t.Errorf("%s on the host while the hook runs: %v", certs, err)
	}
}

// TestSecretVolumeMissingDeploymentDeleted: a hook deleted while it waits
// for its Secret is never started, even once the Secret exists, as a
// kubelet never starts a deleted pod.
func TestSecretVolumeMissingDeploymentDeleted(t *testing.T) {
	if err := mountns.Available(); err != nil {
		t.Skip(err)
	}
	h := startSecretHook(t, func(ns, certs, marker string) string { return secretHook(ns, certs, marker, "") })
	env, ns, ctx, marker, p := h.env, h.ns, h.ctx, h.marker, h.p
	if h.err != nil {
		t.Fatalf("dev stopped for a missing Secret: %v", h.err)
	}
	t.Cleanup(p.Stop)
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "hook"}}
	if err := env.Client.Delete(ctx, d); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 30*time.Second, "dev says the hook was deleted before it started", func(context.Context) (bool, error) {
		return strings.Contains(h.out.String(), "Deployment "+ns+"/hook: deleted before it started"), nil
	})
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "certs"}, StringData: map[string]string{"tls.crt": "CERT\n", "ca.crt": "CA\n"}}
	if err := env.Client.Create(ctx, s); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second) // several polls
	if _, err := os.Stat(marker); err == nil {
		t.Error("a hook deleted while it waited started once its Secret existed")
	}
}

// TestSecretVolumeNoSecretName: a secret volume that names no Secret is
// bad input, not a Secret to wait for: dev stops at start (the API
// server refuses the Deployment at apply), naming secretName.
func TestSecretVolumeNoSecretName(t *testing.T) {
	h := startSecretHook(t, func(ns, certs, marker string) string {
		return strings.Replace(secretHook(ns, certs, marker, ""), "secret: {secretName: certs}", "secret: {}", 1)
	})
	if h.err == nil {
		h.p.Stop()
		t.Fatal("dev started a hook whose secret volume names no Secret")
	}
	if !strings.Contains(h.err.Error(), "secretName") {
		t.Errorf("error %q does not name secretName", h.err)
	}
	if _, err := os.Stat(h.marker); err == nil {
		t.Error("the hook ran")
	}
}

// String is what was written so far.
func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
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
	// out and events are what dev said and its event stream.
	out, events *syncBuffer
}

// startSecretHook starts dev on the manifests manifest writes for a new
// namespace, a mount path that does not exist on the host and a marker
// file.
func startSecretHook(t *testing.T, manifest func(ns, certs, marker string) string) secretHookRun {
	t.Helper()
	env := testenv.Get(t)
	h := secretHookRun{env: env, ns: env.Namespace(t), certs: randomPath(t), marker: filepath.Join(t.TempDir(), "ran"),
		out: &syncBuffer{}, events: &syncBuffer{}}
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
		CacheDir: cacheDir, BuildDir: root, Out: io.MultiWriter(testkit.LogWriter(t), h.out), Events: dev.NewEventWriter(h.events)})
	return h
}
