#!/usr/bin/env bash
# gen.sh copies the pinned tools modules (tools/controlplane, tools/knative,
# tools/otelcol, tools/coredns, tools/images, tools/traefik, tools/imagebuild)
# into modules/ with a .txt suffix, so that the opzero module can embed them:
# a folder holding a file named go.mod would be a module of its own, which
# go:embed refuses. Run by `go generate ./internal/devenv/pinned`;
# TestModulesMatchTools fails when a copy is stale.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
tools="$here/../../../tools"
for f in controlplane/go.mod controlplane/go.sum controlplane/etcd/main.go knative/go.mod knative/go.sum otelcol/go.mod otelcol/go.sum otelcol/main.go \
  coredns/go.mod coredns/go.sum coredns/main.go images/go.mod images/go.sum images/pause/main.go images/netcheck/main.go \
  traefik/go.mod traefik/go.sum imagebuild/go.mod imagebuild/go.sum imagebuild/main.go; do
  mkdir -p "$(dirname "$here/modules/$f")"
  cp "$tools/$f" "$here/modules/$f.txt"
done
