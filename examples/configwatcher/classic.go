//go:build opzero_classic

package main

// Built with -tags opzero_classic, the example runs --mode=classic too: the
// import links controller-runtime's manager (a user's operator that wants
// both modes imports it in its main, without a tag).
import _ "github.com/opzero/opzero/operator/classic"
