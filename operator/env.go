package operator

import (
	"github.com/opzero/opzero/builder"
	"github.com/opzero/opzero/internal/description"
)

// describeEnv is builder.WithEnv / WithSecretEnv as data, in declared order.
func describeEnv(vars []builder.EnvVar) []description.EnvVar {
	var out []description.EnvVar
	for _, v := range vars {
		d := description.EnvVar{Name: v.Name, Value: v.Value}
		if v.SecretName != "" {
			d.Value, d.Secret = "", &description.KeyRef{Name: v.SecretName, Key: v.SecretKey}
		}
		out = append(out, d)
	}
	return out
}
