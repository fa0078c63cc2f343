"""CPU kernels for contractions, convolution and pooling, attention and data
movement match onnxruntime, one ONNX node at a time.

Each case is a one-node ONNX model (opset 18; 23 for Attention and
RotaryEmbedding; ir_version 8) with random inputs from a seeded numpy
generator. The model is compiled by shard-opt (--target cpu), run by
shard-run, and compared with onnxruntime on the same inputs. Constant
operands that ONNX takes as inputs (axes, pads, starts, shape, k, ...) are
initializers, which the compiler folds into attributes.

Tolerances: float32 results use rtol 1e-5 and atol 1e-5. Kernels that sum
many products (matmul, gemm, einsum, conv, attention) use rtol 1e-4 and
atol 1e-5, because their summation order differs from onnxruntime's.
Integer results and every data-movement op must match exactly. The few
float16 cases (computed in float32 and rounded once) use rtol 4e-3 and
atol 4e-3: onnxruntime may round intermediate results to float16.

shape and constant_of_shape always fold to constants in the compiler, so
besides the end-to-end cases their kernels are also run from hand-written
artifacts. The binaries come from $SHARDFLOW_BUILD_DIR (default <repo>/build);
a missing binary fails the tests.
"""
from __future__ import annotations

import os
import subprocess
import zlib
from pathlib import Path

import numpy as np
import onnx
import onnx.reference
import onnxruntime as ort
import pytest
from onnx import helper, numpy_helper

ROOT = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("SHARDFLOW_BUILD_DIR", ROOT / "build"))

F32 = {"rtol": 1e-5, "atol": 1e-5}
SUM = {"rtol": 1e-4, "atol": 1e-5}
HALF = {"rtol": 4e-3, "atol": 4e-3}
EXACT = None
BIG = 2**63 - 1


def rng_for(name: str) -> np.random.Generator:
    return np.random.default_rng(zlib.crc32(name.encode()))


def tool(name: str) -> Path:
    path = BUILD / "bin" / name
    assert path.exists(), f"{path} is missing: build the project first (tools/build.sh)"
    return path


def compile_model(model: Path, artifact: Path) -> Path:
    out = subprocess.run([str(tool("shard-opt")), str(model), "--target", "cpu", "-o",
                          str(artifact)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, f"shard-opt failed:\n{out.stderr}"
    return artifact


def shard_run(artifact: Path, inputs: dict, tmp_path: Path) -> subprocess.CompletedProcess:
    """shard-run ARTIFACT --input NAME=FILE.npy ... --output FILE.npz"""
    cmd = [str(tool("shard-run")), str(artifact), "--output", str(tmp_path / "outputs.npz")]
    for name, array in inputs.items():
        path = tmp_path / f"input_{name}.npy"
        np.save(path, array)
        cmd += ["--input", f"{name}={path}"]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


def run_artifact(artifact: Path, inputs: dict, tmp_path: Path) -> dict:
    out = shard_run(artifact, inputs, tmp_path)
    assert out.returncode == 0, f"shard-run failed:\n{out.stderr}"
    with np.load(tmp_path / "outputs.npz") as data:
        return {k: data[k] for k in data.files}


class Case:
    """One ONNX node: `inputs` are (name, array) pairs, None for an absent
    optional input; names listed in `consts` become initializers. The
    reference is onnxruntime, or `reference` ("onnx": the onnx package's
    reference evaluator, for types onnxruntime's CPU kernels lack; or a
    function of the feeds)."""

    def __init__(self, op, inputs, attrs=None, consts=(), outputs=1, out_dtypes=None,
                 opset=18, tol=F32, reference=None):
        self.op, self.inputs, self.attrs = op, inputs, attrs or {}
        self.consts, self.outputs, self.out_dtypes = set(consts), outputs, out_dtypes
        self.opset, self.tol, self.reference = opset, tol, reference

    def model(self) -> onnx.ModelProto:
        names = [n if a is not None else "" for n, a in self.inputs]
        while names and not names[-1]:
            names.pop()
        outs = [f"y{i}" for i in range(self.outputs)]
        node = helper.make_node(self.op, names, outs, **self.attrs)
        graph_inputs, inits = [], []
        for name, array in self.inputs:
            if array is None:
                continue
            if name in self.consts:
                inits.append(numpy_helper.from_array(np.asarray(array), name))
            else:
                graph_inputs.append(helper.make_tensor_value_info(
                    name, helper.np_dtype_to_tensor_dtype(array.dtype), array.shape))
        dtypes = self.out_dtypes or [self.inputs[0][1].dtype] * self.outputs
        graph_outputs = [helper.make_tensor_value_info(
            o, helper.np_dtype_to_tensor_dtype(np.dtype(t)), None) for o, t in zip(outs, dtypes)]
        graph = helper.make_graph([node], "kernel", graph_inputs, graph_outputs, inits)
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", self.opset)],
                                 ir_version=8)

    def feeds(self) -> dict:
        return {n: a for n, a in self.inputs if a is not None and n not in self.consts}

    def expected(self, path: Path) -> dict:
        names = [f"y{i}" for i in range(self.outputs)]
        if self.reference is None:
            options = ort.SessionOptions()
            options.intra_op_num_threads = 1
            session = ort.InferenceSession(str(path), options,
                                           providers=["CPUExecutionProvider"])
            return dict(zip(names, session.run(names, self.feeds())))
        if self.reference == "onnx":
            evaluator = onnx.reference.ReferenceEvaluator(self.model())
            return dict(zip(names, evaluator.run(names, self.feeds())))
        return dict(zip(names, self.reference(self.feeds())))


def run_case(tmp_path, case: Case):
    path = tmp_path / "model.onnx"
    onnx.save(case.model(), path)
    reference = case.expected(path)
    artifact = compile_model(path, tmp_path / "model.shard")
    ours = run_artifact(artifact, case.feeds(), tmp_path)
    assert set(ours) == set(reference)
    for name, ref in reference.items():
        got = ours[name]
        assert got.shape == ref.shape, (name, got.shape, ref.shape)
        assert got.dtype == ref.dtype, (name, got.dtype, ref.dtype)
        if case.tol is EXACT:
            np.testing.assert_array_equal(got, ref, err_msg=name)
        else:
            np.testing.assert_allclose(got, ref, err_msg=name, **case.tol)


def f32(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


def i64(values):
    return np.array(values, np.int64)


# --------------------------------------------------------------------------
# Contractions
# --------------------------------------------------------------------------

def contraction_cases():
    r = rng_for("contraction")
    c = {}
    mm = lambda a, b, tol=SUM: Case("MatMul", [("a", a), ("b", b)], tol=tol)  # noqa: E731
    c["matmul_batched"] = mm(f32(r, 2, 3, 5, 7), f32(r, 3, 7, 4))
    c["matmul_batch_broadcast"] = mm(f32(r, 4, 1, 5, 6), f32(r, 3, 6, 2))
    c["matmul_shared_rhs"] = mm(f32(r, 3, 9, 17), f32(r, 17, 11))
    c["matmul_1d_lhs"] = mm(f32(r, 7), f32(r, 2, 7, 3))
    c["matmul_1d_rhs"] = mm(f32(r, 2, 5, 7), f32(r, 7))
    c["matmul_1d_both"] = mm(f32(r, 7), f32(r, 7))
    # Long sums: scaled so that results stay O(1) against the absolute tolerance.
    c["matmul_blocked_edges"] = mm(f32(r, 33, 300) / 16, f32(r, 300, 2100))
    c["matmul_f64"] = mm(r.standard_normal((3, 6, 5)), r.standard_normal((5, 4)))
    c["matmul_f64_blocked"] = mm(r.standard_normal((2, 20, 300)) / 16,
                                 r.standard_normal((2, 300, 30)))
    c["matmul_f16"] = mm(f32(r, 2, 5, 16).astype(np.float16), f32(r, 16, 3).astype(np.float16),
                         HALF)
    c["matmul_i64"] = mm(r.integers(-9, 9, (2, 5, 6)), r.integers(-9, 9, (6, 3)), EXACT)
    c["matmul_i32"] = mm(r.integers(-9, 9, (4, 6)).astype(np.int32),
                         r.integers(-9, 9, (6, 5)).astype(np.int32), EXACT)

    def gemm(a, b, cc=None, tol=SUM, **attrs):
        return Case("Gemm", [("a", a), ("b", b), ("c", cc)], attrs, tol=tol)
    c["gemm_plain"] = gemm(f32(r, 4, 5), f32(r, 5, 6))
    c["gemm_trans_a_trans_b_c"] = gemm(f32(r, 5, 4), f32(r, 6, 5), f32(r, 4, 6),
                                       alpha=0.5, beta=2.0, transA=1, transB=1)
    c["gemm_trans_b_c_row"] = gemm(f32(r, 7, 9), f32(r, 10, 9), f32(r, 10), transB=1)
    c["gemm_trans_a_c_column"] = gemm(f32(r, 9, 7), f32(r, 9, 10), f32(r, 7, 1), transA=1,
                                      beta=-1.5)
    c["gemm_c_scalar"] = gemm(f32(r, 3, 4), f32(r, 4, 5), f32(r, 1), alpha=2.0)
    c["gemm_large"] = gemm(f32(r, 65, 270) / 16, f32(r, 130, 270), f32(r, 130), transB=1)
    c["gemm_f16"] = gemm(f32(r, 4, 8).astype(np.float16), f32(r, 5, 8).astype(np.float16),
                         f32(r, 5).astype(np.float16), tol=HALF, transB=1)
    c["gemm_f64"] = gemm(r.standard_normal((4, 3)), r.standard_normal((3, 5)),
                         r.standard_normal((4, 5)), alpha=0.25, beta=0.75)

    def einsum(eq, *arrays, tol=SUM):
        return Case("Einsum", [(f"x{i}", a) for i, a in enumerate(arrays)], {"equation": eq},
                    tol=tol)
    c["einsum_attention_scores"] = einsum("bhid,bhjd->bhij", f32(r, 2, 3, 4, 5),
                                          f32(r, 2, 3, 6, 5))
    c["einsum_implicit_matmul"] = einsum("ij,jk", f32(r, 4, 5), f32(r, 5, 3))
    c["einsum_ellipsis_matmul"] = einsum("...ij,...jk->...ik", f32(r, 2, 3, 4, 5),
                                         f32(r, 2, 3, 5, 2))
    c["einsum_ellipsis_broadcast"] = einsum("...ij,...jk->...ik", f32(r, 2, 1, 4, 5),
                                            f32(r, 1, 3, 5, 2))
    c["einsum_ellipsis_leading_labels"] = einsum("i...,i...->...", f32(r, 3, 2, 4),
                                                 f32(r, 3, 2, 4))
    c["einsum_implicit_batch_summed"] = einsum("bij,bjk", f32(r, 2, 3, 4), f32(r, 2, 4, 5))
    # onnxruntime refuses ellipses of different ranks; numpy is the reference.
    a, b = f32(r, 2, 3, 4, 5), f32(r, 3, 5, 2)
    c["einsum_ellipsis_ranks_differ"] = Case(
        "Einsum", [("x0", a), ("x1", b)], {"equation": "...ij,...jk->...ik"}, tol=SUM,
        reference=lambda feeds: [np.einsum("...ij,...jk->...ik", feeds["x0"], feeds["x1"])])
    c["einsum_diagonal"] = einsum("ii->i", f32(r, 5, 5))
    c["einsum_trace"] = einsum("ii", f32(r, 6, 6))
    c["einsum_sum_all"] = einsum("ij->", f32(r, 4, 7))
    c["einsum_transpose"] = einsum("ijk->kij", f32(r, 2, 3, 4))
    c["einsum_outer"] = einsum("i,j->ij", f32(r, 4), f32(r, 3))
    c["einsum_three_operands"] = einsum("ij,jk,kl->il", f32(r, 3, 4), f32(r, 4, 5),
                                        f32(r, 5, 2))
    c["einsum_f16"] = einsum("bij,bkj->bik", f32(r, 2, 3, 8).astype(np.float16),
                             f32(r, 2, 4, 8).astype(np.float16), tol=HALF)
    c["einsum_i64"] = einsum("ij,jk->ik", r.integers(-5, 5, (3, 4)), r.integers(-5, 5, (4, 2)),
                             tol=EXACT)
    return c


CONTRACTION = contraction_cases()


@pytest.mark.parametrize("name", list(CONTRACTION))
def test_contraction(tmp_path, name):
    run_case(tmp_path, CONTRACTION[name])


def test_transposed_initializer_is_loaded_transposed(tmp_path):
    """MatMul(x, Transpose(W)) with W an initializer (and a second
    initializer read both transposed and as stored): the transposes fold
    into the weights' loads (`permutation` in the artifact, no transpose
    kernel), and the results match onnxruntime."""
    r = rng_for("transposed_initializer")
    x = f32(r, 2, 5, 64)
    w = f32(r, 300, 64)  # large enough to stay a weight, not a constant
    v = f32(r, 64, 64)
    graph = helper.make_graph(
        [helper.make_node("Transpose", ["w"], ["wt"], perm=[1, 0]),
         helper.make_node("MatMul", ["x", "wt"], ["y0"]),
         helper.make_node("Transpose", ["v"], ["vt"], perm=[1, 0]),
         helper.make_node("MatMul", ["x", "vt"], ["a"]),
         helper.make_node("MatMul", ["a", "v"], ["y1"])],
        "transposed", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, x.shape)],
        [helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, None) for n in ("y0", "y1")],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(v, "v")])
    path = tmp_path / "model.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)],
                                ir_version=8), path)
    artifact = compile_model(path, tmp_path / "model.shard")
    text = artifact.read_text()
    assert "kernel transpose" not in text
    assert text.count("permutation=1,0") == 2, text
    ours = run_artifact(artifact, {"x": x}, tmp_path)
    ref = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(
        ["y0", "y1"], {"x": x})
    # y1 sums products of the 64-term sums in `a` (values up to about 200):
    # an element near zero carries the rounding of terms that large, so the
    # absolute tolerance follows the output's scale (1e-6 of its largest
    # value, a few f32 roundings of it) rather than a fixed 1e-5.
    for name, want in zip(("y0", "y1"), ref):
        np.testing.assert_allclose(ours[name], want, rtol=SUM["rtol"],
                                   atol=max(SUM["atol"], 1e-6 * float(np.abs(want).max())))


# --------------------------------------------------------------------------
# Convolution and pooling
# --------------------------------------------------------------------------

def conv_cases():
    r = rng_for("conv")
    c = {}

    def conv(x, w, b=None, **attrs):
        return Case("Conv", [("x", x), ("w", w), ("b", b)], attrs, tol=SUM)
    c["conv2d_bias_pads"] = conv(f32(r, 2, 3, 9, 10), f32(r, 4, 3, 3, 3), f32(r, 4),
                                 pads=[1, 1, 1, 1])
    c["conv2d_groups_strides_pads_dilations"] = conv(
        f32(r, 1, 6, 11, 12), f32(r, 4, 3, 3, 2), f32(r, 4), group=2, strides=[2, 1],
        pads=[1, 0, 2, 1], dilations=[2, 1])
    c["conv2d_depthwise"] = conv(f32(r, 2, 4, 7, 7), f32(r, 4, 1, 3, 3), f32(r, 4), group=4,
                                 pads=[1, 1, 1, 1], strides=[2, 2])
    c["conv2d_pointwise"] = conv(f32(r, 2, 8, 5, 6), f32(r, 3, 8, 1, 1))
    c["conv2d_same_upper"] = conv(f32(r, 1, 2, 8, 7), f32(r, 3, 2, 4, 3), auto_pad="SAME_UPPER",
                                  strides=[2, 2])
    c["conv2d_many_channels"] = conv(f32(r, 1, 32, 10, 10), f32(r, 40, 32, 3, 3), f32(r, 40),
                                     pads=[1, 1, 1, 1])
    c["conv1d_groups_strides_pads_dilations"] = conv(
        f32(r, 2, 4, 15), f32(r, 6, 2, 3), f32(r, 6), group=2, strides=[2], pads=[1, 2],
        dilations=[2])
    c["conv1d_no_bias"] = conv(f32(r, 1, 3, 10), f32(r, 2, 3, 4))
    c["conv3d_groups_strides_pads_dilations"] = conv(
        f32(r, 2, 4, 6, 7, 8), f32(r, 6, 2, 3, 2, 3), f32(r, 6), group=2, strides=[1, 2, 2],
        pads=[1, 0, 1, 0, 1, 2], dilations=[2, 1, 1])
    c["conv3d_pointwise"] = conv(f32(r, 1, 5, 3, 4, 5), f32(r, 2, 5, 1, 1, 1))
    c["conv2d_f16"] = Case("Conv", [("x", f32(r, 1, 4, 6, 6).astype(np.float16)),
                                    ("w", f32(r, 2, 2, 3, 3).astype(np.float16)),
                                    ("b", f32(r, 2).astype(np.float16))],
                           {"group": 2, "pads": [1, 1, 1, 1]}, tol=HALF)
    # onnxruntime has no f64 Conv or AveragePool on the CPU: the onnx
    # reference evaluator checks those.
    c["conv2d_f64"] = Case("Conv", [("x", r.standard_normal((1, 2, 6, 5))),
                                    ("w", r.standard_normal((3, 2, 2, 2))),
                                    ("b", r.standard_normal(3))],
                           {"pads": [0, 1, 1, 0]}, tol=SUM, reference="onnx")

    def pool(op, x, tol=F32, opset=18, **attrs):
        return Case(op, [("x", x)], attrs, tol=tol, opset=opset)
    x = f32(r, 2, 3, 10, 11)
    c["max_pool2d_pads"] = pool("MaxPool", x, EXACT, kernel_shape=[3, 3], strides=[2, 2],
                                pads=[1, 1, 1, 1])
    c["max_pool2d_ceil_mode"] = pool("MaxPool", x, EXACT, kernel_shape=[3, 3], strides=[2, 2],
                                     ceil_mode=1)
    c["max_pool2d_ceil_mode_pads"] = pool("MaxPool", x, EXACT, kernel_shape=[2, 3],
                                          strides=[3, 2], pads=[1, 0, 1, 1], ceil_mode=1)
    c["max_pool2d_dilations"] = pool("MaxPool", x, EXACT, kernel_shape=[2, 2],
                                     dilations=[2, 3], pads=[1, 1, 0, 0])
    c["max_pool1d_ceil_mode"] = pool("MaxPool", f32(r, 2, 3, 13), EXACT, kernel_shape=[4],
                                     strides=[3], pads=[1, 1], ceil_mode=1)
    c["max_pool2d_u8"] = pool("MaxPool", r.integers(0, 255, (1, 2, 6, 6)).astype(np.uint8),
                              EXACT, kernel_shape=[2, 2], strides=[2, 2], pads=[1, 1, 0, 0])
    c["max_pool2d_f16"] = pool("MaxPool", x.astype(np.float16), EXACT, kernel_shape=[3, 3],
                               strides=[2, 2], pads=[1, 1, 1, 1])
    c["average_pool2d_f16"] = pool("AveragePool", x.astype(np.float16), HALF,
                                   kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    c["average_pool2d"] = pool("AveragePool", x, kernel_shape=[3, 2], strides=[2, 2])
    c["average_pool2d_pads_exclude"] = pool("AveragePool", x, kernel_shape=[3, 3],
                                            pads=[1, 1, 1, 1], count_include_pad=0)
    c["average_pool2d_pads_include"] = pool("AveragePool", x, kernel_shape=[3, 3],
                                            pads=[1, 2, 1, 0], count_include_pad=1)
    c["average_pool2d_ceil_include"] = pool("AveragePool", x, kernel_shape=[3, 3],
                                            strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1,
                                            count_include_pad=1)
    c["average_pool2d_ceil_exclude"] = pool("AveragePool", x, kernel_shape=[3, 3],
                                            strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1,
                                            count_include_pad=0)
    c["average_pool2d_ceil_no_pads"] = pool("AveragePool", x, kernel_shape=[3, 3],
                                            strides=[2, 2], ceil_mode=1, count_include_pad=1)
    c["average_pool1d_pads_include"] = pool("AveragePool", f32(r, 2, 2, 9), kernel_shape=[4],
                                            strides=[2], pads=[2, 1], count_include_pad=1)
    c["average_pool2d_dilations"] = pool("AveragePool", x, opset=19, kernel_shape=[2, 2],
                                         dilations=[2, 2], strides=[1, 2])
    v = f32(r, 2, 3, 5, 6, 7)
    c["max_pool3d_pads_strides_dilations"] = pool(
        "MaxPool", v, EXACT, kernel_shape=[2, 3, 2], strides=[2, 1, 2], pads=[1, 0, 1, 0, 1, 1],
        dilations=[1, 2, 1])
    c["max_pool3d_ceil_mode"] = pool("MaxPool", v, EXACT, kernel_shape=[2, 2, 3],
                                     strides=[2, 2, 2], ceil_mode=1)
    c["average_pool3d_pads_include"] = pool("AveragePool", v, kernel_shape=[3, 2, 3],
                                            strides=[1, 2, 2], pads=[1, 1, 0, 1, 0, 2],
                                            count_include_pad=1)
    c["average_pool3d_ceil_exclude"] = pool("AveragePool", v, kernel_shape=[2, 3, 3],
                                            strides=[2, 2, 2], pads=[0, 1, 1, 1, 1, 0],
                                            ceil_mode=1, count_include_pad=0)

    def pool_indices(x, tol=EXACT, **attrs):
        return Case("MaxPool", [("x", x)], attrs, outputs=2, out_dtypes=[x.dtype, np.int64],
                    tol=tol)
    # Distinct values, so that the first maximum is the only one.
    distinct = r.permutation(2 * 3 * 10 * 11).astype(np.float32).reshape(2, 3, 10, 11)
    c["max_pool2d_indices"] = pool_indices(distinct, kernel_shape=[3, 3], strides=[2, 2],
                                           pads=[1, 1, 1, 1])
    c["max_pool2d_indices_column_major"] = pool_indices(
        distinct, kernel_shape=[2, 3], strides=[2, 2], dilations=[2, 1], storage_order=1)
    c["max_pool1d_indices"] = pool_indices(distinct.reshape(6, 10, 11), kernel_shape=[3],
                                           strides=[2], ceil_mode=1)
    c["max_pool3d_indices"] = pool_indices(
        r.permutation(2 * 2 * 4 * 5 * 6).astype(np.float32).reshape(2, 2, 4, 5, 6),
        kernel_shape=[2, 2, 2], strides=[1, 2, 2], pads=[0, 1, 1, 1, 0, 0])
    c["average_pool2d_f64"] = Case("AveragePool", [("x", r.standard_normal((1, 2, 5, 5)))],
                                   {"kernel_shape": [2, 2], "pads": [1, 1, 1, 1]},
                                   reference="onnx")
    c["global_average_pool2d"] = pool("GlobalAveragePool", f32(r, 2, 5, 7, 6))
    c["global_average_pool1d"] = pool("GlobalAveragePool", f32(r, 2, 5, 9))
    return c


CONV = conv_cases()


@pytest.mark.parametrize("name", list(CONV))
def test_convolution_and_pooling(tmp_path, name):
    run_case(tmp_path, CONV[name])


# --------------------------------------------------------------------------
# Attention and rotary embedding (opset 23)
# --------------------------------------------------------------------------

def attention_cases():
    r = rng_for("attention")
    c = {}

    def att(q, k, v, mask=None, **attrs):
        return Case("Attention", [("q", q), ("k", k), ("v", v), ("mask", mask)], attrs,
                    opset=23, tol=SUM)
    c["attention_mha"] = att(f32(r, 2, 4, 5, 8), f32(r, 2, 4, 7, 8), f32(r, 2, 4, 7, 6))
    c["attention_gqa"] = att(f32(r, 2, 6, 5, 8), f32(r, 2, 2, 7, 8), f32(r, 2, 2, 7, 8))
    c["attention_causal"] = att(f32(r, 1, 2, 6, 4), f32(r, 1, 2, 6, 4), f32(r, 1, 2, 6, 4),
                                is_causal=1)
    c["attention_causal_longer_keys"] = att(f32(r, 1, 2, 4, 4), f32(r, 1, 2, 7, 4),
                                            f32(r, 1, 2, 7, 4), is_causal=1)
    keep = r.random((2, 1, 5, 7)) < 0.7
    keep[..., 0] = True  # no fully masked row here
    c["attention_bool_mask"] = att(f32(r, 2, 3, 5, 8), f32(r, 2, 3, 7, 8), f32(r, 2, 3, 7, 8),
                                   keep)
    c["attention_float_mask"] = att(f32(r, 2, 3, 5, 8), f32(r, 2, 3, 7, 8), f32(r, 2, 3, 7, 8),
                                    f32(r, 5, 7))
    c["attention_float_mask_per_head"] = att(f32(r, 1, 2, 3, 4), f32(r, 1, 2, 5, 4),
                                             f32(r, 1, 2, 5, 4), f32(r, 1, 2, 3, 5))
    keep = r.random((5, 5)) < 0.6
    keep[:, 0] = True
    c["attention_causal_bool_mask"] = att(f32(r, 1, 2, 5, 4), f32(r, 1, 2, 5, 4),
                                          f32(r, 1, 2, 5, 4), keep, is_causal=1)
    c["attention_3d"] = att(f32(r, 2, 5, 4 * 8), f32(r, 2, 7, 2 * 8), f32(r, 2, 7, 2 * 6),
                            q_num_heads=4, kv_num_heads=2)
    c["attention_softcap_scale"] = att(f32(r, 1, 2, 4, 8) * 3, f32(r, 1, 2, 6, 8) * 3,
                                       f32(r, 1, 2, 6, 8), f32(r, 4, 6), softcap=2.5, scale=0.4)
    c["attention_f16_float_mask"] = Case(
        "Attention", [("q", f32(r, 1, 2, 3, 8).astype(np.float16)),
                      ("k", f32(r, 1, 2, 5, 8).astype(np.float16)),
                      ("v", f32(r, 1, 2, 5, 8).astype(np.float16)),
                      ("mask", f32(r, 3, 5).astype(np.float16))], opset=23, tol=HALF)
    c["attention_f64"] = att(r.standard_normal((1, 2, 3, 4)), r.standard_normal((1, 2, 5, 4)),
                             r.standard_normal((1, 2, 5, 3)), is_causal=1)

    def rope(x, cos, sin, pos=None, **attrs):
        return Case("RotaryEmbedding", [("x", x), ("cos", cos), ("sin", sin), ("pos", pos)],
                    attrs, opset=23, tol=F32)
    pos = r.integers(0, 10, (2, 5))
    c["rotary_4d_position_ids"] = rope(f32(r, 2, 3, 5, 8), f32(r, 10, 4), f32(r, 10, 4), pos)
    c["rotary_3d_num_heads"] = rope(f32(r, 2, 5, 3 * 8), f32(r, 10, 4), f32(r, 10, 4), pos,
                                    num_heads=3)
    c["rotary_interleaved"] = rope(f32(r, 2, 3, 5, 8), f32(r, 10, 4), f32(r, 10, 4), pos,
                                   interleaved=1)
    c["rotary_partial_dim"] = rope(f32(r, 2, 3, 5, 8), f32(r, 10, 2), f32(r, 10, 2), pos,
                                   rotary_embedding_dim=4)
    c["rotary_partial_dim_3d_interleaved"] = rope(
        f32(r, 2, 5, 2 * 10), f32(r, 12, 3), f32(r, 12, 3), r.integers(0, 12, (2, 5)),
        num_heads=2, rotary_embedding_dim=6, interleaved=1)
    c["rotary_f16"] = rope(f32(r, 2, 3, 5, 8).astype(np.float16),
                           f32(r, 10, 4).astype(np.float16), f32(r, 10, 4).astype(np.float16),
                           pos, interleaved=1)
    c["rotary_f16"].tol = HALF
    c["rotary_no_position_ids"] = rope(f32(r, 2, 3, 5, 8), f32(r, 2, 5, 4), f32(r, 2, 5, 4))
    return c


ATTENTION = attention_cases()


@pytest.mark.parametrize("name", list(ATTENTION))
def test_attention(tmp_path, name):
    run_case(tmp_path, ATTENTION[name])


def test_attention_fully_masked_row_gives_zeros(tmp_path):
    r = rng_for("attention-masked")
    q, k, v = f32(r, 1, 2, 3, 4), f32(r, 1, 2, 5, 4), f32(r, 1, 2, 5, 4)
    keep = np.ones((3, 5), bool)
    keep[1] = False
    case = Case("Attention", [("q", q), ("k", k), ("v", v), ("mask", keep)], opset=23)
    path = tmp_path / "model.onnx"
    onnx.save(case.model(), path)
    artifact = compile_model(path, tmp_path / "model.shard")
    got = run_artifact(artifact, case.feeds(), tmp_path)["y0"]
    np.testing.assert_array_equal(got[:, :, 1], 0)
    reference = onnx.reference.ReferenceEvaluator(case.model()).run(None, case.feeds())[0]
    np.testing.assert_allclose(got, reference, **SUM)


# --------------------------------------------------------------------------
# Data movement
# --------------------------------------------------------------------------

def data_cases():
    r = rng_for("data")
    c = {}
    x = f32(r, 2, 3, 4)
    c["transpose_3d"] = Case("Transpose", [("x", x)], {"perm": [2, 0, 1]}, tol=EXACT)
    c["transpose_4d_i64"] = Case("Transpose", [("x", r.integers(-99, 99, (2, 3, 4, 5)))],
                                 {"perm": [0, 2, 1, 3]}, tol=EXACT)
    c["transpose_default_perm_bool"] = Case("Transpose", [("x", r.random((3, 4, 2)) < 0.5)],
                                            tol=EXACT)
    c["transpose_f16"] = Case("Transpose", [("x", f32(r, 5, 6).astype(np.float16))],
                              {"perm": [1, 0]}, tol=EXACT)

    c["concat_axis1"] = Case("Concat", [("a", f32(r, 2, 1, 3)), ("b", f32(r, 2, 4, 3)),
                                        ("c", f32(r, 2, 2, 3))], {"axis": 1}, tol=EXACT)
    c["concat_negative_axis_i32"] = Case(
        "Concat", [("a", r.integers(0, 9, (2, 3)).astype(np.int32)),
                   ("b", r.integers(0, 9, (2, 2)).astype(np.int32))], {"axis": -1}, tol=EXACT)

    c["split_sizes"] = Case("Split", [("x", f32(r, 2, 6, 3)), ("split", i64([2, 3, 1]))],
                            {"axis": 1}, consts=["split"], outputs=3, tol=EXACT)
    c["split_num_outputs"] = Case("Split", [("x", r.integers(0, 9, (3, 7)))],
                                  {"axis": -1, "num_outputs": 3}, outputs=3, tol=EXACT)

    def slc(data, starts, ends, axes=None, steps=None):
        inputs = [("x", data), ("starts", i64(starts)), ("ends", i64(ends)),
                  ("axes", None if axes is None else i64(axes)),
                  ("steps", None if steps is None else i64(steps))]
        return Case("Slice", inputs, consts=["starts", "ends", "axes", "steps"], tol=EXACT)
    y = f32(r, 5, 6, 7)
    c["slice_basic"] = slc(y, [1, 0], [4, 5], [0, 2])
    c["slice_no_axes"] = slc(y, [1, 2, 3], [3, BIG, 5])
    c["slice_negative_steps"] = slc(y, [-1, 5], [-100, 0], [0, 2], [-2, -1])
    c["slice_negative_bounds"] = slc(y, [-4, -3], [-1, BIG], [1, 2], [1, 2])
    c["slice_steps_and_negative_axis"] = slc(y, [0, 6], [5, -8], [0, -1], [3, -3])
    c["slice_empty"] = slc(y, [3], [1], [1])

    def pad(data, pads, mode="constant", value=None, axes=None):
        inputs = [("x", data), ("pads", i64(pads)),
                  ("value", None if value is None else np.array(value, data.dtype)),
                  ("axes", None if axes is None else i64(axes))]
        return Case("Pad", inputs, {"mode": mode}, consts=["pads", "value", "axes"], tol=EXACT)
    z = f32(r, 3, 4, 5)
    c["pad_constant_value"] = pad(z, [0, 1, 2, 1, 0, 3], value=1.5)
    c["pad_constant_crop"] = pad(z, [1, -1, 0, -1, 2, 1])
    c["pad_reflect"] = pad(z, [2, 1, 0, 1, 3, 4], "reflect")
    c["pad_edge"] = pad(z, [1, 4, 2, 3, 0, 1], "edge")
    c["pad_wrap"] = pad(z, [2, 1, 3, 1, 5, 2], "wrap")
    c["pad_axes_i64"] = pad(r.integers(0, 9, (3, 4)), [1, 2], "reflect", axes=[-1])

    data = f32(r, 5, 4, 3)
    c["gather_negative_indices"] = Case("Gather", [("x", data), ("i", i64([[0, -1], [-5, 2]]))],
                                        {"axis": 0}, tol=EXACT)
    c["gather_axis1_i32"] = Case("Gather", [("x", data),
                                            ("i", np.array([3, -4, 1], np.int32))],
                                 {"axis": 1}, tol=EXACT)
    c["gather_scalar_index_last_axis"] = Case("Gather", [("x", data), ("i", i64(-1))],
                                              {"axis": -1}, tol=EXACT)
    c["gather_elements_axis0"] = Case(
        "GatherElements", [("x", data), ("i", r.integers(-5, 5, (3, 4, 3)))], {"axis": 0},
        tol=EXACT)
    c["gather_elements_axis1_smaller"] = Case(
        "GatherElements", [("x", data), ("i", r.integers(-4, 4, (2, 6, 2)).astype(np.int32))],
        {"axis": 1}, tol=EXACT)

    def scatter(reduction, idx, upd, base):
        return Case("ScatterND", [("x", base), ("i", i64(idx)), ("u", upd)],
                    {"reduction": reduction} if reduction != "none" else {}, tol=EXACT)
    base = f32(r, 4, 3, 2)
    c["scatter_nd_none"] = scatter("none", [[1], [3]], f32(r, 2, 3, 2), base)
    c["scatter_nd_add_duplicates"] = scatter("add", [[1, 0], [1, 0], [3, 2]], f32(r, 3, 2), base)
    c["scatter_nd_mul"] = scatter("mul", [[0, 1, 1], [2, 2, 0]], f32(r, 2), base)
    c["scatter_nd_max"] = scatter("max", [[2], [2]], f32(r, 2, 3, 2), base)
    c["scatter_nd_min_i64"] = scatter("min", [[0, 1], [-1, 2]], r.integers(-9, 9, (2, 2)),
                                      r.integers(-9, 9, (4, 3, 2)))

    c["expand"] = Case("Expand", [("x", f32(r, 3, 1)), ("shape", i64([2, 3, 4]))],
                       consts=["shape"], tol=EXACT)
    c["expand_middle_i32"] = Case("Expand", [("x", r.integers(0, 9, (2, 1, 3)).astype(np.int32)),
                                             ("shape", i64([1, 4, 1]))], consts=["shape"],
                                  tol=EXACT)

    m = f32(r, 2, 4, 5)
    c["trilu_upper"] = Case("Trilu", [("x", m)], tol=EXACT)
    c["trilu_lower_k1"] = Case("Trilu", [("x", m), ("k", i64(1))], {"upper": 0}, consts=["k"],
                               tol=EXACT)
    c["trilu_upper_negative_k"] = Case("Trilu", [("x", m), ("k", i64(-2))], consts=["k"],
                                       tol=EXACT)
    c["trilu_lower_i64"] = Case("Trilu", [("x", r.integers(1, 9, (6, 3))), ("k", i64(-1))],
                                {"upper": 0}, consts=["k"], tol=EXACT)

    def rng_op(start, limit, delta, dtype):
        return Case("Range", [("start", np.array(start, dtype)), ("limit", np.array(limit, dtype)),
                              ("delta", np.array(delta, dtype))],
                    consts=["start", "limit", "delta"], tol=EXACT)
    c["range_f32"] = rng_op(0.5, 5.0, 0.25, np.float32)
    c["range_i64_negative_delta"] = rng_op(10, -3, -3, np.int64)
    c["range_i32"] = rng_op(-4, 7, 2, np.int32)

    c["constant_of_shape_folded"] = Case(
        "ConstantOfShape", [("shape", i64([2, 3]))],
        {"value": numpy_helper.from_array(np.array([2.5], np.float32))}, consts=["shape"],
        out_dtypes=[np.float32], tol=EXACT)
    c["shape_folded"] = Case("Shape", [("x", f32(r, 2, 3, 4, 5))], {"start": 1, "end": -1},
                             out_dtypes=[np.int64], tol=EXACT)
    return c


DATA = data_cases()


@pytest.mark.parametrize("name", list(DATA))
def test_data_movement(tmp_path, name):
    run_case(tmp_path, DATA[name])


def test_gather_index_out_of_range_is_an_error(tmp_path):
    case = Case("Gather", [("x", np.zeros((5, 2), np.float32)), ("i", i64([1, 9]))], {"axis": 0})
    path = tmp_path / "model.onnx"
    onnx.save(case.model(), path)
    artifact = compile_model(path, tmp_path / "model.shard")
    out = shard_run(artifact, case.feeds(), tmp_path)
    assert out.returncode != 0
    assert "gather" in out.stderr and "index 9" in out.stderr and "size 5" in out.stderr, \
        out.stderr


# shape and constant_of_shape always fold in the compiler: run the kernels
# from hand-written artifacts.

def run_program(tmp_path, lines: list[str], inputs: dict) -> dict:
    text = "\n".join(["shardflow-artifact 4", "target cpu", "world-size 1",
                      f"model-dir {tmp_path}", "arena 4096", *lines, "end", ""])
    path = tmp_path / "program.shard"
    path.write_text(text)
    return run_artifact(path, inputs, tmp_path)


@pytest.mark.parametrize("start,end", [(0, None), (1, None), (1, -1), (-3, 3), (3, 1)])
def test_shape_kernel(tmp_path, start, end):
    x = np.zeros((2, 3, 4, 5), np.float32)
    want = np.array(x.shape[start:end], np.int64)
    params = f"start=i:{start}" + ("" if end is None else f" end=i:{end}")
    out = run_program(tmp_path, [
        "buffer 0 input f32 2x3x4x5 name=x",
        f"buffer 1 arena i64 {len(want)} offset=0",
        f"kernel shape in=0 out=1 {params}",
        "output y 1"], {"x": x})
    np.testing.assert_array_equal(out["y"], want)


@pytest.mark.parametrize("dtype,tag,expect", [
    ("f32", "f:2.5", np.full((3, 4), 2.5, np.float32)),
    ("f64", "f:-0.125", np.full((3, 4), -0.125)),
    ("i32", "i:7", np.full((3, 4), 7, np.int32)),
    ("i64", "i:-3", np.full((3, 4), -3, np.int64)),
    ("f16", "f:1.5", np.full((3, 4), 1.5, np.float16)),
    ("i1", "i:1", np.ones((3, 4), bool)),
])
def test_constant_of_shape_kernel(tmp_path, dtype, tag, expect):
    out = run_program(tmp_path, [
        f"buffer 0 arena {dtype} 3x4 offset=0",
        f"kernel constant_of_shape in= out=0 value={tag}",
        "output y 0"], {})
    assert out["y"].dtype == expect.dtype
    np.testing.assert_array_equal(out["y"], expect)


# matmul's element types: one throughout, or floats of different widths
# mixed (what the CUDA target emits for logits: bf16 operands, an f32
# result); anything else is refused, not read as the wrong type.

@pytest.mark.parametrize("ta,tb,tout", [("f16", "f16", "f32"), ("f32", "f16", "f32"),
                                        ("f16", "f32", "f16")])
def test_matmul_mixes_float_widths(tmp_path, ta, tb, tout):
    np_type = {"f32": np.float32, "f16": np.float16}
    rng = rng_for(f"matmul_mix_{ta}_{tb}_{tout}")
    a = rng.standard_normal((2, 3, 16)).astype(np_type[ta])
    b = rng.standard_normal((16, 5)).astype(np_type[tb])
    out = run_program(tmp_path, [
        f"buffer 0 input {ta} 2x3x16 name=a",
        f"buffer 1 input {tb} 16x5 name=b",
        f"buffer 2 arena {tout} 2x3x5 offset=0",
        "kernel matmul in=0,1 out=2",
        "output y 2"], {"a": a, "b": b})
    # Exact products of the stored operands, summed in float64, rounded
    # once to the result type: f32 accumulation stays within 1e-5 of it.
    want = (a.astype(np.float64) @ b.astype(np.float64)).astype(np_type[tout])
    assert out["y"].dtype == np_type[tout]
    tol = 1e-5 if tout == "f32" else 2e-3
    np.testing.assert_allclose(out["y"].astype(np.float64), want.astype(np.float64),
                               rtol=tol, atol=tol * 4)


def test_matmul_refuses_integer_operands_with_a_float_result(tmp_path):
    text = "\n".join(["shardflow-artifact 4", "target cpu", "world-size 1",
                      f"model-dir {tmp_path}", "arena 4096",
                      "buffer 0 input i32 2x4 name=a", "buffer 1 input i32 4x3 name=b",
                      "buffer 2 arena f32 2x3 offset=0", "kernel matmul in=0,1 out=2",
                      "output y 2", "end", ""])
    path = tmp_path / "program.shard"
    path.write_text(text)
    ints = np.arange(8, dtype=np.int32).reshape(2, 4)
    out = shard_run(path, {"a": ints, "b": np.ones((4, 3), np.int32)}, tmp_path)
    assert out.returncode != 0
    assert "matmul" in out.stderr and "one element type" in out.stderr \
        and "i32 and f32" in out.stderr, out.stderr


@pytest.mark.parametrize("equation,shapes,matmul", [
    ("...a,abc->...bc", [(2, 5, 16), (16, 3, 8)], True),   # megatron's fused projection
    ("bhid,bhjd->bhij", [(2, 3, 4, 8), (2, 3, 6, 8)], True),
    ("bmk,bkn->nbm", [(2, 3, 4), (2, 4, 5)], True),
    ("ij,jk->k", [(3, 4), (4, 5)], False),  # i is summed within the first operand
])
def test_einsums_that_are_matmuls_run_on_the_gemm(tmp_path, equation, shapes, matmul):
    """rt-einsum-to-matmul on the CPU: a float einsum that is a matrix
    product becomes a matmul (of views, or around transposes), so it runs
    on OpenBLAS instead of the einsum kernel's serial loop nest (the
    megatron GPT-2's fused projections were 90% of its forward); one that
    is not (a label summed within one operand) stays. Both match
    onnxruntime."""
    r = rng_for("einsum_gemm_" + equation)
    arrays = [f32(r, *s) for s in shapes]
    case = Case("Einsum", [(f"x{i}", a) for i, a in enumerate(arrays)],
                {"equation": equation}, tol=SUM)
    path = tmp_path / "model.onnx"
    onnx.save(case.model(), path)
    text = compile_model(path, tmp_path / "model.shard").read_text()
    assert ("kernel einsum" not in text) == matmul, text
    assert ("kernel matmul" in text) == matmul, text
    ours = run_artifact(tmp_path / "model.shard", case.feeds(), tmp_path)
    want = case.expected(path)
    assert set(ours) == set(want)
    for name, ref in want.items():
        np.testing.assert_allclose(ours[name], ref, **SUM)


# --------------------------------------------------------------------------
# ONNX data movement and losses: GatherND, ScatterElements, OneHot, Tile,
# NonZero (compositions of nn ops, NonZero folded at import) and
# SoftmaxCrossEntropyLoss / NegativeLogLikelihoodLoss.
# --------------------------------------------------------------------------
def indexing_and_loss_cases():
    r = rng_for("indexing_and_losses")
    c = {}
    data = f32(r, 4, 3, 5)
    c["gather_nd_full_tuples"] = Case("GatherND", [("x", data), ("i", i64([[1, 2, 4], [-1, 0, -5]]))],
                                      tol=EXACT)
    c["gather_nd_slices_negative"] = Case(
        "GatherND", [("x", data), ("i", i64([[[0], [-1]], [[2], [3]]]))], tol=EXACT)
    c["gather_nd_pairs"] = Case(
        "GatherND", [("x", data), ("i", i64([[3, -3], [0, 1], [2, 2]]))], tol=EXACT)
    c["gather_nd_batch_dims1"] = Case(
        "GatherND", [("x", data), ("i", r.integers(-3, 3, (4, 2, 1)))], {"batch_dims": 1},
        tol=EXACT)
    c["gather_nd_batch_dims2_i64_data"] = Case(
        "GatherND", [("x", r.integers(-9, 9, (2, 3, 4))), ("i", r.integers(-4, 4, (2, 3, 1)))],
        {"batch_dims": 2}, tol=EXACT)
    c["gather_nd_batch_dims1_full"] = Case(
        "GatherND", [("x", data), ("i", r.integers(0, 3, (4, 2)))], {"batch_dims": 1}, tol=EXACT)
    c["gather_nd_rank1_indices"] = Case("GatherND", [("x", data), ("i", i64([2, -1]))], tol=EXACT)

    def scatter_el(axis, reduction, base, idx, upd, opset=18):
        attrs = {"axis": axis}
        if reduction != "none":
            attrs["reduction"] = reduction
        return Case("ScatterElements", [("x", base), ("i", idx), ("u", upd)], attrs,
                    opset=opset, tol=EXACT)
    base = f32(r, 3, 4, 2)
    # Distinct indices along the axis for "none" (duplicates are undefined).
    perm = np.stack([np.stack([r.permutation(4)[:3] for _ in range(2)], -1) for _ in range(3)])
    c["scatter_elements_axis1_none"] = scatter_el(1, "none", base, perm - 4 * (perm % 2),
                                                  f32(r, 3, 3, 2))
    c["scatter_elements_axis0_add_duplicates"] = scatter_el(
        0, "add", base, r.integers(-3, 3, (5, 4, 2)), f32(r, 5, 4, 2))
    c["scatter_elements_axis_last_mul"] = scatter_el(
        -1, "mul", base, r.integers(0, 2, (3, 2, 3)), f32(r, 3, 2, 3))
    c["scatter_elements_max_i64"] = scatter_el(
        1, "max", r.integers(-9, 9, (2, 5)), r.integers(-5, 5, (2, 6)), r.integers(-9, 9, (2, 6)))
    c["scatter_elements_min_i32_indices"] = scatter_el(
        0, "min", base, r.integers(0, 3, (2, 4, 2)).astype(np.int32), f32(r, 2, 4, 2))
    c["scatter_elements_opset13"] = scatter_el(0, "none", f32(r, 3, 3), i64([[1, 0, 2]]),
                                               f32(r, 1, 3), opset=13)

    # onnxruntime implements a few type combinations; the others are checked
    # against the onnx reference evaluator. Float indices are cast to int64
    # (truncated), as the spec says and onnxruntime does.
    def onehot(idx, depth, values, axis=None, reference=None):
        return Case("OneHot", [("i", idx), ("depth", np.array(depth)), ("v", values)],
                    {} if axis is None else {"axis": axis}, consts=["depth"],
                    out_dtypes=[values.dtype], tol=EXACT, reference=reference)
    c["onehot_default_axis_out_of_range"] = onehot(i64([[0, 3, -1], [5, -4, -6]]), 4,
                                                   np.array([0.0, 1.0], np.float32))
    c["onehot_axis0_i32_values_i64"] = onehot(np.array([1, 2, -3], np.int32), np.int64(3),
                                              i64([-2, 7]), axis=0, reference="onnx")
    c["onehot_float_indices_middle_axis"] = onehot(np.array([[1.0, 2.7], [0.0, -1.0]], np.float32),
                                                   np.float32(5), np.array([3, 9], np.float32),
                                                   axis=1)

    def tile(x, repeats):
        return Case("Tile", [("x", x), ("r", i64(repeats))], consts=["r"], tol=EXACT)
    c["tile_2d"] = tile(f32(r, 2, 3), [2, 3])
    c["tile_3d_ones_and_zero"] = tile(r.integers(0, 9, (2, 1, 3)), [1, 4, 0])
    c["tile_bool"] = tile(r.random((3,)) < 0.5, [3])

    c["nonzero_folded"] = Case("NonZero", [("x", np.array([[0, 1.5, 0], [2, 0, -1]], np.float32))],
                               consts=["x"], out_dtypes=[np.int64], tol=EXACT)
    c["nonzero_folded_bool_3d"] = Case("NonZero", [("x", r.random((2, 3, 2)) < 0.5)],
                                       consts=["x"], out_dtypes=[np.int64], tol=EXACT)

    def loss(op, scores, target, weight=None, outputs=1, **attrs):
        inputs = [("x", scores), ("t", target), ("w", weight)]
        return Case(op, inputs, attrs, outputs=outputs,
                    out_dtypes=[scores.dtype] * outputs, tol=F32)
    sce = "SoftmaxCrossEntropyLoss"
    nll = "NegativeLogLikelihoodLoss"
    s2, t2 = f32(r, 6, 5), r.integers(0, 5, (6,))
    s4, t4 = f32(r, 3, 4, 2, 5), r.integers(0, 4, (3, 2, 5))
    w5, w4 = r.random(5).astype(np.float32) + 0.5, r.random(4).astype(np.float32) + 0.5
    t4_ign = np.where(r.random(t4.shape) < 0.3, -1, t4)
    for red in ("none", "sum", "mean"):
        c[f"sce_2d_{red}"] = loss(sce, s2, t2, reduction=red)
        c[f"sce_4d_weight_ignore_{red}_log_prob"] = loss(sce, s4, t4_ign, w4, outputs=2,
                                                         reduction=red, ignore_index=-1)
        c[f"nll_2d_weight_{red}"] = loss(nll, s2, t2.astype(np.int32), w5, reduction=red)
        c[f"nll_4d_ignore_{red}"] = loss(nll, s4, np.where(t4 == 2, 2, t4), reduction=red,
                                         ignore_index=2)
    c["sce_default_mean_3d"] = loss(sce, f32(r, 2, 3, 4), r.integers(0, 3, (2, 4)))
    c["sce_ignore_only_no_weight"] = loss(sce, s2, np.where(t2 > 2, 7, t2), ignore_index=7)
    c["nll_mean_weight_ignore"] = loss(nll, s2, np.where(t2 == 1, -100, t2), w5,
                                       ignore_index=-100)
    # Edge cases: every target ignored (mean is 0/0 = NaN, as in onnxruntime),
    # NaN and -inf scores (an ignored row stays 0 only where its scores are
    # finite: log_softmax spreads a NaN over its row), float64 and float16.
    c["nll_all_ignored_mean_is_nan"] = loss(nll, s2, np.full(6, 3), ignore_index=3)
    bad = s2.copy()
    bad[0, 1], bad[2, 3], bad[4, 0] = -np.inf, np.nan, -np.inf
    c["sce_nan_and_inf_scores_ignore"] = loss(sce, bad, np.array([1, 2, 3, 0, 2, 4]),
                                              reduction="none", ignore_index=2)
    c["sce_f64_weight_mean"] = loss(sce, s4.astype(np.float64), t4, w4.astype(np.float64))
    c["sce_f16_sum"] = Case(sce, [("x", s2.astype(np.float16)), ("t", t2)],
                            {"reduction": "sum"}, out_dtypes=[np.float16], tol=HALF)
    c["scatter_elements_bool"] = scatter_el(1, "none", r.random((3, 4)) < 0.5,
                                            i64([[0, 1], [2, 0], [3, -1]]),
                                            r.random((3, 2)) < 0.5)
    c["gather_nd_empty_tuples"] = Case("GatherND", [("x", f32(r, 2, 3)),
                                                    ("i", np.zeros((2, 0), np.int64))], tol=EXACT)
    return c


INDEXING = indexing_and_loss_cases()


@pytest.mark.parametrize("name", list(INDEXING))
def test_indexing_and_losses(tmp_path, name):
    run_case(tmp_path, INDEXING[name])


@pytest.mark.parametrize("op,inputs,message", [
    ("GatherND", [("x", np.zeros((3, 4), np.float32)), ("i", i64([[1, 4]]))],
     "index 4 is out of range for axis 0 of size 4"),
    ("ScatterElements", [("x", np.zeros((3, 4), np.float32)), ("i", i64([[5]])),
                         ("u", np.ones((1, 1), np.float32))], "index 5"),
])
def test_indexing_out_of_range_is_an_error(tmp_path, op, inputs, message):
    case = Case(op, inputs)
    path = tmp_path / "model.onnx"
    onnx.save(case.model(), path)
    artifact = compile_model(path, tmp_path / "model.shard")
    out = shard_run(artifact, case.feeds(), tmp_path)
    assert out.returncode != 0
    assert message in out.stderr, out.stderr
