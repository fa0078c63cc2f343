"""shard-run --trace FILE: every rank's operations on one timeline.

GPT-2 sharded dp=2,tp=2 (megatron) runs twice on four ranks, on the CPU
under mpirun and on the CUDA stand-ins (NCCL over four processes), and a
one-rank CUDA run; rank 0 writes one Chrome trace JSON file. It must load
as JSON, hold spans for every rank, and each rank's spans must be its
program's instructions, run after run (kernels by name, generated kernels
by function, collectives by kind: profile_report.trace_operations against
profile_report.artifact_operations), on the lanes they ran on. Ranks here
share one clock, so the offsets rank 0 measured must be within half of
their round trip of zero.
"""
from __future__ import annotations

import subprocess

import numpy as np
import pytest

from shardflow import models, toolchain, profile_report
from test_cuda_standin import mpirun_standin, run_standin, standin_dir
from test_mpi import MPIRUN, mpirun

RUNS = 2


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory):
    out = tmp_path_factory.mktemp("trace")
    model = models.MODELS["gpt2"]()
    models.save(model, out / "gpt2.onnx")
    np.savez(out / "inputs.npz", **models.random_inputs(model, seed=1, vocab=128))
    return out


def compile_gpt2(base, target: str, mesh: bool) -> str:
    artifact = base / f"gpt2-{target}{'-tp' if mesh else ''}.shard"
    if not artifact.exists():
        flags = ["--mesh", "dp=2,tp=2", "--strategy", "megatron"] if mesh else []
        subprocess.run([str(toolchain.tool("shard-opt")), str(base / "gpt2.onnx"), "--target",
                        target, *flags, "-o", str(artifact)], check=True)
    return str(artifact)


def check_trace(path, artifact: str, ranks: int, lanes: set[str]) -> dict:
    trace = profile_report.read_trace(path)
    events = trace["traceEvents"]
    spans = [e for e in events if e["ph"] == "X"]
    assert {e["pid"] for e in spans} == set(range(ranks))
    for e in spans:
        assert e["ts"] >= 0 and e["dur"] >= 0, e
    want = profile_report.artifact_operations(open(artifact).read(), runs=RUNS)
    got = profile_report.trace_operations(trace)
    for rank in range(ranks):
        assert got[rank] == want, (rank, got[rank] - want, want - got[rank])
    names = {e["args"]["name"] for e in events
             if e["ph"] == "M" and e["name"] == "thread_name"}
    assert names == lanes | {"host"}, names
    runs = [e for e in spans if e["cat"] == "run"]
    assert len(runs) == ranks * RUNS
    assert any("node" in e["args"] for e in spans)
    offsets = trace["otherData"]["clockOffsetsMicroseconds"]
    trips = trace["otherData"]["clockRoundTripsMicroseconds"]
    assert len(offsets) == ranks and offsets[0] == 0
    for offset, trip in zip(offsets, trips):
        assert abs(offset) <= trip / 2 + 1, (offsets, trips)
    return trace


def lane_of(trace, category) -> set[str]:
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in trace["traceEvents"]
             if e["ph"] == "M" and e["name"] == "thread_name"}
    return {names[(e["pid"], e["tid"])] for e in trace["traceEvents"]
            if e["ph"] == "X" and e["cat"] == category}


def test_four_cpu_ranks_write_one_trace(gpt2, tmp_path):
    assert MPIRUN, "mpirun is missing: run tools/setup.sh (openmpi-bin)"
    artifact = compile_gpt2(gpt2, "cpu", mesh=True)
    rc, log, _ = mpirun(4, artifact, "--weights", gpt2 / "gpt2.onnx", "--inputs",
                        gpt2 / "inputs.npz", "--repeat", RUNS, "--trace", tmp_path / "t.json",
                        timeout=300)
    assert rc == 0, log
    trace = check_trace(tmp_path / "t.json", artifact, 4, {"CPU"})
    assert lane_of(trace, "collective") == {"CPU"}
    collectives = [e for e in trace["traceEvents"] if e.get("cat") == "collective"]
    assert collectives and all(e["args"]["bytes"] > 0 for e in collectives)


def test_cuda_runs_write_one_trace(gpt2, tmp_path):
    standin_dir()
    single = compile_gpt2(gpt2, "cuda", mesh=False)
    rc, err = run_standin(single, "--weights", gpt2 / "gpt2.onnx", "--inputs",
                          gpt2 / "inputs.npz", "--repeat", RUNS, "--trace", tmp_path / "one.json",
                          env={"SHARDFLOW_STANDIN_SM": "86"})
    assert rc == 0, err
    trace = check_trace(tmp_path / "one.json", single, 1,
                        {"compute stream", "communication stream"})
    assert lane_of(trace, "launch") == {"compute stream"}
    copies = {e["name"] for e in trace["traceEvents"] if e.get("cat") == "copy"}
    assert {"inputs to the device", "outputs to the host"} <= copies, copies

    sharded = compile_gpt2(gpt2, "cuda", mesh=True)
    nccl = tmp_path / "nccl"
    nccl.mkdir()
    rc, log = mpirun_standin(4, sharded, "--weights", gpt2 / "gpt2.onnx", "--inputs",
                             gpt2 / "inputs.npz", "--repeat", RUNS, "--trace",
                             tmp_path / "four.json",
                             env={"SHARDFLOW_STANDIN_NCCL_DIR": str(nccl)}, timeout=300)
    assert rc == 0, log
    trace = check_trace(tmp_path / "four.json", sharded, 4,
                        {"compute stream", "communication stream"})
    assert lane_of(trace, "collective") == {"communication stream"}


def test_trace_and_cuda_graph_do_not_go_together(gpt2, tmp_path):
    standin_dir()
    single = compile_gpt2(gpt2, "cuda", mesh=False)
    rc, err = run_standin(single, "--weights", gpt2 / "gpt2.onnx", "--inputs",
                          gpt2 / "inputs.npz", "--cuda-graph", "--trace", tmp_path / "t.json",
                          env={"SHARDFLOW_STANDIN_SM": "86"})
    assert rc == 1 and "--cuda-graph and --trace do not go together" in err, err
