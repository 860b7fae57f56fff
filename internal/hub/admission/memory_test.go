package admission

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/opzero/opzero/internal/proc"
	"github.com/opzero/opzero/internal/testkit"
	"github.com/opzero/opzero/testenv"
)

// TestAdmissionEndpointMemory measures what the admission endpoint adds to
// the hub: cmd/opzero-hub run twice side by side on the same API server,
// without and with --webhook-addr (its certificate made in a Secret, the
// configurations watched, no call), RSS and its parts read 40 s after the
// start (the hub trims at 10 s). Run it with
//
//	OPZERO_BENCH_WEBHOOKS=1 go test -count=1 -run TestAdmissionEndpointMemory -v ./internal/hub/admission/
func TestAdmissionEndpointMemory(t *testing.T) {
	if os.Getenv("OPZERO_BENCH_WEBHOOKS") == "" {
		t.Skip("a measurement: OPZERO_BENCH_WEBHOOKS=1 runs it")
	}
	env := testenv.Get(t)
	ns := env.Namespace(t)
	bin := filepath.Join(t.TempDir(), "opzero-hub")
	if out, err := exec.Command("go", "build", "-o", bin, "../../../cmd/opzero-hub").CombinedOutput(); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	run := func(args ...string) int {
		c := exec.Command(bin, append([]string{"--service-account=", fmt.Sprintf("--health-addr=127.0.0.1:%d", testkit.FreePort(t))}, args...)...)
		c.Env = append(os.Environ(), "KUBECONFIG="+env.Kubeconfig)
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Process.Kill(); _ = c.Wait() })
		return c.Process.Pid
	}
	without := run()
	with := run(fmt.Sprintf("--webhook-addr=127.0.0.1:%d", testkit.FreePort(t)), "--webhook-cert-secret="+ns+"/certs", "--webhook-service="+ns+"/opzero-hub")
	time.Sleep(40 * time.Second)
	for _, c := range []struct {
		what string
		pid  int
	}{{"the hub", without}, {"the hub with its admission endpoint", with}} {
		rss, hwm := proc.Mem(c.pid)
		sm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", c.pid))
		var parts []string
		for _, l := range strings.Split(string(sm), "\n") {
			for _, k := range []string{"Anonymous:", "Shared_Clean:", "Private_Clean:"} {
				if strings.HasPrefix(l, k) {
					parts = append(parts, strings.Join(strings.Fields(l), " "))
				}
			}
		}
		t.Logf("%s: RSS %.1f MiB (peak %.1f MiB); %s", c.what, rss, hwm, strings.Join(parts, ", "))
	}
}
