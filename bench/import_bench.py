#!/usr/bin/env python3
"""Import benchmark of shard-opt: does the ONNX import cost depend on weight size?

Generates the same 24-layer GPT-style graph (shardflow.models.gpt2, layers=24)
twice, with ~10 MB and ~1 GB of float32 weights (only hidden and vocab differ,
so the node count is identical), each with all weights in one external .data
file. Then runs ``SHARD_OPT model.onnx -o /dev/null`` on each ``--repeat``
times and compares best wall time and the child's peak RSS (ru_maxrss from
os.wait4 on a subprocess.Popen, run from a small launcher process; see
_MEASURE).

Goals: 1GB/10MB ratio within 1.2x for both time and RSS, and the 1 GB import
under 2 s and 300 MB peak RSS. Missed goals are printed as MISSED; the exit
code stays 0 (it is a benchmark). Exit code 1: the importer is missing or
failed; 2: the two graphs differ (a bug of this script).

Usage:
    .venv/bin/python bench/import_bench.py [--shard-opt build/bin/shard-opt]
        [--repeat 3] [--keep DIR] [--generate-only] [--symbolic]
        [--small-bytes N] [--large-bytes N]

Sizes are decimal: 1 MB = 10**6 bytes, 1 GB = 10**9 bytes.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "python"))

from shardflow import models  # noqa: E402

MB = 10**6
LAYERS = 24
HEADS = 8
SEQ = 128
BATCH = 1
GOAL_RATIO = 1.2
GOAL_TIME_S = 2.0
GOAL_RSS_BYTES = 300 * MB


@dataclass
class Case:
    label: str
    target_bytes: int
    config: dict
    path: Path | None = None
    weight_bytes: int = 0
    nodes: int = 0
    times: list[float] = field(default_factory=list)
    rss_kib: list[int] = field(default_factory=list)


def plan(target_bytes: int, symbolic: bool) -> dict:
    """gpt2 config whose weights come closest to ``target_bytes``: hidden sized
    so that the 24 layers hold ~85% of the bytes, vocab fills the rest."""
    floats = target_bytes / 4
    hidden = max(32, int(math.sqrt(0.85 * floats / (12 * LAYERS)) // 32 * 32))
    base = dict(layers=LAYERS, hidden=hidden, heads=HEADS, seq=SEQ, batch=BATCH, symbolic=symbolic)
    b1 = models.weight_bytes(models.shape_only("gpt2", **base, vocab=1))
    b2 = models.weight_bytes(models.shape_only("gpt2", **base, vocab=2))
    vocab = max(1, 1 + round((target_bytes - b1) / (b2 - b1)))
    return dict(base, vocab=vocab)


def fmt_bytes(n: float) -> str:
    return f"{n / 1e9:.2f} GB" if n >= 0.5e9 else f"{n / MB:.1f} MB"


def generate(case: Case, out_dir: Path) -> None:
    """Writes the model (weights streamed to <stem>.data) unless ``out_dir``
    already holds it for the same config (gpt2_<label>.json next to it)."""
    case.path = out_dir / f"gpt2_{case.label}.onnx"
    manifest = out_dir / f"gpt2_{case.label}.json"
    data = out_dir / models.data_location(case.path)
    if manifest.exists() and case.path.exists() and data.exists():
        if json.loads(manifest.read_text()) == case.config:
            shape = models.shape_only("gpt2", **case.config)
            case.nodes, case.weight_bytes = len(shape.graph.node), models.weight_bytes(shape)
            print(f"  {case.label}: reusing {case.path}")
            return
    t0 = time.perf_counter()
    model = models.generate_to_file("gpt2", case.path, external_data=True, **case.config)
    manifest.write_text(json.dumps(case.config))
    case.nodes, case.weight_bytes = len(model.graph.node), models.weight_bytes(model)
    print(f"  {case.label}: {case.path.name} + {data.name} ({fmt_bytes(data.stat().st_size)}), "
          f"hidden={case.config['hidden']} vocab={case.config['vocab']}, "
          f"generated in {time.perf_counter() - t0:.1f} s")


# Runs a command N times and prints "wall_s max_rss_kib exit_code" per run.
# It runs in its own small interpreter (python -S, nothing imported but os,
# sys, time, subprocess) because on Linux the ru_maxrss that os.wait4 reports
# for a child includes the memory its launcher had when it forked it: execve
# carries the old high-water mark over. Spawned from this script, which holds
# numpy, onnx and just generated the weights, every importer run would show
# this script's RSS instead of its own. The floor left by this launcher is
# measured with /bin/true and printed.
_MEASURE = r"""
import os, subprocess, sys, time
repeat, log, cmd = int(sys.argv[1]), sys.argv[2], sys.argv[3:]
for _ in range(repeat):
    with open(log, "wb") as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
    proc.returncode = rc = os.waitstatus_to_exitcode(status)  # reaped here; tell Popen
    print(wall, usage.ru_maxrss, rc, flush=True)              # ru_maxrss: KiB on Linux
    if rc != 0:
        break
"""


def measure(cmd: list[str], repeat: int, log: Path) -> list[tuple[float, int, int]]:
    """[(wall seconds, peak RSS KiB, exit code)] of ``repeat`` runs of ``cmd``."""
    res = subprocess.run([sys.executable, "-S", "-c", _MEASURE, str(repeat), str(log), *cmd],
                         capture_output=True, text=True)
    if res.returncode != 0:
        raise RuntimeError(f"could not run {shlex.join(cmd)}:\n{res.stderr[-2000:]}")
    out = res.stdout
    return [(float(w), int(r), int(c)) for w, r, c in (line.split() for line in out.splitlines())]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shard-opt", default=str(ROOT / "build" / "bin" / "shard-opt"),
                    help="importer command (split like a shell word list); run as "
                         "CMD model.onnx -o /dev/null (default build/bin/shard-opt)")
    ap.add_argument("--repeat", type=int, default=3, help="runs per model (default 3)")
    ap.add_argument("--keep", metavar="DIR",
                    help="write the models to DIR and keep them (reused by later runs)")
    ap.add_argument("--generate-only", action="store_true", help="only write the models")
    ap.add_argument("--symbolic", action="store_true", help="symbolic batch/seq input dims")
    ap.add_argument("--small-bytes", type=int, default=10 * MB,
                    help="weight bytes of the small model (default 10**7)")
    ap.add_argument("--large-bytes", type=int, default=1000 * MB,
                    help="weight bytes of the large model (default 10**9)")
    args = ap.parse_args(argv)

    cmd = shlex.split(args.shard_opt)
    if not args.generate_only:
        exe = shutil.which(cmd[0]) if cmd else None
        if exe is None:
            print(f"error: importer {args.shard_opt!r} not found (build it, or pass --shard-opt)",
                  file=sys.stderr)
            return 1
        cmd[0] = exe

    cases = [Case("10MB", args.small_bytes, plan(args.small_bytes, args.symbolic)),
             Case("1GB", args.large_bytes, plan(args.large_bytes, args.symbolic))]

    if args.keep:
        out_dir = Path(args.keep)
        out_dir.mkdir(parents=True, exist_ok=True)
        cleanup = None
    else:
        cleanup = tempfile.TemporaryDirectory(prefix="shardflow-import-bench-")
        out_dir = Path(cleanup.name)
    try:
        print(f"generating {LAYERS}-layer GPT-style models in {out_dir}")
        for case in cases:
            generate(case, out_dir)
        os.sync()                       # no write-back of the fresh .data files while timing
        small, large = cases
        if small.nodes != large.nodes:
            print(f"error: node counts differ ({small.nodes} vs {large.nodes})", file=sys.stderr)
            return 2
        if args.generate_only:
            return 0

        try:
            return _run_and_report(cmd, cases, args.repeat, out_dir)
        except RuntimeError as e:
            print(f"error: {e}", file=sys.stderr)
            return 1
    finally:
        if cleanup is not None:
            cleanup.cleanup()


def _run_and_report(cmd: list[str], cases: list[Case], repeat: int, out_dir: Path) -> int:
    """Times the importer on both models, prints the table and the verdict."""
    small, large = cases
    floor_kib = max(r for _, r, _ in measure(["/bin/true"], 3, out_dir / "true.stderr"))
    print(f"running: {shlex.join(cmd)} MODEL -o /dev/null  x{repeat}")
    for case in cases:
        log = out_dir / f"gpt2_{case.label}.stderr"
        for wall, rss, rc in measure(cmd + [str(case.path), "-o", "/dev/null"], repeat, log):
            if rc != 0:
                tail = log.read_text(errors="replace")[-2000:]
                print(f"error: importer exited {rc} on {case.path.name}:\n{tail}", file=sys.stderr)
                return 1
            case.times.append(wall)
            case.rss_kib.append(rss)
        print(f"  {case.label}: wall " + " ".join(f"{t:.3f}" for t in case.times)
              + " s; peak RSS " + " ".join(f"{r / 1024:.1f}" for r in case.rss_kib) + " MiB")
    print(f"  (RSS floor of the launcher, /bin/true: {floor_kib / 1024:.1f} MiB)")

    best_t = [min(c.times) for c in cases]
    peak = [max(c.rss_kib) * 1024 for c in cases]   # bytes; highest of the runs
    t_ratio, m_ratio = best_t[1] / best_t[0], peak[1] / peak[0]

    print()
    print(f"{'model':<10} {'weights':>10} {'nodes':>7} {'best wall':>10} {'peak RSS':>10}")
    for c, t, m in zip(cases, best_t, peak):
        print(f"{'gpt2-' + c.label:<10} {fmt_bytes(c.weight_bytes):>10} {c.nodes:>7} "
              f"{t:>8.3f} s {fmt_bytes(m):>10}")
    print(f"{'1GB/10MB':<10} {large.weight_bytes / small.weight_bytes:>9.0f}x {'':>7} "
          f"{t_ratio:>9.2f}x {m_ratio:>9.2f}x")

    goals = [
        (f"time ratio 1GB/10MB <= {GOAL_RATIO}x", f"{t_ratio:.2f}x", t_ratio <= GOAL_RATIO),
        (f"RSS ratio 1GB/10MB <= {GOAL_RATIO}x", f"{m_ratio:.2f}x", m_ratio <= GOAL_RATIO),
        (f"1 GB import wall < {GOAL_TIME_S:g} s", f"{best_t[1]:.3f} s", best_t[1] < GOAL_TIME_S),
        (f"1 GB import peak RSS < {fmt_bytes(GOAL_RSS_BYTES)}", fmt_bytes(peak[1]),
         peak[1] < GOAL_RSS_BYTES),
    ]
    print("\ngoals:")
    for name, value, ok in goals:
        print(f"  {'ok    ' if ok else 'MISSED'}  {name:<34} {value}")
    missed = [name for name, _, ok in goals if not ok]
    print("\nVERDICT: " + ("all goals met" if not missed else f"MISSED {len(missed)} of "
                            f"{len(goals)} goals: " + "; ".join(missed)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
