"""rt collectives and sliced weights, run by shard-run under mpirun.

Each case is a hand-written SPMD rt program: every rank loads its own slice
of one weight tensor (so ranks hold different data), runs one collective,
and writes its result to its own file (`--output out.{rank}.npz`). Every
rank's result is compared with numpy on the whole tensor. Worlds of 2 and 4
ranks (oversubscribed on this machine), with groups spanning the world and
the two axes of a 2x2 mesh. Copies (gather, all_to_all, permute, send/recv,
max/min) must match exactly; float sums use rtol 1e-6 (MPI's summation order
is its own); float16 sums are reduced in float32 and rounded once (rtol 1e-3).

Every case runs twice: compiled for the CPU executor (collectives over
MPI), and compiled with `--target cuda` and run by the CUDA executor on the
stand-in libraries (tools/cuda-standin: NCCL communicators of one process
per rank, meeting through files), which exercises the executor's NCCL
calls, groups, communicator splits and the packing of pieces around them.
"""
from __future__ import annotations

import os
import shutil
import subprocess

import numpy as np
import pytest

from shardflow import toolchain

MPIRUN = shutil.which("mpirun")
ENV = {**os.environ, "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
       "OMPI_MCA_rmaps_base_oversubscribe": "1"}

MLIR_TYPES = {np.float32: "f32", np.float64: "f64", np.int64: "i64", np.float16: "f16",
              np.int32: "i32"}


def memref(shape, dtype):
    return "memref<" + "x".join(map(str, shape)) + "x" + MLIR_TYPES[dtype] + ">"


def rank_lists(lists):
    return "[" + ", ".join("array<i64: " + ", ".join(map(str, g)) + ">" for g in lists) + "]"


class Program:
    """One weight sliced over the ranks, one op on it, one output."""

    def __init__(self, world, glob, local, starts, dtype):
        self.world, self.glob, self.local, self.starts = world, glob, local, starts
        self.dtype = dtype

    def text(self, out_shape, body):
        w_type = memref(self.local, self.dtype)
        o_type = memref(out_shape, self.dtype)
        return "\n".join([
            f'func.func @main(%x: memref<1xf32> {{nn.name = "x"}}) -> ({o_type} {{nn.name = "y"}})'
            f" attributes {{rt.world_size = {self.world} : i64}} {{",
            f'  %w = rt.weight "w" {{storage = "external", file = "w.bin", offset = 0 : i64, '
            f"global_shape = array<i64: {', '.join(map(str, self.glob))}>, "
            f"starts = {rank_lists(self.starts)}}} : {w_type}",
            f"  %y = rt.alloc : {o_type}",
            "  " + body.replace("IN", f"%w : {w_type}").replace("OUT", f"%y : {o_type}"),
            f"  return %y : {o_type}",
            "}", ""])

    def slice_of(self, data, rank):
        return data[tuple(slice(s, s + n) for s, n in zip(self.starts[rank], self.local))]


TARGETS = ("cpu", "cuda")


def launcher(target, world, tmp_path):
    """mpirun's command prefix and environment for `target`."""
    assert MPIRUN, "mpirun is missing: run tools/setup.sh (openmpi-bin)"
    env = dict(ENV)
    if target == "cuda":
        from test_cuda_standin import standin_env  # skips when CUDA is not built
        (tmp_path / "nccl").mkdir(exist_ok=True)
        env.update(standin_env(world, tmp_path / "nccl"))  # the ranks inherit it
    return [MPIRUN, "-np", str(world), "--oversubscribe"], env


def run(tmp_path, program: Program, out_shape, body, data, target="cpu"):
    tmp_path.mkdir(parents=True, exist_ok=True)
    data.astype(program.dtype).tofile(tmp_path / "w.bin")
    (tmp_path / "p.mlir").write_text(program.text(out_shape, body))
    artifact = tmp_path / "p.shard"
    out = subprocess.run([str(toolchain.tool("shard-opt")), str(tmp_path / "p.mlir"), "--target",
                          target, "-o", str(artifact)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    np.save(tmp_path / "x.npy", np.zeros(1, np.float32))
    cmd, env = launcher(target, program.world, tmp_path)
    cmd += [str(toolchain.tool("shard-run")), str(artifact), "--input", f"x={tmp_path / 'x.npy'}",
            "--output", str(tmp_path / "out.{rank}.npz")]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 0, out.stdout + out.stderr
    if target == "cuda":  # the last rank to leave a communicator removes its files
        assert not list((tmp_path / "nccl").iterdir())
    return [np.load(tmp_path / f"out.{r}.npz")["y"] for r in range(program.world)]


def row_split(world, rows, cols, dtype):
    """Rank r holds rows [r*rows, (r+1)*rows) of a [world*rows, cols] tensor."""
    return Program(world, [world * rows, cols], [rows, cols],
                   [[r * rows, 0] for r in range(world)], dtype)


def data_for(program, seed):
    rng = np.random.default_rng(seed)
    if np.issubdtype(program.dtype, np.integer):
        return rng.integers(-1000, 1000, program.glob).astype(program.dtype)
    return rng.standard_normal(program.glob).astype(program.dtype)


def mesh_groups(world, axis):
    """Groups of a [2, world/2] mesh (rank = i * (world/2) + j) along `axis`."""
    if world == 2:
        return [[0, 1]]
    cols = world // 2
    if axis == 0:
        return [[j, cols + j] for j in range(cols)]
    return [[i * cols + j for j in range(cols)] for i in range(2)]


def check(got, want, dtype, exact):
    assert got.shape == want.shape and got.dtype == want.dtype, (got.shape, want.shape)
    if exact or np.issubdtype(dtype, np.integer):
        np.testing.assert_array_equal(got, want)
    elif dtype == np.float16:
        np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), rtol=1e-3,
                                   atol=1e-3)
    else:
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


REDUCE = {"sum": np.sum, "max": np.max, "min": np.min, "prod": np.prod}


@pytest.mark.parametrize("world", [2, 4])
@pytest.mark.parametrize("dtype,reduction", [(np.float32, "sum"), (np.float32, "max"),
                                             (np.int64, "sum"), (np.float64, "min"),
                                             (np.float16, "sum"), (np.int32, "prod")])
@pytest.mark.parametrize("axis", ["world", 0, 1])
@pytest.mark.parametrize("target", TARGETS)
def test_all_reduce(tmp_path, target, world, dtype, reduction, axis):
    p = row_split(world, 2, 5, dtype)
    data = data_for(p, world)
    if reduction == "prod":
        data = np.random.default_rng(1).integers(-3, 4, p.glob).astype(dtype)
    groups = [list(range(world))] if axis == "world" else mesh_groups(world, axis)
    body = f"rt.all_reduce ins(IN) outs(OUT) {{groups = {rank_lists(groups)}, " \
           f'reduction = "{reduction}"}}'
    outs = run(tmp_path, p, p.local, body, data, target=target)
    for group in groups:
        stacked = np.stack([p.slice_of(data, r) for r in group])
        if dtype == np.float16:
            want = REDUCE[reduction](stacked.astype(np.float32), axis=0).astype(dtype)
        else:
            want = REDUCE[reduction](stacked, axis=0).astype(dtype)
        for r in group:
            check(outs[r], want, dtype, exact=reduction in ("max", "min"))


@pytest.mark.parametrize("world", [2, 4])
@pytest.mark.parametrize("dim", [0, 1, 2])
@pytest.mark.parametrize("axis", ["world", 1])
@pytest.mark.parametrize("target", TARGETS)
def test_all_gather(tmp_path, target, world, dim, axis):
    # A [world*2, 3, 4] tensor split over its first dimension; gathered
    # along every dimension in turn.
    p = Program(world, [world * 2, 3, 4], [2, 3, 4], [[2 * r, 0, 0] for r in range(world)],
                np.float32)
    data = data_for(p, 7)
    groups = [list(range(world))] if axis == "world" else mesh_groups(world, axis)
    g = len(groups[0])
    out_shape = list(p.local)
    out_shape[dim] *= g
    body = f"rt.all_gather ins(IN) outs(OUT) {{dim = {dim} : i64, groups = {rank_lists(groups)}}}"
    outs = run(tmp_path, p, out_shape, body, data, target=target)
    for group in groups:
        want = np.concatenate([p.slice_of(data, r) for r in group], axis=dim)
        for r in group:
            check(outs[r], want, np.float32, exact=True)


@pytest.mark.parametrize("world", [2, 4])
@pytest.mark.parametrize("dim", [0, 1])
@pytest.mark.parametrize("dtype", [np.float32, np.int64])
@pytest.mark.parametrize("target", TARGETS)
def test_reduce_scatter(tmp_path, target, world, dim, dtype):
    p = row_split(world, 4, 8, dtype)
    data = data_for(p, 11)
    groups = [list(range(world))]
    out_shape = list(p.local)
    out_shape[dim] //= world
    body = f"rt.reduce_scatter ins(IN) outs(OUT) {{dim = {dim} : i64, " \
           f"groups = {rank_lists(groups)}}}"
    outs = run(tmp_path, p, out_shape, body, data, target=target)
    total = np.sum(np.stack([p.slice_of(data, r) for r in range(world)]), axis=0).astype(dtype)
    for k in range(world):
        want = np.split(total, world, axis=dim)[k]
        check(outs[k], want, dtype, exact=False)


@pytest.mark.parametrize("world", [2, 4])
@pytest.mark.parametrize("split,concat", [(0, 1), (1, 0), (1, 1), (2, 0)])
@pytest.mark.parametrize("target", TARGETS)
def test_all_to_all(tmp_path, target, world, split, concat):
    p = Program(world, [world * 4, 4, 4], [4, 4, 4], [[4 * r, 0, 0] for r in range(world)],
                np.float32)
    data = data_for(p, 13)
    out_shape = list(p.local)
    out_shape[split] //= world
    out_shape[concat] *= world
    body = f"rt.all_to_all ins(IN) outs(OUT) {{split_dim = {split} : i64, " \
           f"concat_dim = {concat} : i64, groups = {rank_lists([list(range(world))])}}}"
    outs = run(tmp_path, p, out_shape, body, data, target=target)
    pieces = [np.split(p.slice_of(data, r), world, axis=split) for r in range(world)]
    for k in range(world):
        want = np.concatenate([pieces[r][k] for r in range(world)], axis=concat)
        check(outs[k], want, np.float32, exact=True)


@pytest.mark.parametrize("world", [2, 4])
@pytest.mark.parametrize("target", TARGETS)
def test_collective_permute_ring_and_idle_rank(tmp_path, target, world):
    p = row_split(world, 2, 3, np.float32)
    data = data_for(p, 17)
    # A chain 0 -> 1 -> ... -> world-1: rank 0 receives nothing (zeros).
    pairs = [[r, r + 1] for r in range(world - 1)]
    body = f"rt.collective_permute ins(IN) outs(OUT) {{pairs = {rank_lists(pairs)}}}"
    outs = run(tmp_path, p, p.local, body, data, target=target)
    check(outs[0], np.zeros(p.local, np.float32), np.float32, exact=True)
    for r in range(1, world):
        check(outs[r], p.slice_of(data, r - 1), np.float32, exact=True)


@pytest.mark.parametrize("target", TARGETS)
def test_send_recv_pairs(tmp_path, target):
    world = 4
    p = row_split(world, 2, 3, np.float32)
    data = data_for(p, 19)
    # Ranks 0 and 2 send their slice to 1 and 3; the receivers' output is
    # what they received, the senders' output their own slice (copied).
    send = "rt.send %w {peers = array<i64: 1, -1, 3, -1>} : " + memref(p.local, np.float32)
    copy = 'rt.kernel "identity" ins(IN) outs(OUT)'
    recv = "rt.recv %y {peers = array<i64: -1, 0, -1, 2>} : " + memref(p.local, np.float32)
    outs = run(tmp_path, p, p.local, f"{copy}\n  {send}\n  {recv}", data, target=target)
    for r in range(world):
        src = r - 1 if r % 2 else r
        check(outs[r], p.slice_of(data, src), np.float32, exact=True)


@pytest.mark.parametrize("world", [2, 4])
@pytest.mark.parametrize("target", TARGETS)
def test_column_sliced_weight_is_assembled_from_rows(tmp_path, target, world):
    # Each rank's slice is a column block: its rows are apart in the file,
    # so shard-run copies them together. Gathering the blocks along the
    # columns rebuilds the whole tensor on every rank.
    p = Program(world, [3, 2 * world], [3, 2], [[0, 2 * r] for r in range(world)], np.float32)
    data = data_for(p, 23)
    body = f"rt.all_gather ins(IN) outs(OUT) {{dim = 1 : i64, " \
           f"groups = {rank_lists([list(range(world))])}}}"
    outs = run(tmp_path, p, p.glob, body, data, target=target)
    for r in range(world):
        check(outs[r], data, np.float32, exact=True)


def test_each_rank_checks_the_checksum_of_its_own_slice(tmp_path):
    world = 2
    p = row_split(world, 2, 3, np.float32)
    data = data_for(p, 29)
    body = f"rt.all_gather ins(IN) outs(OUT) {{dim = 0 : i64, groups = {rank_lists([[0, 1]])}}}"
    run(tmp_path, p, p.glob, body, data)
    text = (tmp_path / "p.shard").read_text()
    line = next(line for line in text.splitlines() if " weight " in line)
    assert "starts=0,0;2,0" in line and line.count(";") == 2, line  # two starts, two crcs
    # Corrupt rank 1's rows only: rank 1 reports it, and the job stops.
    bad = data.copy()
    bad[3, 1] += 1
    bad.astype(np.float32).tofile(tmp_path / "w.bin")
    cmd = [MPIRUN, "-np", "2", "--oversubscribe", str(toolchain.tool("shard-run")),
           str(tmp_path / "p.shard"), "--input", f"x={tmp_path / 'x.npy'}"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=ENV)
    assert out.returncode != 0
    assert "rank 1: weight 'w'" in out.stderr and "has checksum" in out.stderr, out.stderr
