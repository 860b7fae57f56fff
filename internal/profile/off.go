//go:build !opzero_pprof

package profile

// Stop does nothing: this binary was built without -tags opzero_pprof.
func Stop() {}
