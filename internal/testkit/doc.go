// Package testkit is the kit every opzero test shares (any test, unit or
// e2e; devenv/devtest is only for tests that run `opzero dev`): polling with a deadline
// instead of fixed sleeps, loopback ports that survive a collision, and a
// goroutine whose lifetime is the test's.
//
// # Guarantees
//
//   - Eventually and Wait poll a condition until it holds or a deadline
//     passes; Eventually fails the test naming what it waited for and the
//     last error the condition returned, so a timeout says why.
//   - Listen hands over a bound listener (no window in which another process
//     can take the port); OnFreePort retries with another port when the
//     server under test reports the port taken.
//   - Blocks reads the fenced blocks of a page of the README or the book
//     with how each ```sh block is kept true (```sh run, test=NAME, e2e,
//     checked); BookBlock finds a test=NAME block; RunBlocks and RunReadme
//     run blocks exactly as written, a command that runs until Ctrl-C
//     included, in ReadmeEnv: a new user's HOME with the checkout at
//     ~/src/opzero.
//   - Background cancels its goroutine's context when the test ends and waits
//     for it, so nothing it started outlives the test.
//
// # Caveats
//
// testkit uses the standard library only: it must not pull controller-runtime
// or client-go into the packages whose tests use it. Tests that wait for wall
// time to pass in the code under test should inject a fake clock
// (k8s.io/utils/clock/testing) and step it instead of polling.
package testkit
