package builder

import (
	"errors"
	"fmt"
	"strings"
)

// WatchOption configures Watches; an error is collected and returned by
// Build with the others.
type WatchOption func(*Watch) error

// ReferencedBy promises that objects of the primary kind (For) name the
// watched objects that matter to them, in their own namespace, in the string
// field at fieldPath (dot separated, e.g. "spec.configMap"): an event of a
// watched object that no primary names maps to nothing.
//
// The map function still runs in the operator, in either mode, and decides;
// the promise lets a shared event source (the opzero hub, `opzero manifests
// --source=hub`) drop the other events before they wake the operator. A map
// function that reconciles more than the referrers (a label match, a
// cluster-wide setting) must not make the promise.
func ReferencedBy(fieldPath string) WatchOption {
	return func(w *Watch) error {
		if w.ReferencedBy != "" {
			return fmt.Errorf("ReferencedBy(%q): already ReferencedBy(%q); a watched kind is named in one field", fieldPath, w.ReferencedBy)
		}
		if err := checkFieldPath(fieldPath); err != nil {
			return fmt.Errorf("ReferencedBy(%q): %w", fieldPath, err)
		}
		w.ReferencedBy = fieldPath
		return nil
	}
}

// checkFieldPath accepts dot-separated identifiers: letters, digits and
// underscores, not starting with a digit (JSON field names as Kubernetes
// APIs spell them).
func checkFieldPath(p string) error {
	if p == "" {
		return errors.New(`the field path is empty; name the field of the primary kind that holds the watched object's name, e.g. "spec.configMap"`)
	}
	for i, seg := range strings.Split(p, ".") {
		if !isIdentifier(seg) {
			return fmt.Errorf("field path element %d (%q) is not an identifier: want dot-separated JSON field names, e.g. \"spec.configMap\"", i+1, seg)
		}
	}
	return nil
}

func isIdentifier(s string) bool {
	if s == "" {
		return false
	}
	for i, r := range s {
		switch {
		case r == '_', 'a' <= r && r <= 'z', 'A' <= r && r <= 'Z':
		case '0' <= r && r <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}
