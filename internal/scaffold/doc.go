// Package scaffold writes new opzero projects: `opzero init` and `opzero
// create api`. The layout and markers are kubebuilder's (PROJECT,
// api/<version>/<kind>_types.go, internal/controller/, cmd/main.go, config/,
// a Makefile), so kubebuilder users find their way; main.go and the
// controllers use opzero's operator, builder, reconcileutil and testenv.
//
// # Guarantees
//
//   - Bad input (a non-empty folder without Force, a folder that is not an
//     opzero project, invalid names, a kind that exists) is refused with an
//     error that says what to do, before any file is written.
//   - Go files are written gofmt-formatted; after CreateAPI the project
//     builds: `go mod tidy` has run and the DeepCopy methods are generated
//     by controller-gen (`object`, run as a program: internal/controllergen),
//     the release go.mod requires for `make generate` (`go tool controller-gen`).
//   - The generated controller test passes as written (`make test`).
//
// # Caveats
//
// One project is one operator: in serverless mode one binary serves one
// controller (one Knative Service), so CreateAPI refuses a second
// controller; a second kind without one (for example a kind the controller
// owns) is fine. One API group per project (kubebuilder's default
// single-group layout); kinds are namespaced.
package scaffold
