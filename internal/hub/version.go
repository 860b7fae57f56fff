package hub

import (
	"runtime/debug"
	"sync"
)

// Version is the opzero module version the hub was built from: a tag, a
// pseudo-version, or the VCS revision of a build in a checkout. It goes into
// the conditions that refuse a Subscription written by a newer opzero, so
// that the message says what runs.
var Version = sync.OnceValue(func() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	for _, d := range bi.Deps {
		if d.Path == "github.com/opzero/opzero" {
			return d.Version // the hub linked into another module's binary
		}
	}
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	for _, s := range bi.Settings {
		if s.Key == "vcs.revision" && len(s.Value) >= 12 {
			return "devel " + s.Value[:12]
		}
	}
	return "devel"
})
