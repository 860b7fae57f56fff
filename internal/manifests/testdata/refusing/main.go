// Command refusing exits at start with its own reason, as an adopted
// manager does when Start refuses what cannot run serverless.
package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "problem running manager: serverless mode: webhooks (/validate-x) cannot be served serverless")
	os.Exit(1)
}
