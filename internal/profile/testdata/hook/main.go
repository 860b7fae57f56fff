// Command hook is a main that uses package profile as the benchmarked
// binaries do: some work, then Stop at exit.
package main

import (
	"fmt"

	"github.com/opzero/opzero/internal/profile"
)

func main() {
	var b []byte
	for i := range 100000 {
		b = fmt.Appendf(b[:0], "%d", i)
	}
	profile.Stop()
}
