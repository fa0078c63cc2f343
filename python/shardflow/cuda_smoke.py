"""Hand-written `target cuda` artifacts with numpy references.

Until `shard-opt --target cuda` produces real CUDA artifacts, these cases
exercise the CUDA executor on a GPU: cuBLASLt matmul and gemm in each of
their shape classes (folded batch, strided batched, broadcast, 1-D, C
broadcast, f16 with a weight converted from an f32 file, f16 operands
with an f32 result), every NCCL
collective on one rank, a hand-written device kernel (transpose), and a
chain where a collective and independent compute overlap on two streams.

    python -m shardflow.cuda_smoke OUTDIR

writes CASE.shard, CASE.inputs.npz and CASE.expected.npz per case (and the
weight files next to them, storage `artifact`, so OUTDIR can be copied to
another machine). tools/gpu-check.sh runs them; python/tests checks the
same cases on the CPU executor (target rewritten to cpu), which keeps the
references honest.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

# Relative tolerances per result type: f32 GEMMs run in full f32 (no TF32
# unless --allow-tf32); f16 results are rounded once more.
TOLERANCE = {np.dtype(np.float32): 1e-4, np.dtype(np.float16): 1e-2}

DTYPE_NAMES = {np.dtype(np.float32): "f32", np.dtype(np.float16): "f16"}


class Case:
    """One artifact under construction: buffers, instructions, outputs."""

    def __init__(self, name: str, outdir: Path):
        self.name, self.outdir = name, outdir
        self.lines: list[str] = []
        self.program: list[str] = []
        self.outputs: list[str] = []
        self.inputs: dict[str, np.ndarray] = {}
        self.expected: dict[str, np.ndarray] = {}
        self.arena = 0
        self.count = 0

    def _buffer(self, text: str) -> int:
        index = self.count
        self.lines.append(f"buffer {index} {text}")
        self.count += 1
        return index

    @staticmethod
    def _shape(shape) -> str:
        return "x".join(map(str, shape)) if len(shape) else "scalar"

    def input(self, name: str, value: np.ndarray) -> int:
        self.inputs[name] = value
        return self._buffer(f"input {DTYPE_NAMES[value.dtype]} {self._shape(value.shape)} name={name}")

    def constant(self, value: np.ndarray) -> int:
        return self._buffer(f"constant {DTYPE_NAMES[value.dtype]} {self._shape(value.shape)} "
                            f"data={value.tobytes().hex()}")

    def weight(self, name: str, value: np.ndarray, dtype: np.dtype, permutation=None) -> int:
        """A weight stored as `value` (its dtype) in a file, held as `dtype`
        (and with its dimensions permuted, when given)."""
        file = f"{self.name}.{name}.bin"
        (self.outdir / file).write_bytes(value.tobytes())
        extra = "" if np.dtype(dtype) == value.dtype else f" source-dtype={DTYPE_NAMES[value.dtype]}"
        shape = value.shape
        if permutation is not None:
            shape = tuple(value.shape[d] for d in permutation)
            extra += " permutation=" + ",".join(map(str, permutation))
        return self._buffer(f"weight {DTYPE_NAMES[np.dtype(dtype)]} {self._shape(shape)} "
                            f"name={name} storage=artifact file={file} offset=0 "
                            f"size={value.nbytes}{extra}")

    def arena_buffer(self, shape, dtype) -> int:
        size = int(np.prod(shape)) * np.dtype(dtype).itemsize
        offset = self.arena
        self.arena += (size + 255) // 256 * 256
        return self._buffer(f"arena {DTYPE_NAMES[np.dtype(dtype)]} {self._shape(shape)} "
                            f"offset={offset}")

    def kernel(self, name: str, ins, outs, params: str = "", collective=False):
        kind = "collective" if collective else "kernel"
        line = f"{kind} {name} in={','.join(map(str, ins))} out={','.join(map(str, outs))}"
        self.program.append(line + (f" {params}" if params else ""))

    def output(self, name: str, buffer: int, want: np.ndarray):
        self.outputs.append(f"output {name} {buffer}")
        self.expected[name] = want

    def write(self) -> Path:
        text = ["shardflow-artifact 4", "target cuda", "world-size 1", "model-dir .",
                f"arena {max(self.arena, 256)}", *self.lines, *self.program, *self.outputs,
                "end", ""]
        path = self.outdir / f"{self.name}.shard"
        path.write_text("\n".join(text))
        np.savez(self.outdir / f"{self.name}.inputs.npz", **self.inputs)
        np.savez(self.outdir / f"{self.name}.expected.npz", **self.expected)
        return path


def matmul_ref(a, b, dtype):
    return np.matmul(a.astype(np.float64), b.astype(np.float64)).astype(dtype)


def build(outdir: Path) -> list[Path]:
    outdir.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(2024)
    f32 = np.float32

    def rand(*shape, dtype=f32):
        return rng.standard_normal(shape).astype(dtype)

    paths = []
    # MatMul in each shape class (CudaPlanning.h: MatmulPlan).
    # Then f16 operands with an f32 result (what cuda-fuse-gemm-output-casts
    # makes of a product that is cast to f32 and returned): f32 accumulation
    # rounded once to f32, so the f32 tolerance holds; broadcast, to cover
    # the result's offsets, which step in f32 while the operands' step in
    # f16.
    for name, sa, sb, operands in [("matmul_folded", (2, 3, 4, 8), (8, 5), f32),
                                   ("matmul_batched", (2, 3, 4, 8), (2, 3, 8, 5), f32),
                                   ("matmul_broadcast", (2, 1, 4, 8), (1, 3, 8, 5), f32),
                                   ("matmul_repeat_a", (4, 8), (3, 8, 5), f32),
                                   ("matmul_vector", (8,), (8, 5), f32),
                                   ("matmul_matrix_vector", (2, 4, 8), (8,), f32),
                                   ("matmul_f16_to_f32", (2, 3, 16), (16, 8), np.float16),
                                   ("matmul_f16_to_f32_broadcast", (2, 1, 3, 16),
                                    (1, 2, 16, 8), np.float16)]:
        c = Case(name, outdir)
        a, b = rand(*sa, dtype=operands), rand(*sb, dtype=operands)
        ia, ib = c.input("a", a), c.input("b", b)
        want = matmul_ref(a, b, f32)
        out = c.arena_buffer(want.shape, f32)
        c.kernel("matmul", [ia, ib], [out])
        c.output("y", out, want)
        paths.append(c.write())

    # A weight whose rows are not 16-byte aligned ([K, N], N = 13 f16 or 5
    # f32), held transposed (permutation, applied at load) and read with
    # trans_b: what cuda-transpose-misaligned-gemm-weights makes of GPT-2's
    # vocabulary projection. The f16 one writes f32, as the logits under
    # --dtype do.
    for name, sx, sw, held, result in [("matmul_trans_b_f16_to_f32", (2, 3, 16), (16, 13),
                                        np.float16, f32),
                                       ("matmul_trans_b_f32", (2, 3, 8), (8, 5), f32, f32)]:
        c = Case(name, outdir)
        x, w = rand(*sx, dtype=held), rand(*sw)
        ix, iw = c.input("x", x), c.weight("w", w, held, permutation=(1, 0))
        want = matmul_ref(x, w.astype(held), result)
        out = c.arena_buffer(want.shape, result)
        c.kernel("matmul", [ix, iw], [out], "trans_b=i:1")
        c.output("y", out, want)
        paths.append(c.write())

    # Gemm: transposes, alpha/beta, every broadcast of C.
    for name, cshape in [("gemm_c_full", (4, 6)), ("gemm_c_row", (6,)),
                         ("gemm_c_column", (4, 1)), ("gemm_c_scalar", ())]:
        c = Case(name, outdir)
        a, b, cc = rand(5, 4), rand(6, 5), rand(*cshape)
        ia, ib, ic = c.input("a", a), c.constant(b), c.input("c", cc)
        want = (0.5 * (a.T.astype(np.float64) @ b.T.astype(np.float64)) +
                2.0 * np.broadcast_to(cc.astype(np.float64), (4, 6))).astype(f32)
        out = c.arena_buffer((4, 6), f32)
        c.kernel("gemm", [ia, ib, ic], [out], "alpha=f:0.5 beta=f:2 trans_a=i:1 trans_b=i:1")
        c.output("y", out, want)
        paths.append(c.write())

    # f16 with a weight kept as f32 in its file (mixed precision).
    c = Case("matmul_f16_source_f32", outdir)
    x, w = rand(3, 16, dtype=np.float16), rand(16, 8)
    ix, iw = c.input("x", x), c.weight("w", w, np.float16)
    want = matmul_ref(x, w.astype(np.float16), np.float16)
    out = c.arena_buffer(want.shape, np.float16)
    c.kernel("matmul", [ix, iw], [out])
    c.output("y", out, want)
    paths.append(c.write())

    # Every collective on one rank (NCCL in the loop; pieces packed when
    # the dimension is not the outermost).
    c = Case("collectives_one_rank", outdir)
    x = rand(2, 6, 4)
    ix = c.input("x", x)
    grp = "groups=is:0 group_size=i:1"
    ar = c.arena_buffer(x.shape, f32)
    c.kernel("matmul", [ix, c.constant(np.eye(4, dtype=f32))], [ar])  # ar = x
    c.kernel("all_reduce", [ar], [ar], f"{grp} reduction=s:sum", collective=True)
    ag = c.arena_buffer(x.shape, f32)
    c.kernel("all_gather", [ar], [ag], f"{grp} dim=i:1", collective=True)
    rs = c.arena_buffer(x.shape, f32)
    c.kernel("reduce_scatter", [ag], [rs], f"{grp} dim=i:2 reduction=s:sum", collective=True)
    aa = c.arena_buffer(x.shape, f32)
    c.kernel("all_to_all", [rs], [aa], f"{grp} split_dim=i:1 concat_dim=i:2", collective=True)
    cp = c.arena_buffer(x.shape, f32)
    c.kernel("collective_permute", [aa], [cp], "pairs=is:0,0", collective=True)
    ls = c.arena_buffer((2, 3, 2), f32)
    c.kernel("local_slice", [cp], [ls], "starts=is:0,2,1", collective=True)
    c.output("all", cp, x)
    c.output("slice", ls, x[:, 2:5, 1:3])
    paths.append(c.write())

    # Streams: the collective's input comes from matmul 1; matmul 2 is
    # independent (overlaps with it); matmul 3 reads the collective's result.
    c = Case("streams_overlap", outdir)
    x, w1, w2 = rand(64, 64), rand(64, 64), rand(64, 64)
    ix, iw1, iw2 = c.input("x", x), c.constant(w1), c.constant(w2)
    h = c.arena_buffer((64, 64), f32)
    g = c.arena_buffer((64, 64), f32)
    y = c.arena_buffer((64, 64), f32)
    c.kernel("matmul", [ix, iw1], [h])
    c.kernel("all_reduce", [h], [h], "groups=is:0 group_size=i:1 reduction=s:sum",
             collective=True)
    c.kernel("matmul", [ix, iw2], [g])
    c.kernel("matmul", [h, iw2], [y])
    x64 = x.astype(np.float64)
    c.output("g", g, (x64 @ w2).astype(f32))
    c.output("y", y, ((x64 @ w1) @ w2).astype(f32))
    paths.append(c.write())

    # A hand-written device kernel (DeviceKernels.h).
    c = Case("transpose_kernel", outdir)
    x = rand(3, 4, 5)
    ix = c.input("x", x)
    out = c.arena_buffer((4, 3, 5), f32)
    c.kernel("transpose", [ix], [out], "perm=is:1,0,2")
    c.output("y", out, np.transpose(x, (1, 0, 2)).copy())
    paths.append(c.write())
    return paths


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python -m shardflow.cuda_smoke OUTDIR")
    for p in build(Path(sys.argv[1])):
        print(p)
