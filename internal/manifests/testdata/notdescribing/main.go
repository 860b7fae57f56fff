// Command notdescribing is not an opzero operator: it exits without a
// description (a fixture for opzero manifests' error).
package main

import "fmt"

func main() { fmt.Println("hello") }
