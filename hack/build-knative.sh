#!/usr/bin/env bash
# build-knative.sh builds Knative's real event adapters into bin/: the
# ApiServerSource receive adapter and the PingSource adapter (mtping), from the
# module in tools/knative (knative.dev/eventing v0.50.0). It rebuilds only when
# that module's pins change (stamp: bin/.knative.pins) and prints progress
# while it compiles: the first build takes minutes on 2 cores.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
mod="$root/tools/knative"
bin="$root/bin"
stamp="$bin/.knative.pins"
bins=(apiserver_receive_adapter mtping)

pins=$(cat "$mod/go.mod" "$mod/go.sum" | sha256sum | cut -d' ' -f1)
have_all=1
for b in "${bins[@]}"; do [ -x "$bin/$b" ] || have_all=0; done
if [ "$have_all" = 1 ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$pins" ]; then
  echo "knative adapters: bin/ is up to date (apiserver_receive_adapter, mtping)"
  exit 0
fi

mkdir -p "$bin"
rm -f "$stamp"
ldflags="-s -w"

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
echo "knative adapters: building into bin/ (first build takes a few minutes on 2 cores; later builds reuse Go's cache)"
build() {
  local name=$1 pkg=$2
  local t0; t0=$(date +%s)
  if ! go build -v -trimpath -ldflags "$ldflags" -o "$bin/$name" "$pkg" 2>&1 | progress "$name"; then
    echo "knative adapters: building $name failed; see the errors above" >&2
    exit 1
  fi
  [ -x "$bin/$name" ] || { echo "knative adapters: building $name produced no binary" >&2; exit 1; }
  echo "  built $name in $(( $(date +%s) - t0 ))s"
}
build apiserver_receive_adapter knative.dev/eventing/cmd/apiserver_receive_adapter
build mtping knative.dev/eventing/cmd/mtping
echo "$pins" > "$stamp"
echo "knative adapters: done in $(( $(date +%s) - start ))s"
