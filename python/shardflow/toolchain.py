"""Drive the Shardflow tools from Python: compile with shard-opt, run with
shard-run, compare with onnxruntime.

    from shardflow import toolchain
    artifact = toolchain.compile_model("model.onnx", "model.shard")
    outputs = toolchain.run_artifact(artifact, {"x": x})
"""
from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]


def build_dir() -> Path:
    return Path(os.environ.get("SHARDFLOW_BUILD_DIR", ROOT / "build"))


def tool(name: str) -> Path:
    path = build_dir() / "bin" / name
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing: build the project first (tools/build.sh)")
    return path


def compile_model(model: str | Path, artifact: str | Path,
                  input_shapes: dict[str, tuple[int, ...]] | None = None,
                  extra: list[str] | None = None) -> Path:
    """shard-opt MODEL --target cpu -o ARTIFACT; raises with shard-opt's stderr."""
    cmd = [str(tool("shard-opt")), str(model), "--target", "cpu", "-o", str(artifact)]
    for name, dims in (input_shapes or {}).items():
        cmd += ["--input-shape", f"{name}={','.join(map(str, dims))}"]
    cmd += extra or []
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        raise RuntimeError(f"shard-opt failed ({out.returncode}):\n{out.stderr}")
    return Path(artifact)


def run_artifact(artifact: str | Path, inputs: dict[str, np.ndarray],
                 extra: list[str] | None = None, launcher: list[str] | None = None,
                 timeout: int = 600, env: dict[str, str] | None = None) -> dict[str, np.ndarray]:
    """shard-run ARTIFACT with the inputs (and `env` added to the
    environment); returns the outputs by name."""
    with tempfile.TemporaryDirectory() as tmp:
        result = Path(tmp) / "outputs.npz"
        cmd = (launcher or []) + [str(tool("shard-run")), str(artifact),
                                  "--output", str(result)]
        if inputs:
            # np.asarray keeps 0-d arrays 0-d (ascontiguousarray would not).
            npz = Path(tmp) / "inputs.npz"
            np.savez(npz, **{k: np.asarray(v, order="C") for k, v in inputs.items()})
            cmd += ["--inputs", str(npz)]
        cmd += extra or []
        env = {**os.environ, **(env or {})}
        if launcher and hasattr(os, "geteuid") and os.geteuid() == 0:
            # OpenMPI refuses to start as root unless told that it is meant.
            env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
        if out.returncode != 0:
            raise RuntimeError(f"shard-run failed ({out.returncode}):\n{out.stderr}")
        with np.load(result) as data:
            return {k: data[k] for k in data.files}


def run_onnxruntime(model: str | Path | bytes, inputs: dict[str, np.ndarray],
                    threads: int = 1) -> dict[str, np.ndarray]:
    import onnxruntime as ort
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    source = model if isinstance(model, bytes) else str(model)
    session = ort.InferenceSession(source, options, providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(names, inputs)))


def run_onnxruntime_model(model, inputs: dict[str, np.ndarray],
                          threads: int = 1) -> dict[str, np.ndarray]:
    """Like run_onnxruntime, for an in-memory onnx.ModelProto."""
    return run_onnxruntime(model.SerializeToString(), inputs, threads)


def relative_error(ours: np.ndarray, reference: np.ndarray) -> float:
    """||ours - reference||_2 / ||reference||_2 over all elements, in float64."""
    ours = np.asarray(ours, np.float64)
    reference = np.asarray(reference, np.float64)
    denom = np.linalg.norm(reference.ravel())
    diff = np.linalg.norm((ours - reference).ravel())
    return float(diff / denom) if denom else float(diff)
