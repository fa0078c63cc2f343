#!/usr/bin/env python3
"""Pipeline bubbles, measured: a forward-only pipeline of two stages on two
CPU ranks against the theory.

Builds a GPT-2-style decoder (shardflow.models; 8 layers by default),
compiles it with `--mesh pp=2 --microbatches M` for each schedule and M,
runs each under `mpirun -np 2` (one process per core, `--threads 1`) with
`--repeat R --trace`, and measures the last run's bubble from the trace
(python -m shardflow.timeline's measure: 1 - the ranks' time computing /
(ranks x the run's span)). Prints, side by side, the measured bubble and
(p - 1) / (M + p - 1), the bubble of equal stages under GPipe and 1F1B,
with the run's span; and the best run of the unpipelined program on one
rank over the same batch (one core: the pipeline's two cores should take
about 1 / (2 (1 - bubble)) of it). Writes each timeline as a PNG to --out.

A forward-only program runs each schedule's forwards in its order: gpipe
and 1f1b are the same there; interleaved-1f1b and zbv run two stages per
rank. With --train, each is a training step (cross-entropy, SGD) run for
--repeat steps with --data, the bubble the last step's, beside the
unpipelined step's time on one rank (the --log's step_seconds, best of
the steps). Run by hand (about a minute each); results go in
docs/pipeline.md.

    python3 bench/pipeline_bench.py [--build-dir build] [--microbatches 2,4,8] [--train]
"""
from __future__ import annotations

import argparse
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "python"))


def cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor()


def main() -> int:
    import numpy as np

    from shardflow import models, timeline
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build-dir", type=Path, default=ROOT / "build")
    parser.add_argument("--microbatches", default="2,4,8")
    parser.add_argument("--schedules", default="1f1b,gpipe,interleaved-1f1b,zbv")
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=4)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "out" / "pipeline")
    parser.add_argument("--train", action="store_true",
                        help="training steps (gpipe, 1f1b, interleaved-1f1b) instead of forwards")
    args = parser.parse_args()
    if args.train and "--schedules" not in sys.argv:
        args.schedules = "1f1b,gpipe,interleaved-1f1b"
    train = ["--train", "--optimizer", "sgd", "--lr", "0.01"] if args.train else []
    shard_opt = args.build_dir / "bin" / "shard-opt"
    shard_run = args.build_dir / "bin" / "shard-run"
    args.out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
    mpirun = [shutil.which("mpirun") or "mpirun", "--oversubscribe", "-np", "2",
              "--bind-to", "core"]
    print(f"machine: {cpu_model()}, {os.cpu_count()} cores; model: GPT-2 style, "
          f"{args.layers} layers, hidden {args.hidden}, sequence {args.seq}, batch {args.batch}")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        model = tmp / "model.onnx"
        models.save(models.gpt2(layers=args.layers, hidden=args.hidden, heads=4, seq=args.seq,
                                batch=args.batch, vocab=512), model)
        rng = np.random.default_rng(0)
        ids = rng.integers(0, 512, (args.batch, args.seq)).astype(np.int64)
        np.savez(tmp / "in.npz", input_ids=ids)
        # A training run's batches: the same one each step.
        np.savez(tmp / "data.npz", input_ids=ids[None],
                 labels=rng.integers(0, 512, (1, args.batch, args.seq)).astype(np.int64))
        shape = f"input_ids={args.batch},{args.seq}"

        def traced(artifact: Path, ranks: int, name: str) -> dict:
            trace = tmp / f"{name}.json"
            launcher = mpirun if ranks > 1 else []
            cmd = [*launcher, str(shard_run), str(artifact), "--threads", "1"]
            cmd += (["--data", str(tmp / "data.npz"), "--steps", str(args.repeat), "--log",
                     str(tmp / f"{name}.jsonl")] if args.train else
                    ["--inputs", str(tmp / "in.npz"), "--repeat", str(args.repeat)])
            if ranks > 1:
                cmd += ["--trace", str(trace)]
            done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
            if done.returncode != 0:
                raise SystemExit(f"{name}: shard-run failed:\n{done.stderr}")
            return {"trace": trace}

        # The unpipelined program on one rank: its run time from --verbose
        # (a training step's from its log).
        whole = tmp / "whole.shard"
        subprocess.run([str(shard_opt), str(model), "--input-shape", shape, *train,
                        "--target", "cpu", "-o", str(whole)], check=True)
        if args.train:
            traced(whole, 1, "whole")
            import json
            seconds = min(json.loads(line)["step_seconds"]
                          for line in (tmp / "whole.jsonl").read_text().splitlines())
        else:
            done = subprocess.run([str(shard_run), str(whole), "--inputs", str(tmp / "in.npz"),
                                   "--threads", "1", "--repeat", str(args.repeat), "--verbose"],
                                  capture_output=True, text=True, env=env, timeout=900)
            import re
            best = re.search(r"best of \d+ runs ([0-9.]+) s", done.stderr)
            if not best:
                raise SystemExit(f"no run time in shard-run --verbose:\n{done.stderr}")
            seconds = float(best.group(1))
        what = "steps" if args.train else "runs"
        print(f"unpipelined, 1 rank: best of {args.repeat} {what} {seconds * 1e3:.1f} ms")
        print(f"{'schedule':18} {'M':>3} {'bubble':>8} {'theory':>8} {'span ms':>9}")
        for schedule in args.schedules.split(","):
            for m in [int(x) for x in args.microbatches.split(",")]:
                name = f"{schedule}-m{m}"
                artifact = tmp / f"{name}.shard"
                compiled = subprocess.run([str(shard_opt), str(model), "--input-shape", shape,
                                           "--mesh", "pp=2", "--microbatches", str(m),
                                           "--pipeline-schedule", schedule, *train,
                                           "--target", "cpu",
                                           "-o", str(artifact)], capture_output=True, text=True)
                if compiled.returncode != 0:
                    print(f"{schedule:18} {m:>3} skipped: {compiled.stderr.strip()[-120:]}")
                    continue
                run = traced(artifact, 2, name)
                runs = timeline.load(run["trace"])
                actions = runs[max(runs)]
                stats = timeline.measure(actions)
                theory = f"{stats['theory']:.3f}" if stats["theory"] is not None else "-"
                print(f"{schedule:18} {m:>3} {stats['bubble']:8.3f} {theory:>8} "
                      f"{stats['span'] * 1e3:9.1f}")
                kind = "training" if args.train else "forward"
                timeline.draw(actions, stats, args.out / f"{kind}-{name}.png",
                              f"{schedule}, pp=2, M={m}: bubble {stats['bubble']:.1%}")
    print(f"timelines in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
