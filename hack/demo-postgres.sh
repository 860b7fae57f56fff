#!/usr/bin/env bash
# demo-postgres.sh: make demo-postgres. See examples/postgres/demo/main.go.
set -euo pipefail
cd "$(dirname "$0")/../examples/postgres"
exec go run ./demo
