package mountns

import (
	"encoding/json"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
)

// envSpec carries the helper's spec (JSON) from Command to Main.
const envSpec = "OPZERO_MOUNTNS_SPEC"

// Bind puts Src (a host file or folder the caller wrote) at Dst (an
// absolute path, as a container's mountPath) inside the namespace.
type Bind struct {
	Src, Dst string
}

// spec is what the helper is told: where to build the root, what to
// mount, where to run and what.
type spec struct {
	Root  string
	Binds []Bind
	Dir   string
	Argv  []string
}

// Check reports a bind whose Dst cannot be made without writing on the
// host: Dst must be absolute, and exist on the host or have its nearest
// existing ancestor be / (or another bind's Dst, made first).
func Check(binds []Bind) error {
	made := map[string]bool{"/": true}
	for _, b := range sorted(binds) {
		d := path.Clean(b.Dst)
		if !path.IsAbs(b.Dst) || d == "/" {
			return fmt.Errorf("mount path %q: not an absolute path below /", b.Dst)
		}
		if _, err := os.Lstat(d); err == nil {
			made[d] = true
			continue
		}
		a := path.Dir(d)
		for !made[a] {
			if _, err := os.Lstat(a); err == nil {
				return fmt.Errorf("mount path %s: %s exists on the host and %s would be made in it", d, a, strings.TrimPrefix(d, a+"/"))
			}
			a = path.Dir(a)
		}
		made[d] = true
	}
	return nil
}

// sorted are binds shortest Dst first, so a folder is mounted before
// the mounts inside it.
func sorted(binds []Bind) []Bind {
	out := append([]Bind(nil), binds...)
	sort.SliceStable(out, func(i, j int) bool { return len(path.Clean(out[i].Dst)) < len(path.Clean(out[j].Dst)) })
	return out
}

// encode is the helper's environment entry for s.
func encode(s spec) (string, error) {
	if s.Root == "" || len(s.Argv) == 0 || !filepath.IsAbs(s.Argv[0]) {
		return "", fmt.Errorf("mountns: a root folder and an absolute program are needed (got %q, %q)", s.Root, s.Argv)
	}
	b, err := json.Marshal(s)
	if err != nil {
		return "", err
	}
	return envSpec + "=" + string(b), nil
}
