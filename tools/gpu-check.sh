#!/usr/bin/env bash
# Checks shard-run's CUDA executor on a GPU machine that has the CUDA
# toolkit (headers, nvcc), the driver, cuBLASLt and NCCL, but no LLVM/MLIR:
# builds a runtime-only shard-run with CUDA in a fresh folder, checks that
# it links no CUDA library, runs each given artifact and compares its
# outputs with the expected .npz (relative and absolute tolerance).
#
#   bash tools/gpu-check.sh [options] CASE...
#
# A CASE is an artifact X.shard (inputs from X.inputs.npz and the reference
# from X.expected.npz, next to it) or a folder of them. Artifacts compiled
# for several ranks run under `mpirun -np N` (one GPU per rank). With
# X.expected-error instead, the run must fail and its stderr contain every
# line of that file (bad inputs reported through the kernels' status words).
# With X.data.npz, X is a training step: it runs `--data X.data.npz --steps
# N` (N: the lines of X.expected.jsonl, the reference's log) and passes when
# every step's loss and gradient norm are within 1e-4 relative of the
# reference's and the saved weights within 1e-3 relative L2 of
# X.expected.npz.
#
#   --build-dir DIR   where to build (default build-gpu-check; emptied first)
#   --no-build        reuse the shard-run already in --build-dir
#   --rtol R          tolerance for f32 results (default 1e-4; f16/bf16: 1e-2)
#   --flags "..."     extra shard-run flags, e.g. "--verbose --repeat 10"
#   --sanitize TOOL   run shard-run under compute-sanitizer --tool TOOL
#                     (memcheck, racecheck, synccheck, initcheck): a case
#                     whose run it reports errors for fails, expected-error
#                     cases included ($COMPUTE_SANITIZER names the binary)
#
# Hand-written cases (cuBLASLt shape classes, C broadcasts, mixed precision,
# NCCL collectives, streams, a device kernel) come from
#   python -m shardflow.cuda_smoke DIR     (needs numpy; run it anywhere)
# and the zoo models compiled with --target cuda (f32 and --dtype bf16,
# single rank and dp=2,tp=2 megatron) with onnxruntime's outputs from
#   python -m shardflow.cuda_zoo DIR       (needs shard-opt: run it where it is built)
# (X.onnx next to X.shard is passed as --weights; check DIR/bf16 with --rtol 2e-2;
# DIR/checks holds the expected-error cases, DIR/train the training steps of
# the real-export test bed). A CUDA artifact for more ranks
# than the machine has GPUs is skipped (NCCL takes one GPU per rank).
# Comparison uses only python3's standard library (no numpy needed here).
# tools/gpu-session.sh runs all of this (and the bench) in a few commands.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="$root/build-gpu-check"
rebuild=1
rtol=1e-4
flags=""
sanitize=""
cases=()
while [ $# -gt 0 ]; do
  case "$1" in
    --build-dir) build="$2"; shift 2 ;;
    --no-build) rebuild=0; shift ;;
    --rtol) rtol="$2"; shift 2 ;;
    --flags) flags="$2"; shift 2 ;;
    --sanitize) sanitize="$2"; shift 2 ;;
    -h|--help) sed -n '2,41p' "$0"; exit 0 ;;
    *) cases+=("$1"); shift ;;
  esac
done

# NCCL and cuBLASLt: the toolkit's, or PyTorch's pip packages' (headers
# for the build, LD_LIBRARY_PATH for the runs).
echo "== NCCL and cuBLASLt"
source "$root/tools/cuda-env.sh" python3

if [ "$rebuild" = 1 ]; then
  echo "== building a runtime-only shard-run with CUDA in $build"
  rm -rf "$build"
  generator=()
  command -v ninja >/dev/null && generator=(-G Ninja)
  if ! cmake -S "$root" -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
        -DSHARDFLOW_RUNTIME_ONLY=ON -DSHARDFLOW_ENABLE_CUDA=ON \
        "${SHARDFLOW_CUDA_CMAKE_ARGS[@]}" >"$build.log" 2>&1 ||
     ! cmake --build "$build" --target shard-run -j "$(nproc)" >>"$build.log" 2>&1; then
    tail -30 "$build.log"
    echo "build failed (log: $build.log)"
    exit 1
  fi
  grep -E "shard-run:" "$build.log" | sed 's/^/  /'
fi
shard_run="$build/bin/shard-run"
[ -x "$shard_run" ] || { echo "no $shard_run"; exit 1; }

echo "== shard-run links no CUDA library (they are loaded at run time)"
if ldd "$shard_run" | grep -Eq 'libcuda|libcudart|libcublas|libnccl'; then
  ldd "$shard_run"
  echo "FAIL: shard-run links a CUDA library"
  exit 1
fi
gpus=0
if command -v nvidia-smi >/dev/null; then
  nvidia-smi --query-gpu=index,name,driver_version,memory.total \
    --format=csv,noheader | sed 's/^/  GPU /'
  gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
elif [ -n "${SHARDFLOW_STANDIN_GPUS:-}" ]; then
  # A dry run on the stand-in libraries (tools/cuda-standin/README.md).
  gpus=$SHARDFLOW_STANDIN_GPUS
  echo "  no nvidia-smi: $gpus stand-in GPU(s) (SHARDFLOW_STANDIN_GPUS)"
fi

if [ -n "$sanitize" ]; then
  case "$sanitize" in
    memcheck|racecheck|synccheck|initcheck) ;;
    *) echo "--sanitize: unknown tool '$sanitize' (memcheck, racecheck, synccheck or initcheck)"
       exit 2 ;;
  esac
  sanitizer="${COMPUTE_SANITIZER:-$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)}"
  [ -x "$sanitizer" ] || { echo "--sanitize: no compute-sanitizer ($sanitizer); set COMPUTE_SANITIZER"; exit 1; }
  echo "== under $sanitizer --tool $sanitize"
fi

# The artifacts to run, from files and folders.
artifacts=()
for c in "${cases[@]}"; do
  if [ -d "$c" ]; then
    while IFS= read -r f; do artifacts+=("$f"); done < <(ls "$c"/*.shard 2>/dev/null | grep -v '\.cpu\.shard$')
  else
    artifacts+=("$c")
  fi
done
[ ${#artifacts[@]} -gt 0 ] || { echo "no artifacts given (see --help)"; exit 1; }

# compare outputs GOT.npz EXPECTED.npz RTOL
# compare training GOT.jsonl GOT.npz EXPECTED.jsonl EXPECTED.npz
compare() {
  python3 - "$@" <<'EOF'
import ast, json, math, struct, sys, zipfile

FORMATS = {"f2": "e", "f4": "f", "f8": "d", "i1": "b", "u1": "B", "b1": "?", "i2": "h",
           "u2": "H", "i4": "i", "u4": "I", "i8": "q", "u8": "Q"}

def load(path):
    out = {}
    with zipfile.ZipFile(path) as z:
        for member in z.namelist():
            data = z.read(member)
            length = struct.unpack("<H", data[8:10])[0] if data[6] == 1 else struct.unpack("<I", data[8:12])[0]
            start = (10 if data[6] == 1 else 12) + length
            header = ast.literal_eval(data[10 if data[6] == 1 else 12:start].decode("latin1"))
            kind = header["descr"][1:]
            count = 1
            for d in header["shape"]:
                count *= d
            values = struct.unpack("<%d%s" % (count, FORMATS[kind]), data[start:start + count * int(kind[1:])])
            out[member[:-4]] = (kind, tuple(header["shape"]), values)
    return out

def training(got_log, got_weights, want_log, want_weights):
    """Each step's loss and gradient norm within 1e-4 relative, the final
    weights within 1e-3 relative L2 (all of them together)."""
    got = [json.loads(line) for line in open(got_log) if line.strip()]
    want = [json.loads(line) for line in open(want_log) if line.strip()]
    ok = len(got) == len(want)
    if not ok:
        print(f"    {len(got)} steps logged, expected {len(want)}")
    for g, w in zip(got, want):
        for key in ("loss", "grad_norm"):
            err = abs(g[key] - w[key]) / abs(w[key]) if w[key] else abs(g[key])
            if not err <= 1e-4:
                print(f"    step {w['step']}: {key} {g[key]}, expected {w[key]} (relative error {err:.2e} > 1e-4)")
                ok = False
    print("    steps: " + ", ".join(f"loss {g['loss']:.6g} ({w['loss']:.6g})" for g, w in zip(got, want)))
    mine, ref = load(got_weights), load(want_weights)
    if set(mine) != set(ref):
        print(f"    weights: {sorted(set(ref) - set(mine))} missing, {sorted(set(mine) - set(ref))} unexpected")
        return False
    num = den = 0.0
    for name, (kind, shape, values) in ref.items():
        if mine[name][1] != shape:
            print(f"    {name}: shape {list(mine[name][1])}, expected {list(shape)}")
            return False
        num += sum((a - b) ** 2 for a, b in zip(mine[name][2], values))
        den += sum(b * b for b in values)
    l2 = math.sqrt(num / den) if den else math.sqrt(num)
    print(f"    weights: relative L2 {l2:.2e} (tolerance 1e-3)")
    return ok and l2 <= 1e-3

if sys.argv[1] == "training":
    sys.exit(0 if training(*sys.argv[2:6]) else 1)
got, want, rtol = load(sys.argv[2]), load(sys.argv[3]), float(sys.argv[4])
ok = True
for name, (kind, shape, ref) in want.items():
    if name not in got:
        print(f"    {name}: missing from the outputs"); ok = False; continue
    gkind, gshape, values = got[name]
    if (gkind, gshape) != (kind, shape):
        print(f"    {name}: {gkind}{list(gshape)}, expected {kind}{list(shape)}"); ok = False; continue
    tol = rtol if kind in ("f4", "f8") else max(rtol, 1e-2) if kind == "f2" else 0.0
    worst, where = 0.0, -1
    for i, (g, w) in enumerate(zip(values, ref)):
        if isinstance(w, float) and (math.isnan(w) or math.isinf(w)):
            bad = not (g == w or (math.isnan(g) and math.isnan(w)))
            err = math.inf if bad else 0.0
        else:
            err = abs(g - w) / (tol + tol * abs(w)) if tol else float(g != w)
        if err > worst:
            worst, where = err, i
    status = "ok" if worst <= 1.0 else "MISMATCH"
    if worst > 1.0:
        ok = False
        print(f"    {name}: {status}: element {where} is {values[where]}, expected {ref[where]} (rtol=atol={tol})")
    else:
        print(f"    {name}: ok (worst error {worst:.3f} of the tolerance {tol})")
sys.exit(0 if ok else 1)
EOF
}

passed=0
failed=0
skipped=0
# Under --sanitize, exit status 97 is the sanitizer's: the case fails.
sanitizer_objected() { # exit-status
  [ -n "$sanitize" ] && [ "$1" = 97 ] || return 1
  echo "   FAIL: compute-sanitizer ($sanitize) reported errors"
  failed=$((failed + 1))
}
out_dir="$build/gpu-check-outputs"
mkdir -p "$out_dir"
for art in "${artifacts[@]}"; do
  base="${art%.shard}"
  name="$(basename "$base")"
  world=$(awk '$1 == "world-size" { print $2; exit }' "$art")
  launch=()
  if [ "${world:-1}" -gt 1 ]; then
    if ! command -v mpirun >/dev/null; then
      echo "-- $name: SKIPPED (needs $world ranks and there is no mpirun)"
      skipped=$((skipped + 1))
      continue
    fi
    # One rank per GPU: NCCL refuses two ranks on one GPU.
    if grep -q '^target cuda' "$art" && [ "$gpus" -lt "$world" ]; then
      echo "-- $name: SKIPPED (needs $world GPUs, this machine has $gpus)"
      skipped=$((skipped + 1))
      continue
    fi
    # --oversubscribe: a rank per GPU may be more ranks than cores.
    launch=(mpirun -np "$world" --oversubscribe)
    [ "$(id -u)" = 0 ] && launch+=(--allow-run-as-root)
  fi
  run=("$shard_run")
  if [ -n "$sanitize" ]; then
    # Exit status 97 says the sanitizer found errors (shard-run's own
    # failures exit 1). API calls that return an error are not counted:
    # NCCL probes its kernels with cudaFuncGetAttributes at initialization
    # and takes "no kernel image" for an answer (seen on an H200,
    # 2026-11-26); shard-run checks the result of every call it makes.
    run=("$sanitizer" --tool "$sanitize" --error-exitcode 97 --print-limit 20
         --report-api-errors no --target-processes all "$shard_run")
  fi
  args=("$art" --output "$out_dir/$name.npz")
  [ -f "$base.inputs.npz" ] && args+=(--inputs "$base.inputs.npz")
  # A model next to its artifact holds the weights (the compile-time folder
  # may not exist here).
  [ -f "$base.onnx" ] && args+=(--weights "$base.onnx")
  echo "-- $name"
  if [ -f "$base.expected-error" ]; then
    # shellcheck disable=SC2086
    "${launch[@]}" "${run[@]}" "${args[@]}" $flags >"$out_dir/$name.stdout" \
      2>"$out_dir/$name.stderr"
    rc=$?
    if sanitizer_objected "$rc"; then
      grep -h "=========" "$out_dir/$name.stdout" "$out_dir/$name.stderr" | head -20 | sed 's/^/   /'
      continue
    fi
    if [ "$rc" = 0 ]; then
      echo "   FAIL: shard-run succeeded; expected an error"
      failed=$((failed + 1))
      continue
    fi
    sed 's/^/   /' "$out_dir/$name.stderr" | head -5
    missing=0
    while IFS= read -r phrase; do
      [ -z "$phrase" ] && continue
      if ! grep -qF -- "$phrase" "$out_dir/$name.stderr"; then
        echo "   FAIL: the error does not say: $phrase"
        missing=1
      fi
    done <"$base.expected-error"
    if [ "$missing" = 0 ]; then
      echo "   ok (failed as expected)"
      passed=$((passed + 1))
    else
      failed=$((failed + 1))
    fi
    continue
  fi
  if [ -f "$base.data.npz" ]; then
    # A training step: as many steps as the reference logged, then its log
    # and its weights against the reference's.
    steps=$(grep -c . "$base.expected.jsonl")
    targs=("$art" --data "$base.data.npz" --steps "$steps" --log "$out_dir/$name.jsonl"
           --save-weights "$out_dir/$name.npz")
    [ -f "$base.onnx" ] && targs+=(--weights "$base.onnx")
    rm -f "$out_dir/$name.jsonl"
    # shellcheck disable=SC2086
    "${launch[@]}" "${run[@]}" "${targs[@]}" $flags 2>"$out_dir/$name.stderr"
    rc=$?
    sanitizer_objected "$rc" && continue
    if [ "$rc" != 0 ]; then
      tail -5 "$out_dir/$name.stderr" | sed 's/^/   /'
      echo "   FAIL: shard-run exited with an error"
      failed=$((failed + 1))
    elif compare training "$out_dir/$name.jsonl" "$out_dir/$name.npz" \
        "$base.expected.jsonl" "$base.expected.npz"; then
      passed=$((passed + 1))
    else
      echo "   FAIL: the training run differs from $base.expected.jsonl / .expected.npz"
      failed=$((failed + 1))
    fi
    continue
  fi
  # shellcheck disable=SC2086
  "${launch[@]}" "${run[@]}" "${args[@]}" $flags
  rc=$?
  sanitizer_objected "$rc" && continue
  if [ "$rc" != 0 ]; then
    echo "   FAIL: shard-run exited with an error"
    failed=$((failed + 1))
    continue
  fi
  if [ ! -f "$base.expected.npz" ]; then
    echo "   ran (no $base.expected.npz to compare with)"
    passed=$((passed + 1))
  elif compare outputs "$out_dir/$name.npz" "$base.expected.npz" "$rtol"; then
    passed=$((passed + 1))
  else
    echo "   FAIL: outputs differ from $base.expected.npz"
    failed=$((failed + 1))
  fi
done
if [ "$skipped" -gt 0 ]; then
  echo "== $passed passed, $failed failed, $skipped skipped"
else
  echo "== $passed passed, $failed failed"
fi
[ "$failed" = 0 ]
