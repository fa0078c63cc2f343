#!/usr/bin/env bash
# Copies the kernel signature table that the build generates from the nn
# ODS and RTKernels.td (build/generated/KernelSignatures.inc) into
# include/shardflow/Runtime/Format, where the runtime-only build reads it.
# python/tests/test_kernel_signatures.py fails while the copy is stale.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${SHARDFLOW_BUILD_DIR:-$root/build}"
ninja -C "$build" ShardflowKernelTable >/dev/null
cp "$build/generated/KernelSignatures.inc" "$root/include/shardflow/Runtime/Format/KernelSignatures.inc"
echo "include/shardflow/Runtime/Format/KernelSignatures.inc updated from $build/generated"
