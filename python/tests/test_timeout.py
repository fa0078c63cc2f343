"""shard-run --timeout: a rank that never joins ends the job, named.

Two ranks run a one-instruction program (an all_reduce over both, or a
receive from rank 1); rank 1 never gets there (SHARDFLOW_TEST_STALL_RANK=1
makes it sleep after loading). Rank 0 waits --timeout seconds, then ends the
whole job, the sleeping rank included, with a message that names itself, the
collective (kind, instruction, ONNX node) and the ranks it waited for: on the
CPU over MPI, and on the CUDA stand-ins over NCCL (where the wait is the
host's wait for the GPU, and the collective named the first one not done).
"""
from __future__ import annotations

import time

import numpy as np
import pytest

from test_cuda_standin import mpirun_standin
from test_mpi import MPIRUN, mpirun

TIMEOUT = 2.0
# mpirun's start and end on a busy machine, on top of the timeout.
SLACK = 25.0


def artifact(tmp_path, target: str, instruction: str) -> str:
    path = tmp_path / f"{target}.shard"
    path.write_text("\n".join([
        "shardflow-artifact 4", f"target {target}", "world-size 2", "model-dir .", "arena 256",
        "buffer 0 input f32 4 name=x", "buffer 1 arena f32 4 offset=0", instruction,
        "output y 1", "end", ""]))
    np.save(tmp_path / "x.npy", np.arange(4, dtype=np.float32))
    return str(path)


ALL_REDUCE = ("collective all_reduce in=0 out=1 groups=is:0,1 group_size=i:2 reduction=s:sum "
              "node=s:the_sum")
RECV = "collective recv in= out=1 peers=is:1,-1 node=s:from_one"


def expect_named(log: str, seconds: float, what: str, waited: str):
    assert seconds < TIMEOUT + SLACK, f"the job took {seconds:.1f} s to stop"
    assert f"rank 0: {what} did not finish within 2 s (--timeout): rank 0 waited for {waited}" \
        in log, log
    assert "rank 1:" not in log, log  # killed while it slept


@pytest.mark.parametrize("instruction,what,waited", [
    (ALL_REDUCE, "collective 'all_reduce' (ONNX node 'the_sum', instruction 0)",
     "ranks 0, 1 (its group)"),
    (RECV, "collective 'recv' (ONNX node 'from_one', instruction 0)", "rank 1 to send to it")])
def test_cpu_rank_that_never_joins_ends_the_job(tmp_path, instruction, what, waited):
    assert MPIRUN, "mpirun is missing: run tools/setup.sh (openmpi-bin)"
    path = artifact(tmp_path, "cpu", instruction)
    rc, log, seconds = mpirun(2, path, "--input", f"x={tmp_path / 'x.npy'}", "--timeout",
                              str(TIMEOUT), env={"SHARDFLOW_TEST_STALL_RANK": "1"},
                              timeout=TIMEOUT + SLACK + 30)
    assert rc != 0, log
    expect_named(log, seconds, what, waited)


def test_cpu_collectives_within_the_timeout_run(tmp_path):
    path = artifact(tmp_path, "cpu", ALL_REDUCE)
    rc, log, _ = mpirun(2, path, "--input", f"x={tmp_path / 'x.npy'}", "--timeout", "30",
                        "--output", tmp_path / "y.npy")
    assert rc == 0, log
    np.testing.assert_array_equal(np.load(tmp_path / "y.npy"), 2 * np.arange(4))


def test_cuda_rank_that_never_joins_ends_the_job(tmp_path):
    path = artifact(tmp_path, "cuda", ALL_REDUCE)
    nccl = tmp_path / "nccl"
    nccl.mkdir()
    start = time.monotonic()
    rc, log = mpirun_standin(2, path, "--input", f"x={tmp_path / 'x.npy'}", "--timeout",
                             str(TIMEOUT), env={"SHARDFLOW_STANDIN_NCCL_DIR": str(nccl)},
                             ranks_env={1: {"SHARDFLOW_TEST_STALL_RANK": "1"}},
                             timeout=TIMEOUT + SLACK + 30)
    seconds = time.monotonic() - start
    assert rc != 0, log
    expect_named(log, seconds, "collective 'all_reduce' (ONNX node 'the_sum', instruction 0)",
                 "ranks 0, 1 (its group)")


def test_collective_timeout_is_the_same_flag(tmp_path):
    path = artifact(tmp_path, "cpu", ALL_REDUCE)
    rc, log, _ = mpirun(2, path, "--input", f"x={tmp_path / 'x.npy'}", "--collective-timeout",
                        str(TIMEOUT), env={"SHARDFLOW_TEST_STALL_RANK": "1"},
                        timeout=TIMEOUT + SLACK + 30)
    assert rc != 0 and "did not finish within 2 s (--collective-timeout)" in log, log
