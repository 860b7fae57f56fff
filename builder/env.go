package builder

import (
	"fmt"

	"github.com/opzero/opzero/internal/envvar"
)

// EnvVar is an environment variable the operator needs wherever it is
// deployed: a literal Value, or the key SecretKey of the Secret SecretName
// in the operator's namespace.
type EnvVar struct {
	Name, Value           string
	SecretName, SecretKey string
}

// WithEnv declares that the operator needs the variable name set to value.
// `opzero manifests` writes it into the pod template of the Knative Service
// and of the classic Deployment, so it survives regeneration; `opzero dev`
// runs the operator with it. Declaring a name twice with different values,
// a name that is not a valid environment variable name, or one Knative or
// opzero sets itself (PORT, K_SERVICE, K_CONFIGURATION, K_REVISION,
// POD_NAMESPACE, OPZERO_MAX_SCALE) is an error from Build.
func (b *Builder) WithEnv(name, value string) *Builder {
	return b.addEnv("WithEnv", EnvVar{Name: name, Value: value})
}

// WithSecretEnv declares that the operator needs the variable name set to
// the key of Secret secret in its namespace (valueFrom.secretKeyRef: the
// value never appears in the manifests). The Secret is not generated.
func (b *Builder) WithSecretEnv(name, secret, key string) *Builder {
	v := EnvVar{Name: name, SecretName: secret, SecretKey: key}
	if key == "" {
		b.errs = append(b.errs, fmt.Errorf("WithSecretEnv(%q, %q, %q): name the key of the Secret", name, secret, key))
		return b
	}
	if err := envvar.CheckRef("Secret", secret, key); err != nil {
		b.errs = append(b.errs, fmt.Errorf("WithSecretEnv(%q): %w", name, err))
		return b
	}
	return b.addEnv("WithSecretEnv", v)
}

func (b *Builder) addEnv(method string, v EnvVar) *Builder {
	if err := envvar.CheckName(v.Name); err != nil {
		b.errs = append(b.errs, fmt.Errorf("%s: %w", method, err))
		return b
	}
	for _, have := range b.op.Env {
		if have.Name != v.Name {
			continue
		}
		if have != v {
			b.errs = append(b.errs, fmt.Errorf("%s: env %s is declared twice with different values (%s and %s); keep one",
				method, v.Name, have.describe(), v.describe()))
		}
		return b
	}
	b.op.Env = append(b.op.Env, v)
	return b
}

// describe is how an error shows where the value comes from.
func (v EnvVar) describe() string {
	if v.SecretName != "" {
		return fmt.Sprintf("Secret %s key %s", v.SecretName, v.SecretKey)
	}
	return fmt.Sprintf("%q", v.Value)
}
