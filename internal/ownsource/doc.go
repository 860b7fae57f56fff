// Package ownsource finds the source of opzero the running program was
// built from, so that a CLI installed with `go install` can build opzero's
// own commands (opzero-metacontroller, the hub, the wakeup source) in a
// user's folder that is no Go module, or whose module does not require
// opzero: a folder of YAML for Metacontroller's hooks.
//
// Guarantees: Root is the folder of a go.mod declaring opzero's module
// (a checkout, or the read-only copy in the module cache), found from the
// compile-time path of this file; it is checked to exist on this machine.
//
// Caveats: a binary built with -trimpath, or copied to another machine,
// has no usable path: Root says so, and the caller asks for a module.
package ownsource
