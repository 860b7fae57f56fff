package dev

import (
	"context"
	"fmt"
	"sort"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/opzero/opzero/internal/envvar"
)

// BaseEnv is all a process inherits that its pod template does not set:
// the PATH container images set. Nothing of opzero dev's own environment
// reaches a process, so a variable missing from the manifests is missing
// locally too, as it would be on a cluster.
var BaseEnv = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}

// pod is what a process stands in for: the pod template's object, its
// namespace and the pod name fieldRef metadata.name resolves to.
type pod struct {
	u         *unstructured.Unstructured
	namespace string
	name      string
}

// containerEnv is the environment of a process that runs container c of
// pod, as kubelet builds it: BaseEnv, then envFrom (ConfigMaps' and
// Secrets' keys, with their prefix), then env (literals with $(VAR)
// expanded, fieldRef, secretKeyRef, configMapKeyRef), read from the cluster
// now; a later entry wins. platform are added last and win: what opzero dev
// must set (KUBECONFIG, which stands in for in-cluster config, and what
// Knative injects). In-cluster URLs of Services are rewritten to local ones.
func (p *Platform) containerEnv(ctx context.Context, where string, pd pod, c map[string]any, platform ...string) ([]string, error) {
	e := &envList{index: map[string]int{}}
	for _, kv := range BaseEnv {
		n, v, _ := strings.Cut(kv, "=")
		e.set(n, v)
	}
	froms, _, _ := unstructured.NestedSlice(c, "envFrom")
	for _, f := range froms {
		m, _ := f.(map[string]any)
		if err := p.envFrom(ctx, pd.namespace, m, e); err != nil {
			return nil, fmt.Errorf("%s: envFrom: %w", where, err)
		}
	}
	envs, _, _ := unstructured.NestedSlice(c, "env")
	for _, x := range envs {
		m, _ := x.(map[string]any)
		name, _, _ := unstructured.NestedString(m, "name")
		v, ok, err := p.envValue(ctx, pd, m, e)
		if err != nil {
			return nil, fmt.Errorf("%s: env %s: %w", where, name, err)
		}
		if ok {
			e.set(name, rewrite(v, p.localURLs))
		}
	}
	for _, kv := range platform {
		n, v, _ := strings.Cut(kv, "=")
		e.set(n, v)
	}
	return e.list(), nil
}

// checkKnativeEnv refuses what Knative's webhook refuses: a Service's
// container that sets a variable Knative sets itself.
func checkKnativeEnv(where string, c map[string]any) error {
	envs, _, _ := unstructured.NestedSlice(c, "env")
	for _, x := range envs {
		m, _ := x.(map[string]any)
		name, _, _ := unstructured.NestedString(m, "name")
		for _, k := range envvar.Knative {
			if name == k {
				return fmt.Errorf("%s: env %s is reserved: Knative sets %s itself and refuses a Service that sets it", where, name, strings.Join(envvar.Knative, ", "))
			}
		}
	}
	return nil
}

// envValue resolves one env entry; ok is false for an optional reference
// that does not resolve (kubelet leaves the variable unset).
func (p *Platform) envValue(ctx context.Context, pd pod, m map[string]any, e *envList) (string, bool, error) {
	vf, hasFrom := m["valueFrom"].(map[string]any)
	if !hasFrom {
		v, _, _ := unstructured.NestedString(m, "value")
		return expand(v, e.lookup), true, nil
	}
	if fp, ok, _ := unstructured.NestedString(vf, "fieldRef", "fieldPath"); ok {
		switch fp {
		case "metadata.namespace":
			return pd.namespace, true, nil
		case "metadata.name":
			return pd.name, true, nil
		case "spec.serviceAccountName":
			sa, _, _ := unstructured.NestedString(pd.u.Object, "spec", "template", "spec", "serviceAccountName")
			return firstNonEmpty(sa, "default"), true, nil
		case "status.podIP", "status.hostIP":
			return "127.0.0.1", true, nil
		}
		return "", false, fmt.Errorf("fieldRef %s is not supported locally (metadata.namespace, metadata.name, spec.serviceAccountName, status.podIP are)", fp)
	}
	for _, kind := range []string{"secretKeyRef", "configMapKeyRef"} {
		ref, ok := vf[kind].(map[string]any)
		if !ok {
			continue
		}
		name, _, _ := unstructured.NestedString(ref, "name")
		key, _, _ := unstructured.NestedString(ref, "key")
		optional, _, _ := unstructured.NestedBool(ref, "optional")
		data, err := p.envSource(ctx, kind == "secretKeyRef", pd.namespace, name)
		if err != nil {
			if apierrors.IsNotFound(err) && optional {
				return "", false, nil
			}
			return "", false, err
		}
		v, ok := data[key]
		if !ok {
			if optional {
				return "", false, nil
			}
			return "", false, fmt.Errorf("%s %s/%s has no key %q: on a cluster the pod would not start (CreateContainerConfigError); add the key or mark the reference optional",
				sourceKind(kind == "secretKeyRef"), pd.namespace, name, key)
		}
		return v, true, nil
	}
	return "", false, fmt.Errorf("valueFrom %v is not supported locally (fieldRef, secretKeyRef and configMapKeyRef are)", keys(vf))
}

// envFrom adds every key of one envFrom source, with its prefix; keys that
// are not valid variable names are skipped, as kubelet does.
func (p *Platform) envFrom(ctx context.Context, ns string, m map[string]any, e *envList) error {
	prefix, _, _ := unstructured.NestedString(m, "prefix")
	for _, kind := range []string{"secretRef", "configMapRef"} {
		ref, ok := m[kind].(map[string]any)
		if !ok {
			continue
		}
		name, _, _ := unstructured.NestedString(ref, "name")
		optional, _, _ := unstructured.NestedBool(ref, "optional")
		data, err := p.envSource(ctx, kind == "secretRef", ns, name)
		if err != nil {
			if apierrors.IsNotFound(err) && optional {
				return nil
			}
			return err
		}
		for _, k := range sortedKeys(data) {
			if len(validation.IsEnvVarName(prefix+k)) == 0 {
				e.set(prefix+k, rewrite(data[k], p.localURLs))
			}
		}
	}
	return nil
}

// envSource reads a Secret's or ConfigMap's data, with an error that says
// what a cluster would do and what to do.
func (p *Platform) envSource(ctx context.Context, secret bool, ns, name string) (map[string]string, error) {
	var data map[string]string
	var err error
	if secret {
		s, gerr := p.cs.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
		if err = gerr; err == nil {
			data = map[string]string{}
			for k, v := range s.Data {
				data[k] = string(v)
			}
		}
	} else {
		c, gerr := p.cs.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{})
		if err = gerr; err == nil {
			data = c.Data
		}
	}
	if apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("%s %s/%s: %w; on a cluster the pod would not start (CreateContainerConfigError): create it or mark the reference optional",
			sourceKind(secret), ns, name, err)
	}
	if err != nil {
		return nil, fmt.Errorf("reading %s %s/%s: %w", sourceKind(secret), ns, name, err)
	}
	return data, nil
}

func sourceKind(secret bool) string {
	if secret {
		return "Secret"
	}
	return "ConfigMap"
}

// expandArgs expands $(NAME) in a container's args with its env, as
// kubelet does.
func expandArgs(args, env []string) []string {
	vars := map[string]string{}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		vars[k] = v
	}
	lookup := func(n string) (string, bool) { v, ok := vars[n]; return v, ok }
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = expand(a, lookup)
	}
	return out
}

// expand replaces $(NAME) with the value of a variable defined before it
// and $$ with $, leaving other references as they are (Kubernetes'
// dependent environment variables).
func expand(s string, lookup func(string) (string, bool)) string {
	if !strings.Contains(s, "$") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 >= len(s) {
			b.WriteByte(s[i])
			continue
		}
		switch s[i+1] {
		case '$':
			b.WriteByte('$')
			i++
			continue
		case '(':
			if end := strings.IndexByte(s[i+2:], ')'); end >= 0 {
				name := s[i+2 : i+2+end]
				if v, ok := lookup(name); ok {
					b.WriteString(v)
				} else {
					b.WriteString(s[i : i+3+end])
				}
				i += 2 + end
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// envList is an ordered environment in which a later set wins.
type envList struct {
	kv    [][2]string
	index map[string]int
}

func (e *envList) set(name, value string) {
	if i, ok := e.index[name]; ok {
		e.kv[i][1] = value
		return
	}
	e.index[name] = len(e.kv)
	e.kv = append(e.kv, [2]string{name, value})
}

func (e *envList) lookup(name string) (string, bool) {
	if i, ok := e.index[name]; ok {
		return e.kv[i][1], true
	}
	return "", false
}

func (e *envList) list() []string {
	out := make([]string, len(e.kv))
	for i, kv := range e.kv {
		out[i] = kv[0] + "=" + kv[1]
	}
	return out
}

func sortedKeys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func keys(m map[string]any) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func firstNonEmpty(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
