#!/usr/bin/env bash
# The main job on the bundled example: sets up, builds, then imports
# examples/tiny-gpt2 (a 2-layer GPT-2-style decoder with external weights and
# symbolic batch/sequence dims) and prints its nn IR and a one-line summary.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
bash tools/setup.sh
bash tools/build.sh
model="${1:-examples/tiny-gpt2/model.onnx}"
shift || true
echo "== shard-opt $model --input-shape input_ids=2,16 --summary"
build/bin/shard-opt "$model" --input-shape input_ids=2,16 --summary "$@"
