"""Compile models for CUDA and run them with shard-run on the CUDA stand-ins.

tools/cuda-standin builds libcuda, cuBLASLt and NCCL stand-ins that run a
CUDA artifact on a machine without a GPU (see its README): shard-run's CUDA
executor unchanged, the generated kernels interpreted from the PTX NVPTX
emitted (on a stand-in sm_86, which loads the artifact's compute_80 PTX),
with a GPU's faults reported as errors naming the kernel, block, thread and
PTX line: out-of-bounds and misaligned accesses, shared-memory races, warp
shuffles that part of a warp never reaches.

    ir = standin.compile_cuda("m.onnx", "m.shard")   # and the gpu.func kernels
    outputs = standin.run("m.shard", {"x": x})       # by name; RunFailed on errors
    ranks = standin.run("tp.shard", feeds, world=4)  # mpirun: every rank's outputs

compile_cuda returns the program right after convert-rt-to-gpu, in generic
form, from the compile that wrote the artifact, so a test checks the
kernels that ran. The raising passes are off unless the flags name them
(as when shard-opt prints IR), so a test compiles exactly the ops it writes.
"""
from __future__ import annotations

import base64
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np

from shardflow import toolchain

RAISING = ("attention", "normalization", "gelu", "rotate-half")
_IR_DUMP = "// -----// IR Dump After ConvertRTToGPU (convert-rt-to-gpu) //----- //"


class RunFailed(RuntimeError):
    """shard-run exited with an error; `stderr` holds what it (and the
    stand-ins) said."""

    def __init__(self, returncode: int, stderr: str):
        super().__init__(f"shard-run failed ({returncode}):\n{stderr}")
        self.returncode = returncode
        self.stderr = stderr


def library_dir() -> Path:
    """build/cuda-standin, where the build puts the stand-in libraries (only
    when it builds the CUDA executor)."""
    return toolchain.build_dir() / "cuda-standin"


def environment(world: int = 1, nccl_dir: Path | None = None) -> dict[str, str]:
    """What runs shard-run, or each rank of an mpirun of `world` ranks, on
    the stand-ins: one stand-in GPU per rank, generated kernels from their
    PTX (sm_86), NCCL's rank files under nccl_dir (default /dev/shm)."""
    env = {"LD_LIBRARY_PATH": f"{library_dir()}:{os.environ.get('LD_LIBRARY_PATH', '')}",
           "SHARDFLOW_STANDIN_GPUS": str(world), "SHARDFLOW_STANDIN_SM": "86",
           "SHARDFLOW_STANDIN_NCCL_TIMEOUT": "60"}
    if nccl_dir:
        env["SHARDFLOW_STANDIN_NCCL_DIR"] = str(nccl_dir)
    return env


def compile_cuda(model: str | Path, artifact: str | Path, *flags: str) -> str:
    """shard-opt MODEL --target cuda -o ARTIFACT FLAGS; returns the program
    after convert-rt-to-gpu (generic form). Cubins are built for sm_80 only
    unless FLAGS name --cuda-arch: the stand-ins run the PTX. Raises
    RuntimeError with shard-opt's stderr when the compile fails."""
    cmd = [str(toolchain.tool("shard-opt")), str(model), "--target", "cuda", "-o", str(artifact),
           *flags, "--mlir-print-ir-after=convert-rt-to-gpu", "--mlir-print-op-generic"]
    if not any(f.startswith("--cuda-arch") for f in flags):
        cmd.append("--cuda-arch=sm_80")
    for name in RAISING:
        if not any(f.startswith(f"--raise-{name}") for f in flags):
            cmd.append(f"--raise-{name}=false")
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        raise RuntimeError(f"shard-opt failed ({out.returncode}):\n{out.stderr}")
    at = out.stderr.find(_IR_DUMP)
    assert at >= 0, f"shard-opt printed no IR after convert-rt-to-gpu:\n{out.stderr}"
    return out.stderr[at + len(_IR_DUMP):]


def _ptx_line(text: str) -> re.Match:
    m = re.search(r"^(module \S+ arch=\S+ format=ptx data=)(\S*)$", text, re.M)
    assert m, "the artifact has no PTX module"
    return m


def ptx(artifact: str | Path) -> str:
    """The PTX of the artifact's generated kernels."""
    return base64.b64decode(_ptx_line(Path(artifact).read_text()).group(2)).decode()


def with_ptx(artifact: str | Path, edited: str | Path, text: str) -> Path:
    """Writes to `edited` the artifact with its PTX replaced by `text` (a
    kernel changed to show what the stand-ins catch)."""
    whole = Path(artifact).read_text()
    m = _ptx_line(whole)
    data = base64.b64encode(text.encode()).decode()
    Path(edited).write_text(whole[:m.start(2)] + data + whole[m.end(2):])
    return Path(edited)


def run(artifact: str | Path, inputs: dict[str, np.ndarray], *args: str | Path,
        world: int = 1, env: dict[str, str] | None = None,
        timeout: int = 300) -> dict[str, np.ndarray] | list[dict[str, np.ndarray]]:
    """shard-run ARTIFACT ARGS on the stand-ins with `inputs` (by name);
    with `world` above 1 under mpirun, one process and stand-in GPU per
    rank. Returns the outputs by name, or with several ranks every rank's.
    Raises RunFailed when shard-run fails."""
    if not (library_dir() / "libcuda.so.1").exists():
        raise FileNotFoundError(f"{library_dir()} has no stand-in libraries: the build has "
                                "no CUDA executor")
    with tempfile.TemporaryDirectory(prefix="shardflow-standin-") as tmp:
        tmp = Path(tmp)
        feeds = tmp / "inputs.npz"
        np.savez(feeds, **{k: np.asarray(v, order="C") for k, v in inputs.items()})
        nccl = tmp / "nccl"
        nccl.mkdir()
        extra = {**environment(world, nccl), **(env or {})}
        output = tmp / ("out.{rank}.npz" if world > 1 else "out.npz")
        program = [str(toolchain.tool("shard-run")), str(artifact), "--inputs", str(feeds),
                   "--output", str(output), *map(str, args)]
        if world > 1:
            mpirun = shutil.which("mpirun")
            assert mpirun, "mpirun is missing: run tools/setup.sh (openmpi-bin)"
            exported = [a for key in extra for a in ("-x", key)]
            cmd = [mpirun, "--oversubscribe", "-np", str(world), *exported, *program]
            # OpenMPI refuses to start as root unless told that it is meant.
            extra.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
        else:
            cmd = program
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                             env={**os.environ, **extra})
        if out.returncode != 0:
            raise RunFailed(out.returncode, out.stdout + out.stderr)

        def load(path: Path) -> dict[str, np.ndarray]:
            with np.load(path) as data:
                return {k: data[k] for k in data.files}

        if world > 1:
            return [load(tmp / f"out.{rank}.npz") for rank in range(world)]
        return load(output)
