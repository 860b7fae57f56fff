package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/opzero/opzero/api/v1alpha1"
	"github.com/opzero/opzero/internal/wakeup"
)

// Loading pending Wakeups straight into etcd.
//
// Creating them through the API server goes at a few hundred a second on
// this machine (schema validation, admission, one etcd transaction each),
// so 1M would take about an hour. The bench's control plane is ours, so the
// records are written where the API server keeps them instead: etcd key
// /registry/opzero.dev/wakeups/<ns>/<name>, value the object as the API
// server stores a custom resource (JSON, no resourceVersion: etcd's
// revision is it). The API server's watch cache reads them from etcd's
// watch like any other write.
//
// So that a loaded record is exactly what the API server would have
// stored, the first two records are created through the API and their
// stored bytes read back from etcd. Every other record is rendered from
// the first one's bytes (name, uid, creation and managedFields time,
// due-bucket label, due time, target name); the second one rendered that
// way, with its own uid and times, must equal its stored bytes or the load
// fails. One put per record (one etcd revision each, as the API server's
// creates have), through etcd's JSON gateway (/v3/kv/put), so the bench
// needs no etcd client. Afterwards the API server must serve them: a
// paginated list counts them and a sample is read with GET.

// etcdPrefix is where kube-apiserver keeps Wakeups (its default
// --etcd-prefix, then group/resource).
const etcdPrefix = "/registry/opzero.dev/wakeups/"

// loadWakeups makes records [from, to) of operator bench pending, as
// createWakeups would, and returns once the API server serves them all.
func (e *env) loadWakeups(ctx context.Context, from, to int, sink string, due func(int) time.Time, prefix string) error {
	if to-from < 3 {
		return e.createWakeups(ctx, from, to, sink, due, prefix)
	}
	if err := e.createWakeups(ctx, from, from+2, sink, due, prefix); err != nil {
		return err
	}
	et := &etcdKV{url: e.etcdURL, c: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}, Timeout: time.Minute}}
	key := func(i int) string { return etcdPrefix + wakeupNS + "/" + fmt.Sprintf("%s%07d", prefix, i) }
	tmpl, err := et.get(ctx, key(from))
	if err != nil {
		return err
	}
	second, err := et.get(ctx, key(from+1))
	if err != nil {
		return err
	}
	var stored map[string]any
	if err := json.Unmarshal(second, &stored); err != nil {
		return err
	}
	md := stored["metadata"].(map[string]any)
	created, _ := time.Parse(time.RFC3339, md["creationTimestamp"].(string))
	check, err := renderWakeup(tmpl, fmt.Sprintf("%s%07d", prefix, from+1), due(from+1), types.UID(md["uid"].(string)), created)
	if err != nil {
		return err
	}
	if !bytes.Equal(check, second) {
		return fmt.Errorf("a record rendered for etcd differs from what the API server stored:\nrendered %s\nstored   %s", check, second)
	}

	err = forEach(ctx, 16, from+2, to, func(ctx context.Context, i int) error {
		v, err := renderWakeup(tmpl, fmt.Sprintf("%s%07d", prefix, i), due(i), uuid.NewUUID(), time.Now())
		if err != nil {
			return err
		}
		return et.put(ctx, key(i), v)
	})
	if err != nil {
		return fmt.Errorf("putting Wakeups into etcd: %w", err)
	}
	return e.checkServed(ctx, to, due, prefix)
}

// renderWakeup is template (a stored Wakeup) with another name, uid,
// creation time, due time and target.
func renderWakeup(template []byte, name string, due time.Time, uid types.UID, created time.Time) ([]byte, error) {
	var o map[string]any
	if err := json.Unmarshal(template, &o); err != nil {
		return nil, err
	}
	md, _ := o["metadata"].(map[string]any)
	spec, _ := o["spec"].(map[string]any)
	labels, _ := md["labels"].(map[string]any)
	target, _ := spec["target"].(map[string]any)
	mf, _ := md["managedFields"].([]any)
	if md == nil || spec == nil || labels == nil || target == nil || len(mf) != 1 {
		return nil, fmt.Errorf("a stored Wakeup of unexpected shape: %s", template)
	}
	at := created.UTC().Format(time.RFC3339)
	md["name"], md["uid"], md["creationTimestamp"] = name, string(uid), at
	mf[0].(map[string]any)["time"] = at
	labels[wakeup.DueBucketLabel] = wakeup.DueBucket(due)
	spec["due"] = due.UTC().Format(metav1.RFC3339Micro)
	target["name"] = name
	b, err := json.Marshal(o)
	if bytes.HasSuffix(template, []byte("\n")) { // the API server's encoder ends each object with a newline
		b = append(b, '\n')
	}
	return b, err
}

// checkServed waits until the API server lists `want` records that are not
// probes (by pages, names only), then reads a sample with GET and checks
// its due time and label.
func (e *env) checkServed(ctx context.Context, want int, due func(int) time.Time, prefix string) error {
	deadline := time.Now().Add(10 * time.Minute)
	for {
		// Until its watch cache has taken in every write, the API server
		// answers a list with 504 "Too large resource version": retried.
		n, err := e.countWakeups(ctx, prefix)
		if err == nil && n == want {
			break
		}
		if err == nil && n > want || time.Now().After(deadline) {
			return fmt.Errorf("the API server lists %d Wakeups named %s*, want %d (%v)", n, prefix, want, err)
		}
		time.Sleep(2 * time.Second)
	}
	for k := 0; k < 20; k++ {
		i := rand.IntN(want)
		var w v1alpha1.Wakeup
		if err := e.c.Get(ctx, client.ObjectKey{Namespace: wakeupNS, Name: fmt.Sprintf("%s%07d", prefix, i)}, &w); err != nil {
			return fmt.Errorf("GET of a loaded Wakeup: %w", err)
		}
		d := due(i)
		if !w.Spec.Due.Time.Equal(d.Truncate(time.Microsecond)) || w.Labels[wakeup.DueBucketLabel] != wakeup.DueBucket(d) || w.Spec.Target.Name != w.Name || w.UID == "" {
			return fmt.Errorf("loaded Wakeup %s served as due %s, label %q, target %q, uid %q; want due %s", w.Name, w.Spec.Due, w.Labels[wakeup.DueBucketLabel], w.Spec.Target.Name, w.UID, d)
		}
	}
	return nil
}

// countWakeups counts the Wakeups named prefix<digits> by a paginated
// list of their metadata.
func (e *env) countWakeups(ctx context.Context, prefix string) (int, error) {
	n := 0
	for cont := ""; ; {
		l := &metav1.PartialObjectMetadataList{}
		l.SetGroupVersionKind(v1alpha1.GroupVersion.WithKind("WakeupList"))
		if err := e.c.List(ctx, l, client.InNamespace(wakeupNS), client.Limit(10_000), client.Continue(cont)); err != nil {
			return 0, fmt.Errorf("listing Wakeups: %w", err)
		}
		for _, it := range l.Items {
			if rest, ok := strings.CutPrefix(it.Name, prefix); ok && strings.Trim(rest, "0123456789") == "" {
				n++
			}
		}
		if cont = l.Continue; cont == "" {
			return n, nil
		}
	}
}

// etcdKV reads and writes keys through etcd's JSON gateway.
type etcdKV struct {
	url string
	c   *http.Client
}

func (k *etcdKV) call(ctx context.Context, path string, req, resp any) error {
	body, err := json.Marshal(req)
	if err != nil {
		return err
	}
	r, err := http.NewRequestWithContext(ctx, http.MethodPost, k.url+path, bytes.NewReader(body))
	if err != nil {
		return err
	}
	res, err := k.c.Do(r)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		return err
	}
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("etcd %s: %s: %s", path, res.Status, b)
	}
	return json.Unmarshal(b, resp)
}

func (k *etcdKV) get(ctx context.Context, key string) ([]byte, error) {
	var resp struct {
		Kvs []struct {
			Value []byte `json:"value"` // base64 in JSON, as []byte is
		} `json:"kvs"`
	}
	if err := k.call(ctx, "/v3/kv/range", map[string][]byte{"key": []byte(key)}, &resp); err != nil {
		return nil, err
	}
	if len(resp.Kvs) != 1 {
		return nil, fmt.Errorf("etcd has no key %s", key)
	}
	return resp.Kvs[0].Value, nil
}

func (k *etcdKV) put(ctx context.Context, key string, value []byte) error {
	var resp struct{}
	return k.call(ctx, "/v3/kv/put", map[string]string{"key": base64.StdEncoding.EncodeToString([]byte(key)), "value": base64.StdEncoding.EncodeToString(value)}, &resp)
}
