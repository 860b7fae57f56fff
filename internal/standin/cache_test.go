package standin

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// TestCacheReads: what a Get read is served only while no event could have
// made it stale: not when an event of its kind arrived while the Get was
// under way, not once an event carries another version (older or newer:
// the cache cannot tell) or none (Reference mode), not past MaxAge, and
// never for a kind whose reads are not kept (a source with a selector).
func TestCacheReads(t *testing.T) {
	cmKind := corev1.SchemeGroupVersion.WithKind("ConfigMap")
	secretKind := corev1.SchemeGroupVersion.WithKind("Secret")
	key := types.NamespacedName{Namespace: "ns", Name: "cfg"}
	other := types.NamespacedName{Namespace: "ns", Name: "other"}
	obj := func(rv string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name, ResourceVersion: rv}}
	}
	now := time.Unix(1000, 0)
	fresh := func() *Cache {
		c := NewCache(cmKind, secretKind)
		c.now = func() time.Time { return now }
		c.KeepReads(cmKind)
		return c
	}
	// read is the client's Get: ReadStart, then (between) whatever the
	// API server's answer races with, then Observed and Read.
	read := func(c *Cache, rv string, between func()) {
		tok := c.ReadStart(cmKind)
		if between != nil {
			between()
		}
		c.Observed(cmKind, key, rv)
		c.Read(cmKind, tok, obj(rv))
	}
	served := func(c *Cache) string {
		raw := c.Get(cmKind, key)
		if raw == nil {
			return ""
		}
		o := &corev1.ConfigMap{}
		if err := DecodeInto(raw, o); err != nil {
			t.Fatal(err)
		}
		return o.ResourceVersion
	}

	cases := []struct {
		name string
		run  func(c *Cache)
		want string // the version served, "" none
	}{
		{"a read is kept", func(c *Cache) { read(c, "5", nil) }, "5"},
		{"an event of the kind during the Get (another object's too)", func(c *Cache) {
			read(c, "5", func() { c.Event(cmKind, other, "9", []byte(`{}`)) })
		}, ""},
		{"an event of another kind during the Get", func(c *Cache) {
			read(c, "5", func() { c.Event(secretKind, key, "9", []byte(`{}`)) })
		}, "5"},
		{"an event with another version after the read", func(c *Cache) {
			read(c, "5", nil)
			c.Event(cmKind, key, "4", []byte(`{"metadata":{"resourceVersion":"4"}}`))
		}, ""},
		{"a Reference-mode event after the read", func(c *Cache) {
			read(c, "5", nil)
			c.Event(cmKind, key, "", nil)
		}, ""},
		{"the read version's own event replaces it", func(c *Cache) {
			read(c, "5", nil)
			c.Event(cmKind, key, "5", []byte(`{"metadata":{"resourceVersion":"5"}}`))
		}, "5"},
		{"this instance writes a newer version", func(c *Cache) {
			read(c, "5", nil)
			c.Observed(cmKind, key, "6")
		}, ""},
		{"an older read never replaces a newer event", func(c *Cache) {
			c.Event(cmKind, key, "7", []byte(`{"metadata":{"resourceVersion":"7"}}`))
			tok := c.ReadStart(cmKind)
			c.Read(cmKind, tok, obj("3")) // not Observed: not the newest known
		}, "7"},
		{"past MaxAge", func(c *Cache) {
			read(c, "5", nil)
			now = now.Add(c.MaxAge)
		}, ""},
		{"Forget", func(c *Cache) {
			read(c, "5", nil)
			c.Forget()
		}, ""},
		{"a Forget during the Get", func(c *Cache) { read(c, "5", c.Forget) }, ""},
		{"a deletion event during the Get", func(c *Cache) {
			tok := c.ReadStart(cmKind)
			c.Gone(cmKind, key)
			c.Observed(cmKind, key, "5") // read before the deletion, answered after it
			c.Read(cmKind, tok, obj("5"))
		}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := fresh()
			tc.run(c)
			if got := served(c); got != tc.want {
				t.Fatalf("served %q, want %q", got, tc.want)
			}
		})
	}

	t.Run("reads of a kind not kept", func(t *testing.T) {
		c := fresh()
		sk := types.NamespacedName{Namespace: "ns", Name: "s"}
		tok := c.ReadStart(secretKind)
		c.Observed(secretKind, sk, "5")
		c.Read(secretKind, tok, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "s", ResourceVersion: "5"}})
		if c.Get(secretKind, sk) != nil || c.Len() != 0 {
			t.Fatal("a read of a kind without KeepReads was kept")
		}
	})
}
