#!/usr/bin/env bash
# Sets up, builds and runs every Shardflow test: lit + FileCheck (test/),
# gtest unit tests, pytest (python/tests) and a libFuzzer smoke run of the
# importer. Ends with one line `N passed, M failed`; exits non-zero on failure.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
build="${SHARDFLOW_BUILD_DIR:-$root/build}"
export SHARDFLOW_BUILD_DIR="$build"

bash tools/setup.sh || { echo "setup failed"; echo "0 passed, 1 failed"; exit 1; }
bash tools/build.sh || { echo "build failed"; echo "0 passed, 1 failed"; exit 1; }

results="$build/test-results"
rm -rf "$results" && mkdir -p "$results"
steps=()

echo "== lit tests"
/usr/lib/llvm-22/bin/lit -sv --xunit-xml-output "$results/lit.xml" "$build/test"

echo "== unit tests"
"$build/bin/shardflow-unittests" --gtest_brief=1 --gtest_output="xml:$results/unit.xml"

echo "== python tests"
PYTHONPATH="$root/python" "$root/.venv/bin/python" -m pytest -q -p no:cacheprovider \
  --junitxml="$results/pytest.xml" python/tests

echo "== the runtime builds alone (no MLIR, no libonnx)"
rt_build="$build-runtime-only"
if cmake -S "$root" -B "$rt_build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
     -DSHARDFLOW_RUNTIME_ONLY=ON >"$rt_build.log" 2>&1 &&
   ninja -C "$rt_build" -j "${SHARDFLOW_JOBS:-$(nproc)}" shard-run >>"$rt_build.log" 2>&1 &&
   ! ldd "$rt_build/bin/shard-run" | grep -Eq 'libMLIR|libLLVM|libonnx|libprotobuf'; then
  steps+=(--step "runtime-only-build=0")
else
  tail -20 "$rt_build.log"
  steps+=(--step "runtime-only-build=1")
fi

echo "== importer fuzzer smoke run"
if [ -f tools/fuzz-smoke.sh ]; then
  bash tools/fuzz-smoke.sh
  steps+=(--step "fuzz-smoke=$?")
fi

echo "== summary"
"$root/.venv/bin/python" tools/summarize_tests.py "${steps[@]}" \
  "$results/lit.xml" "$results/unit.xml" "$results/pytest.xml"
