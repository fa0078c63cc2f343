#!/usr/bin/env bash
# Sets up, builds and runs every Shardflow test: lit + FileCheck (test/),
# gtest unit tests, pytest (python/tests), a libFuzzer smoke run of the
# importer, and the runtime-only build under ASan+UBSan with its unit tests
# and a libFuzzer smoke run of each of shard-run's readers
# (SHARDFLOW_RUNTIME_FUZZ_SECONDS each, default 20). Ends with one line
# `N passed, M failed`; exits non-zero on failure.
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
"$build/bin/shardflow-runtime-unittests" --gtest_brief=1 \
  --gtest_output="xml:$results/runtime-unit.xml"
"$build/bin/shardflow-kernel-table-tests" --gtest_brief=1 \
  --gtest_output="xml:$results/kernel-table.xml"

echo "== python tests"
PYTHONPATH="$root/python" "$root/.venv/bin/python" -m pytest -q -p no:cacheprovider \
  --junitxml="$results/pytest.xml" python/tests

echo "== the runtime builds alone (no MLIR, no libonnx, no CUDA library linked)"
# Twice: with the CUDA executor (the default where the CUDA headers are;
# the driver, cuBLASLt and NCCL are loaded at run time, never linked) and
# without it (-DSHARDFLOW_ENABLE_CUDA=OFF), which must refuse a CUDA
# artifact with a clear message.
runtime_only_build() { # build-dir extra-cmake-args...
  local dir="$1"
  shift
  cmake -S "$root" -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DSHARDFLOW_RUNTIME_ONLY=ON "$@" >"$dir.log" 2>&1 &&
    ninja -C "$dir" -j "${SHARDFLOW_JOBS:-$(nproc)}" shard-run >>"$dir.log" 2>&1 &&
    ! ldd "$dir/bin/shard-run" |
      grep -Eq 'libMLIR|libLLVM|libonnx|libprotobuf|libcuda|libcudart|libcublas|libnccl'
}
rt_build="$build-runtime-only"
rt_nocuda="$build-runtime-only-nocuda"
if runtime_only_build "$rt_build"; then
  steps+=(--step "runtime-only-build=0")
else
  tail -20 "$rt_build.log"
  steps+=(--step "runtime-only-build=1")
fi
cuda_probe="$rt_nocuda.probe.shard"
printf 'shardflow-artifact 4\ntarget cuda\nworld-size 1\nmodel-dir .\narena 64\nbuffer 0 arena f32 4 offset=0\noutput y 0\nend\n' >"$cuda_probe"
# shard-run exits 1 on the probe: take its message before grepping, as
# pipefail would count that exit status.
if runtime_only_build "$rt_nocuda" -DSHARDFLOW_ENABLE_CUDA=OFF &&
   probe_message="$("$rt_nocuda/bin/shard-run" "$cuda_probe" 2>&1 || true)" &&
   grep -q "built without CUDA support" <<<"$probe_message"; then
  steps+=(--step "runtime-only-build-without-cuda=0")
else
  tail -20 "$rt_nocuda.log"
  steps+=(--step "runtime-only-build-without-cuda=1")
fi

echo "== importer fuzzer smoke run"
if [ -f tools/fuzz-smoke.sh ]; then
  bash tools/fuzz-smoke.sh
  steps+=(--step "fuzz-smoke=$?")
fi

echo "== the runtime under AddressSanitizer and UndefinedBehaviorSanitizer"
# build-asan/: the runtime-only configuration built by clang with
# -fsanitize=address,undefined; its unit tests, then a short libFuzzer run
# of every reader of a file shard-run is given (tools/runtime-fuzz-smoke.sh).
started=$SECONDS
if bash tools/runtime-fuzz-smoke.sh build; then
  steps+=(--step "asan-runtime-build=0")
  echo "   built in $((SECONDS - started)) s"
  started=$SECONDS
  bash tools/runtime-fuzz-smoke.sh unittests
  steps+=(--step "asan-runtime-unittests=$?")
  echo "   unit tests in $((SECONDS - started)) s"
  for reader in artifact npy npz tensorproto autotune data; do
    started=$SECONDS
    SHARDFLOW_FUZZ_SECONDS="${SHARDFLOW_RUNTIME_FUZZ_SECONDS:-20}" \
      bash tools/runtime-fuzz-smoke.sh fuzz "$reader"
    steps+=(--step "runtime-fuzz-smoke-$reader=$?")
    echo "   $reader fuzzer in $((SECONDS - started)) s"
  done
else
  steps+=(--step "asan-runtime-build=1")
fi

echo "== summary"
"$root/.venv/bin/python" tools/summarize_tests.py "${steps[@]}" \
  "$results/lit.xml" "$results/unit.xml" "$results/runtime-unit.xml" \
  "$results/kernel-table.xml" "$results/pytest.xml"
