"""shard-run under mpirun: one process per rank, failures stop every rank.

The programs here are replicated (every rank runs the whole model) since
partitioned programs come with the sharding passes; what is checked is the
launch path: MPI bootstrap, the world-size check, rank 0 writing the
outputs, and a failure on one rank ending the whole job within seconds.
"""
import os
import shutil
import subprocess
import time

import numpy as np
import pytest

from shardflow import models, toolchain

MPIRUN = shutil.which("mpirun")
ENV = {**os.environ, "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
       "OMPI_MCA_rmaps_base_oversubscribe": "1"}


@pytest.fixture(scope="module")
def mlp(tmp_path_factory):
    assert MPIRUN, "mpirun is missing: run tools/setup.sh (openmpi-bin)"
    tmp = tmp_path_factory.mktemp("mpi")
    path = tmp / "mlp.onnx"
    models.save(models.mlp(), path)
    artifact = toolchain.compile_model(path, tmp / "mlp.shard")
    # The same program for two ranks: a replicated (data-parallel-free) run.
    two = tmp / "mlp2.shard"
    two.write_text(artifact.read_text().replace("world-size 1\n", "world-size 2\n", 1))
    x = np.random.default_rng(3).standard_normal((2, 16)).astype(np.float32)
    np.save(tmp / "x.npy", x)
    return tmp, path, artifact, two, x


def mpirun(n, *args, env=None, timeout=60):
    cmd = [MPIRUN, "-np", str(n), "--oversubscribe"]
    for key in (env or {}):
        cmd += ["-x", key]
    cmd += [str(toolchain.tool("shard-run")), *map(str, args)]
    start = time.monotonic()
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                         env={**ENV, **(env or {})})
    return out.returncode, out.stdout + out.stderr, time.monotonic() - start


def test_replicated_run_on_two_ranks_matches_onnxruntime(mlp):
    tmp, path, _, two, x = mlp
    rc, log, _ = mpirun(2, two, "--input", f"x={tmp / 'x.npy'}", "--output", tmp / "out.npz")
    assert rc == 0, log
    ours = np.load(tmp / "out.npz")["probs"]
    ref = toolchain.run_onnxruntime(path, {"x": x})["probs"]
    assert toolchain.relative_error(ours, ref) < 1e-5


def test_world_size_mismatch_under_mpirun(mlp):
    tmp, _, one, _, _ = mlp
    rc, log, _ = mpirun(2, one, "--input", f"x={tmp / 'x.npy'}")
    assert rc != 0
    assert "compiled for 1 rank(s) but was launched with 2" in log, log


def test_one_failing_rank_stops_the_job(mlp):
    tmp, _, _, two, _ = mlp
    rc, log, seconds = mpirun(2, two, "--input", f"x={tmp / 'x.npy'}",
                              env={"SHARDFLOW_TEST_FAIL_RANK": "1"})
    assert rc != 0
    assert "rank 1: injected failure" in log, log
    assert seconds < 20, f"the job took {seconds:.1f} s to stop"


@pytest.mark.parametrize("mode", ["in-time", "late-root"])
def test_broadcast_within_a_deadline(mode):
    """The broadcast that hands NCCL's unique id to the other ranks is polled
    under --collective-timeout (Communicator::broadcastWithin, an MPI_Ibcast):
    on time it delivers the root's bytes; when the root is 3 s late, rank 1
    gives up after its 0.3 s and its abort ends the job, the sleeping root
    included, long before the root would have joined."""
    assert MPIRUN, "mpirun is missing: run tools/setup.sh (openmpi-bin)"
    cmd = [MPIRUN, "-np", "2", "--oversubscribe",
           str(toolchain.tool("shardflow-mpi-check")), mode]
    start = time.monotonic()
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=ENV)
    elapsed = time.monotonic() - start
    log = out.stdout + out.stderr
    if mode == "in-time":
        assert out.returncode == 0, log
        assert "rank 0: finished" in log and "rank 1: finished" in log, log
        assert "rank 1: finished after" in log and "value 5eed5eed" in log.split("rank 1:")[1], log
        return
    assert out.returncode != 0, log
    waited = float(log.split("rank 1: timed out after ")[1].split()[0])
    assert 0.3 <= waited < 2.5, log
    assert "rank 0:" not in log, log  # killed while it slept
    assert "rank 1: the broadcast timed out" in log, log
    # The root sleeps 3 s; mpirun's own start-up is counted here too.
    assert elapsed < 3.0 + 5.0, (elapsed, log)
