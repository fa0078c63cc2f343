"""GPT-2-small-shaped forward on one GPU: Shardflow against PyTorch.

Side by side in one run, on the same weights and token ids: our compiled
CUDA artifact (bf16, generated fused kernels, cuBLASLt, the runtime's
attention kernel) run by shard-run, PyTorch eager, and torch.compile. It
prints the time per forward of each, the ratios ours/eager and
ours/compile, our model FLOP utilization, and the logits' relative error
against PyTorch's float32 forward. The graph returns float32 logits, as
our artifact does (its last GEMM writes them in f32), so PyTorch's forward
returns them in float32 too (`.float()`, a cast after its bf16 GEMM). Both
are also timed returning bf16 logits (half the bytes): PyTorch's forward
without the cast, and our artifact compiled with `--outputs-in-dtype`.
It times the default artifact with the two-tile attention kernel
(`shard-run --attention-kernel mma2`) against the default one-tile kernel,
with cuBLASLt algorithms chosen by timing at load (`--gemm-autotune`)
against the heuristic's first,
and launched as one CUDA graph (`shard-run --cuda-graph`) against one
launch per operation.
At a small shape (batch 1, sequence 128: an artifact compiled from the same
model with `--input-shape`), where launch overhead rather than the GEMMs
decides the time, it times ours with and without `--cuda-graph` against
PyTorch eager and torch.compile again.
It times loading and a run's wall time (input upload and logits download
included) with page-locked host memory (`shard-run --pinned-memory
always`) against pageable memory (`never`).
Last, `shard-run --profile` shows where our time goes: GPU time per kind
of operation (GEMMs by epilogue, attention, each generated kernel) and the
slowest operations. It also times our artifact compiled
with each code generation feature turned off (`shard-opt --cuda-disable`:
vector accesses, the fused QKV GEMM read in place, cuBLASLt epilogues,
residual adds as the GEMM's C),
as a ratio to the default's time: whether each feature pays.

Two steps, because the GPU machines have no LLVM/MLIR (so no shard-opt):

    # where shard-opt is built: the model (weights streamed to disk from a
    # seeded RNG) and the artifact
    python bench/gpt2_gpu_bench.py prepare --out bench/out/gpt2s
    # on the GPU machine, from a checkout that holds bench/out/gpt2s (the
    # artifact, the graph and config.json; a runtime-only shard-run, see
    # tools/gpu-check.sh):
    python bench/gpt2_gpu_bench.py run --dir bench/out/gpt2s --shard-run build-gpu/bin/shard-run

`run` regenerates the weights with the same seed (identical bytes: the
artifact's CRC-32C checks prove it) unless they are already there.
The model: 12 layers, hidden 768, 12 heads, vocabulary 50257, 1024
positions, batch 8, sequence 1024 (GPT-2 small's shapes; weights random).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "python"))

# Artifacts compiled with one feature off (shard-opt --cuda-disable), timed
# against the default one.
ABLATIONS = ("vector-accesses", "packed-qkv", "gemm-epilogues", "gemm-residuals")
# Compiled with --outputs-in-dtype: the logits returned in bf16, as PyTorch's
# bf16 forward returns them.
HALF_LOGITS = "gpt2s.bf16-logits.shard"

CONFIG = dict(layers=12, hidden=768, heads=12, seq=1024, batch=8, vocab=50257, max_pos=1024)
# The small shape: batch and sequence of the launch-bound timing.
SMALL = (1, 128)
SMALL_ARTIFACT = "gpt2s.small.shard"
# Dense bf16 tensor-core peaks (FLOP/s) by device name, for MFU.
PEAK_BF16 = {"H100 SXM": 989.4e12, "H100 PCIe": 756.5e12, "H100 NVL": 835.5e12,
             "H200": 989.4e12, "A100": 312e12}


def _config(args) -> dict:
    cfg = dict(CONFIG)
    if args.layers:
        cfg["layers"] = args.layers
    if args.batch:
        cfg["batch"] = args.batch
    return cfg


def _generate(out: Path, cfg: dict) -> Path:
    from shardflow import models

    path = out / "gpt2s.onnx"
    if not (out / "gpt2s.data").exists() or not path.exists():
        t0 = time.time()
        # Symbolic batch and sequence: each artifact pins its own shape.
        models.generate_to_file("gpt2", path, external_data=True, symbolic=True, **cfg)
        print(f"generated {path} ({time.time() - t0:.0f} s)", file=sys.stderr)
    return path


def prepare(args) -> int:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    cfg = _config(args)
    model = _generate(out, cfg)
    shard_opt = Path(args.shard_opt)
    shape = f"input_ids={cfg['batch']},{cfg['seq']}"
    variants = [("gpt2s.shard", [shape]), (HALF_LOGITS, [shape, "--outputs-in-dtype"]),
                (SMALL_ARTIFACT, [f"input_ids={SMALL[0]},{SMALL[1]}"])]
    if args.ablations:
        variants += [(f"gpt2s.no-{f}.shard", [shape, "--cuda-disable", f]) for f in ABLATIONS]
    for name, (pin, *extra) in variants:
        cmd = [str(shard_opt), str(model), "--input-shape", pin, "--target", "cuda",
               "--dtype", "bf16", "-o", str(out / name)] + extra
        t0 = time.time()
        subprocess.run(cmd, check=True)
        print(f"compiled in {time.time() - t0:.1f} s: {' '.join(cmd)}", file=sys.stderr)
    (out / "config.json").write_text(json.dumps(cfg))
    return 0


def _flops(cfg: dict) -> float:
    """Forward FLOPs: 2 per multiply-add of every matmul; causal attention
    counts the scores and values it needs (half the square)."""
    b, s, h, l, v = cfg["batch"], cfg["seq"], cfg["hidden"], cfg["layers"], cfg["vocab"]
    tokens = b * s
    dense = 2 * tokens * (l * (3 * h * h + h * h + 8 * h * h) + h * v)
    attention = l * 2 * 2 * b * s * s * h / 2
    return float(dense + attention)


def _time_shard_run(args, out: Path, ids_path: Path, artifact: str = "gpt2s.shard",
                    extra: tuple[str, ...] = (), repeat: int | None = None
                    ) -> tuple[float, "object"]:
    import numpy as np

    result = out / "ours.npz"
    cmd = [str(args.shard_run), str(out / artifact), "--weights", str(out),
           "--input", f"input_ids={ids_path}", "--output", str(result),
           "--repeat", str(repeat or args.repeat), "--verbose", *extra]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    sys.stderr.write(proc.stderr)
    if proc.returncode:
        raise SystemExit(f"shard-run failed ({proc.returncode})")
    # shard-run --verbose prints the GPU time of the program (events around
    # it, no host copies), as torch's times below are measured.
    m = re.search(r"GPU program time: best ([0-9.]+) ms, median ([0-9.]+) ms", proc.stderr)
    if not m:
        raise SystemExit("no GPU program time in shard-run --verbose output")
    return float(m.group(2)) / 1e3, np.load(result)["logits"]


def _host_times(args, out: Path, ids_path: Path, pinned: str) -> tuple[float, float, float, str]:
    """shard-run --pinned-memory PINNED: (load seconds, the best run's wall
    seconds with its input upload and logits download, the best GPU program
    seconds, the best download's time and bandwidth as shard-run gives
    them)."""
    cmd = [str(args.shard_run), str(out / "gpt2s.shard"), "--weights", str(out),
           "--input", f"input_ids={ids_path}", "--repeat", "5", "--verbose",
           "--pinned-memory", pinned]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    m = re.search(r"load ([0-9.]+) s, first run [0-9.]+ s, best of \d+ runs ([0-9.]+) s",
                  proc.stderr)
    g = re.search(r"GPU program time: best ([0-9.]+) ms", proc.stderr)
    d = re.search(r"outputs downloaded \(\d+ bytes, [a-z-]+ memory\): best ([0-9.]+ ms "
                  r"\([0-9.]+ GB/s\))", proc.stderr)
    if proc.returncode or not m or not g or not d:
        sys.stderr.write(proc.stderr)
        raise SystemExit(f"shard-run --pinned-memory {pinned} failed ({proc.returncode})")
    return float(m.group(1)), float(m.group(2)), float(g.group(1)) / 1e3, d.group(1)


def _torch_model(model_path: Path, cfg: dict):
    import onnx
    import torch
    import torch.nn.functional as F
    from onnx import numpy_helper

    m = onnx.load(str(model_path))  # external data next to it
    w = {t.name: torch.from_numpy(numpy_helper.to_array(t).copy()) for t in m.graph.initializer}
    heads, hidden = cfg["heads"], cfg["hidden"]

    def forward(params, ids):
        b, s = ids.shape
        x = params["wte.weight"][ids] + params["wpe.weight"][:s][None]
        for i in range(cfg["layers"]):
            p = f"h.{i}"
            h = F.layer_norm(x, (hidden,), params[f"{p}.ln_1.weight"], params[f"{p}.ln_1.bias"])
            qkv = h @ params[f"{p}.attn.c_attn.weight"] + params[f"{p}.attn.c_attn.bias"]
            q, k, v = (t.view(b, s, heads, -1).transpose(1, 2) for t in qkv.split(hidden, -1))
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            a = a.transpose(1, 2).reshape(b, s, hidden)
            x = x + a @ params[f"{p}.attn.c_proj.weight"] + params[f"{p}.attn.c_proj.bias"]
            h = F.layer_norm(x, (hidden,), params[f"{p}.ln_2.weight"], params[f"{p}.ln_2.bias"])
            h = F.gelu(h @ params[f"{p}.mlp.c_fc.weight"] + params[f"{p}.mlp.c_fc.bias"],
                       approximate="tanh")
            x = x + h @ params[f"{p}.mlp.c_proj.weight"] + params[f"{p}.mlp.c_proj.bias"]
        x = F.layer_norm(x, (hidden,), params["ln_f.weight"], params["ln_f.bias"])
        return x @ params["lm_head.weight"]

    return forward, w


def _time_torch(fn, ids, repeat: int) -> float:
    import torch

    for _ in range(3):
        fn(ids)
    torch.cuda.synchronize()
    times = []
    for _ in range(repeat):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn(ids)
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    times.sort()
    return times[len(times) // 2]


def run(args) -> int:
    import numpy as np
    import torch

    out = Path(args.dir)
    cfg = json.loads((out / "config.json").read_text())
    model_path = _generate(out, cfg)
    ids = np.random.default_rng(1).integers(0, cfg["vocab"], (cfg["batch"], cfg["seq"]),
                                            dtype=np.int64)
    ids_path = out / "input_ids.npy"
    np.save(ids_path, ids)

    ours_s, ours_logits = _time_shard_run(args, out, ids_path)
    half = (_time_shard_run(args, out, ids_path, HALF_LOGITS)
            if (out / HALF_LOGITS).exists() else None)
    # The attention kernel with two query tiles per warp, against the
    # default one-tile kernel (which one should be the default).
    mma2 = _time_shard_run(args, out, ids_path, extra=("--attention-kernel", "mma2"))
    # cuBLASLt algorithms chosen by timing at load instead of the
    # heuristic's first (which one should be the default).
    tuned = _time_shard_run(args, out, ids_path, extra=("--gemm-autotune",))
    # The program captured once into a CUDA graph and launched whole.
    try:
        graphed = _time_shard_run(args, out, ids_path, extra=("--cuda-graph",))
    except SystemExit as e:
        graphed = str(e)
    ablated = {}  # feature -> (seconds, logits)
    for feature in ABLATIONS:
        if (out / f"gpt2s.no-{feature}.shard").exists():
            ablated[feature] = _time_shard_run(args, out, ids_path,
                                               f"gpt2s.no-{feature}.shard")

    # The small shape, launch-bound: ours with and without the graph.
    small = None
    if (out / SMALL_ARTIFACT).exists():
        small_ids = np.random.default_rng(2).integers(0, cfg["vocab"], SMALL, dtype=np.int64)
        small_path = out / "input_ids.small.npy"
        np.save(small_path, small_ids)
        reps = args.repeat * 5
        small = {"ours": _time_shard_run(args, out, small_path, SMALL_ARTIFACT, repeat=reps)}
        try:
            small["graph"] = _time_shard_run(args, out, small_path, SMALL_ARTIFACT,
                                             extra=("--cuda-graph",), repeat=reps)
        except SystemExit as e:
            small["graph"] = str(e)

    # Page-locked host memory: the weights' upload (staged by the loader
    # threads) and each run's logits download, always against never.
    host = {mode: _host_times(args, out, ids_path, mode) for mode in ("always", "never")}

    forward, w = _torch_model(model_path, cfg)
    dev = torch.device("cuda")
    tids = torch.from_numpy(ids).to(dev)
    with torch.inference_mode():
        f32 = {k: v.to(dev) for k, v in w.items()}
        ref = forward(f32, tids).float().cpu().numpy()
        if small:
            small_tids = torch.from_numpy(small_ids).to(dev)
            small_ref = forward(f32, small_tids).float().cpu().numpy()
        del f32
        bf = {k: v.to(dev, torch.bfloat16) for k, v in w.items()}
        # The graph's output: float32 logits.
        eager = lambda t: forward(bf, t).float()
        eager_s = _time_torch(eager, tids, args.repeat)
        compile_s = _time_torch(torch.compile(eager), tids, args.repeat)
        torch_bf16 = eager(tids).cpu().numpy()
        # The same forward returning its bf16 logits as they are.
        eager_half = lambda t: forward(bf, t)
        eager_half_s = _time_torch(eager_half, tids, args.repeat)
        compile_half_s = _time_torch(torch.compile(eager_half), tids, args.repeat)
        if small:
            small["eager"] = _time_torch(eager, small_tids, reps)
            small["compile"] = _time_torch(torch.compile(eager), small_tids, reps)

    err = float(np.linalg.norm(ours_logits - ref) / np.linalg.norm(ref))
    err_torch = float(np.linalg.norm(torch_bf16 - ref) / np.linalg.norm(ref))
    name = torch.cuda.get_device_name()
    peak = next((v for k, v in PEAK_BF16.items() if k in name), None)
    flops = _flops(cfg)
    print(f"device: {name}; date: {time.strftime('%Y-%m-%d')}")
    print(f"model: GPT-2 small shapes {cfg}, bf16, {flops / 1e12:.2f} TFLOP per forward")
    print(f"shardflow      {ours_s * 1e3:9.2f} ms  {flops / ours_s / 1e12:7.1f} TFLOP/s"
          + (f"  MFU {flops / ours_s / peak:.1%}" if peak else ""))
    print(f"torch eager    {eager_s * 1e3:9.2f} ms  {flops / eager_s / 1e12:7.1f} TFLOP/s")
    print(f"torch.compile  {compile_s * 1e3:9.2f} ms  {flops / compile_s / 1e12:7.1f} TFLOP/s")
    print(f"torch eager, bf16 logits    {eager_half_s * 1e3:9.2f} ms")
    print(f"torch.compile, bf16 logits  {compile_half_s * 1e3:9.2f} ms")
    print(f"ratio ours/eager {ours_s / eager_s:.3f}  ours/compile {ours_s / compile_s:.3f}"
          f"  (f32 logits, as the graph returns them)")
    print(f"logits rel. L2 error vs torch f32: ours {err:.2e}, torch bf16 {err_torch:.2e}")
    worst = err
    if half:
        e = float(np.linalg.norm(half[1] - ref) / np.linalg.norm(ref))
        worst = max(worst, e)
        print(f"shardflow, bf16 logits  {half[0] * 1e3:9.2f} ms  (--outputs-in-dtype; "
              f"logits error {e:.2e})")
        print(f"ratio with bf16 logits on both sides: ours/eager {half[0] / eager_half_s:.3f}"
              f"  ours/compile {half[0] / compile_half_s:.3f}")
    e = float(np.linalg.norm(mma2[1] - ref) / np.linalg.norm(ref))
    worst = max(worst, e)
    print(f"shardflow with --attention-kernel mma2 {mma2[0] * 1e3:9.2f} ms  "
          f"{mma2[0] / ours_s:.3f} of the default's time  (logits error {e:.2e})")
    e = float(np.linalg.norm(tuned[1] - ref) / np.linalg.norm(ref))
    worst = max(worst, e)
    print(f"shardflow with --gemm-autotune {tuned[0] * 1e3:9.2f} ms  "
          f"{tuned[0] / ours_s:.3f} of the default's time  (logits error {e:.2e})")
    if isinstance(graphed, str):
        print(f"shardflow with --cuda-graph: {graphed}")
        worst = float("inf")
    else:
        e = float(np.linalg.norm(graphed[1] - ref) / np.linalg.norm(ref))
        worst = max(worst, e)
        print(f"shardflow with --cuda-graph {graphed[0] * 1e3:9.2f} ms  "
              f"{graphed[0] / ours_s:.3f} of the default's time  (logits error {e:.2e})")
    if small:
        shape = f"batch {SMALL[0]}, sequence {SMALL[1]}"
        ours_small, logits = small["ours"]
        e = float(np.linalg.norm(logits - small_ref) / np.linalg.norm(small_ref))
        worst = max(worst, e)
        print(f"small shape ({shape}): shardflow {ours_small * 1e3:8.3f} ms  "
              f"torch eager {small['eager'] * 1e3:8.3f} ms  "
              f"torch.compile {small['compile'] * 1e3:8.3f} ms  (logits error {e:.2e})")
        print(f"small shape ratio ours/eager {ours_small / small['eager']:.3f}  "
              f"ours/compile {ours_small / small['compile']:.3f}")
        if isinstance(small["graph"], str):
            print(f"small shape with --cuda-graph: {small['graph']}")
            worst = float("inf")
        else:
            seconds, logits = small["graph"]
            e = float(np.linalg.norm(logits - small_ref) / np.linalg.norm(small_ref))
            worst = max(worst, e)
            print(f"small shape with --cuda-graph {seconds * 1e3:8.3f} ms  "
                  f"{seconds / ours_small:.3f} of the default's time  "
                  f"ours/eager {seconds / small['eager']:.3f}  "
                  f"ours/compile {seconds / small['compile']:.3f}  (logits error {e:.2e})")
    for mode, (load, wall, gpu, download) in host.items():
        print(f"host copies, --pinned-memory {mode:6}: load {load:.3f} s, best run "
              f"{wall * 1e3:.2f} ms (GPU program {gpu * 1e3:.2f} ms, logits download {download})")
    (load_p, wall_p, gpu_p, _), (load_n, wall_n, gpu_n, _) = host["always"], host["never"]
    print(f"ratio pinned/pageable: load {load_p / load_n:.3f}, run wall time {wall_p / wall_n:.3f}, "
          f"run minus GPU program {(wall_p - gpu_p) / max(wall_n - gpu_n, 1e-9):.3f}")
    for feature, (seconds, logits) in ablated.items():
        e = float(np.linalg.norm(logits - ref) / np.linalg.norm(ref))
        worst = max(worst, e)
        print(f"shardflow without {feature:15} {seconds * 1e3:9.2f} ms  "
              f"{seconds / ours_s:.3f} of the default's time  (logits error {e:.2e})")
    # Where our time goes: shard-run --profile (events around every
    # operation; a run of its own, not the timed one).
    proc = subprocess.run([str(args.shard_run), str(out / "gpt2s.shard"), "--weights", str(out),
                           "--input", f"input_ids={ids_path}", "--repeat", "5", "--profile"],
                          capture_output=True, text=True)
    report = proc.stderr[proc.stderr.find("shard-run: profile:"):]
    if proc.returncode or "profile:" not in report:
        print(f"profile: shard-run --profile failed ({proc.returncode})")
        sys.stderr.write(proc.stderr)
    else:
        for line in report.splitlines():
            print("profile: " + line.removeprefix("shard-run: profile: ").strip())
    return 0 if worst < 2e-2 else 1


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="step", required=True)
    p = sub.add_parser("prepare", help="generate the model and compile it (needs shard-opt)")
    p.add_argument("--out", required=True, help="folder for the model and the artifact")
    p.add_argument("--shard-opt", default=str(REPO / "build" / "bin" / "shard-opt"))
    p.add_argument("--no-ablations", dest="ablations", action="store_false",
                   help="compile only the default artifact, not one per --cuda-disable "
                        "feature (" + ", ".join(ABLATIONS) + ")")
    r = sub.add_parser("run", help="time ours, torch eager and torch.compile (needs a GPU)")
    r.add_argument("--dir", required=True, help="the folder `prepare` wrote")
    r.add_argument("--shard-run", required=True, help="a CUDA-enabled shard-run")
    r.add_argument("--repeat", type=int, default=20, help="timed forwards of each (median)")
    for q in (p,):
        q.add_argument("--layers", type=int, help="fewer layers for a quick check")
        q.add_argument("--batch", type=int, help="another batch size")
    args = ap.parse_args(argv)
    return prepare(args) if args.step == "prepare" else run(args)


if __name__ == "__main__":
    sys.exit(main())
