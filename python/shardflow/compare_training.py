"""Train a model on one rank and sharded over a mesh, and compare.

    PYTHONPATH=python .venv/bin/python -m shardflow.compare_training MODEL.onnx \\
        --input-shape input_ids=2,16 [--mesh dp=2,tp=2 --strategy megatron] [--steps 8]

Makes a few batches of random token ids (labels: the next token, the last
position ignored), compiles `shard-opt --train` (AdamW by default) for one
rank and for the mesh, runs both with `shard-run --data --steps` (the mesh
under mpirun), prints each step's loss side by side, and checks that the
sharded run matches the single-rank one (loss within 1e-5 relative at every
step, the saved weights within 1e-3 relative L2) and that the loss went
down. Exits non-zero otherwise. tools/example.sh runs it on the bundled
example; python/tests/test_training.py too.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from shardflow import toolchain


def make_batches(vocab: int, shape: tuple[int, ...], count: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, vocab, (count, *shape)).astype(np.int64)
    labels = np.roll(ids, -1, axis=-1)
    labels[..., -1] = -100
    return {"input_ids": ids, "labels": labels}


def train(model: Path, artifact: Path, data: Path, steps: int, flags: list[str],
          ranks: int = 1) -> tuple[list[dict], dict[str, np.ndarray]]:
    compile_cmd = [str(toolchain.tool("shard-opt")), str(model), "--train", *flags,
                   "--target", "cpu", "-o", str(artifact)]
    out = subprocess.run(compile_cmd, capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        raise RuntimeError(f"shard-opt failed:\n{out.stderr}")
    launcher = []
    env = dict(os.environ)
    if ranks > 1:
        launcher = [shutil.which("mpirun") or "mpirun", "--oversubscribe", "-np", str(ranks)]
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    log, weights = artifact.with_suffix(".jsonl"), artifact.with_suffix(".safetensors")
    run = [*launcher, str(toolchain.tool("shard-run")), str(artifact), "--data", str(data),
           "--steps", str(steps), "--log", str(log), "--save-weights", str(weights)]
    out = subprocess.run(run, capture_output=True, text=True, timeout=600, env=env)
    if out.returncode != 0:
        raise RuntimeError(f"shard-run failed:\n{out.stderr}")
    from safetensors.numpy import load_file
    return [json.loads(line) for line in log.read_text().splitlines()], load_file(str(weights))


def relative_l2(ours: dict[str, np.ndarray], reference: dict[str, np.ndarray]) -> float:
    num = sum(float(((ours[k].astype(np.float64) - v) ** 2).sum()) for k, v in reference.items())
    den = sum(float((v.astype(np.float64) ** 2).sum()) for v in reference.values())
    return math.sqrt(num / den)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", type=Path)
    parser.add_argument("--input-shape", required=True,
                        help="input_ids=B,S: the token batch of one step")
    parser.add_argument("--mesh", default="dp=2,tp=2")
    parser.add_argument("--strategy", default="megatron")
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--vocab", type=int, default=0,
                        help="token ids below this (default: the first output's last dim)")
    parser.add_argument("--train-flags", default="--optimizer adamw --lr 0.01",
                        help="shard-opt flags of the training step")
    parser.add_argument("--work-dir", type=Path, default=None)
    args = parser.parse_args(argv)

    name, dims = args.input_shape.split("=")
    shape = tuple(int(d) for d in dims.split(","))
    work = args.work_dir or Path(tempfile.mkdtemp(prefix="shardflow-train-"))
    work.mkdir(parents=True, exist_ok=True)
    vocab = args.vocab
    if not vocab:
        import onnx
        graph = onnx.load(str(args.model), load_external_data=False).graph
        vocab = graph.output[0].type.tensor_type.shape.dim[-1].dim_value
    batches = make_batches(vocab, shape, count=4)
    batches[name] = batches.pop("input_ids")
    np.savez(work / "data.npz", **batches)
    ranks = 1
    for axis in args.mesh.split(","):
        ranks *= int(axis.split("=")[1])
    flags = ["--input-shape", args.input_shape, *args.train_flags.split()]
    print(f"== train {args.model.name}: {args.steps} steps on 1 rank, then --mesh {args.mesh} "
          f"--strategy {args.strategy} ({ranks} ranks under mpirun)")
    single_log, single = train(args.model, work / "single.shard", work / "data.npz", args.steps,
                               flags)
    mesh_log, sharded = train(args.model, work / "sharded.shard", work / "data.npz", args.steps,
                              [*flags, "--mesh", args.mesh, "--strategy", args.strategy], ranks)
    print(f"   {'step':>4}  {'loss (1 rank)':>14}  {'loss (' + args.mesh + ')':>18}")
    worst = 0.0
    for a, b in zip(single_log, mesh_log):
        worst = max(worst, abs(a["loss"] - b["loss"]) / abs(a["loss"]))
        print(f"   {a['step']:>4}  {a['loss']:>14.6f}  {b['loss']:>18.6f}")
    drift = relative_l2(sharded, single)
    went_down = single_log[-1]["loss"] < single_log[0]["loss"]
    ok = worst <= 1e-5 and drift <= 1e-3 and went_down and set(sharded) == set(single)
    print(f"   loss: max relative difference {worst:.2e} (limit 1e-5); trained weights: "
          f"relative L2 {drift:.2e} (limit 1e-3); loss {single_log[0]['loss']:.4f} -> "
          f"{single_log[-1]['loss']:.4f}: {'OK' if ok else 'MISMATCH'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
