// Command serving ignores OPZERO_DESCRIBE and serves forever (a fixture for
// opzero manifests' timeout).
package main

import "time"

func main() { time.Sleep(time.Hour) }
