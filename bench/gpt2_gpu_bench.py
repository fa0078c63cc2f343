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
The rest of `run` compares our artifacts with each other, in parts run
in this order (`--parts` picks some; `--budget SECONDS` skips the parts
that would start later, so a run with a time limit prints the most
important figures first): `shard-run --profile` (GPU time per kind of
operation: GEMMs by epilogue, attention, each generated kernel; the
slowest operations); the two-tile attention kernel (`--attention-kernel
mma2`) against the default one-tile kernel; cuBLASLt algorithms chosen by
timing at load (`--gemm-autotune`, its choices written to a file and
replayed by a second load with `--gemm-autotune-file`) against the
heuristic's first; one
launch per operation (`--no-cuda-graph`) against the default CUDA graph
(captured at the second run); each code
generation feature turned off (`shard-opt --cuda-disable`: vector
accesses, the fused QKV GEMM read in place, cuBLASLt epilogues, residual
adds as the GEMM's C) against the default, whether each pays; loading and
a run's wall time (input upload and logits download included) with
page-locked host memory (`--pinned-memory always`) against pageable
memory (`never`); a small shape (batch 1, sequence 128: an artifact
compiled from the same model with `--input-shape`), where launch overhead
rather than the GEMMs decides the time, ours with and without a CUDA
graph against PyTorch eager and torch.compile again; and last,
bf16 logits on both sides.

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
import re
import subprocess
import sys
import time
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "python"))

# Artifacts compiled with one feature off (shard-opt --cuda-disable), timed
# against the default one.
ABLATIONS = ("vector-accesses", "packed-qkv", "gemm-epilogues", "gemm-residuals",
             "gemm-padding")
# Compiled with --outputs-in-dtype: the logits returned in bf16, as PyTorch's
# bf16 forward returns them.
HALF_LOGITS = "gpt2s.bf16-logits.shard"

CONFIG = dict(layers=12, hidden=768, heads=12, seq=1024, batch=8, vocab=50257, max_pos=1024)
# The small shape: batch and sequence of the launch-bound timing.
SMALL = (1, 128)
SMALL_ARTIFACT = "gpt2s.small.shard"
# Dense bf16 tensor-core peaks (FLOP/s) by device name, for MFU.
PEAK_BF16 = {"H100 SXM": 989.4e12, "H100 80GB HBM3": 989.4e12, "H100 PCIe": 756.5e12,
             "H100 NVL": 835.5e12, "H200": 989.4e12, "A100": 312e12}


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
    # The small artifact's shape too: `run` feeds it ids of that shape.
    (out / "config.json").write_text(json.dumps({**cfg, "small": list(SMALL)}))
    return 0


def _load_config(out: Path) -> tuple[dict, tuple[int, int]]:
    """The model's configuration `prepare` wrote, and the small shape."""
    cfg = json.loads((out / "config.json").read_text())
    return cfg, tuple(cfg.pop("small", SMALL))


def _flops(cfg: dict) -> float:
    """Forward FLOPs: 2 per multiply-add of every matmul; causal attention
    counts the scores and values it needs (half the square)."""
    b, s, h, l, v = cfg["batch"], cfg["seq"], cfg["hidden"], cfg["layers"], cfg["vocab"]
    tokens = b * s
    dense = 2 * tokens * (l * (3 * h * h + h * h + 8 * h * h) + h * v)
    attention = l * 2 * 2 * b * s * s * h / 2
    return float(dense + attention)


class RunFailed(Exception):
    """A shard-run invocation failed: the part that ran it is reported as
    failed and the bench goes on with the next part."""


def _time_shard_run(args, out: Path, ids_path: Path, artifact: str = "gpt2s.shard",
                    extra: tuple[str, ...] = (), repeat: int | None = None,
                    info: dict | None = None) -> tuple[float, "object"]:
    """shard-run's median GPU program time and the logits; `info` gets the
    GPU's name as shard-run --verbose reports it ("device")."""
    import numpy as np

    result = out / "ours.npz"
    cmd = [str(args.shard_run), str(out / artifact), "--weights", str(out),
           "--input", f"input_ids={ids_path}", "--output", str(result),
           "--repeat", str(repeat or args.repeat), "--verbose", *extra]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    sys.stderr.write(proc.stderr)
    if proc.returncode:
        flags = " ".join(extra)
        raise RunFailed(f"shard-run {flags + ' ' if flags else ''}failed ({proc.returncode})")
    # shard-run --verbose prints the GPU time of the program (events around
    # it, no host copies), as torch's times below are measured.
    m = re.search(r"GPU program time: best ([0-9.]+) ms, median ([0-9.]+) ms", proc.stderr)
    if not m:
        raise RunFailed("no GPU program time in shard-run --verbose output")
    d = re.search(r"uses GPU \d+ \((.+), sm_\d+\)", proc.stderr)
    if info is not None and d:
        info["device"] = d.group(1)
    with np.load(result) as f:
        return float(m.group(2)) / 1e3, f["logits"]


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
        raise RunFailed(f"shard-run --pinned-memory {pinned} failed ({proc.returncode})")
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


class TorchSide:
    """PyTorch's forward of the same model on the same weights and ids: the
    float32 reference logits, and the bf16 forward timed eager and under
    torch.compile, returning float32 logits (as our graph does) or bf16
    ones (``half``). Each compiled form is compiled once per shape, with
    static shapes (``dynamic=False``: a second shape recompiles rather than
    turning the first into a dynamic-shape program)."""

    def __init__(self, model_path: Path, cfg: dict):
        import torch

        self.torch = torch
        self.forward, self.weights = _torch_model(model_path, cfg)
        self.device = torch.device("cuda")
        self._bf16 = None
        self._compiled = {}

    def _ids(self, ids):
        return self.torch.from_numpy(ids).to(self.device)

    def reference(self, ids):
        """float32 logits from float32 weights, as a numpy array."""
        torch = self.torch
        with torch.inference_mode():
            f32 = {k: v.to(self.device) for k, v in self.weights.items()}
            logits = self.forward(f32, self._ids(ids)).float().cpu().numpy()
            del f32
            torch.cuda.empty_cache()
        return logits

    def _fn(self, half: bool):
        torch = self.torch
        if self._bf16 is None:
            self._bf16 = {k: v.to(self.device, torch.bfloat16) for k, v in self.weights.items()}
        bf, forward = self._bf16, self.forward
        return (lambda t: forward(bf, t)) if half else (lambda t: forward(bf, t).float())

    def bf16_logits(self, ids):
        with self.torch.inference_mode():
            return self._fn(half=False)(self._ids(ids)).cpu().numpy()

    def sdpa(self, shape: tuple[int, int, int, int], repeat: int) -> float:
        """Median seconds of one causal bf16 scaled_dot_product_attention of
        query, key and value of ``shape`` [B, H, S, D] (PyTorch picks its
        flash kernel), as our attention kernel computes it in the model."""
        torch = self.torch
        q, k, v = (torch.randn(shape, device=self.device, dtype=torch.bfloat16)
                   for _ in range(3))
        fn = lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        with torch.inference_mode():
            return _median_cuda_time(torch, fn, repeat)

    def time(self, ids, compiled: bool, half: bool, repeat: int) -> float:
        """Median seconds per forward (the first warm-up run compiles)."""
        torch = self.torch
        key = (half, ids.shape)
        fn = self._fn(half)
        if compiled:
            if key not in self._compiled:
                self._compiled[key] = torch.compile(fn, dynamic=False)
            fn = self._compiled[key]
        t = self._ids(ids)
        with torch.inference_mode():
            return _median_cuda_time(torch, lambda: fn(t), repeat)


def _median_cuda_time(torch, fn, repeat: int) -> float:
    """Median seconds of ``fn()`` over ``repeat`` timed calls after 3
    warm-up calls, CUDA events around each."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeat):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    times.sort()
    return times[len(times) // 2]


# The parts of `run`, in the order they run: what the bench's goal needs
# first, then the cheap comparisons of our own artifacts, then those that
# compile PyTorch's forward again (a minute each), so that a run cut short
# by its time budget (--budget) or its caller has printed the most.
PARTS = {
    "core": "ours (default artifact) against torch eager and torch.compile, f32 logits; "
            "MFU; the logits' error",
    "profile": "shard-run --profile of the default artifact: where our time goes",
    "attention": "--attention-kernel mma2 against the default kernel",
    "autotune": "--gemm-autotune (timed, then replayed from its file) against cuBLASLt's "
                "heuristic",
    "graph": "--no-cuda-graph (one launch per operation) against the default graph",
    "ablations": "each --cuda-disable feature against the default artifact",
    "host": "--pinned-memory always against never: load and run wall time",
    "small": "batch 1 x 128 (launch-bound): ours, --no-cuda-graph, eager, torch.compile",
    "half": "bf16 logits on both sides (--outputs-in-dtype)",
}


def _rel(a, b) -> float:
    import numpy as np

    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def run(args, torch_side=None) -> int:
    """Runs the parts asked for (--parts, default all) in PARTS' order,
    printing each one's lines as soon as it has them; a part that fails
    (its shard-run, or PyTorch's side: torch.compile, memory) is reported
    and the next one runs. With --budget, a
    part that would start after that many seconds is skipped (and said
    so). Exit status 1 when a part failed or a logits error reached 2e-2."""
    import numpy as np

    started = time.monotonic()
    wanted = list(PARTS) if args.parts == "all" else args.parts.split(",")
    unknown = [p for p in wanted if p not in PARTS]
    if unknown:
        raise SystemExit(f"--parts: unknown part(s) {', '.join(unknown)}; "
                         f"the parts are {', '.join(PARTS)} (or all)")
    out = Path(args.dir)
    cfg, small = _load_config(out)
    model_path = _generate(out, cfg)
    ids = np.random.default_rng(1).integers(0, cfg["vocab"], (cfg["batch"], cfg["seq"]),
                                            dtype=np.int64)
    ids_path = out / "input_ids.npy"
    np.save(ids_path, ids)
    small_ids = np.random.default_rng(2).integers(0, cfg["vocab"], small, dtype=np.int64)
    small_path = out / "input_ids.small.npy"
    np.save(small_path, small_ids)
    flops = _flops(cfg)
    state = {"worst": 0.0, "status": 0}
    cache = {}  # what several parts use, computed by the first that needs it

    def say(line: str) -> None:
        print(line, flush=True)

    def torch_():
        if "torch" not in cache:
            cache["torch"] = (torch_side or TorchSide)(model_path, cfg)
        return cache["torch"]

    def ref():
        if "ref" not in cache:
            cache["ref"] = torch_().reference(ids)
        return cache["ref"]

    def ours():
        if "ours" not in cache:
            cache["ours"] = _time_shard_run(args, out, ids_path, info=cache)
        return cache["ours"]

    def eager(compiled: bool, half: bool = False):
        key = ("torch", compiled, half)
        if key not in cache:
            cache[key] = torch_().time(ids, compiled, half, args.repeat)
        return cache[key]

    def error(logits, reference=None) -> float:
        e = _rel(logits, ref() if reference is None else reference)
        state["worst"] = max(state["worst"], e)
        return e

    def compare(label: str, extra=(), artifact="gpt2s.shard"):
        seconds, logits = _time_shard_run(args, out, ids_path, artifact, extra)
        base = ours()[0]
        say(f"{label} {seconds * 1e3:9.2f} ms  {seconds / base:.3f} of the default's time  "
            f"(logits error {error(logits):.2e})")

    def part_core():
        # Printed as measured: a torch.compile that fails leaves the rest.
        seconds, logits = ours()
        name = cache.get("device", "unknown")
        peak = next((v for k, v in PEAK_BF16.items() if k in name), None)
        say(f"device: {name}; date: {time.strftime('%Y-%m-%d')}")
        say(f"model: GPT-2 small shapes {cfg}, bf16, {flops / 1e12:.2f} TFLOP per forward")
        say(f"shardflow      {seconds * 1e3:9.2f} ms  {flops / seconds / 1e12:7.1f} TFLOP/s"
            + (f"  MFU {flops / seconds / peak:.1%}" if peak else ""))
        t = torch_()
        err, err_torch = error(logits), _rel(t.bf16_logits(ids), ref())
        say(f"logits rel. L2 error vs torch f32: ours {err:.2e}, torch bf16 {err_torch:.2e}")
        eager_s = eager(False)
        say(f"torch eager    {eager_s * 1e3:9.2f} ms  {flops / eager_s / 1e12:7.1f} TFLOP/s")
        say(f"ratio ours/eager {seconds / eager_s:.3f}  (f32 logits, as the graph returns them)")
        compile_s = eager(True)
        say(f"torch.compile  {compile_s * 1e3:9.2f} ms  {flops / compile_s / 1e12:7.1f} TFLOP/s")
        say(f"ratio ours/compile {seconds / compile_s:.3f}  (f32 logits)")

    def profile_report() -> str:
        # Events around every operation; a run of its own, not the timed one.
        if "profile" not in cache:
            proc = subprocess.run([str(args.shard_run), str(out / "gpt2s.shard"), "--weights",
                                   str(out), "--input", f"input_ids={ids_path}", "--repeat",
                                   "5", "--profile"], capture_output=True, text=True)
            report = proc.stderr[proc.stderr.find("shard-run: profile:"):]
            if proc.returncode or "profile:" not in report:
                sys.stderr.write(proc.stderr)
                raise RunFailed(f"shard-run --profile failed ({proc.returncode})")
            cache["profile"] = report
            # "attention  COUNT  MS-PER-RUN  SHARE": our attention kernels' time.
            m = re.search(r"^\s*attention\s+(\d+)\s+([0-9.]+)\s", report, re.M)
            if m:
                cache["attention"] = (int(m.group(1)), float(m.group(2)) / 1e3)
        return cache["profile"]

    def part_profile():
        for line in profile_report().splitlines():
            say("profile: " + line.removeprefix("shard-run: profile: ").strip())

    def part_attention():
        compare("shardflow with --attention-kernel mma2", ("--attention-kernel", "mma2"))
        # The profile part may have run in another invocation (--parts).
        profile_report()
        if "attention" in cache:
            # Our default kernel's share of the forward (from the profile)
            # against PyTorch's SDPA on the same shapes.
            count, seconds = cache["attention"]
            head = cfg["hidden"] // cfg["heads"]
            sdpa = torch_().sdpa((cfg["batch"], cfg["heads"], cfg["seq"], head), args.repeat)
            # One layer's causal attention, as _flops counts it.
            per = 2 * cfg["batch"] * cfg["seq"] ** 2 * cfg["hidden"]
            say(f"attention per layer: ours {seconds / count * 1e3:.3f} ms, torch SDPA "
                f"{sdpa * 1e3:.3f} ms, ratio ours/SDPA {seconds / count / sdpa:.3f} "
                f"({per / (seconds / count) / 1e12:.1f} against {per / sdpa / 1e12:.1f} TFLOP/s)")

    def part_autotune():
        # The first load times the algorithms and writes the file, the
        # second takes its choices without timing: the same GEMMs.
        choices = out / "gemm-choices.txt"
        choices.unlink(missing_ok=True)
        compare("shardflow with --gemm-autotune", ("--gemm-autotune-file", str(choices)))
        compare("shardflow with --gemm-autotune-file, replayed",
                ("--gemm-autotune-file", str(choices)))

    def part_graph():
        compare("shardflow with --no-cuda-graph", ("--no-cuda-graph",))

    def part_half():
        if not (out / HALF_LOGITS).exists():
            raise RunFailed(f"no {HALF_LOGITS}: run prepare again")
        seconds, logits = _time_shard_run(args, out, ids_path, HALF_LOGITS)
        eager_s, compile_s = eager(False, half=True), eager(True, half=True)
        say(f"torch eager, bf16 logits    {eager_s * 1e3:9.2f} ms")
        say(f"torch.compile, bf16 logits  {compile_s * 1e3:9.2f} ms")
        say(f"shardflow, bf16 logits  {seconds * 1e3:9.2f} ms  (--outputs-in-dtype; "
            f"logits error {error(logits):.2e})")
        say(f"ratio with bf16 logits on both sides: ours/eager {seconds / eager_s:.3f}"
            f"  ours/compile {seconds / compile_s:.3f}")

    def part_small():
        if not (out / SMALL_ARTIFACT).exists():
            raise RunFailed(f"no {SMALL_ARTIFACT}: run prepare again")
        reps = args.repeat * 5
        seconds, logits = _time_shard_run(args, out, small_path, SMALL_ARTIFACT, repeat=reps)
        t = torch_()
        small_ref = t.reference(small_ids)
        eager_s = t.time(small_ids, False, False, reps)
        compile_s = t.time(small_ids, True, False, reps)
        shape = f"batch {small[0]}, sequence {small[1]}"
        say(f"small shape ({shape}): shardflow {seconds * 1e3:8.3f} ms  "
            f"torch eager {eager_s * 1e3:8.3f} ms  "
            f"torch.compile {compile_s * 1e3:8.3f} ms  "
            f"(logits error {error(logits, small_ref):.2e})")
        say(f"small shape ratio ours/eager {seconds / eager_s:.3f}  "
            f"ours/compile {seconds / compile_s:.3f}")
        ungraphed, logits = _time_shard_run(args, out, small_path, SMALL_ARTIFACT,
                                            extra=("--no-cuda-graph",), repeat=reps)
        say(f"small shape with --no-cuda-graph {ungraphed * 1e3:8.3f} ms  "
            f"{ungraphed / seconds:.3f} of the default's time  "
            f"ours/eager {ungraphed / eager_s:.3f}  ours/compile {ungraphed / compile_s:.3f}  "
            f"(logits error {error(logits, small_ref):.2e})")

    def part_host():
        host = {mode: _host_times(args, out, ids_path, mode) for mode in ("always", "never")}
        for mode, (load, wall, gpu, download) in host.items():
            say(f"host copies, --pinned-memory {mode:6}: load {load:.3f} s, best run "
                f"{wall * 1e3:.2f} ms (GPU program {gpu * 1e3:.2f} ms, logits download "
                f"{download})")
        (load_p, wall_p, gpu_p, _), (load_n, wall_n, gpu_n, _) = host["always"], host["never"]
        say(f"ratio pinned/pageable: load {load_p / load_n:.3f}, run wall time "
            f"{wall_p / wall_n:.3f}, run minus GPU program "
            f"{(wall_p - gpu_p) / max(wall_n - gpu_n, 1e-9):.3f}")

    def part_ablations():
        found = [f for f in ABLATIONS if (out / f"gpt2s.no-{f}.shard").exists()]
        if not found:
            raise RunFailed("no --cuda-disable artifacts: run prepare without --no-ablations")
        for feature in found:
            compare(f"shardflow without {feature:15}", artifact=f"gpt2s.no-{feature}.shard")

    parts = {"core": part_core, "profile": part_profile, "attention": part_attention,
             "autotune": part_autotune, "graph": part_graph, "ablations": part_ablations,
             "host": part_host, "small": part_small, "half": part_half}
    for name in PARTS:
        if name not in wanted:
            continue
        spent = time.monotonic() - started
        if args.budget and spent >= args.budget:
            say(f"part {name}: skipped ({spent:.0f} s spent of the {args.budget:.0f} s budget)")
            continue
        t0 = time.monotonic()
        try:
            parts[name]()
            say(f"part {name}: done in {time.monotonic() - t0:.1f} s")
        except RunFailed as e:
            say(f"part {name}: FAILED: {e}")
            state["status"] = 1
        except Exception as e:  # noqa: BLE001 -- PyTorch's side failing stops only its part
            traceback.print_exc()
            say(f"part {name}: FAILED: {type(e).__name__}: {e}")
            state["status"] = 1
    if state["worst"] >= 2e-2:
        say(f"FAILED: a logits error reached {state['worst']:.2e} (the limit is 2e-2)")
        state["status"] = 1
    return state["status"]


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
    r.add_argument("--parts", default="all",
                   help="comma-separated parts to run, in this order: " +
                        "; ".join(f"{k}: {v}" for k, v in PARTS.items()) + " (default: all)")
    r.add_argument("--budget", type=float, default=0,
                   help="seconds: a part that would start later than this is skipped "
                        "(default 0: no limit)")
    for q in (p,):
        q.add_argument("--layers", type=int, help="fewer layers for a quick check")
        q.add_argument("--batch", type=int, help="another batch size")
    w = sub.add_parser("weights", help="regenerate the weights `run` needs from config.json "
                                        "(run does it when they are missing)")
    w.add_argument("--dir", required=True, help="the folder `prepare` wrote")
    args = ap.parse_args(argv)
    if args.step == "weights":
        _generate(Path(args.dir), _load_config(Path(args.dir))[0])
        return 0
    return prepare(args) if args.step == "prepare" else run(args)


if __name__ == "__main__":
    sys.exit(main())
