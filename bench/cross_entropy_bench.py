#!/usr/bin/env python3
"""The softmax cross-entropy loss and its backward on the CPU: the fused
backward (nn.softmax_cross_entropy_grad) against the composed one.

Builds an ONNX model whose output is its input (the logits, [rows,
classes]), compiles `nn-append-loss` and `nn-differentiate` against the
input twice, with `fused=cross-entropy` and without, and times both with
shard-run (best of --repeat runs inside one process, after a first run) at
each thread count, side by side in one run. The program is the training
step's loss part: the log-sum-exp, the per-position terms, the loss, and
the logits' cotangent.

Prints per thread count both times and the ratio (composed / fused: above
1 means the fused backward is faster), and checks that both give the same
loss and gradient (within 1e-6 relative L2).

    .venv/bin/python bench/cross_entropy_bench.py [--rows 512] [--classes 50257]
        [--threads 1,2] [--repeat 5]

The default shape is GPT-2's vocabulary over a batch of 4 x 128 tokens.
"""
from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "python"))
from shardflow import toolchain  # noqa: E402


def compile_loss(tmp: Path, rows: int, classes: int, fused: bool) -> Path:
    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["logits"])], "logits",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [rows, classes])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [rows, classes])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]),
              str(tmp / "logits.onnx"))
    shard_opt = str(toolchain.tool("shard-opt"))
    name = "fused" if fused else "composed"
    subprocess.run([shard_opt, str(tmp / "logits.onnx"), "--compile-to=import",
                    "-o", str(tmp / "nn.mlir")], check=True)
    subprocess.run([shard_opt, str(tmp / "nn.mlir"), "--nn-append-loss",
                    "--nn-differentiate=wrt=inputs loss=loss" + (" fused=cross-entropy" if fused else ""),
                    "-o", str(tmp / f"{name}.mlir")], check=True)
    subprocess.run([shard_opt, str(tmp / f"{name}.mlir"), "--target", "cpu",
                    "-o", str(tmp / f"{name}.shard")], check=True)
    return tmp / f"{name}.shard"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=512)
    parser.add_argument("--classes", type=int, default=50257)
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    shard_run = str(toolchain.tool("shard-run"))
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        artifacts = {fused: compile_loss(tmp, args.rows, args.classes, fused)
                     for fused in (False, True)}
        labels = rng.integers(0, args.classes, args.rows).astype(np.int64)
        labels[::7] = -100
        np.savez(tmp / "in.npz", x=rng.standard_normal((args.rows, args.classes)).astype(np.float32) * 3,
                 labels=labels)
        print(f"logits [{args.rows}, {args.classes}] f32; best of {args.repeat} runs")
        results = {}
        for threads in [int(t) for t in args.threads.split(",")]:
            times = {}
            for fused, artifact in artifacts.items():
                out = tmp / f"out-{int(fused)}.npz"
                run = subprocess.run([shard_run, str(artifact), "--inputs", str(tmp / "in.npz"),
                                      "--threads", str(threads), "--repeat", str(args.repeat),
                                      "--verbose", "--output", str(out)],
                                     capture_output=True, text=True, check=True)
                times[fused] = float(re.search(r"best of \d+ runs ([0-9.]+) s", run.stderr).group(1))
                with np.load(out) as o:
                    results[fused] = {k: o[k].astype(np.float64) for k in o.files}
            print(f"  {threads} thread(s): composed {times[False] * 1e3:.1f} ms, "
                  f"fused {times[True] * 1e3:.1f} ms, ratio {times[False] / times[True]:.2f}x",
                  flush=True)
        for key in ("loss", "grad:x"):
            a, b = results[False][key], results[True][key]
            rel = float(np.linalg.norm(a - b) / np.linalg.norm(a))
            print(f"  {key}: composed and fused within {rel:.2e} relative L2")
            assert rel < 1e-6, key


if __name__ == "__main__":
    main()
