"""The zoo models compiled for CUDA, with inputs and onnxruntime's outputs.

For the GPU machine's check (tools/gpu-check.sh), which has no shard-opt:

    python -m shardflow.cuda_zoo OUTDIR

writes OUTDIR/f32 and OUTDIR/bf16, each with MODEL.onnx (weights inside the
model), MODEL.shard (`shard-opt --target cuda`, with `--dtype bf16` in the
second), MODEL.inputs.npz and MODEL.expected.npz (onnxruntime, float32),
for mlp, gpt2, bert, llama and resnet; and the same for gpt2 and llama
sharded dp=2,tp=2 with the megatron preset (MODEL-tp.shard: 4 ranks, run
under mpirun, one GPU each). shard-opt comes from $SHARDFLOW_BUILD_DIR/bin
(default build/bin).

    bash tools/gpu-check.sh OUTDIR/f32
    bash tools/gpu-check.sh --rtol 2e-2 OUTDIR/bf16
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort

from shardflow import models

REPO = Path(__file__).resolve().parents[2]
MODELS = ["mlp", "gpt2", "bert", "llama", "resnet"]
SHARDED = ["gpt2", "llama"]


def write_cases(outdir: Path, shard_opt: Path) -> list[Path]:
    written = []
    for dtype in ("f32", "bf16"):
        folder = outdir / dtype
        folder.mkdir(parents=True, exist_ok=True)
        for name in MODELS:
            model = models.MODELS[name]()
            path = folder / f"{name}.onnx"
            models.save(model, path)
            feeds = models.random_inputs(model, seed=1, vocab=128)
            expected = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(
                None, feeds)
            names = [o.name for o in model.graph.output]
            variants = [(name, [])]
            if name in SHARDED:
                variants.append((f"{name}-tp", ["--mesh", "dp=2,tp=2", "--strategy", "megatron"]))
            for case, extra in variants:
                if case != name:
                    shutil.copyfile(path, folder / f"{case}.onnx")
                art = folder / f"{case}.shard"
                subprocess.run([str(shard_opt), str(path), "--target", "cuda", "--dtype", dtype,
                                *extra, "-o", str(art)], check=True)
                np.savez(folder / f"{case}.inputs.npz", **feeds)
                np.savez(folder / f"{case}.expected.npz", **dict(zip(names, expected)))
                written.append(art)
    return written


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    build = Path(os.environ.get("SHARDFLOW_BUILD_DIR", REPO / "build"))
    for art in write_cases(Path(argv[0]), build / "bin" / "shard-opt"):
        print(art)
    return 0


if __name__ == "__main__":
    sys.exit(main())
