package dev

import (
	"fmt"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/opzero/opzero/internal/localport"
)

// TestOwnPorts: an argument binding a declared containerPort (the hub's
// --webhook-addr=:8443) gets a free local port, the same for every
// argument of that port; arguments of undeclared ports and others stay.
func TestOwnPorts(t *testing.T) {
	u := &unstructured.Unstructured{}
	u.SetNamespace("opzero-system")
	u.SetName("opzero-hub")
	c := map[string]any{"ports": []any{
		map[string]any{"name": "health", "containerPort": int64(8081)},
		map[string]any{"name": "webhooks", "containerPort": int64(8443)},
	}}
	argv := []string{"--health-addr=127.0.0.1:39001", "--webhook-addr=:8443", "--also=0.0.0.0:8443", "--metrics-addr=:9090", "--buckets=4"}
	if err := ownPorts(u, c, argv, func(int) (int, error) { return localport.Free() }); err != nil {
		t.Fatal(err)
	}
	if argv[0] != "--health-addr=127.0.0.1:39001" || argv[3] != "--metrics-addr=:9090" || argv[4] != "--buckets=4" {
		t.Fatalf("arguments of no declared port changed: %q", argv)
	}
	port := strings.TrimPrefix(argv[1], "--webhook-addr=:")
	if port == "8443" || port == argv[1] || argv[2] != "--also=0.0.0.0:"+port {
		t.Fatalf("the webhook port's arguments %q, want one free local port for both", argv[1:3])
	}
	var n int
	if _, err := fmt.Sscan(port, &n); err != nil || n <= 0 {
		t.Fatalf("the local port %q is not a port", port)
	}
}
