package manifests

import "time"

// SetDescribeTimeout shortens the describe timeout in tests.
func SetDescribeTimeout(d time.Duration) func() {
	old := describeTimeout
	describeTimeout = d
	return func() { describeTimeout = old }
}
