// Package booktest keeps the README and the book (docs/) true: its test,
// TestBook, runs the commands they tell a reader to type, so a page that
// drifts from the code fails `make test`.
//
// # The contract of a page
//
// Every ```sh block says, after the language, how it is kept true (package
// testkit parses it, testkit.Blocks):
//
//   - ```sh run: TestBook runs it, with the page's other run blocks in
//     order, as a reader at the root of a fresh clone would: one bash
//     script in a clone of the checkout (every top-level entry linked, bin/
//     and .git not), with a new HOME (in which ~/src/opzero is the
//     checkout) and the user's Go caches. A command whose comment says
//     "runs until Ctrl-C" runs until it says it is ready ("opzero dev:
//     ready"), then gets SIGINT; ```sh run terminal=2 blocks after it are
//     typed in a second terminal meanwhile (a shell of its own, started
//     at the clone's root with the first terminal's initial environment).
//   - ```sh test=NAME: run by the test that reads block NAME (in the folder
//     it prepares: a new project, an adopted kubebuilder project);
//     TestBook checks that the test exists and that a block of that name
//     reads the same wherever it appears.
//   - ```sh e2e: needs root and the real cluster; `make e2e-book` runs
//     these pages (their run and e2e blocks, in order), and under `make
//     test` their commands are only checked, as checked blocks are.
//   - ```sh checked: not run (make test itself, the benchmarks, a session
//     that takes minutes); each command is checked: a make target exists,
//     an opzero command line parses (its flags and subcommands), a go run
//     or go test package exists with the tests its -run names.
//
// A block a reader is not meant to type is not sh: ```console for a
// session with its output, ```text, ```go, ```yaml. Every relative link of
// a page must lead to a file that exists, and the book's index
// (docs/README.md) must link every page of docs/.
//
// # Caveats
//
// Run blocks are run by bash as written, so they can only do what a test
// may: start a control plane of their own (in the new HOME), build, run
// `opzero dev` on it, never need root or the network beyond the Go module
// proxy. Under -short only the checks run.
package booktest
