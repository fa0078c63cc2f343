"""The CUDA programs the compiler writes, as the device sees them.

The zoo's GPT-2-style models (gpt2, llama, neox), compiled for CUDA in f32
and bf16, on one rank and sharded dp=2,tp=2 with the megatron preset, run
on the stand-in libraries (test_cuda_standin.py), each rank writing the
stand-in's log of device operations: uploads, launches of generated and
hand-written kernels with their grids, cuBLASLt GEMMs with their shapes,
transposes and epilogues, NCCL calls with their sizes, 2-D copies, and CUDA
graph capture and replay (one-rank programs run twice, so that the second
run is captured into a graph; gpt2-tp runs twice with --cuda-graph).

Each rank's log, kept in order per stream (streams interleave by timing),
must be the one recorded in data/device_logs/: a change to the compiler or
the runtime that changes what runs on the device shows here as a diff, the
operation named. After a deliberate change, record the logs again with

    SHARDFLOW_RECORD_DEVICE_LOGS=1 pytest python/tests/test_device_log.py

and say in the commit why the device's work changed.
"""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

from shardflow import models, toolchain
from test_cuda_standin import mpirun_standin, run_standin, standin_dir

LOGS = Path(__file__).parent / "data" / "device_logs"
RECORD = os.environ.get("SHARDFLOW_RECORD_DEVICE_LOGS") == "1"
MODELS = ["gpt2", "llama", "neox"]
# (case suffix, shard-opt flags, ranks, shard-run flags)
LAYOUTS = [("", [], 1, ["--repeat", "2"]),
           ("-tp", ["--mesh", "dp=2,tp=2", "--strategy", "megatron"], 4, [])]


def per_stream(trace: str) -> str:
    """The trace's lines grouped by stream, in order within each stream; a
    stream's leading uploads (the weights, which loader threads finish in
    any order) sorted."""
    streams: dict[str, list[str]] = {}
    for line in trace.splitlines():
        stream, op = line.split(": ", 1)
        streams.setdefault(stream, []).append(op)
    for ops in streams.values():
        lead = next((i for i, op in enumerate(ops) if not op.startswith("copy host to device")),
                    len(ops))
        ops[:lead] = sorted(ops[:lead])
    return "".join(f"== {s}\n" + "".join(f"{op}\n" for op in ops)
                   for s, ops in sorted(streams.items()))


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    standin_dir()
    out = tmp_path_factory.mktemp("device_log")
    for name in MODELS:
        model = models.MODELS[name]()
        models.save(model, out / f"{name}.onnx")
        np.savez(out / f"{name}.inputs.npz", **models.random_inputs(model, seed=1, vocab=128))
    return out


def device_log(sources: Path, name: str, dtype: str, suffix: str, compile_flags, ranks,
               run_flags, tmp_path: Path) -> str:
    artifact = tmp_path / f"{name}{suffix}.shard"
    subprocess.run([str(toolchain.tool("shard-opt")), str(sources / f"{name}.onnx"), "--target",
                    "cuda", "--dtype", dtype, *compile_flags, "-o", str(artifact)], check=True)
    args = [artifact, "--weights", sources / f"{name}.onnx", "--inputs",
            sources / f"{name}.inputs.npz", "--output", tmp_path / "out.npz", *run_flags]
    traces = [tmp_path / f"rank{r}.trace" for r in range(ranks)]
    if ranks == 1:
        rc, err = run_standin(*args, env={"SHARDFLOW_STANDIN_SM": "86",
                                          "SHARDFLOW_STANDIN_TRACE": str(traces[0])})
    else:
        nccl = tmp_path / "nccl"
        nccl.mkdir()
        rc, err = mpirun_standin(ranks, *args, env={"SHARDFLOW_STANDIN_NCCL_DIR": str(nccl)},
                                 ranks_env={r: {"SHARDFLOW_STANDIN_TRACE": str(traces[r])}
                                            for r in range(ranks)})
    assert rc == 0, err
    return "".join(f"=== rank {r}\n" + per_stream(t.read_text()) for r, t in enumerate(traces))


CASES = [(name, dtype, layout) for name in MODELS for dtype in ("f32", "bf16")
         for layout in LAYOUTS] + [
    ("gpt2", "bf16", ("-tp-graph", LAYOUTS[1][1], 4, ["--repeat", "2", "--cuda-graph"]))]


@pytest.mark.parametrize("name,dtype,layout", CASES,
                         ids=[f"{n}{l[0]}-{d}" for n, d, l in CASES])
def test_device_operations_are_the_recorded_ones(sources, name, dtype, layout, tmp_path):
    suffix, compile_flags, ranks, run_flags = layout
    got = device_log(sources, name, dtype, suffix, compile_flags, ranks, run_flags, tmp_path)
    recorded = LOGS / f"{name}{suffix}-{dtype}.log"
    if RECORD:
        LOGS.mkdir(parents=True, exist_ok=True)
        recorded.write_text(got)
    assert recorded.exists(), f"{recorded} is missing: record it (see this file's docstring)"
    want = recorded.read_text()
    if got != want:
        import difflib
        diff = "".join(difflib.unified_diff(want.splitlines(True), got.splitlines(True),
                                            str(recorded), "this run", n=2))
        pytest.fail(f"the device's operations changed:\n{diff[:6000]}")
