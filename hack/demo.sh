#!/usr/bin/env bash
# demo.sh: the main job (make demo). See hack/demo/main.go.
set -euo pipefail
cd "$(dirname "$0")/.."
exec go run ./hack/demo
