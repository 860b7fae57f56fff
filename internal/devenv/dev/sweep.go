package dev

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"net/http"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// ping is a PingSource opzero dev made Ready.
type ping struct {
	u    *unstructured.Unstructured
	sink sink
	oidc string // its OIDC ServiceAccount, "" without sink.audience
}

// sweep is what opzero dev does after an ApiServerSource adapter had a gap
// in its watch: a restarted Knative adapter sends nothing for the objects
// it lists, so a change made in the gap would wait for the next scheduled
// tick of a PingSource (the anti-entropy sweep). dev sends that tick now,
// once, for every PingSource with the same sink, as mtping would send it
// (same type, source, data and identity). A sink without a PingSource gets
// nothing, and the line says so.
func (p *Platform) sweep(ctx context.Context, what, sinkURI string) {
	p.pingMu.Lock()
	var pings []ping
	for _, pg := range p.pings {
		if pg.sink.URI == sinkURI {
			pings = append(pings, pg)
		}
	}
	p.pingMu.Unlock()
	if len(pings) == 0 {
		p.say("%s: changes made during the gap were not sent, and no PingSource sweeps %s: they wait for the next change of each object", what, sinkURI)
		return
	}
	for _, pg := range pings {
		t := time.Now()
		code, err := p.sendTick(ctx, pg)
		name := "PingSource " + key(pg.u)
		if err != nil {
			p.say("%s: the sweep tick of %s after the gap failed: %v", what, name, err)
			p.opts.Events.Write(Event{Event: EventError, Process: what, Message: fmt.Sprintf("sweep tick of %s: %v", name, err)})
			continue
		}
		p.say("%s: sent a tick of %s to %s so it sweeps what the gap lost (answered %d in %s)", what, name, sinkURI, code, since(t))
		p.opts.Events.Write(Event{Event: EventSweep, Process: what, Source: name, Code: code, DurationMS: ms(time.Since(t))})
	}
}

// sendTick delivers one tick of pg as mtping would, retrying for up to a
// minute while the answer is not 2xx (a cold start, the API server away).
func (p *Platform) sendTick(ctx context.Context, pg ping) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	data, _, _ := unstructured.NestedString(pg.u.Object, "spec", "data")
	ctype, _, _ := unstructured.NestedString(pg.u.Object, "spec", "contentType")
	wait := 200 * time.Millisecond
	for {
		code, err := p.tickOnce(ctx, pg, data, ctype)
		if err == nil && code/100 == 2 {
			return code, nil
		}
		if err == nil {
			err = fmt.Errorf("answered %d", code)
		}
		select {
		case <-ctx.Done():
			return code, err
		case <-time.After(wait):
		}
		wait = min(2*wait, 5*time.Second)
	}
}

func (p *Platform) tickOnce(ctx context.Context, pg ping, data, ctype string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, pg.sink.URI, bytes.NewBufferString(data))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Ce-Specversion", "1.0")
	req.Header.Set("Ce-Id", rand.Text())
	req.Header.Set("Ce-Type", "dev.knative.sources.ping")
	req.Header.Set("Ce-Source", "/apis/v1/namespaces/"+pg.u.GetNamespace()+"/pingsources/"+pg.u.GetName())
	if data != "" {
		req.Header.Set("Content-Type", orDefault(ctype, "application/json"))
	}
	if pg.sink.Audience != "" {
		exp := int64(600)
		tr, err := p.cs.CoreV1().ServiceAccounts(pg.u.GetNamespace()).CreateToken(ctx, pg.oidc,
			&authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{Audiences: []string{pg.sink.Audience}, ExpirationSeconds: &exp}}, metav1.CreateOptions{})
		if err != nil {
			return 0, fmt.Errorf("a token of %s for audience %s: %w", pg.oidc, pg.sink.Audience, err)
		}
		req.Header.Set("Authorization", "Bearer "+tr.Status.Token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}
