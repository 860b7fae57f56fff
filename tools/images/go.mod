// Module images holds the small programs `opzero cluster up` puts into
// images of its own: pause (the sandbox image containerd runs for every pod)
// and netcheck (a server and a client the cluster's test runs as pods).
// No dependencies; built statically, pinned by the hash of these files.
module github.com/opzero/opzero/tools/images

go 1.25.0
