#!/usr/bin/env python3
"""Weight loading: shard-run's load time with several load threads against one.

Writes a GPT-2-small-sized model (12 layers, hidden 768, vocabulary 50257:
about 650 MB of f32 weights in an external data file), compiles it for the
CPU with --dtype bf16 (every weight is read, checked against its CRC-32C
and converted to bf16 at load, as a CUDA artifact's weights are before
their upload) and as plain f32 (read and checked in place), then times
`shard-run --verbose` loading each with `--load-threads 1` and with more,
side by side in one run: best load time of --repeat processes each, after a
first process that warms the page cache. Prints each time and the ratio
(threads' time / one thread's time: below 1 means faster).

    .venv/bin/python bench/weight_load_bench.py [--threads 2,4] [--repeat 3]
        [--layers 12 --hidden 768 --vocab 50257]
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "python"))
from shardflow import models, toolchain  # noqa: E402


def load_seconds(shard_run: str, artifact: Path, inputs: Path, threads: int) -> float:
    """One shard-run process; its `load` time from --verbose."""
    out = subprocess.run([shard_run, str(artifact), "--inputs", str(inputs), "--verbose",
                          "--load-threads", str(threads)],
                         capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        raise RuntimeError(f"shard-run failed ({out.returncode}):\n{out.stderr}")
    match = re.search(r"shard-run: load ([0-9.]+) s", out.stderr)
    if not match:
        raise RuntimeError(f"no load time in shard-run's output:\n{out.stderr}")
    return float(match.group(1))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", default=f"{min(os.cpu_count() or 1, 8)}",
                        help="comma-separated load thread counts to compare with 1 "
                             "(default: this machine's CPUs, at most 8)")
    parser.add_argument("--repeat", type=int, default=3, help="processes timed per setting")
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--hidden", type=int, default=768)
    parser.add_argument("--heads", type=int, default=12)
    parser.add_argument("--vocab", type=int, default=50257)
    args = parser.parse_args()
    counts = [int(t) for t in args.threads.split(",") if t]
    if any(t < 1 for t in counts) or args.repeat < 1:
        parser.error("--threads takes positive counts and --repeat a positive number")
    shard_run = str(toolchain.tool("shard-run"))
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        path = tmp / "gpt2.onnx"
        print(f"writing the model ({args.layers} layers, hidden {args.hidden}, "
              f"vocabulary {args.vocab}) ...", flush=True)
        model = models.generate_to_file("gpt2", path, layers=args.layers, hidden=args.hidden,
                                        heads=args.heads, vocab=args.vocab, seq=8, batch=1,
                                        max_pos=1024)
        weight_mb = models.weight_bytes(model) / 1e6
        inputs = tmp / "inputs.npz"
        np.savez(inputs, input_ids=np.zeros((1, 8), dtype=np.int64))
        artifacts = {}
        for dtype in ("bf16", "f32"):
            print(f"compiling ({dtype}) ...", flush=True)
            extra = ["--dtype", "bf16"] if dtype == "bf16" else []
            artifacts[dtype] = toolchain.compile_model(path, tmp / f"gpt2-{dtype}.shard",
                                                      extra=extra)
        rows = []
        for dtype, artifact in artifacts.items():
            load_seconds(shard_run, artifact, inputs, 1)  # the page cache
            times = {}
            for threads in [1, *counts]:
                times[threads] = min(load_seconds(shard_run, artifact, inputs, threads)
                                     for _ in range(args.repeat))
                print(f"  {dtype}, {threads} load thread(s): {times[threads]:.3f} s", flush=True)
            rows.append((dtype, times))
    print(f"\n{weight_mb:.0f} MB of f32 weights; best load time of {args.repeat} "
          f"shard-run processes each; {os.cpu_count()} CPUs")
    for dtype, times in rows:
        what = "read, checked, converted to bf16" if dtype == "bf16" else "read and checked"
        for threads in counts:
            print(f"{dtype} ({what}): {threads} threads {times[threads]:.3f} s, 1 thread "
                  f"{times[1]:.3f} s: {times[threads] / times[1]:.2f} of one thread's time")
    return 0


if __name__ == "__main__":
    sys.exit(main())
