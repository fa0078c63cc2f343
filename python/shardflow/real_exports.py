"""The real-export test bed: every model in test/real-exports (written by
python/testbed/export_models.py from Hugging Face `transformers` classes by
PyTorch's TorchScript and dynamo exporters, onnxruntime's transformer
optimizer and onnxruntime-genai's model builder) taken through the steps a
user takes, each checked against the export's own reference outputs
(onnxruntime's, in expected.npz):

  import       shard-opt --compile-to=import with the test inputs' shapes
  cpu          --target cpu, one rank; every output within relative L2
               error 1e-5 of onnxruntime's (float32)
  megatron     --mesh dp=2,tp=2 --strategy megatron under mpirun -np 4, the
               same tolerance on every rank; and, from --report and the
               artifact, every attention and MLP weight split (the
               manifest says which PyTorch parameter each initializer
               holds) and each rank holding at most 0.6 of the parameters
  megatron-sp  the same with --strategy megatron-sp
  cuda-bf16    --target cuda --dtype bf16 on the CUDA stand-in (the PTX
               interpreter), within relative L2 error 2e-2; and every
               attention block raised to one attention kernel (as many
               as the model has: its layers, or T5's encoder layers and
               two per decoder layer)

Mixtral's experts are the expert-parallel work: only its attention weights
must be split, and the 0.6 bound (its experts are most of its parameters)
is not applied to it. Run by hand for the whole table (docs/real-exports.md):

    PYTHONPATH=python .venv/bin/python -m shardflow.real_exports [--steps ...] [NAME ...]

python/tests/test_real_exports.py runs the same steps in CI.
"""
from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from shardflow import toolchain

ROOT = toolchain.ROOT
EXPORTS_DIR = ROOT / "test" / "real-exports"
STEPS = ("import", "cpu", "megatron", "megatron-sp", "cuda-bf16")
CPU_TOLERANCE = 1e-5
BF16_TOLERANCE = 2e-2
MAX_PARAMETER_FRACTION = 0.6
MESH = "dp=2,tp=2"

# PyTorch parameters of attention and MLP projections (2-D weights), by
# the names transformers gives them across the families of the test bed.
PROJECTION = re.compile(
    r"(\.(q_proj|k_proj|v_proj|o_proj|qkv_proj|gate_proj|up_proj|down_proj|gate_up_proj"
    r"|c_attn|c_proj|c_fc|query|key|value|q_lin|k_lin|v_lin|out_lin|lin1|lin2|fc1|fc2"
    r"|q|k|v|o|wi|wi_0|wi_1|wo)"
    r"|attention\.output\.dense|intermediate\.dense|\.output\.dense)\.weight$")
# Mixtral's experts (and its router) belong to expert parallelism.
EXPERTS = re.compile(r"\.(experts|gate|block_sparse_moe\.gate|mlp\.gate)\b")


def manifest() -> dict:
    return json.loads((EXPORTS_DIR / "manifest.json").read_text())


def export_names() -> list[str]:
    return [e["name"] for e in manifest()["exports"] if e.get("status") == "ok"]


@dataclass
class Export:
    name: str
    entry: dict

    @property
    def folder(self) -> Path:
        return EXPORTS_DIR / self.name

    @property
    def model(self) -> Path:
        return self.folder / "model.onnx"

    def inputs(self) -> dict[str, np.ndarray]:
        with np.load(self.folder / "inputs.npz") as d:
            return {k: d[k] for k in d.files}

    def expected(self) -> dict[str, np.ndarray]:
        with np.load(self.folder / "expected.npz") as d:
            return {k: d[k] for k in d.files}

    def shape_flags(self, tmp: Path) -> list[str]:
        return shape_flags(self.inputs(), tmp)

    def attention_blocks(self) -> int:
        """The model's attention blocks: one per layer, and for an
        encoder-decoder (T5) one per encoder layer and two (self and cross)
        per decoder layer."""
        config = self.entry["config"]
        layers = config["num_hidden_layers"]
        if config.get("model_class") == "T5ForConditionalGeneration":
            return layers + 2 * config.get("num_decoder_layers", layers)
        return layers

    def split_parameters(self) -> dict[str, str]:
        """Initializer -> PyTorch parameter for the weights a Megatron split
        must cover."""
        out = {}
        for init, info in self.entry["initializer_map"]["initializers"].items():
            if not isinstance(info, dict):
                continue
            # A packed projection (onnxruntime-genai's qkv_proj) holds several.
            params = info.get("concat_of") or [info.get("parameter")]
            hits = [p for p in params if p and PROJECTION.search(p) and not EXPERTS.search(p)]
            if hits:
                out[init] = "+".join(hits)
        return out


def shape_flags(inputs: dict[str, np.ndarray], tmp: Path) -> list[str]:
    """--input-shape for every input; --input-value for the scalars (a
    total sequence length the program is compiled for), written to tmp."""
    flags = []
    for name, value in inputs.items():
        if value.ndim == 0:
            path = tmp / f"{name}.npy"
            np.save(path, value)
            flags += ["--input-value", f"{name}={path}"]
        else:
            flags += ["--input-shape", f"{name}={','.join(map(str, value.shape))}"]
    return flags


def load(name: str) -> Export:
    for e in manifest()["exports"]:
        if e["name"] == name:
            return Export(name, e)
    raise KeyError(f"no export '{name}' in {EXPORTS_DIR / 'manifest.json'}")


class StepFailed(Exception):
    pass


def _shard_opt(args: list[str]) -> str:
    cmd = [str(toolchain.tool("shard-opt")), *args]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        first = next((l for l in out.stderr.splitlines() if "error" in l), out.stderr.strip())
        raise StepFailed(f"shard-opt: {first}")
    return out.stderr


def _compare(ours: dict[str, np.ndarray], expected: dict[str, np.ndarray],
             tolerance: float, what: str) -> float:
    worst = 0.0
    for name, want in expected.items():
        if name not in ours:
            raise StepFailed(f"{what}: output '{name}' missing (have {sorted(ours)})")
        got = ours[name]
        if got.shape != want.shape:
            raise StepFailed(f"{what}: output '{name}' has shape {got.shape}, onnxruntime's "
                             f"{want.shape}")
        if not np.all(np.isfinite(got) == np.isfinite(want)):
            raise StepFailed(f"{what}: output '{name}' has non-finite values where "
                             "onnxruntime's has none (or the other way)")
        finite = np.isfinite(want)
        err = toolchain.relative_error(got[finite], want[finite])
        worst = max(worst, err)
        if not err <= tolerance:
            raise StepFailed(f"{what}: output '{name}' relative L2 error {err:.3g} over "
                             f"the tolerance {tolerance:g}")
    return worst


def _mpirun(ranks: int) -> list[str]:
    mpirun = shutil.which("mpirun")
    if not mpirun:
        raise StepFailed("mpirun is missing (tools/setup.sh installs openmpi-bin)")
    return [mpirun, "--oversubscribe", "-np", str(ranks)]


def check_split(export: Export, artifact: Path, report: str) -> str:
    """Every attention and MLP weight sliced, and each rank holding at most
    MAX_PARAMETER_FRACTION of the parameters (from --report)."""
    m = re.search(r"parameters per rank: \d+ bytes .*?: ([0-9.]+) per rank", report)
    if not m:
        raise StepFailed("--report printed no 'parameters per rank' line")
    fraction = float(m.group(1))
    # Split: every buffer read from the initializer is a different block on
    # different ranks (a block of a packed projection, the same on every
    # rank, is not a split).
    blocks: dict[str, list[bool]] = {}
    for line in artifact.read_text(errors="replace").splitlines():
        m = re.match(r"buffer \d+ weight \S+ \S+ name=(\S+)", line)
        if m:
            starts = re.search(r" starts=(\S+)", line)
            blocks.setdefault(m.group(1), []).append(
                bool(starts) and len(set(starts.group(1).split(";"))) > 1)
    sliced = {name for name, split in blocks.items() if all(split)}
    wanted = export.split_parameters()
    if not wanted:
        raise StepFailed("the manifest maps no initializer to an attention or MLP weight")
    whole = sorted(f"{p} ({i})" for i, p in wanted.items() if i not in sliced)
    if whole:
        raise StepFailed(f"{len(whole)} of {len(wanted)} attention/MLP weights not split: "
                         + ", ".join(whole[:4]) + (" ..." if len(whole) > 4 else ""))
    if export.entry["family"] == "mixtral":
        # Its experts are most of its parameters and belong to expert
        # parallelism: only the attention weights must be split.
        return f"{len(wanted)} weights split, {fraction:.3f} of the parameters per rank " \
               "(experts whole)"
    if fraction > MAX_PARAMETER_FRACTION:
        raise StepFailed(f"each rank holds {fraction:.3f} of the parameters (at most "
                         f"{MAX_PARAMETER_FRACTION})")
    return f"{len(wanted)} weights split, {fraction:.3f} of the parameters per rank"


def run_step(export: Export, step: str, tmp: Path) -> str:
    """Runs one step; returns a short summary or raises StepFailed."""
    flags = export.shape_flags(tmp)
    inputs, expected = export.inputs(), export.expected()
    if step == "import":
        _shard_opt([str(export.model), *flags, "--compile-to=import", "-o",
                    str(tmp / "import.mlir")])
        return "imported"
    if step == "cpu":
        artifact = tmp / "cpu.shard"
        _shard_opt([str(export.model), *flags, "--target", "cpu", "-o", str(artifact)])
        try:
            ours = toolchain.run_artifact(artifact, inputs)
        except RuntimeError as e:
            raise StepFailed(str(e).splitlines()[-1]) from None
        return f"relative L2 {_compare(ours, expected, CPU_TOLERANCE, 'cpu'):.2g}"
    if step in ("megatron", "megatron-sp"):
        artifact = tmp / f"{step}.shard"
        report = _shard_opt([str(export.model), *flags, "--mesh", MESH, "--strategy", step,
                             "--target", "cpu", "--report", "-o", str(artifact)])
        split = check_split(export, artifact, report)
        worst = 0.0
        with tempfile.TemporaryDirectory() as outdir:
            launcher = _mpirun(4)
            pattern = Path(outdir) / "out.{rank}.npz"
            npz = Path(outdir) / "inputs.npz"
            np.savez(npz, **inputs)
            cmd = [*launcher, str(toolchain.tool("shard-run")), str(artifact),
                   "--inputs", str(npz), "--output", str(pattern)]
            env = dict(__import__("os").environ, OMPI_ALLOW_RUN_AS_ROOT="1",
                       OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
            if out.returncode != 0:
                raise StepFailed("shard-run: " + (out.stderr.strip().splitlines() or ["?"])[-1])
            for rank in range(4):
                with np.load(Path(outdir) / f"out.{rank}.npz") as d:
                    ours = {k: d[k] for k in d.files}
                worst = max(worst, _compare(ours, expected, CPU_TOLERANCE, f"rank {rank}"))
        return f"{split}; relative L2 {worst:.2g}"
    if step == "cuda-bf16":
        from shardflow import standin
        artifact = tmp / "cuda.shard"
        _shard_opt([str(export.model), *flags, "--target", "cuda", "--dtype", "bf16",
                    "-o", str(artifact)])
        raised = len(re.findall(r"^kernel attention ", artifact.read_text(errors="replace"),
                                re.M))
        blocks = export.attention_blocks()
        if raised != blocks:
            raise StepFailed(f"{raised} of the {blocks} attention blocks raised to an "
                             "attention kernel (why: shard-opt MODEL --compile-to=import | shard-opt "
                             "--nn-raise-attention=explain=true)")
        try:
            ours = standin.run(artifact, inputs, timeout=900)
        except FileNotFoundError as e:
            raise StepFailed(str(e)) from None
        except standin.RunFailed as e:
            raise StepFailed("shard-run (stand-in): " + str(e).strip().splitlines()[-1]) from None
        worst = _compare(ours, expected, BF16_TOLERANCE, "cuda-bf16")
        return f"{raised} attention blocks raised; relative L2 {worst:.2g}"
    raise ValueError(f"unknown step '{step}' (steps: {', '.join(STEPS)})")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help="exports (default: all)")
    parser.add_argument("--steps", default=",".join(STEPS),
                        help=f"comma-separated steps (default: {','.join(STEPS)})")
    parser.add_argument("--markdown", action="store_true",
                        help="print the table as Markdown (for docs/real-exports.md)")
    args = parser.parse_args(argv)
    steps = [s for s in args.steps.split(",") if s]
    for s in steps:
        if s not in STEPS:
            parser.error(f"unknown step '{s}' (steps: {', '.join(STEPS)})")
    names = args.names or export_names()
    rows = []
    for name in names:
        export = load(name)
        row = [name]
        for step in steps:
            with tempfile.TemporaryDirectory(prefix="shardflow-real-") as tmp:
                try:
                    row.append("ok: " + run_step(export, step, Path(tmp)))
                except StepFailed as e:
                    row.append("FAIL: " + str(e))
            print(f"{name:28s} {step:12s} {row[-1]}", file=sys.stderr, flush=True)
        rows.append(row)
    if args.markdown:
        print("| export | " + " | ".join(steps) + " |")
        print("|---|" + "---|" * len(steps))
        for row in rows:
            print("| " + " | ".join(c.replace("|", "/") for c in row) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
