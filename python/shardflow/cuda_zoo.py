"""The zoo models compiled for CUDA, with inputs and onnxruntime's outputs.

For the GPU machine's check (tools/gpu-check.sh), which has no shard-opt:

    python -m shardflow.cuda_zoo OUTDIR

writes OUTDIR/f32 and OUTDIR/bf16, each with MODEL.onnx (weights inside the
model), MODEL.shard (`shard-opt --target cuda`, with `--dtype bf16` in the
second), MODEL.inputs.npz and MODEL.expected.npz (onnxruntime, float32),
for mlp, gpt2, bert, llama, llama-hf (Llama written out as a TorchScript
export of Hugging Face's writes it: RMSNorm, the rotation and the attention
as plain ops) and resnet; and
the same for gpt2 and llama
sharded dp=2,tp=2 with the megatron preset (MODEL-tp.shard: 4 ranks, run
under mpirun, one GPU each). shard-opt comes from $SHARDFLOW_BUILD_DIR/bin
(default build/bin).

OUTDIR/checks holds programs whose inputs are bad on purpose: an integer
division by zero and out-of-range indices (a generated gather_elements and
the runtime's gather kernel). Each CASE.expected-error lists, one per line,
phrases shard-run's error must contain: the status-word path from the
kernel through the runtime's message, ONNX node included.

OUTDIR/train holds float32 training steps compiled for CUDA (sm_90 alone,
the lent GPUs' architecture: a training artifact is about 1.8 MB, and the
device tool carries 64 MiB): the TRAINING exports of the real-export test
bed, with the flags and the data of their JAX training references
(test/real-exports/NAME/train-reference-OPT.npz),
as NAME-OPT.shard with NAME-OPT.onnx (the weights), NAME-OPT.data.npz
(shard-run --data), and the CPU backend's run of the same step as the
reference: NAME-OPT.expected.jsonl (each step's loss and gradient norm)
and NAME-OPT.expected.npz (the weights after the last step); plus
SHARDED_TRAINING, compiled for a mesh, with the single-rank CPU run as
their reference (skipped where there are fewer GPUs than ranks).

    bash tools/gpu-check.sh OUTDIR/f32 OUTDIR/checks
    bash tools/gpu-check.sh --rtol 2e-2 OUTDIR/bf16
    bash tools/gpu-check.sh OUTDIR/train
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper

from shardflow import models, real_exports

REPO = Path(__file__).resolve().parents[2]
MODELS = ["mlp", "gpt2", "bert", "llama", "llama-hf", "neox", "resnet"]
SHARDED = ["gpt2", "llama", "neox"]
# Zoo cases that are a generator of shardflow.models with options: the
# Llama written out as a TorchScript export of Hugging Face's writes it
# (RMSNorm, rotation and attention as plain ops).
VARIANTS = {"llama-hf": ("llama", {"export": "hf"})}


def write_cases(outdir: Path, shard_opt: Path) -> list[Path]:
    written = []
    for dtype in ("f32", "bf16"):
        folder = outdir / dtype
        folder.mkdir(parents=True, exist_ok=True)
        for name in MODELS:
            generator, config = VARIANTS.get(name, (name, {}))
            model = models.MODELS[generator](**config)
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


# Training steps on one GPU, (export, optimizer): both exporters of GPT-2
# and Llama, an encoder with the MSE loss (BERT), an encoder-decoder (T5),
# experts (Mixtral), a vision transformer (ViT), soft-capped attention
# (Gemma 2); AdamW and SGD with momentum.
TRAINING = [("gpt2-torchscript", "adamw"), ("gpt2-dynamo", "sgd"), ("llama-dynamo", "adamw"),
            ("llama-torchscript", "sgd"), ("bert-torchscript", "adamw"), ("t5-torchscript", "sgd"),
            ("mixtral-dynamo", "adamw"), ("vit-dynamo", "sgd"), ("gemma2-torchscript", "adamw")]
# Training steps on a mesh: (export, optimizer, mesh, strategy). dp=2
# reduces the gradients in buckets (overlapped with the backward on CUDA);
# dp=2,tp=2 megatron adds the tensor-parallel collectives and the
# vocabulary-parallel cross-entropy.
SHARDED_TRAINING = [("gpt2-torchscript", "sgd", "dp=2,tp=2", "megatron"),
                    ("llama-dynamo", "sgd", "dp=2", "dp")]


def _training_flags(flags: list[str]) -> list[str]:
    if "adamw" in flags:
        # GPT-2's key bias gets a gradient of exactly zero (it shifts every
        # score of a softmax row alike): what reaches it is rounding noise,
        # which AdamW with eps 1e-8 turns into steps of about lr, so any
        # other summation order (the GPU's) moves it elsewhere. eps 1e-6
        # keeps that noise still and every real gradient's update as it was.
        return [*flags, "--eps", "1e-6"]
    return flags


def _train_cpu(model: Path, flags: list[str], data: Path, steps: int, work: Path,
               shard_opt: Path) -> tuple[str, dict[str, np.ndarray]]:
    """The CPU backend's run: its log (JSON lines) and its final weights."""
    artifact = work / "cpu.shard"
    subprocess.run([str(shard_opt), str(model), *flags, "--target", "cpu", "-o", str(artifact)],
                   check=True)
    shard_run = shard_opt.parent / "shard-run"
    subprocess.run([str(shard_run), str(artifact), "--data", str(data), "--steps", str(steps),
                    "--log", str(work / "cpu.jsonl"), "--save-weights", str(work / "cpu.npz")],
                   check=True, capture_output=True)
    with np.load(work / "cpu.npz") as w:
        return (work / "cpu.jsonl").read_text(), {k: w[k] for k in w.files}


def write_training_cases(outdir: Path, shard_opt: Path, cuda_arch: str = "sm_90") -> list[Path]:
    """OUTDIR/train: CASE.shard (CUDA, float32, cubins for `cuda_arch`),
    CASE.onnx, CASE.data.npz, CASE.expected.jsonl and CASE.expected.npz (the
    CPU backend's run), for TRAINING and SHARDED_TRAINING."""
    import tempfile
    folder = outdir / "train"
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    cpu_runs = {}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        cases = [(name, optimizer, None, None) for name, optimizer in TRAINING]
        cases += SHARDED_TRAINING
        for name, optimizer, mesh, strategy in cases:
            export = real_exports.load(name)
            with np.load(export.folder / f"train-reference-{optimizer}.npz") as ref:
                flags = _training_flags([str(f) for f in ref["flags"]])
                data = {k[len("data."):]: ref[k] for k in ref.files if k.startswith("data.")}
                steps = len(ref["loss"])
            flags = [*export.shape_flags(work), *flags]
            case = f"{name}-{optimizer}" + (f"-{mesh.replace('=', '').replace(',', '-')}"
                                            if mesh else "")
            shutil.copyfile(export.model, folder / f"{case}.onnx")
            np.savez(folder / f"{case}.data.npz", **data)
            if (name, optimizer) not in cpu_runs:
                cpu_runs[name, optimizer] = _train_cpu(export.model, flags,
                                                       folder / f"{case}.data.npz", steps,
                                                       work, shard_opt)
            log, weights = cpu_runs[name, optimizer]
            (folder / f"{case}.expected.jsonl").write_text(log)
            np.savez(folder / f"{case}.expected.npz", **weights)
            art = folder / f"{case}.shard"
            mesh_flags = ["--mesh", mesh, "--strategy", strategy] if mesh else []
            subprocess.run([str(shard_opt), str(export.model), *flags, *mesh_flags,
                            "--target", "cuda", f"--cuda-arch={cuda_arch}", "-o", str(art)],
                           check=True)
            written.append(art)
    return written


def _check_model(name: str, op: str, inputs, output, **attrs) -> onnx.ModelProto:
    """One named node (`name`) in a graph of its own."""
    node = helper.make_node(op, [i.name for i in inputs], [output.name], name=name, **attrs)
    graph = helper.make_graph([node], name, inputs, [output])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])


def _two_divisions() -> onnx.ModelProto:
    """(x / y) / z: two checking divisions fused into one generated kernel;
    the error must name the one that divided by zero (the second)."""
    nodes = [helper.make_node("Div", ["x", "y"], ["q"], name="per_group"),
             helper.make_node("Div", ["q", "z"], ["r"], name="per_member")]
    graph = helper.make_graph(nodes, "two_divisions",
                              [_value(n, TensorProto.INT32, [8]) for n in "xyz"],
                              [_value("r", TensorProto.INT32, [8])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])


def _value(name: str, elem: int, shape: list[int]):
    return helper.make_tensor_value_info(name, elem, shape)


# Programs that must fail on the GPU, with the inputs that make them fail
# and phrases the error names (the kernel's status word, read after the run).
CHECK_CASES = {
    "div_by_zero": (
        lambda: _check_model("divide_counts", "Div",
                             [_value("x", TensorProto.INT32, [8]),
                              _value("y", TensorProto.INT32, [8])],
                             _value("q", TensorProto.INT32, [8])),
        {"x": np.arange(8, dtype=np.int32) * 7,
         "y": np.array([1, 2, 3, 4, 5, 0, 7, 8], np.int32)},
        ["ONNX node 'divide_counts'", "integer division by zero (element 5 of the result)"]),
    "fused_div_by_zero": (
        _two_divisions,
        {"x": np.arange(8, dtype=np.int32) * 60, "y": np.full(8, 3, np.int32),
         "z": np.array([1, 2, 3, 4, 5, 6, 0, 8], np.int32)},
        ["ONNX node 'per_member'", "integer division by zero (element 6 of the result)"]),
    "mod_by_zero": (
        lambda: _check_model("wrap_slots", "Mod",
                             [_value("x", TensorProto.INT64, [8]),
                              _value("y", TensorProto.INT64, [8])],
                             _value("r", TensorProto.INT64, [8])),
        {"x": np.arange(8, dtype=np.int64) * 5,
         "y": np.array([3, 2, 0, 4, 5, 6, 7, 8], np.int64)},
        ["ONNX node 'wrap_slots'", "integer modulo by zero (element 2 of the result)"]),
    "gather_elements_out_of_range": (
        lambda: _check_model("pick_rows", "GatherElements",
                             [_value("x", TensorProto.FLOAT, [3, 4]),
                              _value("i", TensorProto.INT64, [3, 2])],
                             _value("y", TensorProto.FLOAT, [3, 2]), axis=1),
        {"x": np.arange(12, dtype=np.float32).reshape(3, 4),
         "i": np.array([[0, 1], [2, 7], [-4, 3]], np.int64)},
        ["ONNX node 'pick_rows'", "index 7 read from the data is out of range"]),
    "gather_out_of_range": (
        lambda: _check_model("embed", "Gather",
                             [_value("table", TensorProto.FLOAT, [4, 8]),
                              _value("ids", TensorProto.INT64, [2, 3])],
                             _value("y", TensorProto.FLOAT, [2, 3, 8]), axis=0),
        {"table": np.arange(32, dtype=np.float32).reshape(4, 8),
         "ids": np.array([[0, 1, 2], [3, -9, 1]], np.int64)},
        ["ONNX node 'embed'", "index -9 read from the data is out of range"]),
}


def write_check_cases(outdir: Path, shard_opt: Path) -> list[Path]:
    """OUTDIR/checks: CASE.shard, CASE.inputs.npz, CASE.expected-error."""
    folder = outdir / "checks"
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for case, (build, feeds, phrases) in CHECK_CASES.items():
        path = folder / f"{case}.onnx"
        onnx.save(build(), path)
        art = folder / f"{case}.shard"
        subprocess.run([str(shard_opt), str(path), "--target", "cuda", "-o", str(art)],
                       check=True)
        np.savez(folder / f"{case}.inputs.npz", **feeds)
        (folder / f"{case}.expected-error").write_text("\n".join(phrases) + "\n")
        written.append(art)
    return written


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    build = Path(os.environ.get("SHARDFLOW_BUILD_DIR", REPO / "build"))
    shard_opt = build / "bin" / "shard-opt"
    outdir = Path(argv[0])
    for art in (write_cases(outdir, shard_opt) + write_check_cases(outdir, shard_opt)
                + write_training_cases(outdir, shard_opt)):
        print(art)
    return 0


if __name__ == "__main__":
    sys.exit(main())
