#!/usr/bin/env python3
"""Stage balancing's cost estimates against measured stage times.

Compiles a calibration model and a check model (GPT-2 style and Llama
style decoders from shardflow.models, a large vocabulary so that the head
weighs) with `--mesh pp=P --target cpu --report` for P = 2 and 4, reads
each stage's estimated work from the report (the registry's FLOPs and
bytes read and written per micro-batch), and times each stage's program
alone: the stage's artifact is cut out of the pipeline artifact and run by
shard-run on one core (`--threads 1 --repeat R`, its best run), with
random inputs of its shapes.

Calibration: on the first model's stages, a least-squares fit of
time = FLOPs / F + bytes / B (non-negative rates F, B). Check: the second
model's stage times predicted with F and B, each within 15% of the
measured time (the pipeline issue's criterion). Prints both tables and
the verdict; exits 1 when a prediction misses. Run by hand; results go in
docs/pipeline.md.

    python3 bench/pipeline_balance_bench.py [--build-dir build] [--repeat 5]
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "python"))

STAGE = re.compile(r"^stage (\d+) on pp rank \d+: layers (\d+) to (\d+).*?\(([0-9.e+-]+) GFLOP, "
                   r"([0-9.e+-]+) MB read and written", re.M)
DTYPES = {"f32": "float32", "i64": "int64", "i32": "int32", "i1": "bool", "f16": "float16"}


def stage_artifacts(pipeline: Path, out: Path) -> list[Path]:
    """Each stage's artifact, cut out of the pipeline artifact."""
    lines = pipeline.read_text().splitlines(keepends=True)
    paths, i = [], 0
    while i < len(lines):
        m = re.match(r"stage (\d+) lines (\d+)$", lines[i].strip())
        if m:
            count = int(m.group(2))
            path = out / f"{pipeline.stem}.stage{m.group(1)}.shard"
            path.write_text("".join(lines[i + 1:i + 1 + count]))
            paths.append(path)
            i += count
        i += 1
    return paths


def random_inputs(artifact: Path, out: Path, vocab: int) -> Path:
    import numpy as np
    rng = np.random.default_rng(0)
    feeds = {}
    for line in artifact.read_text().splitlines():
        m = re.match(r"buffer \d+ input (\S+) (\S+) name=(\S+)", line)
        if not m:
            continue
        dtype, shape, name = m.groups()
        dims = [] if shape == "scalar" else [int(d) for d in shape.split("x")]
        name = re.sub(r"%([0-9A-F]{2})", lambda h: chr(int(h.group(1), 16)), name)
        if dtype.startswith("f"):
            feeds[name] = rng.standard_normal(dims).astype(DTYPES[dtype])
        else:
            feeds[name] = rng.integers(0, vocab, dims).astype(DTYPES[dtype])
    path = artifact.with_suffix(".inputs.npz")
    np.savez(path, **feeds)
    return path


def best_time(shard_run: Path, artifact: Path, inputs: Path, repeat: int) -> float:
    done = subprocess.run([str(shard_run), str(artifact), "--inputs", str(inputs), "--threads",
                           "1", "--repeat", str(repeat), "--verbose"], capture_output=True,
                          text=True, timeout=900)
    m = re.search(r"best of \d+ runs ([0-9.]+) s", done.stderr)
    if done.returncode != 0 or not m:
        raise SystemExit(f"{artifact}: shard-run failed:\n{done.stderr}")
    return float(m.group(1))


def measure(name, model, shape, args, tmp, vocab):
    """Per stage of pp=2 and pp=4: (label, GFLOP, MB, measured seconds)."""
    rows = []
    for pp in (2, 4):
        pipeline = tmp / f"{name}-pp{pp}.shard"
        done = subprocess.run([str(args.build_dir / "bin" / "shard-opt"), str(model),
                               "--input-shape", shape, "--mesh", f"pp={pp}", "--microbatches",
                               str(args.microbatches), "--target", "cpu", "--report", "-o",
                               str(pipeline)], capture_output=True, text=True, timeout=900)
        if done.returncode != 0:
            raise SystemExit(f"{name}: shard-opt failed:\n{done.stderr}")
        estimates = STAGE.findall(done.stderr)
        for (stage, first, last, gflop, mb), artifact in zip(estimates,
                                                             stage_artifacts(pipeline, tmp)):
            inputs = random_inputs(artifact, tmp, vocab)
            seconds = best_time(args.build_dir / "bin" / "shard-run", artifact, inputs,
                                args.repeat)
            rows.append((f"{name} pp={pp} stage {stage} (layers {first}-{last})", float(gflop),
                         float(mb), seconds))
    return rows


def main() -> int:
    import numpy as np

    from shardflow import models
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build-dir", type=Path, default=ROOT / "build")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--microbatches", type=int, default=4)
    args = parser.parse_args()
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text()
                .splitlines() if line.startswith("model name")), "?")
    print(f"machine: {cpu}, {os.cpu_count()} cores; each stage alone on one core")
    vocab, batch, seq = 8192, 8, 64
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        shape = f"input_ids={batch},{seq}"
        made = {
            "gpt2": models.gpt2(layers=8, hidden=256, heads=4, seq=seq, batch=batch, vocab=vocab),
            "llama": models.llama(layers=8, hidden=256, heads=4, kv_heads=2, seq=seq,
                                  batch=batch, vocab=vocab),
        }
        for name, model in made.items():
            models.save(model, tmp / f"{name}.onnx", external_data=True)
        calibration = measure("gpt2", tmp / "gpt2.onnx", shape, args, tmp, vocab)
        check = measure("llama", tmp / "llama.onnx", shape, args, tmp, vocab)
    a = np.array([[g * 1e9, m * 1e6] for _, g, m, _ in calibration])
    t = np.array([s for *_, s in calibration])
    coef, *_ = np.linalg.lstsq(a, t, rcond=None)
    coef = np.maximum(coef, 1e-30)
    print(f"calibrated on gpt2: {1 / coef[0] / 1e9:.1f} GFLOP/s, {1 / coef[1] / 1e9:.2f} GB/s "
          "(time = FLOPs / F + bytes / B)")
    worst = 0.0
    for title, rows in (("calibration (gpt2)", calibration), ("check (llama)", check)):
        print(f"{title}:")
        print(f"  {'stage':40} {'GFLOP':>8} {'MB':>8} {'measured ms':>12} {'predicted ms':>13} "
              f"{'error':>7}")
        for label, g, m, s in rows:
            predicted = g * 1e9 * coef[0] + m * 1e6 * coef[1]
            error = predicted / s - 1
            if title.startswith("check"):
                worst = max(worst, abs(error))
            print(f"  {label:40} {g:8.3f} {m:8.1f} {s * 1e3:12.2f} {predicted * 1e3:13.2f} "
                  f"{error:+7.1%}")
    verdict = "within" if worst <= 0.15 else "NOT within"
    print(f"check: every predicted stage time {verdict} 15% of the measured one "
          f"(worst {worst:.1%})")
    return 0 if worst <= 0.15 else 1


if __name__ == "__main__":
    sys.exit(main())
