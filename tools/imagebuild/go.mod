// Module imagebuild is the program internal/devenv/image runs to write the
// images of `opzero cluster up` and `opzero cluster apply` as one
// docker-archive tarball with go-containerregistry. It is a module of its
// own so that go-containerregistry (and the OCI image-spec, docker/cli and
// the rest it requires) never reach the module graph of a project that
// requires opzero (issue 54). Pinned by the hash of these files; the
// indirect versions are the ones opzero's own module required when it
// linked go-containerregistry itself, so the images are the same.
module github.com/opzero/opzero/tools/imagebuild

go 1.24.0

require github.com/google/go-containerregistry v0.20.2

require (
	github.com/containerd/stargz-snapshotter/estargz v0.16.3 // indirect
	github.com/google/go-cmp v0.7.0 // indirect
	github.com/klauspost/compress v1.18.0 // indirect
	github.com/opencontainers/go-digest v1.0.0 // indirect
	github.com/opencontainers/image-spec v1.1.0 // indirect
	github.com/vbatts/tar-split v0.11.6 // indirect
	golang.org/x/sync v0.12.0 // indirect
	golang.org/x/sys v0.31.0 // indirect
)
