"""Partitioned nn + dist programs, lowered by convert-nn-to-rt and run under mpirun.

Each case is a per-rank program as dist-partition writes them: a
`dist.mesh`, local (per-rank) tensor types and `dist` collectives. It is
lowered by `shard-opt --convert-nn-to-rt`, compiled with `shard-opt --target
cpu` and run by `mpirun -np N shard-run`, every rank writing its own outputs
(`--output out.{rank}.npz`). Ranks hold different data either through a
sharded `nn.weight` (`global_shape`/`starts`: rank r loads block r of a
weight file) or through `dist.all_slice` of a replicated input.

The expected values come from a model of the mesh written here in Python
(row-major ranks; a group along some axes is the ranks that differ only
there, member k the one at index k along them, the first axis major), not
from the compiler's own tables. Meshes: ["x"=2], ["x"=4] and
["dp"=2, "tp"=2] along "dp", "tp", ("dp", "tp") and ("tp", "dp").

Data is seeded float32. Where data only moves (gather, all_to_all, slices,
permutes, send/recv, max/min) every rank's result must be exactly equal;
sums over ranks use rtol = atol = 1e-6 (MPI sums in its own order), and the
matmul cases rtol = atol = 1e-5 against a float64 reference.
"""
from __future__ import annotations

import subprocess

import numpy as np
import pytest

from shardflow import toolchain
from test_collectives import ENV, MLIR_TYPES, MPIRUN, check, rank_lists

pytestmark = pytest.mark.skipif(
    MPIRUN is None, reason="mpirun is missing (tools/setup.sh installs openmpi-bin)")


class Mesh:
    """A dist.mesh: named axes, ranks numbered row-major (first axis major)."""

    def __init__(self, **axes):
        self.names = list(axes)
        self.sizes = [axes[a] for a in self.names]
        self.world = int(np.prod(self.sizes))

    def text(self):
        return "dist.mesh @mesh [" + ", ".join(
            f'"{a}"={n}' for a, n in zip(self.names, self.sizes)) + "]"

    def coords(self, rank):
        return dict(zip(self.names, np.unravel_index(rank, self.sizes)))

    def index_along(self, rank, axes):
        c, index = self.coords(rank), 0
        for a in axes:
            index = index * self.sizes[self.names.index(a)] + int(c[a])
        return index

    def group_of(self, rank, axes):
        """The ranks that share `rank`'s coordinates off `axes`, in member order."""
        c = self.coords(rank)
        members = [s for s in range(self.world)
                   if all(self.coords(s)[a] == c[a] for a in self.names if a not in axes)]
        return sorted(members, key=lambda s: self.index_along(s, axes))


MESHES = {"x2": Mesh(x=2), "x4": Mesh(x=4), "2x2": Mesh(dp=2, tp=2)}

# (mesh, axes): every 1-D world, each axis of the 2x2 mesh, and both orders
# of its axis pair.
LAYOUTS = [("x2", ["x"]), ("x4", ["x"]), ("2x2", ["dp"]), ("2x2", ["tp"]),
           ("2x2", ["dp", "tp"]), ("2x2", ["tp", "dp"])]


def layout_id(layout):
    return f"{layout[0]}-{','.join(layout[1])}"


def tensor(shape, dtype=np.float32):
    return "tensor<" + "".join(f"{d}x" for d in shape) + MLIR_TYPES[dtype] + ">"


def axes_text(axes):
    return "[" + ", ".join(f'"{a}"' for a in axes) + "]"


def group_size(mesh, axes):
    return int(np.prod([mesh.sizes[mesh.names.index(a)] for a in axes]))


def weight(name, glob, local, starts, dtype=np.float32):
    """A sharded nn.weight read from NAME.bin: rank r's block starts at starts[r]."""
    size = int(np.prod(glob)) * np.dtype(dtype).itemsize
    return (f'%{name} = nn.weight "{name}" {{storage = "external", file = "{name}.bin", '
            f"offset = 0 : i64, size = {size} : i64, "
            f"global_shape = array<i64: {', '.join(map(str, glob))}>, "
            f"starts = {rank_lists(starts)}}} : {tensor(local, dtype)}")


def program(mesh, args, body, results):
    """args: [(name, shape, dtype)]; results: [(value, shape, dtype)], named y0, y1, ..."""
    params = ", ".join(f'%{n}: {tensor(s, t)} {{nn.name = "{n}"}}' for n, s, t in args)
    outs = ", ".join(f'{tensor(s, t)} {{nn.name = "y{i}"}}' for i, (_, s, t) in enumerate(results))
    values = ", ".join(f"%{v}" for v, _, _ in results)
    types = ", ".join(tensor(s, t) for _, s, t in results)
    return "\n".join([mesh.text(), f"func.func @main({params}) -> ({outs}) {{",
                      *("  " + line for line in body),
                      f"  return {values} : {types}", "}", ""])


def run(tmp_path, mesh, text, inputs=None, weights=None, extra=()):
    """Compiles `text` and runs it on mesh.world ranks; returns each rank's outputs."""
    for name, data in (weights or {}).items():
        data.tofile(tmp_path / f"{name}.bin")
    (tmp_path / "p.mlir").write_text(text)
    # The program is already partitioned: shard-opt --target lowers it as
    # it is (it runs the sharding passes only on global programs).
    artifact = tmp_path / "p.shard"
    out = subprocess.run([str(toolchain.tool("shard-opt")), str(tmp_path / "p.mlir"),
                          "--target", "cpu", "-o", str(artifact)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    cmd = [MPIRUN, "-np", str(mesh.world), "--oversubscribe", str(toolchain.tool("shard-run")),
           str(artifact), "--output", str(tmp_path / "out.{rank}.npz"), *extra]
    for name, data in (inputs or {}).items():
        np.save(tmp_path / f"{name}.npy", data)
        cmd += ["--input", f"{name}={tmp_path / f'{name}.npy'}"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=ENV)
    assert out.returncode == 0, out.stdout + out.stderr
    return [dict(np.load(tmp_path / f"out.{r}.npz")) for r in range(mesh.world)]


def per_rank_weight(mesh, local, seed, dtype=np.float32):
    """A weight whose rank-r block (along dimension 0) is rank r's local data.

    Returns the nn.weight line and each rank's block.
    """
    glob = [mesh.world * local[0], *local[1:]]
    data = np.random.default_rng(seed).standard_normal(glob).astype(dtype)
    starts = [[r * local[0]] + [0] * (len(local) - 1) for r in range(mesh.world)]
    blocks = [data[r * local[0]:(r + 1) * local[0]] for r in range(mesh.world)]
    return weight("w", glob, local, starts, dtype), data, blocks


def collective_case(tmp_path, layout, local, out_shape, op_text, seed):
    """Runs `%y = OP_TEXT` on per-rank data `%w` of shape `local`."""
    mesh, axes = MESHES[layout[0]], layout[1]
    line, data, blocks = per_rank_weight(mesh, local, seed)
    text = program(mesh, [], [line, f"%y = {op_text}"], [("y", out_shape, np.float32)])
    outs = run(tmp_path, mesh, text, weights={"w": data})
    return mesh, axes, blocks, [o["y0"] for o in outs]


REDUCE = {"sum": np.sum, "max": np.max, "min": np.min, "prod": np.prod}


@pytest.mark.parametrize("layout,reduction",
                         [(l, "sum") for l in LAYOUTS] +
                         [(("x4", ["x"]), "max"), (("2x2", ["tp", "dp"]), "min"),
                          (("2x2", ["dp"]), "prod")],
                         ids=lambda v: layout_id(v) if isinstance(v, tuple) else v)
def test_all_reduce(tmp_path, layout, reduction):
    local = [2, 5]
    op = (f"dist.all_reduce %w on @mesh {axes_text(layout[1])} {{reduction = \"{reduction}\"}}"
          f" : {tensor(local)} -> {tensor(local)}")
    mesh, axes, blocks, outs = collective_case(tmp_path, layout, local, local, op, 101)
    for r in range(mesh.world):
        members = np.stack([blocks[m] for m in mesh.group_of(r, axes)])
        check(outs[r], REDUCE[reduction](members, axis=0).astype(np.float32), np.float32,
              exact=reduction in ("max", "min"))


@pytest.mark.parametrize("layout,dim",
                         [(l, d) for l in LAYOUTS for d in (0, 2)],
                         ids=lambda v: layout_id(v) if isinstance(v, tuple) else f"dim{v}")
def test_all_gather(tmp_path, layout, dim):
    mesh = MESHES[layout[0]]
    local = [2, 3, 4]
    out_shape = list(local)
    out_shape[dim] *= group_size(mesh, layout[1])
    op = (f"dist.all_gather %w on @mesh {axes_text(layout[1])} {{dim = {dim} : i64}}"
          f" : {tensor(local)} -> {tensor(out_shape)}")
    mesh, axes, blocks, outs = collective_case(tmp_path, layout, local, out_shape, op, 202)
    for r in range(mesh.world):
        want = np.concatenate([blocks[m] for m in mesh.group_of(r, axes)], axis=dim)
        check(outs[r], want, np.float32, exact=True)


@pytest.mark.parametrize("layout,dim", [(l, i % 2) for i, l in enumerate(LAYOUTS)],
                         ids=lambda v: layout_id(v) if isinstance(v, tuple) else f"dim{v}")
def test_reduce_scatter(tmp_path, layout, dim):
    mesh = MESHES[layout[0]]
    local = [4, 8]
    g = group_size(mesh, layout[1])
    out_shape = list(local)
    out_shape[dim] //= g
    op = (f"dist.reduce_scatter %w on @mesh {axes_text(layout[1])} {{dim = {dim} : i64}}"
          f" : {tensor(local)} -> {tensor(out_shape)}")
    mesh, axes, blocks, outs = collective_case(tmp_path, layout, local, out_shape, op, 303)
    for r in range(mesh.world):
        total = np.sum(np.stack([blocks[m] for m in mesh.group_of(r, axes)]), axis=0)
        want = np.split(total, g, axis=dim)[mesh.index_along(r, axes)]
        check(outs[r], want.astype(np.float32), np.float32, exact=False)


@pytest.mark.parametrize("layout,split,concat",
                         [(l, s, c) for l in LAYOUTS for s, c in ((0, 1), (1, 0))],
                         ids=lambda v: layout_id(v) if isinstance(v, tuple) else str(v))
def test_all_to_all(tmp_path, layout, split, concat):
    mesh = MESHES[layout[0]]
    local = [4, 4, 3]
    g = group_size(mesh, layout[1])
    out_shape = list(local)
    out_shape[split] //= g
    out_shape[concat] *= g
    op = (f"dist.all_to_all %w on @mesh {axes_text(layout[1])} "
          f"{{split_dim = {split} : i64, concat_dim = {concat} : i64}}"
          f" : {tensor(local)} -> {tensor(out_shape)}")
    mesh, axes, blocks, outs = collective_case(tmp_path, layout, local, out_shape, op, 404)
    for r in range(mesh.world):
        k = mesh.index_along(r, axes)
        want = np.concatenate([np.split(blocks[m], g, axis=split)[k]
                               for m in mesh.group_of(r, axes)], axis=concat)
        check(outs[r], want, np.float32, exact=True)


@pytest.mark.parametrize("mesh_name,pairs", [
    ("x2", [[0, 1], [1, 0]]),
    ("2x2", [[0, 1], [1, 3], [3, 2]]),  # rank 0 is no pair's target: zeros
])
def test_collective_permute(tmp_path, mesh_name, pairs):
    local = [3, 4]
    op = (f"dist.collective_permute %w on @mesh {{pairs = {rank_lists(pairs)}}}"
          f" : {tensor(local)}")
    mesh, _, blocks, outs = collective_case(tmp_path, (mesh_name, []), local, local, op, 505)
    source = {dst: src for src, dst in pairs}
    for r in range(mesh.world):
        want = blocks[source[r]] if r in source else np.zeros(local, np.float32)
        check(outs[r], want, np.float32, exact=True)


def test_send_recv_gives_idle_ranks_zeros(tmp_path):
    # Ranks 0 and 2 send to 1 and 3. The receive buffer reuses the arena
    # slot of `%a` (dead after the send), so a rank that receives nothing
    # would see 2 * w there if its buffer were not zero-filled.
    mesh = MESHES["2x2"]
    local = [2, 3]
    line, data, blocks = per_rank_weight(mesh, local, 606)
    t = tensor(local)
    body = [line,
            f"%a = nn.add %w, %w : ({t}, {t}) -> {t}",
            f"dist.send %a on @mesh {{peers = array<i64: 1, -1, 3, -1>}} : {t}",
            f"%y = dist.recv on @mesh {{peers = array<i64: -1, 0, -1, 2>}} : {t}"]
    text = program(mesh, [], body, [("y", local, np.float32)])
    outs = run(tmp_path, mesh, text, weights={"w": data})
    for r in range(mesh.world):
        want = 2 * blocks[r - 1] if r % 2 else np.zeros(local, np.float32)
        check(outs[r]["y0"], want, np.float32, exact=True)


# all_slice: (mesh, axes, dim, dtype) on a replicated [8, 4, 6] input.
SLICES = [("x2", ["x"], 0, np.float32), ("x4", ["x"], 0, np.int64),
          ("x4", ["x"], 1, np.float32), ("2x2", ["dp"], 0, np.float32),
          ("2x2", ["tp"], 2, np.float32), ("2x2", ["dp", "tp"], 1, np.int32),
          ("2x2", ["tp", "dp"], 0, np.float32)]


@pytest.mark.parametrize("mesh_name,axes,dim,dtype", SLICES,
                         ids=[f"{m}-{','.join(a)}-dim{d}-{np.dtype(t).name}"
                              for m, a, d, t in SLICES])
def test_all_slice(tmp_path, mesh_name, axes, dim, dtype):
    mesh = MESHES[mesh_name]
    shape = [8, 4, 6]
    g = group_size(mesh, axes)
    out_shape = list(shape)
    out_shape[dim] //= g
    x = (np.random.default_rng(707).standard_normal(shape) * 100).astype(dtype)
    body = [f"%y = dist.all_slice %x on @mesh {axes_text(axes)} {{dim = {dim} : i64}}"
            f" : {tensor(shape, dtype)} -> {tensor(out_shape, dtype)}"]
    text = program(mesh, [("x", shape, dtype)], body, [("y", out_shape, dtype)])
    outs = run(tmp_path, mesh, text, inputs={"x": x})
    for r in range(mesh.world):
        want = np.split(x, g, axis=dim)[mesh.index_along(r, axes)]
        check(outs[r]["y0"], want, dtype, exact=True)


def test_all_slice_two_axes_on_two_dims(tmp_path):
    # A 2-D block: rows over "dp", then columns over "tp"; the inner slice
    # reads a strided block of a buffer the outer one wrote.
    mesh = MESHES["2x2"]
    x = np.random.default_rng(808).standard_normal([6, 10, 3]).astype(np.float32)
    body = [f"%a = dist.all_slice %x on @mesh [\"dp\"] {{dim = 0 : i64}} : "
            f"{tensor([6, 10, 3])} -> {tensor([3, 10, 3])}",
            f"%b = dist.all_slice %a on @mesh [\"tp\"] {{dim = 1 : i64}} : "
            f"{tensor([3, 10, 3])} -> {tensor([3, 5, 3])}"]
    text = program(mesh, [("x", [6, 10, 3], np.float32)], body,
                   [("b", [3, 5, 3], np.float32)])
    outs = run(tmp_path, mesh, text, inputs={"x": x})
    for r in range(mesh.world):
        c = mesh.coords(r)
        want = x[3 * c["dp"]:3 * c["dp"] + 3, 5 * c["tp"]:5 * c["tp"] + 5]
        check(outs[r]["y0"], want, np.float32, exact=True)


def test_all_slice_of_a_large_input_on_threads(tmp_path):
    # 16384 runs of 16 bytes (the last dimension is split), enough for
    # shard-run to hand ranges of them to 3 threads; a range may begin in
    # the middle of a row of the outer dimensions.
    mesh = MESHES["x2"]
    shape, out_shape = [64, 256, 8], [64, 256, 4]
    x = np.random.default_rng(1111).standard_normal(shape).astype(np.float32)
    body = [f"%y = dist.all_slice %x on @mesh [\"x\"] {{dim = 2 : i64}} : "
            f"{tensor(shape)} -> {tensor(out_shape)}"]
    text = program(mesh, [("x", shape, np.float32)], body, [("y", out_shape, np.float32)])
    outs = run(tmp_path, mesh, text, inputs={"x": x}, extra=["--threads", "3"])
    for r in range(mesh.world):
        check(outs[r]["y0"], x[:, :, 4 * r:4 * r + 4], np.float32, exact=True)


# all_slice then all_gather over the same axes and dimension: every rank
# gets the input back, bit for bit.
ROUND_TRIPS = [("x2", [(["x"], 0)]), ("x4", [(["x"], 1)]), ("2x2", [(["tp", "dp"], 0)]),
               ("2x2", [(["dp", "tp"], 2)]), ("2x2", [(["dp"], 0), (["tp"], 1)])]


@pytest.mark.parametrize("mesh_name,steps", ROUND_TRIPS,
                         ids=[f"{m}-" + "-".join(f"{','.join(a)}@{d}" for a, d in s)
                              for m, s in ROUND_TRIPS])
def test_all_slice_then_all_gather_round_trips(tmp_path, mesh_name, steps):
    mesh = MESHES[mesh_name]
    shape = [8, 4, 8]
    x = np.random.default_rng(909).standard_normal(shape).astype(np.float32)
    body, value, cur, shapes = [], "x", list(shape), []
    for i, (axes, dim) in enumerate(steps):
        nxt = list(cur)
        nxt[dim] //= group_size(mesh, axes)
        body.append(f"%s{i} = dist.all_slice %{value} on @mesh {axes_text(axes)} "
                    f"{{dim = {dim} : i64}} : {tensor(cur)} -> {tensor(nxt)}")
        shapes.append(cur)
        value, cur = f"s{i}", nxt
    for i, (axes, dim) in reversed(list(enumerate(steps))):
        prev = shapes[i]
        body.append(f"%g{i} = dist.all_gather %{value} on @mesh {axes_text(axes)} "
                    f"{{dim = {dim} : i64}} : {tensor(cur)} -> {tensor(prev)}")
        value, cur = f"g{i}", prev
    text = program(mesh, [("x", shape, np.float32)], body, [(value, shape, np.float32)])
    outs = run(tmp_path, mesh, text, inputs={"x": x})
    for r in range(mesh.world):
        check(outs[r]["y0"], x, np.float32, exact=True)


def matmul_check(got, want):
    assert got.shape == want.shape, (got.shape, want.shape)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_row_sharded_weight_matmul_all_reduce(tmp_path):
    # Tensor parallel on ["x"=4]: rank r holds rows 4r..4r+3 of W and the
    # matching columns of x (all_slice); the partial products are summed.
    mesh = MESHES["x4"]
    rng = np.random.default_rng(1001)
    x = rng.standard_normal([2, 16]).astype(np.float32)
    w = rng.standard_normal([16, 6]).astype(np.float32)
    body = [weight("w", [16, 6], [4, 6], [[4 * r, 0] for r in range(4)]),
            f"%xs = dist.all_slice %x on @mesh [\"x\"] {{dim = 1 : i64}} : "
            f"{tensor([2, 16])} -> {tensor([2, 4])}",
            f"%p = nn.matmul %xs, %w : ({tensor([2, 4])}, {tensor([4, 6])}) -> {tensor([2, 6])}",
            f"%y = dist.all_reduce %p on @mesh [\"x\"] : {tensor([2, 6])} -> {tensor([2, 6])}"]
    text = program(mesh, [("x", [2, 16], np.float32)], body, [("y", [2, 6], np.float32)])
    outs = run(tmp_path, mesh, text, inputs={"x": x}, weights={"w": w})
    want = x.astype(np.float64) @ w.astype(np.float64)
    for r in range(mesh.world):
        matmul_check(outs[r]["y0"], want)


def test_column_sharded_weight_matmul_on_2x2(tmp_path):
    # Data parallel over "dp" (the batch is sliced), tensor parallel over
    # "tp" (W's columns); gathering over "tp" then "dp" rebuilds x @ W.
    mesh = MESHES["2x2"]
    rng = np.random.default_rng(1002)
    x = rng.standard_normal([4, 8]).astype(np.float32)
    w = rng.standard_normal([8, 6]).astype(np.float32)
    starts = [[0, 3 * int(mesh.coords(r)["tp"])] for r in range(4)]
    body = [weight("w", [8, 6], [8, 3], starts),
            f"%xs = dist.all_slice %x on @mesh [\"dp\"] {{dim = 0 : i64}} : "
            f"{tensor([4, 8])} -> {tensor([2, 8])}",
            f"%p = nn.matmul %xs, %w : ({tensor([2, 8])}, {tensor([8, 3])}) -> {tensor([2, 3])}",
            f"%c = dist.all_gather %p on @mesh [\"tp\"] {{dim = 1 : i64}} : "
            f"{tensor([2, 3])} -> {tensor([2, 6])}",
            f"%y = dist.all_gather %c on @mesh [\"dp\"] {{dim = 0 : i64}} : "
            f"{tensor([2, 6])} -> {tensor([4, 6])}"]
    text = program(mesh, [("x", [4, 8], np.float32)], body,
                   [("y", [4, 6], np.float32), ("p", [2, 3], np.float32)])
    outs = run(tmp_path, mesh, text, inputs={"x": x}, weights={"w": w})
    want = x.astype(np.float64) @ w.astype(np.float64)
    for r in range(mesh.world):
        c = mesh.coords(r)
        matmul_check(outs[r]["y0"], want)
        matmul_check(outs[r]["y1"], want[2 * c["dp"]:2 * c["dp"] + 2,
                                         3 * c["tp"]:3 * c["tp"] + 3])


def test_megatron_mlp_on_2x2(tmp_path):
    # relu(x @ W1) @ W2 with W1 split by columns and W2 by rows over "tp",
    # the batch over "dp": one all_reduce over "tp", one all_gather over "dp".
    mesh = MESHES["2x2"]
    rng = np.random.default_rng(1003)
    x = rng.standard_normal([4, 8]).astype(np.float32)
    w1 = rng.standard_normal([8, 8]).astype(np.float32)
    w2 = rng.standard_normal([8, 6]).astype(np.float32)
    tp = [int(mesh.coords(r)["tp"]) for r in range(4)]
    body = [weight("w1", [8, 8], [8, 4], [[0, 4 * t] for t in tp]),
            weight("w2", [8, 6], [4, 6], [[4 * t, 0] for t in tp]),
            f"%xs = dist.all_slice %x on @mesh [\"dp\"] {{dim = 0 : i64}} : "
            f"{tensor([4, 8])} -> {tensor([2, 8])}",
            f"%h = nn.matmul %xs, %w1 : ({tensor([2, 8])}, {tensor([8, 4])}) -> {tensor([2, 4])}",
            f"%a = nn.relu %h : ({tensor([2, 4])}) -> {tensor([2, 4])}",
            f"%p = nn.matmul %a, %w2 : ({tensor([2, 4])}, {tensor([4, 6])}) -> {tensor([2, 6])}",
            f"%s = dist.all_reduce %p on @mesh [\"tp\"] : {tensor([2, 6])} -> {tensor([2, 6])}",
            f"%y = dist.all_gather %s on @mesh [\"dp\"] {{dim = 0 : i64}} : "
            f"{tensor([2, 6])} -> {tensor([4, 6])}"]
    text = program(mesh, [("x", [4, 8], np.float32)], body, [("y", [4, 6], np.float32)])
    outs = run(tmp_path, mesh, text, inputs={"x": x}, weights={"w1": w1, "w2": w2})
    h = np.maximum(x.astype(np.float64) @ w1.astype(np.float64), 0)
    want = h @ w2.astype(np.float64)
    for r in range(mesh.world):
        matmul_check(outs[r]["y0"], want)


def test_groups_model_matches_the_documented_tables():
    # The Python mesh model the cases above rely on, against DistOps.td's
    # examples on ["dp"=2, "tp"=2].
    mesh = MESHES["2x2"]

    def groups(axes):
        return sorted({tuple(mesh.group_of(r, axes)) for r in range(mesh.world)})
    assert groups(["tp"]) == [(0, 1), (2, 3)]
    assert groups(["dp"]) == [(0, 2), (1, 3)]
    assert groups(["dp", "tp"]) == [(0, 1, 2, 3)]
    assert groups(["tp", "dp"]) == [(0, 2, 1, 3)]
    assert [mesh.index_along(r, ["tp", "dp"]) for r in range(4)] == [0, 2, 1, 3]



RESHARDS = [
    # (mesh, from, to): each a sharding of a [4, 8, 4] tensor, as dims' axes.
    ("2x2", [["dp"], ["tp"], []], [["tp"], ["dp"], []]),      # swap: gather, all_to_all, slice
    ("2x2", [["dp", "tp"], [], []], [[], ["tp", "dp"], []]),  # both axes to another dim
    ("2x2", [[], ["dp"], ["tp"]], [["tp"], [], ["dp"]]),       # a cycle over three dims
    ("x4", [["x"], [], []], [[], [], ["x"]]),                  # one all_to_all
]


@pytest.mark.parametrize("mesh_name,src,dst", RESHARDS,
                         ids=[f"{m}-{i}" for i, (m, _, _) in enumerate(RESHARDS)])
def test_global_reshard_through_the_whole_pipeline(tmp_path, mesh_name, src, dst):
    # A global program: the input laid out as `src`, a dist.reshard to `dst`,
    # whole results. shard-opt --target runs propagation, reshard insertion
    # and partitioning itself (the module has a mesh and is not partitioned),
    # so the reshard planner's collectives run under mpirun; the value must survive.
    mesh = MESHES[mesh_name]

    def sharding(dims):
        return "<@mesh, [" + ", ".join("{" + ", ".join(f'"{a}"' for a in d) + "}"
                                       for d in dims) + "]>"

    t = tensor([4, 8, 4])
    text = "\n".join([
        mesh.text(),
        f"func.func @main(%x: {t} {{nn.name = \"x\", dist.sharding = #dist.sharding{sharding(src)}}})"
        f" -> ({t} {{nn.name = \"y\"}}) {{",
        f"  %r = dist.reshard %x {sharding(dst)} : {t}",
        f"  %y = nn.neg %r : ({t}) -> {t}",
        f"  return %y : {t}", "}", ""])
    (tmp_path / "g.mlir").write_text(text)
    artifact = tmp_path / "g.shard"
    out = subprocess.run([str(toolchain.tool("shard-opt")), str(tmp_path / "g.mlir"),
                          "--target", "cpu", "-o", str(artifact)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    x = np.random.default_rng(31).standard_normal([4, 8, 4]).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    out = subprocess.run([MPIRUN, "-np", str(mesh.world), "--oversubscribe",
                          str(toolchain.tool("shard-run")), str(artifact),
                          "--input", f"x={tmp_path / 'x.npy'}",
                          "--output", str(tmp_path / "out.{rank}.npz")],
                         capture_output=True, text=True, timeout=120, env=ENV)
    assert out.returncode == 0, out.stdout + out.stderr
    for r in range(mesh.world):
        check(dict(np.load(tmp_path / f"out.{r}.npz"))["y"], -x, np.float32, exact=True)
