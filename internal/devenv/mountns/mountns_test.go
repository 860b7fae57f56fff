package mountns

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestMain(m *testing.M) {
	Main()
	os.Exit(m.Run())
}

// A process started by Command reads a Secret's keys at a mount path
// that does not exist on the host, and the host has no such path after.
func TestCommandGivesFilesAtMountPath(t *testing.T) {
	if err := Available(); err != nil {
		t.Skip(err)
	}
	b := make([]byte, 6)
	rand.Read(b)
	dst := "/opzero-test-certs-" + hex.EncodeToString(b)
	dir := t.TempDir()
	src := filepath.Join(dir, "files", "certs")
	os.MkdirAll(src, 0o755)
	os.WriteFile(filepath.Join(src, "tls.crt"), []byte("CERT"), 0o644)
	os.WriteFile(filepath.Join(src, "ca.crt"), []byte("CA"), 0o644)
	work := filepath.Join(dir, "work")
	os.MkdirAll(work, 0o755)
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip(err)
	}
	cmd, err := Command(filepath.Join(dir, "ns"), []Bind{{Src: src, Dst: dst}}, work,
		[]string{sh, "-c", `cat ` + dst + `/tls.crt ` + dst + `/ca.crt; echo; pwd; echo $OPZERO_MOUNTNS_SPEC`}, []string{"PATH=/usr/bin:/bin"})
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if got, want := string(out), "CERTCA\n"+work+"\n\n"; got != want {
		t.Errorf("output %q, want %q", got, want)
	}
	if _, err := os.Lstat(dst); !os.IsNotExist(err) {
		t.Errorf("%s on the host after the run: %v", dst, err)
	}
}

func TestCheckRefusesWritingOnTheHost(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		dst, err string
	}{
		{"/opzero-no-such-dir/certs", ""},
		{dir, ""},
		{filepath.Join(dir, "missing", "certs"), "exists on the host"},
		{"relative", "not an absolute path"},
	} {
		err := Check([]Bind{{Src: dir, Dst: tc.dst}})
		if (err == nil) != (tc.err == "") || (err != nil && !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("Check(%s) = %v, want %q", tc.dst, err, tc.err)
		}
	}
}
