#!/usr/bin/env bash
# The runtime under AddressSanitizer and UndefinedBehaviorSanitizer, and
# bounded libFuzzer runs of every reader of a file shard-run is given.
#
#   tools/runtime-fuzz-smoke.sh build [TARGET...]  configure (once) and build build-asan/
#   tools/runtime-fuzz-smoke.sh unittests   shardflow-runtime-unittests there
#   tools/runtime-fuzz-smoke.sh fuzz NAME   fuzz one reader for SHARDFLOW_FUZZ_SECONDS
#   tools/runtime-fuzz-smoke.sh             all of the above, every reader
#
# build-asan/ is the runtime-only configuration (no MLIR, no libonnx, so it
# builds in about a minute) compiled by clang with
# -fsanitize=address,undefined -fno-sanitize-recover=all and libFuzzer's
# coverage (-DSHARDFLOW_SANITIZE=address,undefined -DSHARDFLOW_ENABLE_FUZZER=ON),
# without the CUDA executor (-DSHARDFLOW_ENABLE_CUDA=OFF: nvcc would
# dominate the build, and no test here runs the CUDA executor). `build`
# makes shardflow-runtime-unittests and one fuzzer per reader
# (tools/runtime-fuzzers: artifact, npy, npz, tensorproto, autotune, data), and
# the TARGETs named (`build shard-run`: a sanitized shard-run, for
# python/tests/test_artifact_mutations.py with SHARDFLOW_SHARD_RUN).
#
# `fuzz NAME` seeds the fuzzer with real files (tools/runtime-fuzzers/seeds.py:
# artifacts compiled by build/bin/shard-opt, arrays written by numpy,
# TensorProtos by onnx), runs it for SHARDFLOW_FUZZ_SECONDS (default 20) and
# exits non-zero on a crash, a sanitizer report, a hang (-timeout), runaway
# memory (-rss_limit_mb) or an accepted input that breaks a reader's
# promise (FuzzCheck.h), printing the reproducer's path; reproduce with
# `build-asan/bin/shard-run-NAME-fuzzer FILE`. Inputs that found new
# coverage accumulate in build-asan/fuzz-corpus/NAME across runs. Closes with
# `runtime-fuzz-smoke NAME: N runs, M crashes`.
#
# Environment: SHARDFLOW_FUZZ_SECONDS, SHARDFLOW_ASAN_BUILD_DIR (default
# <repo>/build-asan), SHARDFLOW_BUILD_DIR (where shard-opt is; default
# <repo>/build), SHARDFLOW_JOBS (default 2), CC/CXX (default: the first of
# clang-14, clang-22, clang found), SHARDFLOW_ASAN_CMAKE_ARGS (more cmake
# arguments, e.g. -DSHARDFLOW_ENABLE_CUDA=ON).
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${SHARDFLOW_ASAN_BUILD_DIR:-$root/build-asan}"
compiler_build="${SHARDFLOW_BUILD_DIR:-$root/build}"
seconds="${SHARDFLOW_FUZZ_SECONDS:-20}"
jobs="${SHARDFLOW_JOBS:-2}"
python="$root/.venv/bin/python"
fuzzers=(artifact npy npz tensorproto autotune data)

# Sanitizer reports stop the program (exit 1 under gtest, a crash under
# libFuzzer) and print where they happened.
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"

build_asan() { # extra targets...
  if [ -z "${CXX:-}" ]; then
    for v in 14 22 ""; do
      if command -v "clang++${v:+-$v}" >/dev/null 2>&1; then
        CC="clang${v:+-$v}"
        CXX="clang++${v:+-$v}"
        break
      fi
    done
  fi
  if [ -z "${CXX:-}" ] || ! command -v "$CXX" >/dev/null 2>&1; then
    echo "runtime-fuzz-smoke: no clang found (Debian: apt-get install clang-14 libclang-rt-14-dev)" >&2
    return 1
  fi
  if [ ! -f "$build/build.ninja" ]; then
    mkdir -p "$build"
    # -O1 -g: sanitizer reports with lines, at a fraction of -O2's build time.
    # shellcheck disable=SC2086
    CC="$CC" CXX="$CXX" cmake -S "$root" -B "$build" -G Ninja \
      -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS_RELEASE="-O1 -g" \
      -DCMAKE_CXX_FLAGS_RELEASE="-O1 -g" \
      -DSHARDFLOW_RUNTIME_ONLY=ON -DSHARDFLOW_ENABLE_CUDA=OFF \
      -DSHARDFLOW_SANITIZE=address,undefined -DSHARDFLOW_ENABLE_FUZZER=ON \
      ${SHARDFLOW_ASAN_CMAKE_ARGS:-} >"$build/configure.log" 2>&1 ||
      { tail -30 "$build/configure.log" >&2; rm -f "$build/build.ninja";
        echo "runtime-fuzz-smoke: cmake failed (log: $build/configure.log)" >&2; return 1; }
  fi
  local targets=(shardflow-runtime-unittests "$@")
  for f in "${fuzzers[@]}"; do targets+=("shard-run-$f-fuzzer"); done
  ninja -C "$build" -j "$jobs" "${targets[@]}" >"$build/build.log" 2>&1 ||
    { grep -E "error|FAILED" "$build/build.log" | head -20 >&2;
      echo "runtime-fuzz-smoke: build failed (log: $build/build.log)" >&2; return 1; }
  echo "runtime-fuzz-smoke: built ${targets[*]} in $build"
}

unittests() { # extra gtest arguments...
  "$build/bin/shardflow-runtime-unittests" --gtest_brief=1 "$@"
}

fuzz() { # name
  local name="$1" dict="" max_len=4096
  case "$name" in
  artifact) dict=artifact.dict max_len=131072 ;;
  npy | npz | data) dict=npy.dict max_len=16384 ;;
  tensorproto) max_len=4096 ;;
  autotune) dict=autotune.dict max_len=4096 ;;
  *) echo "runtime-fuzz-smoke: unknown fuzzer '$name' (${fuzzers[*]})" >&2; return 2 ;;
  esac
  local fuzzer="$build/bin/shard-run-$name-fuzzer"
  local seeds="$build/fuzz-seeds/$name" corpus="$build/fuzz-corpus/$name"
  local artifacts="$build/fuzz-artifacts/$name" log="$build/fuzz-$name.log"
  [ -x "$fuzzer" ] || { echo "runtime-fuzz-smoke: $fuzzer is not built (run: $0 build)" >&2;
                        echo "runtime-fuzz-smoke $name: 0 runs, 1 crashes (not built)"; return 1; }
  rm -rf "$seeds" "$artifacts"
  mkdir -p "$seeds" "$corpus" "$artifacts"
  "$python" "$root/tools/runtime-fuzzers/seeds.py" "$name" "$seeds" \
    --shard-opt "$compiler_build/bin/shard-opt" >/dev/null ||
    { echo "runtime-fuzz-smoke $name: 0 runs, 1 crashes (writing the seeds failed)"; return 1; }
  local options=(-max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048
                 -max_len="$max_len" -print_final_stats=1 -artifact_prefix="$artifacts/")
  [ -n "$dict" ] && options+=(-dict="$root/tools/runtime-fuzzers/$dict")
  echo "runtime-fuzz-smoke $name: fuzzing for ${seconds} s (log: $log)"
  "$fuzzer" "$corpus" "$seeds" "${options[@]}" >"$log" 2>&1
  local status=$?
  local runs rate cov crashes
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  cov=$(grep -oE 'cov: [0-9]+ ft: [0-9]+' "$log" | tail -1)
  crashes=$(find "$artifacts" -type f | wc -l)
  if [ "$status" -ne 0 ] && [ "$crashes" -eq 0 ]; then
    crashes=1 # The fuzzer failed without leaving a reproducer.
  fi
  if [ "$crashes" -gt 0 ]; then
    grep -E "ERROR|SUMMARY|runtime error|accepted input breaks|==[0-9]+==|Test unit written" \
      "$log" | head -20 >&2
    for f in "$artifacts"/*; do
      [ -f "$f" ] && echo "runtime-fuzz-smoke $name: reproducer: $f (run: $fuzzer $f)" >&2
    done
    echo "runtime-fuzz-smoke $name: fuzzer exit status $status; full log: $log" >&2
  fi
  echo "runtime-fuzz-smoke $name: ${runs:-0} runs (${rate:-0} per second, ${cov:-no coverage}), $crashes crashes"
  [ "$crashes" -eq 0 ]
}

case "${1:-all}" in
build) shift; build_asan "$@" ;;
unittests) shift; unittests "$@" ;;
fuzz) shift; [ $# -eq 1 ] || { echo "usage: $0 fuzz NAME (${fuzzers[*]})" >&2; exit 2; }; fuzz "$1" ;;
all)
  build_asan || exit 1
  failed=0
  unittests || failed=1
  for f in "${fuzzers[@]}"; do fuzz "$f" || failed=1; done
  exit "$failed"
  ;;
*) echo "usage: $0 [build [TARGET...] | unittests [GTEST ARGS] | fuzz NAME]" >&2; exit 2 ;;
esac
