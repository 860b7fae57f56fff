package metacontroller

import (
	"bytes"
	"encoding/json"

	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/opzero/opzero/internal/metacontroller/api/v1alpha1"
)

// Hooks v2, as Metacontroller defines them (spec.hooks.*.version: v2):
//
//   - children, attachments and related are keyed uniformly: every
//     namespaced object by "<namespace>/<name>", a cluster-scoped one by
//     its name (v1: the name, "<namespace>/<name>" outside the parent's
//     namespace). The sync (finalize) hook's version decides its request.
//   - a v2 customize hook may name related objects of a namespaced parent
//     in another namespace (rule namespace) or in every namespace (no
//     namespace); v1 keeps them in the parent's namespace.
//   - answers are decoded strictly unless responseUnMarshallMode says
//     loose: a field the response type does not have is refused
//     (HookAnswerInvalid). Duplicate JSON keys are not detected.
//
// The responses' shapes are v1's.

// isV2 reports whether a hook speaks v2.
func isV2(h *v1alpha1.Hook) bool {
	return h != nil && h.Version != nil && *h.Version == v1alpha1.HookVersionV2
}

// objectName is how a hook's request names o among children, attachments
// or related objects of a parent in namespace parentNS.
func objectName(o client.Object, parentNS string, v2 bool) string {
	switch {
	case o.GetNamespace() == "":
		return o.GetName()
	case v2 || o.GetNamespace() != parentNS:
		return o.GetNamespace() + "/" + o.GetName()
	}
	return o.GetName()
}

// strictAnswer is a response decoded with unknown fields refused.
type strictAnswer struct{ v any }

// answerFor is where h's answer is decoded: strictly when its
// responseUnMarshallMode is strict, or unset on a v2 hook (v2's default).
func answerFor(h *v1alpha1.Hook, resp any) any {
	if h == nil || h.Webhook == nil {
		return resp
	}
	mode := h.Webhook.ResponseUnmarshallMode
	if (mode != nil && *mode == v1alpha1.ResponseUnmarshallStrict) || (mode == nil && isV2(h)) {
		return strictAnswer{resp}
	}
	return resp
}

// decodeInto decodes data into resp (a strictAnswer: refusing unknown fields).
func decodeInto(data []byte, resp any) error {
	s, ok := resp.(strictAnswer)
	if !ok {
		return json.Unmarshal(data, resp)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	return dec.Decode(s.v)
}
