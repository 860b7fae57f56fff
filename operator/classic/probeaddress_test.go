package classic

import (
	"net"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/opzero/opzero/internal/description"
)

// TestProbeAddressEnv: the project's probe address is bound as it sets
// it, unless the generated Knative Service's ProbeAddressEnv says 0 (a
// project whose own flag sets the address: instances side by side would
// all bind it); a taken address fails as controller-runtime's does.
func TestProbeAddressEnv(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	m := &adopted{mo: manager.Options{HealthProbeBindAddress: taken.Addr().String()}}
	if _, err := m.probeServer(); err == nil {
		t.Fatalf("probes on the taken %s: no error", taken.Addr())
	}
	t.Setenv(description.ProbeAddressEnv, "0")
	if r, err := m.probeServer(); err != nil || r != nil {
		t.Errorf("%s=0: %v, %v; want no probe server and no error", description.ProbeAddressEnv, r, err)
	}
}
