package profile_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestHook builds a main that calls Stop, with and without -tags
// opzero_pprof, and runs it with the three variables set: with the tag it
// writes a CPU profile, a heap profile (both gzipped protobuf) and a
// trace; without it, nothing.
func TestHook(t *testing.T) {
	if testing.Short() {
		t.Skip("builds binaries")
	}
	for _, tc := range []struct {
		tags  string
		wants bool
	}{{"opzero_pprof", true}, {"", false}} {
		t.Run("tags="+tc.tags, func(t *testing.T) {
			dir, bin := buildHook(t, tc.tags)
			files := map[string]string{"OPZERO_CPUPROFILE": "cpu.pprof", "OPZERO_MEMPROFILE": "heap.pprof", "OPZERO_TRACE": "trace"}
			cmd := exec.Command(bin)
			cmd.Env = os.Environ()
			for v, f := range files {
				cmd.Env = append(cmd.Env, v+"="+filepath.Join(dir, f))
			}
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("hook: %v\n%s", err, out)
			}
			for v, f := range files {
				b, err := os.ReadFile(filepath.Join(dir, f))
				switch {
				case !tc.wants && err == nil:
					t.Errorf("%s: %s written without the tag", v, f)
				case tc.wants && err != nil:
					t.Errorf("%s: %v", v, err)
				case tc.wants && f != "trace" && !bytes.HasPrefix(b, []byte{0x1f, 0x8b}):
					t.Errorf("%s: %s is not a gzipped profile (%d bytes)", v, f, len(b))
				case tc.wants && f == "trace" && !bytes.HasPrefix(b, []byte("go 1.")):
					t.Errorf("%s: %s is not an execution trace (%d bytes)", v, f, len(b))
				}
			}
		})
	}
}

// TestCreateFails: a profile that cannot be created stops the binary with
// a message, rather than profiling nothing silently.
func TestCreateFails(t *testing.T) {
	if testing.Short() {
		t.Skip("builds binaries")
	}
	dir, bin := buildHook(t, "opzero_pprof")
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), "OPZERO_CPUPROFILE="+filepath.Join(dir, "absent", "cpu.pprof"))
	out, err := cmd.CombinedOutput()
	if err == nil || !bytes.Contains(out, []byte("hook: profile:")) {
		t.Fatalf("hook with an uncreatable profile: %v\n%s\nwant a failure naming the profile", err, out)
	}
}

// buildHook builds testdata/hook with tags into a temporary folder.
func buildHook(t *testing.T, tags string) (dir, bin string) {
	t.Helper()
	dir = t.TempDir()
	bin = filepath.Join(dir, "hook")
	if out, err := exec.Command("go", "build", "-tags", tags, "-o", bin, "./testdata/hook").CombinedOutput(); err != nil {
		t.Fatalf("go build -tags %q: %v\n%s", tags, err, out)
	}
	return dir, bin
}
