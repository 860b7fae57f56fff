#!/usr/bin/env bash
# demo.sh: the main job. Until the engine lands (issue 3) it shows the local
# control plane: up with Knative's CRDs, what runs, and down.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=$(mktemp -d -t opzero-demo-XXXX)
trap 'bin/opzero controlplane down --dir "$dir/plane" >/dev/null 2>&1 || true; rm -rf "$dir"' EXIT
bin/opzero controlplane up --dir "$dir/plane" --port 0 --knative-crds
export KUBECONFIG="$dir/plane/kubeconfig"
bin/kubectl get crds
bin/opzero controlplane status --dir "$dir/plane"
echo
echo "Next (issue 3): ConfigWatcher serverless, fed by the real ApiServerSource adapter, scaling to zero."
bin/opzero controlplane down --dir "$dir/plane"
