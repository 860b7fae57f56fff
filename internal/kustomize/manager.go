package kustomize

import (
	"fmt"
	"os"
	"sort"
	"strings"

	"sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/yaml"
)

// ManagerContainer is the container name kubebuilder and operator-sdk
// scaffold for the manager.
const ManagerContainer = "manager"

// ManagerLabel is the label (control-plane=controller-manager) the
// scaffold puts on the manager's Deployment.
const ManagerLabel = "control-plane"

// Manager is what a project's kustomization declares for its manager.
// Maps and entries are as the rendered YAML has them.
type Manager struct {
	// File is the kustomization file rendered (errors and warnings name it).
	File string
	// Deployment is the manager Deployment's rendered name.
	Deployment string
	// Container is the manager container's name.
	Container string
	// Namespace is the manager Deployment's namespace ("" for none).
	Namespace string
	// NamespaceObject is the Namespace object of that name that the
	// kustomization makes, if it makes one.
	NamespaceObject map[string]any
	// NamePrefix and Labels are the kustomization's namePrefix, and its
	// labels and commonLabels.
	NamePrefix string
	Labels     map[string]string
	// Env and EnvFrom are the manager container's env and envFrom entries.
	Env     []map[string]any
	EnvFrom []map[string]any
	// Resources and SecurityContext are the manager container's; nil when
	// not set.
	Resources       map[string]any
	SecurityContext map[string]any
	// PodSecurityContext is the manager pod's securityContext.
	PodSecurityContext map[string]any
}

// ReadManager renders the kustomization in dir and reads its manager (see
// the package doc for how it is found).
func ReadManager(dir string) (*Manager, error) {
	objs, err := objects(dir)
	if err != nil {
		return nil, err
	}
	file := File(dir)
	m, err := findManager(file, objs)
	if err != nil {
		return nil, err
	}
	raw, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var k types.Kustomization
	if err := yaml.Unmarshal(raw, &k); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	m.NamePrefix = k.NamePrefix
	add := func(pairs map[string]string) {
		for key, v := range pairs {
			if m.Labels == nil {
				m.Labels = map[string]string{}
			}
			m.Labels[key] = v
		}
	}
	add(k.CommonLabels) // deprecated, labels with selectors
	for _, l := range k.Labels {
		add(l.Pairs)
	}
	return m, nil
}

// findManager picks the manager Deployment out of objs and reads it.
func findManager(file string, objs []map[string]any) (*Manager, error) {
	type found struct {
		dep       map[string]any
		container map[string]any
	}
	var byName, byLabel []found
	var names []string
	for _, o := range objs {
		if str(o, "kind") != "Deployment" {
			continue
		}
		meta, _ := o["metadata"].(map[string]any)
		names = append(names, str(meta, "name"))
		cs := containers(o)
		for _, c := range cs {
			if str(c, "name") == ManagerContainer {
				byName = append(byName, found{o, c})
			}
		}
		if l, _ := meta["labels"].(map[string]any); str(l, ManagerLabel) == "controller-manager" && len(cs) > 0 {
			byLabel = append(byLabel, found{o, cs[0]})
		}
	}
	pick := byName
	if len(pick) == 0 {
		pick = byLabel
	}
	switch {
	case len(pick) == 0:
		sort.Strings(names)
		return nil, fmt.Errorf("%s renders no manager: no Deployment with a container named %q or labelled %s=controller-manager (Deployments: %s)",
			file, ManagerContainer, ManagerLabel, orNone(names))
	case len(pick) > 1:
		var ds []string
		for _, f := range pick {
			meta, _ := f.dep["metadata"].(map[string]any)
			ds = append(ds, str(meta, "name"))
		}
		sort.Strings(ds)
		return nil, fmt.Errorf("%s renders %d managers (%s): opzero deploys one; point --config at the kustomization of one", file, len(pick), strings.Join(ds, ", "))
	}
	dep, c := pick[0].dep, pick[0].container
	meta, _ := dep["metadata"].(map[string]any)
	m := &Manager{File: file, Deployment: str(meta, "name"), Container: str(c, "name"), Namespace: str(meta, "namespace")}
	m.Env = entries(c["env"])
	m.EnvFrom = entries(c["envFrom"])
	m.Resources, _ = c["resources"].(map[string]any)
	m.SecurityContext, _ = c["securityContext"].(map[string]any)
	if pod := podSpec(dep); pod != nil {
		m.PodSecurityContext, _ = pod["securityContext"].(map[string]any)
	}
	for _, o := range objs {
		if str(o, "kind") == "Namespace" && m.Namespace != "" {
			if meta, _ := o["metadata"].(map[string]any); str(meta, "name") == m.Namespace {
				m.NamespaceObject = o
			}
		}
	}
	return m, nil
}

func podSpec(dep map[string]any) map[string]any {
	spec, _ := dep["spec"].(map[string]any)
	tmpl, _ := spec["template"].(map[string]any)
	pod, _ := tmpl["spec"].(map[string]any)
	return pod
}

func containers(dep map[string]any) []map[string]any {
	return entries(podSpec(dep)["containers"])
}

func entries(v any) []map[string]any {
	l, _ := v.([]any)
	var out []map[string]any
	for _, e := range l {
		if m, ok := e.(map[string]any); ok {
			out = append(out, m)
		}
	}
	return out
}

func str(m map[string]any, k string) string {
	s, _ := m[k].(string)
	return s
}

func orNone(l []string) string {
	if len(l) == 0 {
		return "none"
	}
	return strings.Join(l, ", ")
}
