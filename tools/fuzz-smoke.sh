#!/usr/bin/env bash
# A bounded libFuzzer run of the ONNX importer (tools/shard-import-fuzzer).
#
# Configures (once) and builds build-fuzz/ with clang, coverage and
# AddressSanitizer (-DSHARDFLOW_ENABLE_FUZZER=ON; only the fuzzer target),
# seeds it with the broken-model corpus (python/shardflow/broken_models.py),
# a few small valid models (python/shardflow/models.py) and the .onnxtxt
# tests, then fuzzes for SHARDFLOW_FUZZ_SECONDS (default 60). Inputs that
# found new coverage accumulate in build-fuzz/fuzz-corpus across runs.
#
# Exits non-zero if the fuzzer found a crash, a sanitizer report, a hang
# (-timeout) or runaway memory (-rss_limit_mb), printing the reproducer's
# path; reproduce with `build-fuzz/bin/shard-import-fuzzer FILE` or
# `build/bin/shard-opt FILE`. Closes with `fuzz-smoke: N runs, M crashes`.
#
# Environment: SHARDFLOW_FUZZ_SECONDS, SHARDFLOW_FUZZ_BUILD_DIR (default
# <repo>/build-fuzz), SHARDFLOW_JOBS (default 2), CC/CXX (default: the first
# of clang-14, clang-22, clang found).
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${SHARDFLOW_FUZZ_BUILD_DIR:-$root/build-fuzz}"
seconds="${SHARDFLOW_FUZZ_SECONDS:-60}"
jobs="${SHARDFLOW_JOBS:-2}"
python="$root/.venv/bin/python"

fail() {
  echo "fuzz-smoke: $*" >&2
  echo "fuzz-smoke: 0 runs, 1 crashes (setup failed)"
  exit 1
}

# --- compiler: clang with the libFuzzer runtime
if [ -z "${CXX:-}" ]; then
  for v in 14 22 ""; do
    if command -v "clang++${v:+-$v}" >/dev/null 2>&1; then
      CC="clang${v:+-$v}"
      CXX="clang++${v:+-$v}"
      break
    fi
  done
fi
[ -n "${CXX:-}" ] || fail "no clang found (Debian: apt-get install clang-14 libclang-rt-14-dev)"
command -v "$CXX" >/dev/null 2>&1 || fail "compiler '$CXX' not found"

# --- configure once, build only the fuzzer
if [ ! -f "$build/build.ninja" ]; then
  mkdir -p "$build"
  CC="$CC" CXX="$CXX" cmake -S "$root" -B "$build" -G Ninja \
    -DCMAKE_BUILD_TYPE=Release \
    -DSHARDFLOW_ENABLE_ASSERTIONS=ON \
    -DSHARDFLOW_ENABLE_FUZZER=ON \
    -DMLIR_DIR=/usr/lib/llvm-22/lib/cmake/mlir \
    -DLLVM_EXTERNAL_LIT=/usr/lib/llvm-22/bin/lit \
    -DSHARDFLOW_PYTHON="$python" >"$build/configure.log" 2>&1 ||
    { tail -30 "$build/configure.log" >&2; rm -f "$build/build.ninja"; fail "cmake failed (log: $build/configure.log)"; }
fi
ninja -C "$build" -j "$jobs" shard-import-fuzzer || fail "building shard-import-fuzzer failed"
fuzzer="$build/bin/shard-import-fuzzer"

# --- seeds: broken corpus, small valid models, ONNX text tests
seeds="$build/fuzz-seeds"
corpus="$build/fuzz-corpus"
artifacts="$build/fuzz-artifacts"
rm -rf "$seeds" "$artifacts"
mkdir -p "$seeds" "$corpus" "$artifacts"
PYTHONPATH="$root/python" "$python" - "$seeds" <<'PY' || fail "writing the seed corpus failed"
import json, shutil, sys, tempfile
from pathlib import Path
from shardflow import broken_models, models

seeds = Path(sys.argv[1])
with tempfile.TemporaryDirectory() as tmp:
    # Only the model files: side files (external data) mean nothing to the
    # fuzzer, whose model path lies in a folder that does not exist.
    for entry in broken_models.write_corpus(tmp):
        shutil.copy(Path(tmp) / entry["file"], seeds / ("broken-" + entry["file"]))
small = {
    "mlp": dict(layers=2, hidden=8, in_features=4, classes=3),
    "gpt2": dict(layers=1, hidden=16, heads=2, seq=4, batch=1, vocab=16),
    "bert": dict(layers=1, hidden=16, heads=2, seq=4, batch=1, vocab=16),
    "resnet": dict(layers=1, hidden=4, image=8),
    "llama": dict(layers=1, hidden=16, heads=2, kv_heads=1, seq=4, batch=1, vocab=16),
}
for name, config in small.items():
    model = getattr(models, name)(**config)
    (seeds / f"valid-{name}.onnx").write_bytes(model.SerializeToString())
print(f"fuzz-smoke: {len(list(seeds.iterdir()))} seeds from the broken corpus and models.py")
PY
find "$root/test" -name '*.onnxtxt' -print0 |
  while IFS= read -r -d '' f; do
    cp "$f" "$seeds/text-$(echo "${f#"$root"/test/}" | tr '/' '_')"
  done

# --- fuzz
log="$build/fuzz-smoke.log"
echo "fuzz-smoke: fuzzing for ${seconds} s (log: $log)"
ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1}" \
  "$fuzzer" "$corpus" "$seeds" \
  -max_total_time="$seconds" -timeout=10 -rss_limit_mb=4096 -max_len=65536 \
  -dict="$root/tools/shard-import-fuzzer/onnx.dict" \
  -print_final_stats=1 -artifact_prefix="$artifacts/" >"$log" 2>&1
status=$?

runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
crashes=$(find "$artifacts" -type f | wc -l)
if [ "$status" -ne 0 ] && [ "$crashes" -eq 0 ]; then
  crashes=1 # The fuzzer failed without leaving a reproducer.
fi
if [ "$crashes" -gt 0 ]; then
  grep -E "ERROR|SUMMARY|Assertion|==[0-9]+==|Test unit written" "$log" | head -20 >&2
  for f in "$artifacts"/*; do
    [ -f "$f" ] && echo "fuzz-smoke: reproducer: $f (run: $fuzzer $f)" >&2
  done
  echo "fuzz-smoke: fuzzer exit status $status; full log: $log" >&2
fi
echo "fuzz-smoke: ${runs:-0} runs (${rate:-0} per second), $crashes crashes"
[ "$crashes" -eq 0 ]
