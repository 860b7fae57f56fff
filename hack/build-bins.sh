#!/usr/bin/env bash
# build-bins.sh builds the pinned local control plane into bin/:
# etcd, kube-apiserver, kube-controller-manager and kubectl, from the module in
# tools/controlplane. It rebuilds only when that module's pins change (the
# stamp bin/.controlplane.pins holds a hash of its go.mod and go.sum), and it
# prints progress while it compiles: the first build takes minutes on 2 cores.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
mod="$root/tools/controlplane"
bin="$root/bin"
stamp="$bin/.controlplane.pins"
bins=(etcd kube-apiserver kube-controller-manager kubectl)

pins=$(cat "$mod/go.mod" "$mod/go.sum" | sha256sum | cut -d' ' -f1)
have_all=1
for b in "${bins[@]}"; do [ -x "$bin/$b" ] || have_all=0; done
if [ "$have_all" = 1 ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$pins" ]; then
  echo "control plane: bin/ is up to date (etcd, kube-apiserver, kube-controller-manager, kubectl)"
  exit 0
fi

mkdir -p "$bin"
rm -f "$stamp"
ver=v1.34.3
vpkg=k8s.io/component-base/version
ldflags="-s -w -X $vpkg.gitVersion=$ver -X $vpkg.gitMajor=1 -X $vpkg.gitMinor=34 -X $vpkg.gitTreeState=clean"

start=$(date +%s)
# progress reads `go build -v` (one line per package compiled) and prints a
# status line every few seconds instead of thousands of package names.
progress() {
  local name=$1 n=0 last=0 now
  while IFS= read -r line; do
    case "$line" in
      "#"*|*.go:[0-9]*) echo "  $line" >&2 ;;
      *) n=$((n + 1)) ;;
    esac
    now=$(date +%s)
    if [ $((now - last)) -ge 10 ]; then
      printf '  building %-24s %5d packages compiled, %4ds elapsed\n' "$name" "$n" $((now - start))
      last=$now
    fi
  done
}

cd "$mod"
echo "control plane: building pinned binaries into bin/ (first build takes several minutes on 2 cores; later builds reuse Go's cache)"
build() {
  local name=$1 pkg=$2
  local t0; t0=$(date +%s)
  if ! go build -v -trimpath -ldflags "$ldflags" -o "$bin/$name" "$pkg" 2>&1 | progress "$name"; then
    echo "control plane: building $name failed; see the errors above" >&2
    exit 1
  fi
  [ -x "$bin/$name" ] || { echo "control plane: building $name produced no binary" >&2; exit 1; }
  echo "  built $name in $(( $(date +%s) - t0 ))s"
}
build etcd ./etcd
build kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver
build kube-controller-manager k8s.io/kubernetes/cmd/kube-controller-manager
build kubectl k8s.io/kubernetes/cmd/kubectl
echo "$pins" > "$stamp"
echo "control plane: done in $(( $(date +%s) - start ))s"
