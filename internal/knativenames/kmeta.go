// Package knativenames reproduces the names Knative gives the objects it creates
// for sources and triggers, so that opzero can name them in advance
// (`opzero manifests` allows exactly these senders) and create them where
// Knative's controllers do not run (`opzero dev`).
package knativenames

import (
	"crypto/md5"
	"encoding/hex"
	"fmt"
	"strings"
)

// OIDCServiceAccount is the ServiceAccount whose tokens Knative sends for
// the source or trigger name of group and kind, with the authentication-oidc
// feature (knative.dev/eventing/pkg/auth.GetOIDCServiceAccountNameForResource).
// It lives in the object's namespace.
func OIDCServiceAccount(name, group, kind string) string {
	return strings.ToLower(ChildName(name, fmt.Sprintf("-oidc-%s-%s", group, kind)))
}

// ChildName is knative.dev/pkg/kmeta.ChildName: parent+suffix, hashed to
// fit 63 characters.
func ChildName(parent, suffix string) string {
	const longest, head = 63, 63 - 32
	n := parent
	if len(parent) > longest-len(suffix) {
		if head-len(suffix) <= 0 {
			h := md5.Sum([]byte(parent + suffix))
			if head < len(parent) {
				parent = parent[:head]
			}
			ret := parent + hex.EncodeToString(h[:])
			if d := longest - len(ret); d > 0 {
				ret += suffix[:d]
			}
			for len(ret) > 0 && !isAlnum(ret[len(ret)-1]) {
				ret = ret[:len(ret)-1]
			}
			return ret
		}
		n = fmt.Sprintf("%s%x", parent[:head-len(suffix)], md5.Sum([]byte(parent)))
	}
	return n + suffix
}

func isAlnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}
