#!/usr/bin/env bash
# Every GPU check of docs/cuda.md, for a GPU machine that has the CUDA
# toolkit, the driver, PyTorch and onnxruntime but no LLVM/MLIR (so no
# shard-opt), and little time: the lent machines give a session 15 minutes
# of device time in all, machine starts included, so `all` runs everything
# in one command, most important first, within a time budget.
#
#   bash tools/gpu-session.sh prepare [DIR]   where shard-opt is built
#   bash tools/gpu-session.sh all [DIR]       on the GPU machine: the steps below, by priority
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
#          cases, float32 training steps of the real-export test bed with
#          the CPU backend's runs as their reference (python -m
#          shardflow.cuda_zoo), and the GPT-2-small bench's
#          artifacts and graph (bench/gpt2_gpu_bench.py prepare; its weights
#          are regenerated from their seed on the GPU machine, in seconds,
#          so DIR stays small), and the Llama grouped-GEMMs bench's
#          artifacts (bench/llama_group_gemms_bench.py prepare, likewise).
#          The zoo is packed into DIR/zoo.tar.gz (the other steps
#          unpack it). Carry DIR to the GPU machine's checkout (about 26 MB;
#          with the tracked files, 57 of the device tool's 64 MiB).
# all      within $SHARDFLOW_GPU_BUDGET seconds (default 540), in this
#          order, each step skipped when the budget is spent and stopped
#          when it would outrun it: build (the benches' weights are
#          generated meanwhile); gpu-check.sh on the smoke cases, the zoo
#          in f32 and its expected-error cases, the zoo in bf16, the
#          training steps; the GPT-2
#          bench's core (ours against PyTorch eager and torch.compile) and
#          profile; cuda-kernel-check and its attention timings; the rest
#          of the GPT-2 bench; the bf16 zoo under --cuda-graph,
#          --pinned-memory always, three runs of the defaults (a graph
#          captured at the second) and --no-group-gemms; the Llama bench;
#          compute-sanitizer's memcheck on the smoke cases and the f32 zoo
#          (each folder's cases in a random order, so that short leases
#          cover different ones).
#          summary.txt says what ran, what it found and what was skipped.
# build    a runtime-only shard-run with CUDA and tools/cuda-kernel-check,
#          from one build (one nvcc run, for this machine's GPU alone), in
#          build-gpu-session/rt (reused when already there).
# check    builds when needed, then: cuda-kernel-check (every device kernel
#          against the CPU kernels, then attention TFLOP/s), and
#          tools/gpu-check.sh on the smoke cases, the zoo in f32 (rtol
#          1e-4, TF32 off), the expected-error cases, the zoo in bf16
#          (rtol 2e-2), the training steps (5 steps each: losses and
#          gradient norms within 1e-4 relative of the CPU backend's,
#          weights within 1e-3 relative L2), bf16 again captured into a
#          CUDA graph (--cuda-graph, two runs), bf16 again through
#          page-locked host memory (--pinned-memory always, two runs), bf16
#          again over three runs (the default CUDA graph, captured at the
#          second) and bf16 again with sibling GEMMs one by one
#          (--no-group-gemms).
# bench    builds when needed, then the GPT-2-small bench (bf16, batch 8,
#          sequence 1024) against PyTorch eager and torch.compile, and our
#          artifacts against each other (bench/gpt2_gpu_bench.py's parts).
# bench-llama  builds when needed, then a Llama-shaped model (multi-head
#          attention, bf16) with sibling GEMMs batched (the default)
#          against one by one, at batch 8 x 512 and 1 x 128, and compiled
#          without sibling fusion against the default.
# sanitize builds when needed, then gpu-check.sh --sanitize TOOL on the
#          smoke cases and the zoo in f32, for each of TOOLS (default
#          "memcheck racecheck"; also synccheck, initcheck), each run under
#          a time limit of $SHARDFLOW_SANITIZE_TIMEOUT seconds (default
#          120): out-of-bounds accesses, shared-memory races and barrier
#          misuse in the hand-written and the generated kernels.
#
# Logs go to $OUT when it is set (the device tool brings that folder back,
# at most 8 files), else to DIR/logs: one log per kind of step plus
# summary.txt, which gets one line per check, `NAME: N passed, M
# failed[, K skipped]` (artifacts for more ranks than there are GPUs are
# skipped), or the bench's figures. The exit status is non-zero when a
# check failed (not when the budget skipped one).
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root" || exit 1

step="${1:-}"
dir="${2:-gpu-session}"
case "$step" in
  prepare|all|build|check|bench|bench-llama|sanitize) ;;
  -h|--help) sed -n '2,79p' "$0"; exit 0 ;;
  *) echo "usage: bash tools/gpu-session.sh prepare|all|build|check|bench|bench-llama|sanitize [DIR] (see --help)" >&2
     exit 2 ;;
esac
builds="${SHARDFLOW_GPU_SESSION_BUILD:-$root/build-gpu-session}"
logs="${OUT:-$dir/logs}"
mkdir -p "$logs"
summary="$logs/summary.txt"
python="${PYTHON:-python3}"
export PYTHONUNBUFFERED=1
status=0

note() { echo "$*" | tee -a "$summary"; }

if [ "$step" = prepare ]; then
  python="${PYTHON:-$root/.venv/bin/python}"
  shard_opt="${SHARD_OPT:-$root/build/bin/shard-opt}"
  [ -x "$shard_opt" ] || { echo "no $shard_opt: build the project first (tools/build.sh)" >&2; exit 1; }
  rm -rf "$dir/smoke" "$dir/zoo" "$dir/zoo.tar.gz" "$dir/bench" "$dir/llama"
  mkdir -p "$dir"
  export PYTHONPATH="$root/python${PYTHONPATH:+:$PYTHONPATH}"
  echo "== hand-written CUDA artifacts"
  "$python" -m shardflow.cuda_smoke "$dir/smoke" >"$dir/smoke.log" 2>&1 ||
    { tail -20 "$dir/smoke.log"; exit 1; }
  echo "== the zoo for CUDA, with onnxruntime's outputs"
  "$python" -m shardflow.cuda_zoo "$dir/zoo" >"$dir/zoo.log" 2>&1 ||
    { tail -20 "$dir/zoo.log"; exit 1; }
  echo "== the GPT-2-small bench"
  bench_out="${SHARDFLOW_BENCH_OUT:-$root/bench/out/gpt2s}"
  "$python" bench/gpt2_gpu_bench.py prepare --out "$bench_out" --shard-opt "$shard_opt" \
    "${@:3}" || exit 1
  mkdir -p "$dir/bench"
  cp "$bench_out"/gpt2s*.shard "$bench_out/gpt2s.onnx" "$bench_out/config.json" "$dir/bench/"
  echo "== the Llama grouped-GEMMs bench"
  llama_out="${SHARDFLOW_LLAMA_BENCH_OUT:-$root/bench/out/llama}"
  "$python" bench/llama_group_gemms_bench.py prepare --out "$llama_out" --shard-opt "$shard_opt" ||
    exit 1
  mkdir -p "$dir/llama"
  cp "$llama_out"/llama.*.shard "$llama_out/llama.onnx" "$llama_out/config.json" "$dir/llama/"
  rm -f "$dir/smoke.log" "$dir/zoo.log"
  rm -rf "$dir/logs"
  # The working tree and what it carries travel in 64 MiB: the zoo (32 MB,
  # 21 of them the training steps' artifacts) goes as a 13 MB archive,
  # unpacked on the GPU machine by the first step.
  tar -czf "$dir/zoo.tar.gz" -C "$dir" zoo && rm -rf "$dir/zoo" || exit 1
  echo "== $dir: $(du -sh "$dir" | cut -f1) (the device tool carries at most 64 MiB)"
  echo "   on the GPU machine: bash tools/gpu-session.sh all $dir"
  exit 0
fi

if [ ! -d "$dir/zoo" ] && [ -f "$dir/zoo.tar.gz" ]; then
  tar -xzf "$dir/zoo.tar.gz" -C "$dir" || { echo "cannot unpack $dir/zoo.tar.gz" >&2; exit 1; }
fi
for part in smoke zoo bench llama; do
  [ -d "$dir/$part" ] || { echo "no $dir/$part: run 'bash tools/gpu-session.sh prepare $dir' where shard-opt is built, and bring $dir here" >&2; exit 1; }
done
mkdir -p "$builds"

# The time budget of `all`: a step starts only with at least its minimum
# left, and is stopped when the budget is spent. Other steps have none.
deadline=""
if [ "$step" = all ]; then
  budget="${SHARDFLOW_GPU_BUDGET:-540}"
  deadline=$((SECONDS + budget))
  note "all: a budget of $budget s; $(nproc) CPU cores"
fi
left() { [ -n "$deadline" ] && echo $((deadline - SECONDS)) || echo 0; }
# timed NAME MIN-SECONDS COMMAND...: COMMAND under `timeout` with the time
# left; returns 125 (and notes it) when fewer than MIN-SECONDS are left.
# The artifacts of a case folder in a random order: under the sanitizer
# a case takes about 30 s, so a lease gets through a few of them, and
# the folder's own (alphabetical) order would check the same few each time.
shuffled_cases() {
  ls "$1"/*.shard 2>/dev/null | shuf
}

timed() {
  local name="$1" min="$2"
  shift 2
  [ -n "$deadline" ] || { "$@"; return; }
  local rest
  rest=$(left)
  if [ "$rest" -lt "$min" ]; then
    note "$name: skipped (${rest} s of the budget left, needs about $min)"
    return 125
  fi
  timeout --kill-after=10 "$rest" "$@"
}

# NCCL and cuBLASLt from the CUDA toolkit, or from PyTorch's pip packages
# when the toolkit lacks them: cmake options and LD_LIBRARY_PATH, for the
# build and for every run below (gpu-check.sh and the bench).
source "$root/tools/cuda-env.sh" "$python" >"$builds/cuda-env.txt"
cat "$builds/cuda-env.txt" >>"$summary"
cat "$builds/cuda-env.txt"

# The compute capability of GPU 0 (e.g. 90), to build the kernels for it
# alone; empty without nvidia-smi (then the default architectures).
gpu_arch() {
  command -v nvidia-smi >/dev/null || return 0
  nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d ' .'
}

build_all() {
  local log="$logs/build.log"
  if [ -x "$builds/rt/bin/shard-run" ] && [ -x "$builds/rt/bin/cuda-kernel-check" ]; then
    return 0
  fi
  : >"$log"
  echo "== building in $builds/rt (log: $log)"
  command -v nvidia-smi >/dev/null &&
    nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv,noheader |
    tee -a "$log" | sed 's/^/GPU: /' >>"$summary"
  local generator=() arch archs=()
  command -v ninja >/dev/null && generator=(-G Ninja)
  arch="$(gpu_arch)"
  [[ "$arch" =~ ^[0-9]+$ ]] && archs=(-DSHARDFLOW_CUDA_ARCHS="$arch")
  local t0=$SECONDS
  { cmake -S "$root" -B "$builds/rt" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
      -DSHARDFLOW_RUNTIME_ONLY=ON -DSHARDFLOW_ENABLE_CUDA=ON "${archs[@]}" \
      "${SHARDFLOW_CUDA_CMAKE_ARGS[@]}" &&
    cmake --build "$builds/rt" --target shard-run cuda-kernel-check -j "$(nproc)"; } \
    >>"$log" 2>&1 || { tail -30 "$log"; note "build: FAILED (log: build.log)"; return 1; }
  note "build: shard-run and cuda-kernel-check in $builds/rt in $((SECONDS - t0)) s" \
       "(kernels for $([ -n "$arch" ] && echo "sm_$arch" || echo "the default architectures"))"
}

# The last `N passed, M failed` of a log's last part (after its last
# `==== ` line), as one summary line.
tally() { # name log exit-status
  local line
  [ "$3" = 125 ] && return 0 # skipped by the budget, and noted
  line="$(awk '/^==== / { part = "" } { part = part $0 "\n" } END { printf "%s", part }' "$2" |
    grep -Eo '[0-9]+ passed, [0-9]+ failed(, [0-9]+ skipped)?' | tail -1)"
  local how="exit $3"
  [ "$3" = 124 ] || [ "$3" = 137 ] && how="stopped at the end of the budget"
  note "$1: ${line:-no result line} ($how)"
  [ "$3" = 0 ] || status=1
}

check=(bash tools/gpu-check.sh --no-build --build-dir "$builds/rt")
# gpu_check NAME-SUFFIX MIN-SECONDS [gpu-check options...] PART: one part
# of DIR through gpu-check.sh, appended to gpu-check.log and tallied.
gpu_check() {
  local suffix="$1" min="$2" log="$logs/gpu-check.log"
  shift 2
  local part="${*: -1}"
  echo "==== $part$suffix" >>"$log"
  timed "gpu-check $part$suffix" "$min" "${check[@]}" "${@:1:$#-1}" "$dir/$part" >>"$log" 2>&1
  tally "gpu-check $part$suffix" "$log" $?
}

kernel_check() {
  local log="$logs/kernel-check.log"
  timed "cuda-kernel-check" 30 "$builds/rt/bin/cuda-kernel-check" >"$log" 2>&1
  tally "cuda-kernel-check" "$log" $?
  timed "cuda-kernel-check --time" 20 "$builds/rt/bin/cuda-kernel-check" --time >>"$log" 2>&1
  local rc=$?
  [ "$rc" = 125 ] && return
  grep -E "TFLOP/s" "$log" | head -20 | sed 's/^/cuda-kernel-check --time: /' >>"$summary"
  [ "$rc" = 0 ] || { note "cuda-kernel-check --time: FAILED (exit $rc)"; status=1; }
}

zoo_variants() {
  gpu_check " --cuda-graph" 20 --rtol 2e-2 --flags "--cuda-graph --repeat 2" zoo/bf16
  gpu_check " --pinned-memory always" 20 --rtol 2e-2 --flags "--pinned-memory always --repeat 2" \
    zoo/bf16
  gpu_check " --repeat 3" 20 --rtol 2e-2 --flags "--repeat 3" zoo/bf16
  gpu_check " --no-group-gemms" 20 --rtol 2e-2 --flags "--no-group-gemms" zoo/bf16
}

# The benches work in folders of their own next to the build (DIR may be
# replaced by the next copy); the weights are generated there.
bench_work() { # part
  local work="$builds/$1"
  mkdir -p "$work"
  cp "$dir/$1/"* "$work/"
  echo "$work"
}

# run_bench NAME PART SCRIPT LINES MIN-SECONDS [SCRIPT-ARGS...]: SCRIPT's
# `run` on its copy of DIR/PART, appended to NAME.log, and the lines
# starting with one of LINES (an ERE) in summary.txt.
run_bench() {
  local name="$1" part="$2" script="$3" lines="$4" min="$5"
  shift 5
  local log="$logs/$name.log" work
  work="$(bench_work "$part")"
  # The GPT-2 bench starts no part in its last 30 s.
  local budget_args=() rest
  rest=$(left)
  [ -n "$deadline" ] && [ "$script" = bench/gpt2_gpu_bench.py ] &&
    budget_args=(--budget "$((rest > 31 ? rest - 30 : 1))")
  local mark
  mark=0
  [ -f "$log" ] && mark=$(wc -l <"$log")
  timed "$name" "$min" "$python" "$script" run --dir "$work" \
    --shard-run "$builds/rt/bin/shard-run" "${budget_args[@]}" "$@" 2>&1 | tee -a "$log"
  local rc=${PIPESTATUS[0]}
  [ "$rc" = 125 ] && return
  tail -n +"$((mark + 1))" "$log" | grep -E "^($lines)" | sed "s/^/$name: /" >>"$summary"
  case "$rc" in
    0) ;;
    124|137) note "$name: stopped at the end of the budget" ;;
    *) note "$name: FAILED (exit $rc)"; status=1 ;;
  esac
}
gpt2_lines="device|model|shardflow|torch|ratio|logits|profile|attention|small|host|part|FAILED"

case "$step" in
  build)
    build_all || exit 1 ;;
  all)
    # The benches' weights (0.65 and 1.3 GB, from their seeds) while the
    # build runs.
    for part in bench llama; do
      work="$(bench_work "$part")"
      script=bench/gpt2_gpu_bench.py
      [ "$part" = llama ] && script=bench/llama_group_gemms_bench.py
      "$python" "$script" weights --dir "$work" >"$work/weights.log" 2>&1 &
    done
    build_all || exit 1
    wait
    for part in smoke zoo/f32 zoo/checks; do
      gpu_check "" 20 "$part"
    done
    gpu_check "" 20 --rtol 2e-2 zoo/bf16
    gpu_check "" 30 zoo/train
    run_bench bench bench bench/gpt2_gpu_bench.py "$gpt2_lines" 90 --parts core,profile
    kernel_check
    run_bench bench bench bench/gpt2_gpu_bench.py "$gpt2_lines" 30 \
      --parts attention,autotune,graph,ablations,host,small,half
    zoo_variants
    run_bench bench-llama llama bench/llama_group_gemms_bench.py "date|llama" 60
    log="$logs/sanitize.log"
    : >"$log"
    for part in smoke zoo/f32; do
      echo "==== memcheck $part" >>"$log"
      timed "sanitize memcheck $part" 60 "${check[@]}" --sanitize memcheck \
        $(shuffled_cases "$dir/$part") >>"$log" 2>&1
      tally "sanitize memcheck $part" "$log" $?
    done
    note "all: done in $SECONDS s (budget ${budget} s)"
    ;;
  check)
    build_all || exit 1
    kernel_check
    for part in smoke zoo/f32 zoo/checks; do
      gpu_check "" 0 "$part"
    done
    gpu_check "" 0 --rtol 2e-2 zoo/bf16
    gpu_check "" 0 zoo/train
    zoo_variants
    ;;
  sanitize)
    build_all || exit 1
    log="$logs/sanitize.log"
    : >"$log"
    for tool in ${3:-memcheck racecheck}; do
      for part in smoke zoo/f32; do
        echo "==== $tool $part" >>"$log"
        timeout "${SHARDFLOW_SANITIZE_TIMEOUT:-120}" "${check[@]}" --sanitize "$tool" \
          $(shuffled_cases "$dir/$part") >>"$log" 2>&1
        tally "sanitize $tool $part" "$log" $?
      done
    done
    ;;
  bench)
    build_all || exit 1
    run_bench bench bench bench/gpt2_gpu_bench.py "$gpt2_lines" 0
    ;;
  bench-llama)
    build_all || exit 1
    run_bench bench-llama llama bench/llama_group_gemms_bench.py "date|llama" 0
    ;;
esac
exit "$status"
