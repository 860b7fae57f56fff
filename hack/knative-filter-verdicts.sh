#!/usr/bin/env bash
# Decides internal/eventfilter/testdata/knative-cases.json with Knative
# Eventing's own filter code and writes knative-verdicts.json beside it.
# Run it after adding cases; eventfilter's test compares opzero's port with
# these verdicts. Knative is built in a throwaway module with the pins of
# internal/devenv/pinned/modules/knative (the opzero module links no knative.dev).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
td=$root/internal/eventfilter/testdata
pins=$root/internal/devenv/pinned/modules/knative
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cp "$pins/go.mod.txt" "$tmp/go.mod"
cp "$pins/go.sum.txt" "$tmp/go.sum"
sed -i 's#^module .*#module knativecheck#' "$tmp/go.mod"
cp "$td/knativecheck/main.go" "$tmp/"
(cd "$tmp" && GOFLAGS=-mod=mod go run . "$td/knative-cases.json" "$td/knative-verdicts.json")
echo "wrote $td/knative-verdicts.json"
