"""Sibling GEMMs batched (`shard-run --group-gemms`, the default) against
one by one (`--no-group-gemms`),
and sibling kernels launched together (the compiler's sibling fusion)
against one by one.

A Llama-shaped decoder (multi-head attention, so query, key and value are
one width and batch together, as do the MLP's gate and up) compiled for
CUDA in bf16, run by shard-run with and without sibling GEMMs batched,
side by side in one run: at batch 8 x 512 (long GEMMs) and batch 1 x 128
(short ones, where launches and SM fill matter), each with one launch per
operation (`--no-cuda-graph`), the latter also with a CUDA graph from the
first run (`--cuda-graph`). It prints the GPU program time of each (median), the ratio
grouped/separate, and the logits' agreement between the two. Then the
same for the artifact compiled with `--cuda-disable sibling-fusion`
(the query's and the key's rotary embedding launched one by one) against
the default (one launch per layer for both).

Two steps, because the GPU machines have no shard-opt:

    # where shard-opt is built: the model (weights streamed to disk from a
    # seeded RNG) and one artifact per shape
    python bench/llama_group_gemms_bench.py prepare --out bench/out/llama
    # on the GPU machine (the artifacts, the graph and config.json carried;
    # the weights regenerated there from the seed)
    python bench/llama_group_gemms_bench.py run --dir bench/out/llama --shard-run build-gpu/bin/shard-run
"""
from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "python"))

# 4 layers of a 2048-wide Llama with 16 heads and no grouped-query sharing
# (1.3 GB of f32 weights to generate).
CONFIG = dict(layers=4, hidden=2048, heads=16, kv_heads=16, intermediate=5632, vocab=32000,
              max_pos=512)
SHAPES = {"large": (8, 512), "small": (1, 128)}


def _generate(out: Path, cfg: dict) -> Path:
    from shardflow import models

    path = out / "llama.onnx"
    if not path.exists() or not (out / "llama.data").exists():
        t0 = time.time()
        models.generate_to_file("llama", path, external_data=True, symbolic=True, **cfg)
        print(f"generated {path} ({time.time() - t0:.0f} s)", file=sys.stderr)
    return path


def prepare(args) -> int:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    cfg = dict(CONFIG, layers=args.layers or CONFIG["layers"])
    model = _generate(out, cfg)
    for name, (batch, seq) in SHAPES.items():
        for suffix, extra in (("", []), (".no-siblings", ["--cuda-disable", "sibling-fusion"])):
            cmd = [str(args.shard_opt), str(model), "--input-shape", f"input_ids={batch},{seq}",
                   "--target", "cuda", "--dtype", "bf16", *extra,
                   "-o", str(out / f"llama.{name}{suffix}.shard")]
            subprocess.run(cmd, check=True)
    (out / "config.json").write_text(json.dumps({**cfg, "shapes": SHAPES}))
    return 0


def _time(args, out: Path, name: str, ids: Path, extra: list[str]) -> tuple[float, object, str]:
    import numpy as np

    result = out / "out.npz"
    cmd = [str(args.shard_run), str(out / f"llama.{name}.shard"), "--weights", str(out),
           "--input", f"input_ids={ids}", "--output", str(result), "--repeat", str(args.repeat),
           "--verbose", *extra]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    m = re.search(r"GPU program time: best [0-9.]+ ms, median ([0-9.]+) ms", proc.stderr)
    if proc.returncode or not m:
        sys.stderr.write(proc.stderr)
        raise SystemExit(f"shard-run {' '.join(extra)} failed ({proc.returncode})")
    grouped = re.search(r"runs \d+ GEMMs as \d+ pointer-array batched calls", proc.stderr)
    with np.load(result) as f:
        logits = f["logits"]
    return float(m.group(1)) / 1e3, logits, grouped.group(0) if grouped else ""


def run(args) -> int:
    import numpy as np

    out = Path(args.dir)
    cfg = json.loads((out / "config.json").read_text())
    shapes = cfg.pop("shapes")  # as `prepare` compiled them
    _generate(out, cfg)
    status = 0
    print(f"date: {time.strftime('%Y-%m-%d')}; model: Llama shapes {cfg}, bf16")
    for name, (batch, seq) in shapes.items():
        ids = out / f"ids.{name}.npy"
        np.save(ids, np.random.default_rng(1).integers(0, cfg["vocab"], (batch, seq),
                                                       dtype=np.int64))
        modes = [(["--no-cuda-graph", "--no-group-gemms"], ["--no-cuda-graph"])]
        if name == "small":
            modes.append((["--cuda-graph", "--no-group-gemms"], ["--cuda-graph"]))
        default = {}  # the default artifact's runs by flags, for both comparisons
        for plain, grouped in modes:
            (t0, l0, _), (t1, l1, what) = (_time(args, out, name, ids, plain),
                                           _time(args, out, name, ids, grouped))
            default[tuple(grouped)] = (t1, l1)
            same = bool(np.array_equal(l0, l1))
            err = float(np.linalg.norm(l1 - l0) / np.linalg.norm(l0))
            print(f"llama {name} (batch {batch}, sequence {seq}) {' '.join(grouped)}: "
                  f"--no-group-gemms {t0 * 1e3:.3f} ms, grouped {t1 * 1e3:.3f} ms, ratio "
                  f"{t1 / t0:.3f} ({what or 'nothing grouped'}; logits "
                  f"{'identical' if same else f'rel. error {err:.1e}'})")
            status |= int(not what or err > 1e-2)
        # Sibling fusion: the artifact compiled without it, with each set of
        # flags the default artifact ran with above.
        if not (out / f"llama.{name}.no-siblings.shard").exists():
            continue
        for flags, (t1, l1) in default.items():
            flags = list(flags)
            t0, l0, _ = _time(args, out, f"{name}.no-siblings", ids, flags)
            same = bool(np.array_equal(l0, l1))
            print(f"llama {name} (batch {batch}, sequence {seq}) {' '.join(flags)}: "
                  f"--cuda-disable sibling-fusion {t0 * 1e3:.3f} ms, sibling fusion "
                  f"{t1 * 1e3:.3f} ms, ratio {t1 / t0:.3f} (logits "
                  f"{'identical' if same else 'DIFFER'})")
            status |= int(not same)
    return status


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="step", required=True)
    p = sub.add_parser("prepare", help="generate the model and compile it (needs shard-opt)")
    p.add_argument("--out", required=True, help="folder for the model and the artifacts")
    p.add_argument("--shard-opt", default=str(REPO / "build" / "bin" / "shard-opt"))
    p.add_argument("--layers", type=int, help="fewer layers for a quick check")
    r = sub.add_parser("run", help="time both ways (needs a GPU)")
    r.add_argument("--dir", required=True, help="the folder `prepare` wrote")
    r.add_argument("--shard-run", required=True, help="a CUDA-enabled shard-run")
    r.add_argument("--repeat", type=int, default=50, help="timed runs of each (median)")
    w = sub.add_parser("weights", help="regenerate the weights `run` needs from config.json "
                                        "(run does it when they are missing)")
    w.add_argument("--dir", required=True, help="the folder `prepare` wrote")
    args = ap.parse_args(argv)
    if args.step == "weights":
        cfg = json.loads((Path(args.dir) / "config.json").read_text())
        cfg.pop("shapes")
        _generate(Path(args.dir), cfg)
        return 0
    return prepare(args) if args.step == "prepare" else run(args)


if __name__ == "__main__":
    sys.exit(main())
