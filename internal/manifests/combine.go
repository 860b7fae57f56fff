package manifests

import (
	"fmt"
	"regexp"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/opzero/opzero/internal/description"
)

// Combine returns the operator that stands for the controllers of one
// binary: the controller itself when there is one; for several, an
// operator named name (the module's last path element) that one Service,
// one service account and one wakeup source serve. Its deployment
// settings are the first controller's, with the largest min- and
// max-scale of all; its environment and rules are all of theirs. The
// sources are those of every controller's kinds (gen.sourceKinds).
func Combine(name string, ops []description.Controller) (description.Controller, error) {
	switch len(ops) {
	case 0:
		return description.Controller{}, fmt.Errorf("registers no operator")
	case 1:
		return ops[0], nil
	}
	name = strings.Trim(nonLabel.ReplaceAllString(strings.ToLower(name), "-"), "-")
	for _, msg := range validation.IsDNS1123Label(name) {
		return description.Controller{}, fmt.Errorf("the Service of its %d controllers (%s) is named after its module, and %q is not a name: %s",
			len(ops), controllerNames(ops), name, msg)
	}
	c := description.Controller{Name: name, Primary: ops[0].Primary, Deploy: ops[0].Deploy}
	for _, op := range ops {
		c.Deploy.MinScale = max(c.Deploy.MinScale, op.Deploy.MinScale)
		c.Deploy.MaxScale = max(c.Deploy.MaxScale, op.Deploy.MaxScale)
		c.Env = append(c.Env, op.Env...)
		c.Rules = append(c.Rules, op.Rules...)
		c.Namespaces = append(c.Namespaces, op.Namespaces...)
		if len(op.Events) > 0 {
			if len(c.Events) > 0 {
				return description.Controller{}, fmt.Errorf("controllers %s take Broker events (WatchesEvents), and one Service takes one controller's", controllerNames(ops))
			}
			c.Events = op.Events
		}
	}
	return c, nil
}

var nonLabel = regexp.MustCompile(`[^a-z0-9-]+`)

func controllerNames(ops []description.Controller) string {
	var names []string
	for _, op := range ops {
		names = append(names, op.Name)
	}
	return strings.Join(names, ", ")
}
