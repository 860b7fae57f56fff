package manifests

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/opzero/opzero/internal/description"
	"github.com/opzero/opzero/internal/envvar"
)

// EnvFrom is a Secret or ConfigMap whose every key becomes an environment
// variable of the operator (a container's envFrom).
type EnvFrom struct {
	// Kind is Secret or ConfigMap.
	Kind string
	Name string
}

// ParseEnv reads NAME=VALUE (--env).
func ParseEnv(s string) (description.EnvVar, error) {
	name, value, ok := strings.Cut(s, "=")
	if !ok {
		return description.EnvVar{}, fmt.Errorf("--env %q: want NAME=VALUE", s)
	}
	v := description.EnvVar{Name: name, Value: value}
	if err := envvar.CheckName(name); err != nil {
		return v, fmt.Errorf("--env %q: %w", s, err)
	}
	return v, nil
}

// ParseSecretEnv reads NAME=SECRET:KEY (--env-secret): the variable NAME
// takes the value of KEY in the Secret SECRET (valueFrom.secretKeyRef).
func ParseSecretEnv(s string) (description.EnvVar, error) {
	name, ref, ok := strings.Cut(s, "=")
	secret, key, ok2 := strings.Cut(ref, ":")
	if !ok || !ok2 || key == "" {
		return description.EnvVar{}, fmt.Errorf("--env-secret %q: want NAME=SECRET:KEY, e.g. GITHUB_TOKEN=github:token", s)
	}
	v := description.EnvVar{Name: name, Secret: &description.KeyRef{Name: secret, Key: key}}
	if err := envvar.CheckName(name); err != nil {
		return v, fmt.Errorf("--env-secret %q: %w", s, err)
	}
	if err := envvar.CheckRef("Secret", secret, key); err != nil {
		return v, fmt.Errorf("--env-secret %q: %w", s, err)
	}
	return v, nil
}

// checkEnvFrom checks the envFrom references.
func checkEnvFrom(from []EnvFrom) error {
	for _, f := range from {
		flag := "--env-from-" + strings.ToLower(f.Kind)
		if f.Kind != "Secret" && f.Kind != "ConfigMap" {
			return fmt.Errorf("envFrom %s %q: want Secret or ConfigMap", f.Kind, f.Name)
		}
		if err := envvar.CheckRef(f.Kind, f.Name, ""); err != nil {
			return fmt.Errorf("%s %q: %w", flag, f.Name, err)
		}
	}
	return nil
}

// userEnv merges what the operator declares with the command line's
// variables: one entry per name, in order (declared first); the same name
// with two different values is an error that names both.
func userEnv(declared, flags []description.EnvVar) ([]description.EnvVar, error) {
	type from struct {
		v     description.EnvVar
		where string
	}
	var out []description.EnvVar
	seen := map[string]from{}
	add := func(v description.EnvVar, where string) error {
		if err := envvar.CheckName(v.Name); err != nil {
			return fmt.Errorf("%s: %w", where, err)
		}
		if v.Secret != nil {
			if v.Secret.Key == "" {
				return fmt.Errorf("%s: env %s: no key of Secret %s", where, v.Name, v.Secret.Name)
			}
			if err := envvar.CheckRef("Secret", v.Secret.Name, v.Secret.Key); err != nil {
				return fmt.Errorf("%s: env %s: %w", where, v.Name, err)
			}
		}
		if have, ok := seen[v.Name]; ok {
			if !sameEnv(have.v, v) {
				return fmt.Errorf("env %s is given twice with different values: %s by %s and %s by %s; keep one",
					v.Name, showEnv(have.v), have.where, showEnv(v), where)
			}
			return nil
		}
		seen[v.Name] = from{v, where}
		out = append(out, v)
		return nil
	}
	for _, v := range declared {
		if err := add(v, "the operator (builder.WithEnv)"); err != nil {
			return nil, err
		}
	}
	for _, v := range flags {
		where := "--env"
		if v.Secret != nil {
			where = "--env-secret"
		}
		if err := add(v, where); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func sameEnv(a, b description.EnvVar) bool {
	if (a.Secret == nil) != (b.Secret == nil) {
		return false
	}
	if a.Secret != nil {
		return *a.Secret == *b.Secret
	}
	return a.Value == b.Value
}

func showEnv(v description.EnvVar) string {
	if v.Secret != nil {
		return "Secret " + v.Secret.Name + " key " + v.Secret.Key
	}
	return strconv.Quote(v.Value)
}

// generatedFlags are the operator flags opzero manifests sets itself.
var generatedFlags = map[string]string{
	"mode":                      "--mode",
	"audience":                  "--audience",
	"allowed-senders":           "opzero manifests derives it from the sources",
	"wakeup-sink":               "--durable-time",
	"leader-election-namespace": "--namespace",
}

// checkArgs refuses extra operator arguments that set a flag opzero
// manifests sets itself, or (when the operator listed its flags) a flag the
// operator does not have: it would exit at start on a cluster.
func checkArgs(args, flags []string) error {
	known := map[string]bool{}
	for _, f := range flags {
		known[f] = true
	}
	for _, a := range args {
		if a == "--" {
			return nil // what follows is not flags
		}
		if !strings.HasPrefix(a, "-") || a == "-" || strings.IndexAny(a[1:2], "0123456789.") == 0 {
			continue // a value (a negative number or duration), not a flag
		}
		name, _, _ := strings.Cut(strings.TrimPrefix(strings.TrimPrefix(a, "-"), "-"), "=")
		if how, ok := generatedFlags[name]; ok {
			return fmt.Errorf("operator argument %q: opzero manifests sets --%s itself (use %s of opzero manifests)", a, name, how)
		}
		if len(known) > 0 && !known[name] {
			names := make([]string, 0, len(flags))
			for _, f := range flags {
				names = append(names, "--"+f)
			}
			sort.Strings(names)
			return fmt.Errorf("operator argument %q: the operator has no flag --%s (it would exit at start); its flags: %s",
				a, name, strings.Join(names, " "))
		}
	}
	return nil
}

// envYAML turns variables into a container's env entries.
func envYAML(vars []description.EnvVar) []any {
	var out []any
	for _, v := range vars {
		if v.Secret != nil {
			out = append(out, map[string]any{"name": v.Name, "valueFrom": map[string]any{
				"secretKeyRef": map[string]any{"name": v.Secret.Name, "key": v.Secret.Key}}})
			continue
		}
		out = append(out, map[string]any{"name": v.Name, "value": v.Value})
	}
	return out
}

// envFromYAML is the container's envFrom: ConfigMaps, then Secrets (a
// Secret's key wins over a ConfigMap's of the same name), each in the
// order given; nil when there are none.
func envFromYAML(from []EnvFrom) []any {
	var out []any
	for _, kind := range []string{"ConfigMap", "Secret"} {
		seen := map[string]bool{}
		for _, f := range from {
			if f.Kind != kind || seen[f.Name] {
				continue
			}
			seen[f.Name] = true
			ref := "configMapRef"
			if kind == "Secret" {
				ref = "secretRef"
			}
			out = append(out, map[string]any{ref: map[string]any{"name": f.Name}})
		}
	}
	return out
}

// container adds the operator's env (generated first, then the user's,
// then config/'s), envFrom (config/'s, then the user's), config/'s
// resources and securityContext, and extra args to a container.
func (g *gen) container(c map[string]any, args []any, generatedEnv []any) map[string]any {
	for _, a := range g.o.Args {
		args = append(args, a)
	}
	c["args"] = args
	c["env"] = append(append(generatedEnv, envYAML(g.env)...), g.project.envEntries()...)
	if from := g.project.envFrom(envFromYAML(g.o.EnvFrom)); from != nil {
		c["envFrom"] = from
	}
	g.project.container(c)
	return c
}
