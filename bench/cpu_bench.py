#!/usr/bin/env python3
"""Single-rank CPU throughput and memory: shard-run against onnxruntime.

For each zoo model (benchmark-sized), compiles it with shard-opt, then times
shard-run (best of --repeat runs inside one process, after a first run) and
onnxruntime (same thread count, best of --repeat session.run calls after a
warm-up), each in its own process so that peak RSS (wait4) is its own.

Prints per model: both times, the throughput ratio ours/theirs (theirs time
/ our time: above 1 means we are faster), both peak RSS values, and our RSS
against the budget weights + planned activation arena. Goals (from the
execution issue): throughput >= 0.8x onnxruntime on gpt2 and bert; peak RSS
<= 1.2x (weights + arena), on top of the process's baseline with no model
(shard-run --help's RSS).

    .venv/bin/python bench/cpu_bench.py [--threads 1] [--repeat 5] [--models gpt2,bert]
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "python"))
from shardflow import models, toolchain  # noqa: E402

CONFIGS = {
    "gpt2": dict(layers=4, hidden=256, heads=8, seq=128, batch=4, vocab=2048),
    "bert": dict(layers=4, hidden=256, heads=8, seq=128, batch=4, vocab=2048),
    "llama": dict(layers=4, hidden=256, heads=8, kv_heads=4, seq=128, batch=4, vocab=2048),
    "mlp": dict(),
    "resnet": dict(),
}

ORT_SCRIPT = textwrap.dedent("""
    import sys, time, numpy as np, onnxruntime as ort
    model, inputs, threads, repeat = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    s = ort.InferenceSession(model, opts, providers=["CPUExecutionProvider"])
    feed = dict(np.load(inputs))
    s.run(None, feed)
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter(); s.run(None, feed); best = min(best, time.perf_counter() - t)
    print(f"best {best:.6f}")
""")


# Runs a command and prints its exit code and peak RSS (KiB). It runs in its
# own small interpreter (python -S) because Linux's ru_maxrss for a child
# starts from its launcher's RSS at fork: launched from this script, which
# holds numpy and onnx, every run would report at least this script's RSS.
_MEASURE = r"""
import os, subprocess, sys
log, cmd = sys.argv[1], sys.argv[2:]
with open(log, "wb") as out:
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)
    _, status, usage = os.wait4(proc.pid, 0)
proc.returncode = os.waitstatus_to_exitcode(status)
print(proc.returncode, usage.ru_maxrss)
"""


def run_measured(cmd: list[str]) -> tuple[str, float]:
    """Runs cmd; returns (its stdout+stderr, its peak RSS in MB)."""
    with tempfile.NamedTemporaryFile(suffix=".log") as log:
        res = subprocess.run([sys.executable, "-S", "-c", _MEASURE, log.name, *cmd],
                             capture_output=True, text=True)
        out = Path(log.name).read_text(errors="replace")
    if res.returncode != 0:
        raise RuntimeError(f"could not launch {cmd[0]}:\n{res.stderr}")
    rc, rss = res.stdout.split()
    if int(rc) != 0:
        raise RuntimeError(f"{cmd[0]} failed:\n{out}")
    return out, int(rss) / 1024


def make_inputs(model, name, rng):
    from shardflow.compare import make_inputs as generic
    high = CONFIGS.get(name, {}).get("vocab", 128)
    return generic(model, {}, rng, high)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--models", default="gpt2,bert,llama,mlp,resnet")
    args = parser.parse_args()
    shard_run = str(toolchain.tool("shard-run"))
    _, baseline = run_measured([shard_run, "--help"])
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for name in args.models.split(","):
            model = getattr(models, name)(**CONFIGS[name])
            path = tmp / f"{name}.onnx"
            models.save(model, path, external_data=True)
            artifact = toolchain.compile_model(path, tmp / f"{name}.shard")
            feed = make_inputs(model, name, np.random.default_rng(0))
            np.savez(tmp / f"{name}.npz", **feed)
            weights = sum(np.prod(t.dims) * 4 for t in model.graph.initializer)
            arena = int(re.search(r"^arena (\d+)", artifact.read_text(), re.M).group(1))

            out, our_rss = run_measured([shard_run, str(artifact), "--inputs", str(tmp / f"{name}.npz"),
                                         "--threads", str(args.threads), "--repeat", str(args.repeat),
                                         "--verbose", "--output", str(tmp / "out.npz")])
            ours = float(re.search(r"best of \d+ runs ([0-9.]+) s", out).group(1))
            ort_out, ort_rss = run_measured([sys.executable, "-c", ORT_SCRIPT, str(path),
                                             str(tmp / f"{name}.npz"), str(args.threads),
                                             str(args.repeat)])
            theirs = float(re.search(r"best ([0-9.]+)", ort_out).group(1))
            budget = (weights + arena) / 1e6
            rows.append((name, ours, theirs, our_rss, ort_rss, budget))
            print(f"  {name}: ours {ours*1e3:.2f} ms, onnxruntime {theirs*1e3:.2f} ms", flush=True)

    print(f"\nthreads per rank: {args.threads}; best of {args.repeat} runs; "
          f"shard-run baseline RSS {baseline:.1f} MB\n")
    print(f"{'model':8} {'ours ms':>9} {'ort ms':>9} {'throughput':>11} {'our RSS':>9} "
          f"{'ort RSS':>9} {'w+arena':>9} {'RSS/budget':>11}")
    for name, ours, theirs, our_rss, ort_rss, budget in rows:
        ratio = theirs / ours
        rss_ratio = (our_rss - baseline) / budget if budget else float("nan")
        print(f"{name:8} {ours*1e3:9.2f} {theirs*1e3:9.2f} {ratio:10.2f}x {our_rss:8.1f}M "
              f"{ort_rss:8.1f}M {budget:8.1f}M {rss_ratio:10.2f}x")
        if name in ("gpt2", "bert"):
            verdict = "ok" if ratio >= 0.8 else "MISSED"
            print(f"         throughput goal >= 0.8x onnxruntime: {verdict}")
        if budget < 1.0:
            print("         RSS goal: n/a (weights + arena under 1 MB)")
            continue
        verdict = "ok" if rss_ratio <= 1.2 else "MISSED"
        print(f"         RSS goal <= 1.2x (weights + arena) above baseline: {verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
