package dev

import (
	"context"
	"encoding/json"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
)

// ReasonSessionEnded is the reason of the Ready=False condition opzero dev
// leaves on what it had made Ready when it stops (or fails to start): the
// local URLs it wrote answer no more.
const ReasonSessionEnded = "DevSessionEnded"

// made is a status opzero dev wrote with Ready=True.
type made struct {
	obj    *unstructured.Unstructured
	status map[string]any // what was written
	urls   []string       // status fields holding local URLs, removed on exit
}

// madeReady records that u's status now says Ready with local URLs in the
// fields urls.
func (p *Platform) madeReady(u *unstructured.Unstructured, status map[string]any, urls ...string) {
	p.readyMu.Lock()
	defer p.readyMu.Unlock()
	p.ready = append(p.ready, made{u, status, urls})
}

// markEnded turns every condition opzero dev wrote False (reason
// DevSessionEnded) and removes the local URLs, so nothing reads a dead
// session's URL as a ready address. An object deleted meanwhile is skipped.
func (p *Platform) markEnded() {
	p.readyMu.Lock()
	ready := p.ready
	p.ready = nil
	p.readyMu.Unlock()
	if len(ready) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	now := time.Now().UTC().Format(time.RFC3339)
	for _, m := range ready {
		conds, _, _ := unstructured.NestedSlice(m.status, "conditions")
		ended := make([]any, 0, len(conds))
		for _, c := range conds {
			t, _ := c.(map[string]any)["type"].(string)
			ended = append(ended, map[string]any{"type": t, "status": "False", "reason": ReasonSessionEnded, "lastTransitionTime": now,
				"message": "opzero dev stopped: the local process that played Knative's part is gone; run opzero dev again"})
		}
		status := map[string]any{"conditions": ended}
		for _, f := range m.urls {
			status[f] = nil // JSON merge patch: remove
		}
		b, _ := json.Marshal(map[string]any{"status": status})
		ri, err := p.apply.resource(m.obj)
		if err == nil {
			_, err = ri.Patch(ctx, m.obj.GetName(), types.MergePatchType, b, metav1.PatchOptions{FieldManager: FieldManager}, "status")
		}
		if err != nil && !apierrors.IsNotFound(err) {
			p.say("%s %s: could not mark it not ready (%v): its status still shows this session's URL", m.obj.GetKind(), key(m.obj), err)
		}
	}
}
