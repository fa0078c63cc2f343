#!/usr/bin/env bash
# Copies the dialect and pass references that the build generates from
# TableGen (build/docs) into docs/reference, where they are read on the
# web. python/tests/test_docs.py fails when the copies are stale.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${SHARDFLOW_BUILD_DIR:-$root/build}"
ninja -C "$build" mlir-doc >/dev/null
mkdir -p "$root/docs/reference"
for f in Dialects/NNDialect.md Dialects/DistDialect.md Dialects/RTDialect.md \
         NNPasses.md DistPasses.md RTPasses.md ConversionPasses.md CUDAPasses.md; do
  cp "$build/docs/$f" "$root/docs/reference/$(basename "$f")"
done
echo "docs/reference updated from $build/docs"
