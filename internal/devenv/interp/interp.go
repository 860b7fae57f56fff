package interp

import (
	"errors"
	"fmt"
	"path"
	"regexp"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// Annotation is the annotation that names a workload's local command when
// its image is not recognized.
const Annotation = "dev.opzero.dev/command"

// ErrNotRecognized is a workload whose image or command line is not one
// this package knows how to run locally.
var ErrNotRecognized = errors.New("not a recognized interpreter image")

// interpreters maps an image's repository name (its last path element)
// to the local program that plays it.
var interpreters = map[string]string{"python": "python3", "node": "node"}

// programs are the first words of a command line each interpreter accepts.
var programs = map[string]*regexp.Regexp{
	"python3": regexp.MustCompile(`^python(3(\.\d+)?)?$`),
	"python2": regexp.MustCompile(`^python(2(\.\d+)?)?$`),
	"node":    regexp.MustCompile(`^(node|nodejs)$`),
}

// Interpreter is the local program of image ("python:3.11" -> "python3";
// a python image tagged 2.x -> "python2"), "" if the image is not
// recognized.
func Interpreter(image string) string {
	repo, tag := image, ""
	if i := strings.IndexByte(repo, '@'); i >= 0 {
		repo = repo[:i]
	}
	if i := strings.LastIndexByte(repo, ':'); i > strings.LastIndexByte(repo, '/') {
		repo, tag = repo[:i], repo[i+1:]
	}
	prog := interpreters[path.Base(repo)]
	if prog == "python3" && (tag == "2" || strings.HasPrefix(tag, "2.") || strings.HasPrefix(tag, "2-")) {
		prog = "python2"
	}
	return prog
}

// Hook is a recognized workload's container: its interpreter, the
// arguments that follow it and the ConfigMap volumes it mounts.
type Hook struct {
	// Program is the local interpreter: python3 or node.
	Program string
	// Args follow the program (the container's paths, as written).
	Args []string
	// WorkingDir is the container's workingDir ("" if unset).
	WorkingDir string
	// Mounts are the container's mounts of configMap, secret and
	// emptyDir volumes.
	Mounts []Mount
}

// Mount is one configMap, secret or emptyDir volume mounted by the
// container: one of ConfigMap, Secret and EmptyDir is set.
type Mount struct {
	// Volume is the volume's name.
	Volume             string
	MountPath, SubPath string
	ConfigMap          string
	// Secret is a secret volume's secretName.
	Secret   string
	EmptyDir bool
	// Items, if set, are the keys projected and their paths (else every key at its own name).
	Items map[string]string
	// Optional is the configMap or secret volume's optional: a missing
	// object (or key of items) is then an empty folder (no file), as a
	// kubelet mounts it, not a MissingError.
	Optional bool

	isSecret bool // a secret volume, even one that names no Secret
}

// Recognize reads a Deployment's (or Knative Service's) first container:
// a *Hook, or an error wrapping ErrNotRecognized that says why and names
// Annotation.
func Recognize(u *unstructured.Unstructured) (*Hook, error) {
	containers, _, _ := unstructured.NestedSlice(u.Object, "spec", "template", "spec", "containers")
	if len(containers) != 1 {
		return nil, fmt.Errorf("%s %s: %d containers, and one is run locally; annotate it %s with the local command: %w",
			u.GetKind(), u.GetName(), len(containers), Annotation, ErrNotRecognized)
	}
	c, _ := containers[0].(map[string]any)
	img, _, _ := unstructured.NestedString(c, "image")
	prog := Interpreter(img)
	if prog == "" {
		return nil, fmt.Errorf("%s %s: image %q is not run locally (recognized: python and node images running a script from a ConfigMap); "+
			"annotate it %s with the local command (a JSON array, e.g. [\"python3\", \"hook.py\"]): %w", u.GetKind(), u.GetName(), img, Annotation, ErrNotRecognized)
	}
	cmd, _, _ := unstructured.NestedStringSlice(c, "command")
	args, _, _ := unstructured.NestedStringSlice(c, "args")
	line := append(append([]string{}, cmd...), args...)
	switch {
	case len(line) > 0 && programs[prog].MatchString(path.Base(line[0])):
		line = line[1:]
	case len(cmd) == 0 && len(args) > 0 && prog == "node" && !programs[prog].MatchString(path.Base(args[0])) && strings.Contains(args[0], "."):
		// node's image entrypoint runs node on a script it is given
	default:
		return nil, fmt.Errorf("%s %s: image %q runs %q, not %s on a script; annotate it %s with the local command: %w",
			u.GetKind(), u.GetName(), img, strings.Join(line, " "), prog, Annotation, ErrNotRecognized)
	}
	h := &Hook{Program: prog, Args: line}
	h.WorkingDir, _, _ = unstructured.NestedString(c, "workingDir")
	h.Mounts = configMapMounts(u, c)
	return h, nil
}

func configMapMounts(u *unstructured.Unstructured, c map[string]any) []Mount {
	vols, _, _ := unstructured.NestedSlice(u.Object, "spec", "template", "spec", "volumes")
	byName := map[string]map[string]any{}
	kind := map[string]string{}
	for _, v := range vols {
		m, _ := v.(map[string]any)
		n, _ := m["name"].(string)
		for _, k := range []string{"configMap", "secret", "emptyDir"} {
			if src, ok := m[k].(map[string]any); ok {
				byName[n], kind[n] = src, k
			}
		}
	}
	mounts, _, _ := unstructured.NestedSlice(c, "volumeMounts")
	var out []Mount
	for _, mv := range mounts {
		m, _ := mv.(map[string]any)
		n, _ := m["name"].(string)
		cm := byName[n]
		if cm == nil {
			continue
		}
		mt := Mount{Volume: n}
		mt.Optional, _ = cm["optional"].(bool)
		mt.MountPath, _ = m["mountPath"].(string)
		mt.SubPath, _ = m["subPath"].(string)
		switch kind[n] {
		case "configMap":
			mt.ConfigMap, _ = cm["name"].(string)
		case "secret":
			mt.Secret, _ = cm["secretName"].(string)
			mt.isSecret = true
		case "emptyDir":
			mt.EmptyDir = true
		}
		items, _, _ := unstructured.NestedSlice(cm, "items")
		for _, it := range items {
			im, _ := it.(map[string]any)
			k, _ := im["key"].(string)
			p, _ := im["path"].(string)
			if mt.Items == nil {
				mt.Items = map[string]string{}
			}
			mt.Items[k] = p
		}
		out = append(out, mt)
	}
	return out
}
