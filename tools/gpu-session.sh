#!/usr/bin/env bash
# Every GPU check of docs/cuda.md in a few commands, for a GPU machine that
# has the CUDA toolkit, the driver, PyTorch and onnxruntime but no LLVM/MLIR
# (so no shard-opt), and a time limit per command: each step below fits in
# about 10 minutes and reuses what an earlier step built there.
#
#   bash tools/gpu-session.sh prepare [DIR]   where shard-opt is built
#   bash tools/gpu-session.sh build [DIR]     on the GPU machine
#   bash tools/gpu-session.sh check [DIR]     on the GPU machine
#   bash tools/gpu-session.sh bench [DIR]     on the GPU machine
#   bash tools/gpu-session.sh bench-llama [DIR]   on the GPU machine
#   bash tools/gpu-session.sh sanitize [DIR] [TOOLS]   on the GPU machine
#
# prepare  writes DIR (default gpu-session/, which git ignores): the
#          hand-written CUDA artifacts (python -m shardflow.cuda_smoke),
#          the zoo compiled for CUDA in f32 and bf16, single rank and
#          dp=2,tp=2, with onnxruntime's outputs and the expected-error
#          cases (python -m shardflow.cuda_zoo), and the GPT-2-small bench's
#          artifact and graph (bench/gpt2_gpu_bench.py prepare; its weights
#          are regenerated from their seed on the GPU machine, so DIR stays
#          small), and the Llama --group-gemms bench's artifacts
#          (bench/llama_group_gemms_bench.py prepare, likewise). Copy or
#          carry DIR to the GPU machine's checkout.
# build    a runtime-only shard-run with CUDA (gpu-check.sh checks that it
#          links no CUDA library) and tools/cuda-kernel-check, in
#          build-gpu-session/ (reused when already there).
# check    builds when needed, then: cuda-kernel-check (every device kernel
#          against the CPU kernels, then attention TFLOP/s), and
#          tools/gpu-check.sh on the smoke cases, the zoo in f32 (rtol
#          1e-4, TF32 off) and bf16 (rtol 2e-2), bf16 again captured into
#          a CUDA graph (--cuda-graph, two runs), bf16 again through
#          page-locked host memory (--pinned-memory always, two runs), bf16
#          again with sibling GEMMs batched (--group-gemms), and the
#          expected-error cases.
# bench    builds when needed, then the GPT-2-small bench (bf16, batch 8,
#          sequence 1024) against PyTorch eager and torch.compile, and our
#          artifact with each code generation feature off (--cuda-disable)
#          against the default one.
# bench-llama  builds when needed, then a Llama-shaped model (multi-head
#          attention, bf16) with sibling GEMMs batched (--group-gemms)
#          against one by one, at batch 8 x 512 and 1 x 128, and compiled
#          without sibling fusion against the default.
# sanitize builds when needed, then gpu-check.sh --sanitize TOOL on the
#          smoke cases and the zoo in f32, for each of TOOLS (default
#          "memcheck racecheck"; also synccheck, initcheck), each run under
#          a time limit of $SHARDFLOW_SANITIZE_TIMEOUT seconds (default
#          120): out-of-bounds accesses, shared-memory races and barrier
#          misuse in the hand-written and the generated kernels.
#
# Logs go to $OUT when it is set (the device tool brings that folder back),
# else to DIR/logs: one log per step plus summary.txt, which gets one line
# per check, `NAME: N passed, M failed[, K skipped]` (artifacts for more
# ranks than there are GPUs are skipped), or the bench's figures. The exit
# status is non-zero when a check failed.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root" || exit 1

step="${1:-}"
dir="${2:-gpu-session}"
case "$step" in
  prepare|build|check|bench|bench-llama|sanitize) ;;
  -h|--help) sed -n '2,53p' "$0"; exit 0 ;;
  *) echo "usage: bash tools/gpu-session.sh prepare|build|check|bench|bench-llama|sanitize [DIR] (see --help)" >&2
     exit 2 ;;
esac
builds="${SHARDFLOW_GPU_SESSION_BUILD:-$root/build-gpu-session}"
logs="${OUT:-$dir/logs}"
mkdir -p "$logs"
summary="$logs/summary.txt"
python="${PYTHON:-python3}"
status=0

note() { echo "$*" | tee -a "$summary"; }

if [ "$step" = prepare ]; then
  python="${PYTHON:-$root/.venv/bin/python}"
  shard_opt="${SHARD_OPT:-$root/build/bin/shard-opt}"
  [ -x "$shard_opt" ] || { echo "no $shard_opt: build the project first (tools/build.sh)" >&2; exit 1; }
  rm -rf "$dir/smoke" "$dir/zoo" "$dir/bench" "$dir/llama"
  mkdir -p "$dir"
  export PYTHONPATH="$root/python${PYTHONPATH:+:$PYTHONPATH}"
  echo "== hand-written CUDA artifacts"
  "$python" -m shardflow.cuda_smoke "$dir/smoke" >"$dir/smoke.log" 2>&1 ||
    { tail -20 "$dir/smoke.log"; exit 1; }
  echo "== the zoo for CUDA, with onnxruntime's outputs"
  "$python" -m shardflow.cuda_zoo "$dir/zoo" >"$dir/zoo.log" 2>&1 ||
    { tail -20 "$dir/zoo.log"; exit 1; }
  echo "== the GPT-2-small bench (generating its weights takes a few minutes)"
  bench_out="${SHARDFLOW_BENCH_OUT:-$root/bench/out/gpt2s}"
  "$python" bench/gpt2_gpu_bench.py prepare --out "$bench_out" --shard-opt "$shard_opt" \
    "${@:3}" || exit 1
  mkdir -p "$dir/bench"
  cp "$bench_out"/gpt2s*.shard "$bench_out/gpt2s.onnx" "$bench_out/config.json" "$dir/bench/"
  echo "== the Llama --group-gemms bench (generating its weights takes a few minutes)"
  llama_out="${SHARDFLOW_LLAMA_BENCH_OUT:-$root/bench/out/llama}"
  "$python" bench/llama_group_gemms_bench.py prepare --out "$llama_out" --shard-opt "$shard_opt" ||
    exit 1
  mkdir -p "$dir/llama"
  cp "$llama_out"/llama.*.shard "$llama_out/llama.onnx" "$llama_out/config.json" "$dir/llama/"
  rm -f "$dir/smoke.log" "$dir/zoo.log"
  rm -rf "$dir/logs"
  echo "== $dir: $(du -sh "$dir" | cut -f1) (the device tool carries at most 64 MiB)"
  echo "   on the GPU machine: bash tools/gpu-session.sh build|check|bench $dir"
  exit 0
fi

for part in smoke zoo bench llama; do
  [ -d "$dir/$part" ] || { echo "no $dir/$part: run 'bash tools/gpu-session.sh prepare $dir' where shard-opt is built, and bring $dir here" >&2; exit 1; }
done

# NCCL and cuBLASLt from the CUDA toolkit, or from PyTorch's pip packages
# when the toolkit lacks them: cmake options and LD_LIBRARY_PATH, for the
# build and for every run below (gpu-check.sh and the bench).
source "$root/tools/cuda-env.sh" "$python" >"$logs/cuda-env.txt"
cat "$logs/cuda-env.txt" >>"$summary"
cat "$logs/cuda-env.txt"

build_all() {
  local log="$logs/build.log"
  : >"$log"
  echo "== building in $builds (log: $log)"
  command -v nvidia-smi >/dev/null &&
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee -a "$log"
  local generator=()
  command -v ninja >/dev/null && generator=(-G Ninja)
  if [ ! -x "$builds/rt/bin/shard-run" ]; then
    { cmake -S "$root" -B "$builds/rt" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
        -DSHARDFLOW_RUNTIME_ONLY=ON -DSHARDFLOW_ENABLE_CUDA=ON \
        "${SHARDFLOW_CUDA_CMAKE_ARGS[@]}" &&
      cmake --build "$builds/rt" --target shard-run -j "$(nproc)"; } >>"$log" 2>&1 ||
      { tail -30 "$log"; note "build shard-run: FAILED"; return 1; }
  fi
  if [ ! -x "$builds/check/cuda-kernel-check" ]; then
    { cmake -S tools/cuda-kernel-check -B "$builds/check" "${generator[@]}" \
        -DCMAKE_BUILD_TYPE=Release &&
      cmake --build "$builds/check" -j "$(nproc)"; } >>"$log" 2>&1 ||
      { tail -30 "$log"; note "build cuda-kernel-check: FAILED"; return 1; }
  fi
  note "build: shard-run and cuda-kernel-check in $builds"
}

# The last `N passed, M failed` of a log's last part (after its last
# `==== ` line), as one summary line.
tally() { # name log exit-status
  local line
  line="$(awk '/^==== / { part = "" } { part = part $0 "\n" } END { printf "%s", part }' "$2" |
    grep -Eo '[0-9]+ passed, [0-9]+ failed(, [0-9]+ skipped)?' | tail -1)"
  note "$1: ${line:-no result line} (exit $3)"
  [ "$3" = 0 ] || status=1
}

# run_bench NAME PART SCRIPT LINES: SCRIPT's `run` on DIR/PART, its log in
# NAME.log and the lines starting with one of LINES (an ERE) in summary.txt.
run_bench() {
  local name="$1" part="$2" script="$3" lines="$4"
  build_all || exit 1
  local log="$logs/$name.log"
  # The weights are generated next to the graph; DIR may be replaced by
  # the next copy, so the bench works in a folder of its own.
  local work="$builds/$part"
  mkdir -p "$work"
  cp "$dir/$part/"* "$work/"
  PYTHONUNBUFFERED=1 "$python" "$script" run --dir "$work" \
    --shard-run "$builds/rt/bin/shard-run" 2>&1 | tee "$log"
  local rc=${PIPESTATUS[0]}
  grep -E "^($lines)" "$log" | sed "s/^/$name: /" >>"$summary"
  [ "$rc" = 0 ] || { note "$name: FAILED (exit $rc)"; status=1; }
}

case "$step" in
  build)
    build_all || exit 1 ;;
  check)
    build_all || exit 1
    log="$logs/kernel-check.log"
    "$builds/check/cuda-kernel-check" >"$log" 2>&1
    tally "cuda-kernel-check" "$log" $?
    "$builds/check/cuda-kernel-check" --time >>"$log" 2>&1 || status=1
    check=(bash tools/gpu-check.sh --no-build --build-dir "$builds/rt")
    log="$logs/gpu-check.log"
    : >"$log"
    for part in smoke zoo/f32 zoo/checks; do
      echo "==== $part" >>"$log"
      "${check[@]}" "$dir/$part" >>"$log" 2>&1
      tally "gpu-check $part" "$log" $?
    done
    echo "==== zoo/bf16" >>"$log"
    "${check[@]}" --rtol 2e-2 "$dir/zoo/bf16" >>"$log" 2>&1
    tally "gpu-check zoo/bf16" "$log" $?
    # The same programs captured into a CUDA graph and launched twice.
    echo "==== zoo/bf16 --cuda-graph" >>"$log"
    "${check[@]}" --rtol 2e-2 --flags "--cuda-graph --repeat 2" "$dir/zoo/bf16" >>"$log" 2>&1
    tally "gpu-check zoo/bf16 --cuda-graph" "$log" $?
    echo "==== zoo/bf16 --pinned-memory always" >>"$log"
    "${check[@]}" --rtol 2e-2 --flags "--pinned-memory always --repeat 2" "$dir/zoo/bf16" \
      >>"$log" 2>&1
    tally "gpu-check zoo/bf16 --pinned-memory always" "$log" $?
    echo "==== zoo/bf16 --group-gemms" >>"$log"
    "${check[@]}" --rtol 2e-2 --flags "--group-gemms" "$dir/zoo/bf16" >>"$log" 2>&1
    tally "gpu-check zoo/bf16 --group-gemms" "$log" $?
    ;;
  sanitize)
    build_all || exit 1
    check=(bash tools/gpu-check.sh --no-build --build-dir "$builds/rt")
    log="$logs/sanitize.log"
    : >"$log"
    for tool in ${3:-memcheck racecheck}; do
      for part in smoke zoo/f32; do
        echo "==== $tool $part" >>"$log"
        timeout "${SHARDFLOW_SANITIZE_TIMEOUT:-120}" "${check[@]}" --sanitize "$tool" \
          "$dir/$part" >>"$log" 2>&1
        tally "sanitize $tool $part" "$log" $?
      done
    done
    ;;
  bench)
    run_bench bench bench bench/gpt2_gpu_bench.py \
      "device|model|shardflow|torch|ratio|logits|profile|small|host"
    ;;
  bench-llama)
    run_bench bench-llama llama bench/llama_group_gemms_bench.py "date|llama"
    ;;
esac
exit "$status"
