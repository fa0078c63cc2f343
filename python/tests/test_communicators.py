"""The runtime's communicators in real processes (test/unit/CommunicatorTest.cpp).

shardflow-comm-tests holds gtest cases for every communicator: every
collective in its nonblocking form (a request, waited for) and its blocking
one, several requests in flight at once, a peer that joins late (the request
stays in flight, waitWithin times out, then it completes), and splits into
groups. It runs alone (the single rank, and NCCL over it) and under
`mpirun -np 2` (MPI, and NCCL over MPI), NCCL on the CUDA stand-ins (one
stand-in GPU per rank, communicators meeting through files).
"""
from __future__ import annotations

import os
import subprocess

import pytest

from shardflow import toolchain
from test_cuda_standin import standin_env
from test_mpi import ENV, MPIRUN


def comm_tests() -> str:
    return str(toolchain.tool("shardflow-comm-tests"))


NCCL_CASES = 6  # NcclCommunicator's cases, skipped without the stand-ins


def nccl_env(world: int, nccl_dir) -> dict[str, str]:
    """The stand-ins' environment, or none in a build without CUDA (the
    NCCL cases then skip)."""
    try:
        return standin_env(world, nccl_dir)
    except pytest.skip.Exception:
        return {}


def passed(log: str) -> dict[str, int]:
    """gtest's lines of each case's end ('[       OK ] Suite.Case (0 ms)'),
    counted by outcome."""
    marks = {"OK": "[       OK ] ", "SKIPPED": "[  SKIPPED ] ", "FAILED": "[  FAILED  ] "}
    counts = dict.fromkeys(marks, 0)
    for line in log.splitlines():
        for kind, mark in marks.items():
            if line.startswith(mark) and line.endswith(" ms)"):
                counts[kind] += 1
    return counts


def test_single_rank_and_nccl_over_it(tmp_path):
    extra = nccl_env(1, tmp_path)
    env = {**os.environ, **extra}
    out = subprocess.run([comm_tests(), "--gtest_color=no"], capture_output=True, text=True, timeout=300, env=env)
    log = out.stdout + out.stderr
    assert out.returncode == 0, log
    assert "1 rank(s), passed on every rank" in log, log
    counts = passed(log)
    # Nothing is skipped but the two-rank case of each communicator (and
    # NCCL's without the stand-ins).
    assert counts["FAILED"] == 0, (counts, log)
    assert counts["SKIPPED"] == 2 + (0 if extra else NCCL_CASES - 1), (counts, log)


def test_mpi_and_nccl_on_two_ranks(tmp_path):
    assert MPIRUN, "mpirun is missing: run tools/setup.sh (openmpi-bin)"
    extra = nccl_env(2, tmp_path)
    cmd = [MPIRUN, "-np", "2", "--oversubscribe"]
    for key in extra:
        cmd += ["-x", key]
    out = subprocess.run(cmd + [comm_tests(), "--gtest_color=no"], capture_output=True, text=True, timeout=300,
                         env={**ENV, **extra})
    log = out.stdout + out.stderr
    assert out.returncode == 0, log
    assert "2 rank(s), passed on every rank" in log, log
    counts = passed(log)
    # Every rank reports every case.
    assert counts["FAILED"] == 0, (counts, log)
    assert counts["SKIPPED"] == (0 if extra else 2 * NCCL_CASES), (counts, log)
    cases = ["WorldCommunicator.LateJoiner", "WorldCommunicator.RequestsInFlight"]
    if extra:
        cases += ["NcclCommunicator.LateJoiner", "NcclCommunicator.Split",
                  "NcclCommunicator.RequestsAreStreamEvents"]
    for case in cases:
        assert log.count(f"[       OK ] {case} (") == 2, (case, log)
