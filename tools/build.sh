#!/usr/bin/env bash
# Configures (once) and builds Shardflow in build/: Release with assertions,
# Ninja, ccache, against Debian's LLVM/MLIR 22. Extra arguments go to ninja.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${SHARDFLOW_BUILD_DIR:-$root/build}"
jobs="${SHARDFLOW_JOBS:-$(nproc)}"
if [ ! -f "$build/build.ninja" ]; then
  cmake -S "$root" -B "$build" -G Ninja \
    -DCMAKE_BUILD_TYPE=Release \
    -DSHARDFLOW_ENABLE_ASSERTIONS=ON \
    -DMLIR_DIR=/usr/lib/llvm-22/lib/cmake/mlir \
    -DLLVM_EXTERNAL_LIT=/usr/lib/llvm-22/bin/lit \
    -DSHARDFLOW_PYTHON="$root/.venv/bin/python"
fi
ninja -C "$build" -j "$jobs" "$@"
