#!/usr/bin/env bash
# build-bins.sh makes opzero's pinned binaries ready the way a user's
# `opzero install` does, in the same versioned cache (~/.cache/opzero/<pins>),
# and links them from bin/ for the checkout's scripts. Arguments name the sets:
# controlplane (etcd, kube-apiserver, kube-controller-manager, kubectl),
# knative (Knative's ApiServerSource and PingSource adapters and CRDs) and/or
# otelcol (the OpenTelemetry Collector's OTLP receiver, for telemetry tests).
#
# Nothing is rebuilt when the cache has them (the cache folder is named after
# the pins). Binaries in bin/ stamped with the same pins (built by an older
# `make bins`) are hard-linked into the cache instead of built.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
[ $# -gt 0 ] || set -- controlplane knative

# go run caches the CLI it builds; its progress goes to standard error.
dir=$(go run ./cmd/opzero install --print-dir --from "$root/bin" "$@")

mkdir -p bin
for set in "$@"; do
  case "$set" in
    controlplane) names="etcd kube-apiserver kube-controller-manager kubectl" ;;
    knative) names="apiserver_receive_adapter mtping knative-crds" ;;
    otelcol) names="otlp-receiver" ;;
  esac
  for n in $names; do
    rm -rf "bin/$n"
    ln -s "$dir/$n" "bin/$n"
  done
  rm -f "bin/.$set.pins" && cp "$dir/.$set.pins" "bin/.$set.pins"
  echo "$set: bin/ links to $dir ($names)"
done
