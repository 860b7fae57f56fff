// Package envvar checks the environment variables an operator is deployed
// with, wherever they are declared (builder.WithEnv, `opzero manifests
// --env`), so that a mistake is refused where it is made rather than by the
// API server, Knative's webhook or the running operator.
//
// # Guarantees
//
//   - A name the API server would refuse (Kubernetes' rule for env names)
//     is an error, and so is a name Knative sets itself (PORT, K_SERVICE,
//     K_CONFIGURATION, K_REVISION) or one that `opzero manifests` sets
//     (POD_NAMESPACE, OPZERO_MAX_SCALE) or that changes what the binary
//     does (OPZERO_DESCRIBE).
//   - Secret and ConfigMap references name a valid object and key.
package envvar

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// Knative is what Knative Serving sets in every container of a revision;
// its webhook refuses a Service that sets one of them.
var Knative = []string{"PORT", "K_SERVICE", "K_CONFIGURATION", "K_REVISION"}

// opzero lists what `opzero manifests` sets itself or what would change
// the binary's behaviour, with the reason.
var opzero = map[string]string{
	"POD_NAMESPACE":    "opzero manifests sets it to the operator's namespace",
	"OPZERO_MAX_SCALE": "opzero manifests sets it from builder.WithScale",
	"OPZERO_DESCRIBE":  "it makes the operator describe itself and exit instead of serving",
	"OPZERO_HUB_PEERS": "opzero manifests sets it to the hub replicas' address, where a starting instance announces itself",
	// read by --mode=webhooks (operator/classic); opzero dev sets them
	"OPZERO_WEBHOOK_PORT":     "opzero dev sets it to move a --mode=webhooks process's webhook server",
	"OPZERO_WEBHOOK_CERT_DIR": "opzero dev sets it to the folder of the certificate it made for a --mode=webhooks process",
}

// CheckName says whether name may be given to an operator.
func CheckName(name string) error {
	if name == "" {
		return fmt.Errorf("an environment variable needs a name")
	}
	if msgs := validation.IsEnvVarName(name); len(msgs) > 0 {
		return fmt.Errorf("env %q is not a valid environment variable name: %s", name, strings.Join(msgs, "; "))
	}
	for _, k := range Knative {
		if name == k {
			return fmt.Errorf("env %s is reserved: Knative sets %s itself (%s); pick another name", name, strings.Join(Knative, ", "), name)
		}
	}
	if why, ok := opzero[name]; ok {
		return fmt.Errorf("env %s is reserved: %s; pick another name", name, why)
	}
	return nil
}

// CheckRef says whether kind (Secret or ConfigMap) name, and key if not
// "", may be referenced.
func CheckRef(kind, name, key string) error {
	if name == "" {
		return fmt.Errorf("no %s name", kind)
	}
	if msgs := validation.IsDNS1123Subdomain(name); len(msgs) > 0 {
		return fmt.Errorf("%s name %q: %s", kind, name, strings.Join(msgs, "; "))
	}
	if key == "" {
		return nil
	}
	if msgs := validation.IsConfigMapKey(key); len(msgs) > 0 {
		return fmt.Errorf("%s %s: key %q: %s", kind, name, key, strings.Join(msgs, "; "))
	}
	return nil
}
