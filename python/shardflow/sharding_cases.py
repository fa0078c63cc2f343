"""Small ONNX models and seeded random shardings for the differential
sharding tests (python/tests/test_sharding_differential.py).

Every model is a few ONNX nodes (opset 23, IR version 10) built with
onnx.helper from a numpy generator seeded by the model's name, so that the
same name always gives the same bytes and the same feeds. Its shardable
tensors are its graph inputs and its weights: float initializers of more
than 1024 bytes, which the importer keeps as `nn.weight` (smaller
initializers, such as axes, pads and shapes, become embedded constants).

A case is (model, mesh, k), with the id MODEL-MESH-K: its `--shard` seeds
are drawn by a numpy generator seeded with the CRC-32 of the id, so each
case is reproducible on its own and adding models changes no other case.
Each shardable tensor is seeded (one in five is left to propagation when
the model has several); for its dims, in a random order, the entry is `_`
(not split; also one time in three where a split is possible) or one mesh
axis, or two joined by `+` (major first), that the tensor does not use yet
and whose size (product) divides the dim. A case has at least one split.

Command line (with ``PYTHONPATH=python``): write a case's model and feeds
and print the shard-opt / mpirun command lines that reproduce it (with
``--target cuda``: compiled for CUDA, run on the stand-in libraries)::

    python -m shardflow.sharding_cases matmul_2d_weight-dp2tp2-0 --out /tmp/case
    python -m shardflow.sharding_cases --list
"""
from __future__ import annotations

import argparse
import functools
import math
import sys
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 23
IR_VERSION = 10
F32, F64, I64, BOOL = np.float32, np.float64, np.int64, np.bool_

# Mesh name -> [(axis, size)], first axis major.
MESHES: dict[str, list[tuple[str, int]]] = {
    "tp2": [("tp", 2)],
    "tp4": [("tp", 4)],
    "tp8": [("tp", 8)],
    "dp2tp2": [("dp", 2), ("tp", 2)],
    "a2b4": [("a", 2), ("b", 4)],
}

# Case k of a model takes MESH_ORDER[(k + offset) % len], the offset from
# the model's name, skipping meshes that can split none of its dims: most
# cases run on 2 or 4 ranks, about one in five on 8.
MESH_ORDER = ["dp2tp2", "tp2", "tp4", "dp2tp2", "a2b4", "tp2", "tp4", "dp2tp2", "tp8", "tp2"]


def mesh_flag(mesh: str) -> str:
    return ",".join(f"{a}={n}" for a, n in MESHES[mesh])


def world_size(mesh: str) -> int:
    return math.prod(n for _, n in MESHES[mesh])


def crc(text: str) -> int:
    return zlib.crc32(text.encode())


# --------------------------------------------------------------------------
# Building models
# --------------------------------------------------------------------------


class Net:
    """A graph under construction, with its feeds and shardable tensors."""

    def __init__(self, name: str):
        self.name = name
        self.rng = np.random.default_rng(crc("model:" + name))
        self.nodes: list = []
        self.inputs: list = []
        self.inits: list = []
        self.outputs: list = []
        self.feeds: dict[str, np.ndarray] = {}
        self.shardable: dict[str, tuple[int, ...]] = {}
        self.domains: dict[str, int] = {}  # imported besides the default one
        self._n = 0

    def _fresh(self, base: str) -> str:
        self._n += 1
        return f"{base}{self._n}"

    def normal(self, shape, scale=1.0, dtype=F32) -> np.ndarray:
        return (self.rng.standard_normal(shape) * scale).astype(dtype)

    def input(self, name: str, shape, value: np.ndarray | None = None, dtype=F32) -> str:
        """A graph input, fed `value` (default: standard normal floats)."""
        if value is None:
            value = self.normal(shape, dtype=dtype)
        value = np.asarray(value)
        assert tuple(value.shape) == tuple(shape), (name, value.shape, shape)
        self.feeds[name] = value
        self.inputs.append(helper.make_tensor_value_info(
            name, helper.np_dtype_to_tensor_dtype(value.dtype), list(shape)))
        self.shardable[name] = tuple(shape)
        return name

    def weight(self, name: str, shape, value: np.ndarray | None = None, scale=1.0,
               dtype=F32) -> str:
        """A float initializer large enough (> 1024 bytes) to be an nn.weight."""
        if value is None:
            value = self.normal(shape, scale, dtype)
        assert value.nbytes > 1024, f"weight {name}: {value.nbytes} bytes would be a constant"
        self.inits.append(numpy_helper.from_array(np.asarray(value), name))
        self.shardable[name] = tuple(value.shape)
        return name

    def const(self, value, dtype=None) -> str:
        """A small initializer (an embedded constant: axes, pads, shapes...)."""
        arr = np.asarray(value, dtype=dtype)
        assert arr.nbytes <= 1024, "constants must stay embedded"
        name = self._fresh("const")
        self.inits.append(numpy_helper.from_array(arr, name))
        return name

    def op(self, op_type: str, inputs, outputs: int = 1, domain: str = "", **attrs):
        outs = [self._fresh(op_type.lower()) for _ in range(outputs)]
        if domain:
            attrs["domain"] = domain
        self.nodes.append(helper.make_node(op_type, list(inputs), outs,
                                           name=self._fresh(op_type + "_"), **attrs))
        return outs[0] if outputs == 1 else outs

    def output(self, value: str, dtype=F32, name: str | None = None, shape=None) -> str:
        """`shape`: for outputs ONNX's shape inference does not reach (after
        ops of other domains)."""
        name = name or f"y{len(self.outputs)}"
        self.nodes.append(helper.make_node("Identity", [value], [name],
                                           name=self._fresh("out_")))
        self.outputs.append(helper.make_tensor_value_info(
            name, helper.np_dtype_to_tensor_dtype(np.dtype(dtype)), shape))
        return name

    def model(self) -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, self.name, self.inputs, self.outputs, self.inits)
        m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)] + [
            helper.make_opsetid(d, v) for d, v in self.domains.items()], ir_version=IR_VERSION)
        # Strict shape inference checks every node; the outputs get the
        # inferred shapes, then the whole model is checked.
        inferred = onnx.shape_inference.infer_shapes(m, check_type=True, strict_mode=True)
        known = {v.name: v for v in inferred.graph.value_info}
        for out in m.graph.output:
            src = known.get(out.name)
            if src is None:
                node = next(nd for nd in m.graph.node if out.name in nd.output)
                src = known.get(node.input[0])
            if src is not None and src.type.tensor_type.HasField("shape"):
                out.type.tensor_type.shape.CopyFrom(src.type.tensor_type.shape)
        onnx.checker.check_model(m)
        return m


@dataclass
class Model:
    """A built model: its proto, feeds, shardable tensors and tolerance.

    `exact`: outputs must match bit for bit (pure data movement). Otherwise
    float outputs use rtol 1e-5 and atol 1e-5 * sqrt(reduce), `reduce`
    being the longest sum (contraction, normalization, softmax) behind them.
    Integer and bool outputs always match exactly.
    """
    name: str
    family: str
    proto: onnx.ModelProto
    feeds: dict[str, np.ndarray]
    shardable: dict[str, tuple[int, ...]]
    exact: bool = False
    reduce: int = 1
    cases: int = 4

    @property
    def atol(self) -> float:
        return 1e-5 * math.sqrt(max(1, self.reduce))


@dataclass
class Spec:
    family: str
    build: Callable[[Net], None]
    exact: bool = False
    reduce: int = 1
    cases: int = 4


SPECS: dict[str, Spec] = {}


def spec(name: str, family: str, exact=False, reduce=1, cases=4):
    def register(fn):
        assert name not in SPECS, name
        SPECS[name] = Spec(family, fn, exact, reduce, cases)
        return fn
    return register


@functools.lru_cache(maxsize=None)
def build(name: str) -> Model:
    """The model `name` (built once; treat it as read-only)."""
    s = SPECS[name]
    net = Net(name)
    s.build(net)
    return Model(name, s.family, net.model(), net.feeds, net.shardable, s.exact, s.reduce,
                 s.cases)


# --------------------------------------------------------------------------
# Elementwise
# --------------------------------------------------------------------------

E = (8, 12, 4)  # the elementwise shape: 8 splits 2, 4 and 8 ways; 12 and 4 2 and 4 ways


def _unary(name, op, feed=None, out=F32, **attrs):
    @spec(name, "elementwise-unary", cases=2)
    def _(n: Net):
        x = n.input("x", E, None if feed is None else feed(n))
        n.output(n.op(op, [x], **attrs), out)


_unary("relu", "Relu")
_unary("sigmoid", "Sigmoid")
_unary("tanh", "Tanh")
_unary("exp", "Exp")
_unary("neg", "Neg")
_unary("abs", "Abs")
_unary("erf", "Erf")
_unary("cos", "Cos")
_unary("sin", "Sin")
_unary("floor", "Floor")
_unary("round", "Round")
_unary("softplus", "Softplus")
_unary("sqrt", "Sqrt", lambda n: np.abs(n.normal(E)) + 0.1)
_unary("log", "Log", lambda n: np.abs(n.normal(E)) + 0.1)
_unary("reciprocal", "Reciprocal", lambda n: np.sign(n.normal(E)) + n.normal(E, 0.1))
_unary("gelu", "Gelu")
_unary("gelu_tanh", "Gelu", approximate="tanh")
_unary("leaky_relu", "LeakyRelu", alpha=0.1)
_unary("identity", "Identity")
_unary("dropout_inference", "Dropout")
_unary("cast_f64", "Cast", out=F64, to=TensorProto.DOUBLE)
_unary("cast_i64", "Cast", lambda n: n.normal(E, 10.0), out=I64, to=TensorProto.INT64)
_unary("not", "Not", lambda n: n.rng.random(E) < 0.5, out=BOOL)


@spec("clip", "elementwise-unary", cases=2)
def _(n: Net):
    n.output(n.op("Clip", [n.input("x", E), n.const(-0.5, F32), n.const(0.75, F32)]))


def _binary(name, op, sa, sb, fa=None, fb=None, out=F32, cases=3):
    @spec(name, "elementwise-binary", cases=cases)
    def _(n: Net):
        a = n.input("a", sa, None if fa is None else fa(n, sa))
        b = n.input("b", sb, None if fb is None else fb(n, sb))
        n.output(n.op(op, [a, b]), out)


_away = lambda n, s: np.sign(n.normal(s)) + n.normal(s, 0.1)  # noqa: E731
_pos = lambda n, s: np.abs(n.normal(s)) + 0.5  # noqa: E731
_small_int = lambda n, s: n.rng.integers(-2, 3, s).astype(I64)  # noqa: E731
_bools = lambda n, s: n.rng.random(s) < 0.5  # noqa: E731

_binary("add", "Add", E, E)
_binary("sub_bcast_last", "Sub", E, (4,))
_binary("mul_bcast_both", "Mul", (8, 1, 4), (12, 1))
_binary("div_bcast", "Div", E, (1, 12, 4), fb=_away)
_binary("pow_bcast", "Pow", E, (4,), fa=_pos, fb=lambda n, s: n.normal(s, 0.5))
_binary("equal_int", "Equal", E, (12, 4), _small_int, _small_int, out=BOOL)
_binary("greater_bcast", "Greater", E, (8, 1, 1), out=BOOL)
_binary("less", "Less", (8, 12), (8, 12), out=BOOL, cases=3)
_binary("and", "And", E, (12, 1), _bools, _bools, out=BOOL, cases=3)
_binary("add_int64", "Add", E, (8, 1, 4), _small_int, _small_int, out=I64, cases=2)


@spec("mod_int64_bcast", "elementwise-binary", exact=True, cases=2)
def _(n: Net):
    a = n.input("a", E, n.rng.integers(-50, 50, E).astype(I64))
    divisor = n.rng.integers(1, 8, (12, 4)) * np.where(n.rng.random((12, 4)) < 0.5, -1, 1)
    b = n.input("b", (12, 4), divisor.astype(I64))
    n.output(n.op("Mod", [a, b]), I64)


@spec("mod_fmod_float", "elementwise-binary", cases=2)
def _(n: Net):
    n.output(n.op("Mod", [n.input("a", E), n.input("b", (4,), _away(n, (4,)))], fmod=1))


@spec("max3", "elementwise-binary", cases=3)
def _(n: Net):
    n.output(n.op("Max", [n.input("a", E), n.input("b", (12, 4)), n.input("c", (8, 1, 1))]))


@spec("min2", "elementwise-binary", cases=3)
def _(n: Net):
    n.output(n.op("Min", [n.input("a", (1, 12, 4)), n.input("b", (8, 1, 4))]))


@spec("where_bcast", "elementwise-binary", cases=4)
def _(n: Net):
    c = n.input("c", (12, 1), n.rng.random((12, 1)) < 0.5)
    n.output(n.op("Where", [c, n.input("x", E), n.input("y", (4,))]))


@spec("add_weight", "elementwise-binary", cases=3)
def _(n: Net):
    n.output(n.op("Add", [n.input("x", (4, 16, 32)), n.weight("w", (16, 32))]))


@spec("mul_weight_bcast", "elementwise-binary", cases=3)
def _(n: Net):
    n.output(n.op("Mul", [n.input("x", (8, 1, 32)), n.weight("w", (16, 32))]))


# --------------------------------------------------------------------------
# Contractions
# --------------------------------------------------------------------------


def _matmul(name, sa, sb, wa=False, wb=False, cases=5):
    @spec(name, "matmul", reduce=sa[-1], cases=cases)
    def _(n: Net):
        a = (n.weight if wa else n.input)("a", sa)
        b = (n.weight if wb else n.input)("b", sb)
        n.output(n.op("MatMul", [a, b]))


_matmul("matmul_2d_weight", (8, 16), (16, 32), wb=True)
_matmul("matmul_2d_inputs", (8, 16), (16, 12))
_matmul("matmul_batched", (4, 8, 16), (4, 16, 8))
_matmul("matmul_bcast_batch", (2, 1, 8, 16), (4, 16, 8))
_matmul("matmul_3d_weight", (4, 8, 16), (16, 32), wb=True)
_matmul("matmul_weight_lhs", (32, 16), (4, 16, 8), wa=True)
_matmul("matmul_1d_rhs", (4, 8, 16), (16,), cases=3)


@spec("matmul_f64_weight", "matmul", reduce=16, cases=3)
def _(n: Net):
    a = n.input("a", (8, 16), dtype=F64)
    n.output(n.op("MatMul", [a, n.weight("b", (16, 32), dtype=F64)]), F64)
_matmul("matmul_1d_lhs", (16,), (4, 16, 8), cases=3)


def _gemm(name, sa, sb, sc=None, wb=False, cases=5, **attrs):
    k = sa[0] if attrs.get("transA") else sa[1]

    @spec(name, "gemm", reduce=k, cases=cases)
    def _(n: Net):
        ins = [n.input("a", sa), (n.weight if wb else n.input)("b", sb)]
        if sc is not None:
            ins.append(n.input("c", sc))
        n.output(n.op("Gemm", ins, **attrs))


_gemm("gemm_transb_bias", (8, 16), (32, 16), (32,), wb=True, transB=1)
_gemm("gemm_transa_c2d", (16, 8), (16, 32), (8, 32), transA=1, alpha=0.5, beta=2.0)
_gemm("gemm_nobias_weight", (8, 16), (16, 32), wb=True)
_gemm("gemm_c_column", (8, 16), (16, 12), (8, 1), beta=-1.5)
_gemm("gemm_transab", (16, 8), (12, 16), (1, 12), transA=1, transB=1, alpha=2.0)


def _einsum(name, eq, shapes, weights=(), reduce=1, cases=4):
    @spec(name, "einsum", reduce=reduce, cases=cases)
    def _(n: Net):
        ins = [(n.weight if i in weights else n.input)(f"x{i}", s) for i, s in enumerate(shapes)]
        n.output(n.op("Einsum", ins, equation=eq))


_einsum("einsum_bmm", "bij,bjk->bik", [(4, 8, 16), (4, 16, 8)], reduce=16)
_einsum("einsum_scores", "bhid,bhjd->bhij", [(2, 4, 8, 8), (2, 4, 8, 8)], reduce=8)
_einsum("einsum_weight", "bsh,hd->bsd", [(4, 8, 16), (16, 32)], weights=(1,), reduce=16)
_einsum("einsum_reduce", "bij->bj", [(4, 8, 16)], reduce=8)
_einsum("einsum_outer", "i,j->ij", [(8,), (16,)], cases=3)
_einsum("einsum_transpose", "ijk->kji", [(4, 8, 6)], cases=3)
_einsum("einsum_chain3", "ij,jk,kl->il", [(8, 4), (4, 16), (16, 8)], reduce=64)


# --------------------------------------------------------------------------
# Normalizations and softmax
# --------------------------------------------------------------------------


def _softmax(name, op, axis):
    @spec(name, "softmax", reduce=16, cases=3)
    def _(n: Net):
        n.output(n.op(op, [n.input("x", (4, 8, 16))], axis=axis))


_softmax("softmax_last", "Softmax", -1)
_softmax("softmax_axis1", "Softmax", 1)
_softmax("log_softmax_last", "LogSoftmax", -1)
_softmax("log_softmax_axis0", "LogSoftmax", 0)


@spec("layernorm_last", "normalization", reduce=64)
def _(n: Net):
    x = n.input("x", (4, 8, 64))
    s, b = n.const(n.normal(64, 0.2) + 1), n.const(n.normal(64, 0.2))
    n.output(n.op("LayerNormalization", [x, s, b], axis=-1, epsilon=1e-5))


@spec("layernorm_axis_m2_weights", "normalization", reduce=512)
def _(n: Net):
    x = n.input("x", (4, 8, 64))
    s = n.weight("scale", (8, 64), n.normal((8, 64), 0.2) + 1)
    n.output(n.op("LayerNormalization", [x, s, n.weight("bias", (8, 64))], axis=-2))


@spec("layernorm_input_params", "normalization", reduce=16)
def _(n: Net):
    x = n.input("x", (4, 8, 16))
    n.output(n.op("LayerNormalization", [x, n.input("scale", (16,)), n.input("bias", (16,))]))


@spec("rmsnorm_last", "normalization", reduce=16)
def _(n: Net):
    n.output(n.op("RMSNormalization", [n.input("x", (4, 8, 16)), n.input("scale", (16,))],
                  axis=-1, epsilon=1e-6))


@spec("rmsnorm_axis_m2_weight", "normalization", reduce=512)
def _(n: Net):
    s = n.weight("scale", (8, 64), n.normal((8, 64), 0.2) + 1)
    n.output(n.op("RMSNormalization", [n.input("x", (4, 8, 64)), s], axis=-2))


@spec("batchnorm_const", "normalization", cases=3)
def _(n: Net):
    c = 8
    params = [n.const(n.normal(c, 0.2) + 1), n.const(n.normal(c)), n.const(n.normal(c)),
              n.const(np.abs(n.normal(c)) + 0.5)]
    n.output(n.op("BatchNormalization", [n.input("x", (4, c, 6, 4)), *params], epsilon=1e-3))


@spec("batchnorm_inputs", "normalization")
def _(n: Net):
    c = 8
    params = [n.input("scale", (c,)), n.input("bias", (c,)), n.input("mean", (c,)),
              n.input("var", (c,), np.abs(n.normal(c)) + 0.5)]
    n.output(n.op("BatchNormalization", [n.input("x", (4, c, 6, 4)), *params], epsilon=1e-3))


# ONNX normalization compositions: GroupNormalization (opset 23: per-channel
# scale and bias) reshapes channels into groups; InstanceNormalization
# normalizes each channel over the spatial dims.
@spec("group_norm", "normalization", reduce=4 * 6 * 4)
def _(n: Net):
    c = 8
    y = n.op("GroupNormalization", [n.input("x", (4, c, 6, 4)), n.const(n.normal(c) + 1),
                                    n.const(n.normal(c))], num_groups=2, epsilon=1e-3)
    # onnx's shape inference gives GroupNormalization no shape: a reshape does.
    n.output(n.op("Reshape", [y, n.const([4, c, 6, 4], I64)]))


@spec("instance_norm", "normalization", reduce=6 * 4)
def _(n: Net):
    c = 8
    n.output(n.op("InstanceNormalization", [n.input("x", (4, c, 6, 4)), n.input("scale", (c,)),
                                            n.input("bias", (c,))], epsilon=1e-3))


# --------------------------------------------------------------------------
# Reductions, scans, top-k
# --------------------------------------------------------------------------

R = (8, 12, 16)


def _reduce(name, op, axes, keepdims, cases=3):
    size = math.prod(R[a] for a in axes) if axes is not None else math.prod(R)

    @spec(name, "reduce", reduce=size, cases=cases)
    def _(n: Net):
        ins = [n.input("x", R)] + ([] if axes is None else [n.const(axes, I64)])
        n.output(n.op(op, ins, keepdims=keepdims))


_reduce("reduce_sum_axis1_keep", "ReduceSum", [1], 1)
_reduce("reduce_sum_axis1_drop", "ReduceSum", [1], 0)
_reduce("reduce_sum_axes02_drop", "ReduceSum", [0, 2], 0)
_reduce("reduce_sum_all", "ReduceSum", None, 0)
_reduce("reduce_mean_last_keep", "ReduceMean", [-1], 1)
_reduce("reduce_mean_axes12_drop", "ReduceMean", [1, 2], 0)
_reduce("reduce_max_axis1_drop", "ReduceMax", [1], 0)
_reduce("reduce_max_axis0_keep", "ReduceMax", [0], 1)
# ONNX reduction compositions: ReduceL2, ReduceLogSumExp (its shift is a
# reduce_max over the same axes), ReduceSumSquare; ReduceMin, ReduceProd,
# ArgMax and ArgMin.
_reduce("reduce_l2_axis1_drop", "ReduceL2", [1], 0)
_reduce("reduce_l2_all_keep", "ReduceL2", None, 1)
_reduce("reduce_log_sum_exp_last_keep", "ReduceLogSumExp", [-1], 1)
_reduce("reduce_log_sum_exp_axes01_drop", "ReduceLogSumExp", [0, 1], 0)
_reduce("reduce_sum_square_axis0_drop", "ReduceSumSquare", [0], 0)
_reduce("reduce_min_axes12_keep", "ReduceMin", [1, 2], 1)
_reduce("reduce_prod_axis0_drop", "ReduceProd", [0], 0, cases=2)


@spec("argmax_axis1_drop", "reduce", exact=True, cases=2)
def _(n: Net):
    n.output(n.op("ArgMax", [n.input("x", R)], axis=1, keepdims=0), I64)


@spec("argmin_last_ties", "reduce", exact=True, cases=2)
def _(n: Net):
    x = n.input("x", R, n.rng.integers(-3, 4, R).astype(np.int32))
    n.output(n.op("ArgMin", [x], axis=-1, select_last_index=1), I64)


@spec("reduce_sum_square_int64", "reduce", exact=True, cases=3)
def _(n: Net):
    x = n.input("x", R, n.rng.integers(-1000, 1000, R).astype(I64))
    n.output(n.op("ReduceSumSquare", [x, n.const([1, 2], I64)], keepdims=0), I64)


@spec("reduce_sum_int32_keep", "reduce", exact=True, cases=3)
def _(n: Net):
    x = n.input("x", R, n.rng.integers(-1000, 1000, R).astype(np.int32))
    n.output(n.op("ReduceSum", [x, n.const([2], I64)], keepdims=1), np.int32)


@spec("reduce_sum_int64", "reduce", exact=True, cases=3)
def _(n: Net):
    x = n.input("x", R, n.rng.integers(-1000, 1000, R).astype(I64))
    n.output(n.op("ReduceSum", [x, n.const([0, 1], I64)], keepdims=0), I64)


def _cumsum(name, axis, exclusive, reverse):
    @spec(name, "cumsum", reduce=E[axis], cases=3)
    def _(n: Net):
        n.output(n.op("CumSum", [n.input("x", E), n.const(axis, I64)], exclusive=exclusive,
                      reverse=reverse))


_cumsum("cumsum_axis1", 1, 0, 0)
_cumsum("cumsum_axis0_exclusive", 0, 1, 0)
_cumsum("cumsum_last_reverse", 2, 0, 1)


def _topk(name, axis, k, largest):
    @spec(name, "topk", exact=True, cases=3)
    def _(n: Net):
        # Distinct values: no ties, so the indices are unique.
        x = n.input("x", R, n.rng.permutation(math.prod(R)).astype(F32).reshape(R))
        v, i = n.op("TopK", [x, n.const([k], I64)], outputs=2, axis=axis, largest=largest)
        n.output(v)
        n.output(i, I64)


_topk("topk_last", -1, 3, 1)
_topk("topk_axis1_smallest", 1, 2, 0)


# --------------------------------------------------------------------------
# Shape and data movement (exact)
# --------------------------------------------------------------------------


def _reshape(name, shape_in, shape_out, cases=3):
    @spec(name, "reshape", exact=True, cases=cases)
    def _(n: Net):
        n.output(n.op("Reshape", [n.input("x", shape_in), n.const(shape_out, I64)]))


_reshape("reshape_merge_last", (8, 4, 6), (8, 24))
_reshape("reshape_split_last", (8, 24), (8, 4, 6))
_reshape("reshape_merge_lead", (4, 8, 16), (32, 16))
_reshape("reshape_split_heads", (4, 8, 16), (4, 8, 4, 4))
_reshape("reshape_regroup", (8, 12), (4, 24))
_reshape("reshape_coprime", (6, 16), (16, 6))
_reshape("reshape_infer", (4, 8, 16), (0, -1))
_reshape("reshape_flatten_all", (4, 8, 2), (64,), cases=3)


@spec("reshape_heads_transpose", "reshape", exact=True)
def _(n: Net):
    r = n.op("Reshape", [n.input("x", (2, 8, 32)), n.const([2, 8, 4, 8], I64)])
    n.output(n.op("Transpose", [r], perm=[0, 2, 1, 3]))


def _transpose(name, shape, perm, cases=3):
    @spec(name, "transpose", exact=True, cases=cases)
    def _(n: Net):
        attrs = {} if perm is None else {"perm": perm}
        n.output(n.op("Transpose", [n.input("x", shape)], **attrs))


_transpose("transpose_2d", (8, 16), [1, 0])
_transpose("transpose_rotate", (4, 8, 16), [2, 0, 1])
_transpose("transpose_heads", (2, 8, 4, 8), [0, 2, 1, 3])
_transpose("transpose_default", (4, 8, 6), None)


def _flatten(name, axis):
    @spec(name, "flatten", exact=True, cases=2)
    def _(n: Net):
        n.output(n.op("Flatten", [n.input("x", (4, 8, 2, 4))], axis=axis))


_flatten("flatten_axis1", 1)
_flatten("flatten_axis2", 2)
_flatten("flatten_axis0", 0)


@spec("squeeze", "squeeze", exact=True, cases=3)
def _(n: Net):
    n.output(n.op("Squeeze", [n.input("x", (8, 1, 16, 1)), n.const([1, 3], I64)]))


@spec("squeeze_all_ones", "squeeze", exact=True, cases=2)
def _(n: Net):
    n.output(n.op("Squeeze", [n.input("x", (1, 8, 1, 4))]))


@spec("unsqueeze", "squeeze", exact=True, cases=3)
def _(n: Net):
    n.output(n.op("Unsqueeze", [n.input("x", (8, 16)), n.const([0, 2], I64)]))


def _concat(name, shapes, axis, cases=4):
    @spec(name, "concat", exact=True, cases=cases)
    def _(n: Net):
        n.output(n.op("Concat", [n.input(f"x{i}", s) for i, s in enumerate(shapes)], axis=axis))


_concat("concat_axis0", [(4, 12, 4), (8, 12, 4)], 0)
_concat("concat_axis1_three", [(8, 4, 4), (8, 8, 4), (8, 4, 4)], 1)
_concat("concat_last", [(8, 12, 4), (8, 12, 8)], -1)


@spec("concat_weight", "concat", exact=True)
def _(n: Net):
    n.output(n.op("Concat", [n.input("x", (8, 32)), n.weight("w", (16, 32))], axis=0))


def _split(name, shape, axis, sizes=None, num=None, cases=3):
    @spec(name, "split", exact=True, cases=cases)
    def _(n: Net):
        ins = [n.input("x", shape)] + ([] if sizes is None else [n.const(sizes, I64)])
        attrs = {"axis": axis} | ({} if num is None else {"num_outputs": num})
        outs = n.op("Split", ins, outputs=num or len(sizes), **attrs)
        for o in outs:
            n.output(o)


_split("split_equal", (8, 16, 4), 1, num=2)
_split("split_sizes", (8, 16, 4), 1, sizes=[4, 12])
_split("split_axis0_three", (8, 12, 4), 0, sizes=[2, 4, 2])


def _slice(name, shape, starts, ends, axes, steps=None, cases=3):
    @spec(name, "slice", exact=True, cases=cases)
    def _(n: Net):
        ins = [n.input("x", shape), n.const(starts, I64), n.const(ends, I64), n.const(axes, I64)]
        if steps is not None:
            ins.append(n.const(steps, I64))
        n.output(n.op("Slice", ins))


_slice("slice_partial", (8, 16, 12), [2, 0], [6, 16], [0, 1])
_slice("slice_step2", (8, 16, 12), [1], [12], [2], [2])
_slice("slice_negative_step", (8, 16, 12), [-1, 10], [-100, 1], [0, 2], [-1, -3])
_slice("slice_whole_axes", (8, 16, 12), [0, 0], [8, 2**62], [0, 1])


def _pad(name, pads, mode, value=None, cases=3):
    @spec(name, "pad", exact=True, cases=cases)
    def _(n: Net):
        ins = [n.input("x", E), n.const(pads, I64)]
        if value is not None:
            ins.append(n.const(value, F32))
        n.output(n.op("Pad", ins, mode=mode))


_pad("pad_constant", [0, 1, 2, 0, 3, 1], "constant", 1.5)
_pad("pad_reflect", [1, 2, 0, 2, 1, 0], "reflect")
_pad("pad_edge_last_only", [0, 0, 1, 0, 0, 3], "edge")


@spec("gather_embedding", "gather", exact=True, cases=5)
def _(n: Net):
    table = n.weight("table", (64, 32))
    ids = n.input("ids", (4, 8), n.rng.integers(-64, 64, (4, 8)).astype(I64))
    n.output(n.op("Gather", [table, ids], axis=0))


@spec("gather_axis1", "gather", exact=True)
def _(n: Net):
    idx = n.input("i", (2, 4), n.rng.integers(0, 12, (2, 4)).astype(I64))
    n.output(n.op("Gather", [n.input("x", E), idx], axis=1))


@spec("gather_scalar_index", "gather", exact=True, cases=3)
def _(n: Net):
    n.output(n.op("Gather", [n.input("x", E), n.const(5, I64)], axis=1))


@spec("gather_elements_axis1", "gather", exact=True)
def _(n: Net):
    idx = n.input("i", E, n.rng.integers(-12, 12, E).astype(I64))
    n.output(n.op("GatherElements", [n.input("x", E), idx], axis=1))


@spec("gather_elements_smaller", "gather", exact=True, cases=3)
def _(n: Net):
    idx = n.input("i", (4, 12, 2), n.rng.integers(0, 8, (4, 12, 2)).astype(I64))
    n.output(n.op("GatherElements", [n.input("x", E), idx], axis=0))


@spec("scatter_nd", "gather", exact=True, cases=3)
def _(n: Net):
    ins = [n.input("x", E), n.const([[1], [5]], I64), n.input("u", (2, 12, 4))]
    n.output(n.op("ScatterND", ins))


@spec("expand_bcast", "expand", exact=True, cases=3)
def _(n: Net):
    n.output(n.op("Expand", [n.input("x", (1, 12, 1)), n.const([8, 12, 4], I64)]))


@spec("expand_new_dims", "expand", exact=True, cases=3)
def _(n: Net):
    n.output(n.op("Expand", [n.input("x", (12, 4)), n.const([8, 1, 1], I64)]))


@spec("trilu_upper", "trilu", exact=True, cases=3)
def _(n: Net):
    n.output(n.op("Trilu", [n.input("x", (4, 8, 8))]))


@spec("trilu_lower_k1", "trilu", exact=True, cases=3)
def _(n: Net):
    n.output(n.op("Trilu", [n.input("x", (4, 8, 12)), n.const(1, I64)], upper=0))


@spec("dropout_training", "dropout", exact=True, cases=4)
def _(n: Net):
    y, mask = n.op("Dropout", [n.input("x", (8, 16, 4)), n.const(0.3, F32), n.const(True, BOOL)],
                   outputs=2, seed=1234)
    n.output(y)
    n.output(mask, BOOL)


# --------------------------------------------------------------------------
# Convolution and pooling
# --------------------------------------------------------------------------


@spec("conv_weight", "conv", reduce=72, cases=5)
def _(n: Net):
    w = n.weight("w", (16, 8, 3, 3), scale=0.3)
    n.output(n.op("Conv", [n.input("x", (4, 8, 6, 6)), w, n.input("b", (16,))], pads=[1, 1, 1, 1]))


@spec("conv_group2_strided", "conv", reduce=36)
def _(n: Net):
    w = n.weight("w", (16, 4, 3, 3), scale=0.3)
    n.output(n.op("Conv", [n.input("x", (4, 8, 7, 7)), w], group=2, strides=[2, 2]))


@spec("conv_depthwise", "conv", reduce=9)
def _(n: Net):
    w = n.input("w", (8, 1, 3, 3))
    n.output(n.op("Conv", [n.input("x", (4, 8, 6, 6)), w], group=8, pads=[1, 1, 1, 1]))


@spec("conv1d", "conv", reduce=24)
def _(n: Net):
    w = n.weight("w", (16, 8, 3), scale=0.3)
    n.output(n.op("Conv", [n.input("x", (4, 8, 16)), w], pads=[1, 1]))


@spec("maxpool", "pool", exact=True, cases=3)
def _(n: Net):
    n.output(n.op("MaxPool", [n.input("x", (4, 8, 6, 6))], kernel_shape=[3, 3], strides=[2, 2],
                  pads=[1, 1, 1, 1]))


@spec("averagepool", "pool", reduce=4, cases=3)
def _(n: Net):
    n.output(n.op("AveragePool", [n.input("x", (4, 8, 6, 6))], kernel_shape=[2, 2],
                  strides=[2, 2]))


@spec("global_averagepool", "pool", reduce=36, cases=3)
def _(n: Net):
    n.output(n.op("GlobalAveragePool", [n.input("x", (4, 8, 6, 6))]))


# --------------------------------------------------------------------------
# Attention and rotary embeddings (opset 23)
# --------------------------------------------------------------------------


def _attention(name, sq, sk, sv, mask=None, cases=4, **attrs):
    @spec(name, "attention", reduce=64, cases=cases)
    def _(n: Net):
        ins = [n.input("q", sq), n.input("k", sk), n.input("v", sv)]
        if mask == "float":
            ins.append(n.input("mask", (sq[-2], sk[-2])))
        elif mask == "bool":
            keep = n.rng.random((sq[0], 1, sq[-2], sk[-2])) < 0.7
            keep[..., 0] = True
            ins.append(n.input("mask", keep.shape, keep))
        n.output(n.op("Attention", ins, **attrs))


_attention("attention_mha", (2, 4, 8, 8), (2, 4, 8, 8), (2, 4, 8, 8))
_attention("attention_causal", (2, 4, 8, 8), (2, 4, 8, 8), (2, 4, 8, 8), is_causal=1)
_attention("attention_gqa", (2, 8, 8, 8), (2, 2, 8, 8), (2, 2, 8, 8))
_attention("attention_gqa_causal", (2, 8, 4, 8), (2, 4, 4, 8), (2, 4, 4, 8), is_causal=1,
           cases=4)
_attention("attention_3d", (2, 8, 32), (2, 8, 16), (2, 8, 16), q_num_heads=4, kv_num_heads=2)
_attention("attention_float_mask", (2, 4, 8, 8), (2, 4, 16, 8), (2, 4, 16, 8), "float", cases=4)
_attention("attention_bool_mask", (2, 4, 8, 8), (2, 4, 8, 8), (2, 4, 8, 8), "bool", cases=4)


def _rope(name, shape, pos=True, cases=4, **attrs):
    @spec(name, "rotary", cases=cases)
    def _(n: Net):
        half = 8
        if pos:
            cos, sin = n.weight("cos", (64, half)), n.weight("sin", (64, half))
            ins = [n.input("x", shape), cos, sin,
                   n.input("pos", (2, 8), n.rng.integers(0, 64, (2, 8)).astype(I64))]
        else:
            ins = [n.input("x", shape), n.input("cos", (2, 8, half)), n.input("sin", (2, 8, half))]
        n.output(n.op("RotaryEmbedding", ins, **attrs))


_rope("rope_4d", (2, 4, 8, 16))
_rope("rope_4d_interleaved", (2, 4, 8, 16), interleaved=1)
_rope("rope_3d", (2, 8, 64), num_heads=4)
_rope("rope_no_position_ids", (2, 4, 8, 16), pos=False)


# --------------------------------------------------------------------------
# onnxruntime's com.microsoft contrib ops
# --------------------------------------------------------------------------


@spec("contrib_attention_block", "contrib", reduce=64, cases=6)
def _(n: Net):
    """A GPT-2 block as onnxruntime's optimizer writes it: packed-QKV
    Attention with a raw mask, SkipLayerNormalization, FastGelu. ONNX's
    shape inference does not know the contrib ops: the output's shape is
    given."""
    n.domains["com.microsoft"] = 1
    ms = "com.microsoft"
    x = n.input("x", (2, 8, 32))
    keep = (n.rng.random((2, 8)) < 0.8).astype(np.int32)
    keep[:, 0] = 1
    a = n.op("Attention", [x, n.weight("wqkv", (32, 96), scale=0.2),
                           n.const(n.normal(96, 0.1)), n.input("mask", (2, 8), keep)],
             domain=ms, num_heads=4, unidirectional=1)
    o = n.op("MatMul", [a, n.weight("wo", (32, 32), scale=0.2)])
    h = n.op("SkipLayerNormalization", [o, x, n.const(n.normal(32, 0.2) + 1),
                                        n.const(n.normal(32, 0.2))], domain=ms)
    u = n.op("FastGelu", [n.op("MatMul", [h, n.weight("w1", (32, 64), scale=0.2)]),
                          n.const(n.normal(64, 0.1))], domain=ms)
    d = n.op("MatMul", [u, n.weight("w2", (64, 32), scale=0.125)])
    n.output(n.op("Add", [d, h]), shape=[2, 8, 32])


# --------------------------------------------------------------------------
# Chains
# --------------------------------------------------------------------------


@spec("chain_mlp", "chain", reduce=64, cases=7)
def _(n: Net):
    x = n.input("x", (8, 16))
    h = n.op("Add", [n.op("MatMul", [x, n.weight("w1", (16, 64), scale=0.25)]),
                     n.const(n.normal(64, 0.1))])
    h = n.op("Gelu", [h])
    y = n.op("MatMul", [h, n.weight("w2", (64, 16), scale=0.125)])
    n.output(n.op("Add", [y, n.const(n.normal(16, 0.1))]))


@spec("chain_residual_layernorm", "chain", reduce=32, cases=6)
def _(n: Net):
    x = n.input("x", (4, 8, 32))
    h = n.op("Relu", [n.op("MatMul", [x, n.weight("w", (32, 32), scale=0.2)])])
    s, b = n.const(n.normal(32, 0.2) + 1), n.const(n.normal(32, 0.2))
    n.output(n.op("LayerNormalization", [n.op("Add", [x, h]), s, b], axis=-1))


@spec("chain_attention_block", "chain", reduce=64, cases=7)
def _(n: Net):
    x = n.input("x", (2, 8, 32))

    def heads(name):
        p = n.op("MatMul", [x, n.weight(name, (32, 32), scale=0.2)])
        r = n.op("Reshape", [p, n.const([2, 8, 4, 8], I64)])
        return n.op("Transpose", [r], perm=[0, 2, 1, 3])
    a = n.op("Attention", [heads("wq"), heads("wk"), heads("wv")], is_causal=1)
    a = n.op("Reshape", [n.op("Transpose", [a], perm=[0, 2, 1, 3]), n.const([2, 8, 32], I64)])
    y = n.op("MatMul", [a, n.weight("wo", (32, 32), scale=0.2)])
    n.output(n.op("Add", [x, y]))


@spec("chain_swiglu", "chain", reduce=64, cases=6)
def _(n: Net):
    x = n.input("x", (2, 8, 16))
    g = n.op("MatMul", [x, n.weight("wg", (16, 64), scale=0.25)])
    u = n.op("MatMul", [x, n.weight("wu", (16, 64), scale=0.25)])
    h = n.op("Mul", [n.op("Mul", [g, n.op("Sigmoid", [g])]), u])
    n.output(n.op("MatMul", [h, n.weight("wd", (64, 16), scale=0.125)]))


@spec("chain_embedding_lm", "chain", reduce=64, cases=6)
def _(n: Net):
    ids = n.input("ids", (4, 8), n.rng.integers(0, 64, (4, 8)).astype(I64))
    x = n.op("Gather", [n.weight("table", (64, 32)), ids], axis=0)
    x = n.op("RMSNormalization", [x, n.const(n.normal(32, 0.2) + 1)], axis=-1)
    logits = n.op("MatMul", [x, n.weight("head", (32, 64), scale=0.2)])
    n.output(n.op("Softmax", [logits], axis=-1))


@spec("chain_conv_block", "chain", reduce=72, cases=6)
def _(n: Net):
    x = n.input("x", (4, 8, 6, 6))
    y = n.op("Conv", [x, n.weight("w", (16, 8, 3, 3), scale=0.2)], pads=[1, 1, 1, 1])
    params = [n.const(n.normal(16, 0.2) + 1), n.const(n.normal(16, 0.2)),
              n.const(n.normal(16, 0.2)), n.const(np.abs(n.normal(16)) + 0.5)]
    y = n.op("Relu", [n.op("BatchNormalization", [y, *params])])
    y = n.op("MaxPool", [y], kernel_shape=[2, 2], strides=[2, 2])
    y = n.op("Flatten", [n.op("GlobalAveragePool", [y])], axis=1)
    n.output(n.op("Gemm", [y, n.weight("fc", (32, 16), scale=0.3)], transB=1))


# ONNX data movement and loss ops (compositions of nn ops at import).


@spec("gather_nd_batch_dims", "gather_nd", exact=True, cases=3)
def _(n: Net):
    idx = n.input("i", (8, 3, 1), n.rng.integers(-12, 12, (8, 3, 1)).astype(I64))
    n.output(n.op("GatherND", [n.input("x", E), idx], batch_dims=1))


@spec("gather_nd_tuples", "gather_nd", exact=True, cases=3)
def _(n: Net):
    idx = n.const([[1, 2], [-1, 5], [3, 11]], I64)
    n.output(n.op("GatherND", [n.input("x", E), idx]))


@spec("scatter_elements_add", "scatter_elements", reduce=5, cases=3)
def _(n: Net):
    idx = n.input("i", (8, 5, 4), n.rng.integers(-12, 12, (8, 5, 4)).astype(I64))
    n.output(n.op("ScatterElements", [n.input("x", E), idx, n.input("u", (8, 5, 4))],
                  axis=1, reduction="add"))


@spec("one_hot", "one_hot", exact=True, cases=3)
def _(n: Net):
    idx = n.input("i", (8, 12), n.rng.integers(-5, 5, (8, 12)).astype(I64))
    n.output(n.op("OneHot", [idx, n.const(4, I64), n.input("v", (2,))]))


@spec("tile", "tile", exact=True, cases=3)
def _(n: Net):
    n.output(n.op("Tile", [n.input("x", (4, 6, 4)), n.const([2, 1, 2], I64)]))


@spec("softmax_cross_entropy_loss", "loss", reduce=12, cases=4)
def _(n: Net):
    labels = n.rng.integers(0, 12, (8, 4))
    labels[n.rng.random((8, 4)) < 0.25] = -1
    loss, log_prob = n.op("SoftmaxCrossEntropyLoss",
                          [n.input("x", E), n.input("t", (8, 4), labels.astype(I64)),
                           n.const(n.rng.random(12) + 0.5, F32)],
                          outputs=2, ignore_index=-1)
    n.output(loss)
    n.output(log_prob)


@spec("negative_log_likelihood_loss_none", "loss", reduce=12, cases=3)
def _(n: Net):
    t = n.input("t", (8, 4), n.rng.integers(0, 12, (8, 4)).astype(I64))
    n.output(n.op("NegativeLogLikelihoodLoss", [n.input("x", E), t], reduction="none"))


# --------------------------------------------------------------------------
# Cases and their shardings
# --------------------------------------------------------------------------


def _split_options(dim: int, free: list[tuple[str, int]]) -> list[tuple[str, ...]]:
    opts = [(a,) for a, s in free if dim % s == 0]
    opts += [(a, b) for a, sa in free for b, sb in free if a != b and dim % (sa * sb) == 0]
    return opts


def random_spec(rng: np.random.Generator, shape, mesh: str) -> str:
    """One tensor's SPEC: each dim `_` or unused axes whose product divides it."""
    free = list(MESHES[mesh])
    entries = ["_"] * len(shape)
    for d in rng.permutation(len(shape)):
        opts = _split_options(shape[d], free)
        if not opts or rng.random() < 0.35:
            continue
        pick = opts[rng.integers(len(opts))]
        entries[d] = "+".join(pick)
        free = [(a, s) for a, s in free if a not in pick]
    return ",".join(entries)


def splittable(shapes: dict, mesh: str) -> bool:
    return any(_split_options(d, list(MESHES[mesh])) for s in shapes.values() for d in s)


def random_seeds(case_id: str, shapes: dict, mesh: str) -> list[str]:
    """NAME=SPEC seeds for a case: deterministic in the case id; at least one split."""
    rng = np.random.default_rng(crc(case_id))
    for _ in range(50):
        seeds = []
        for name, shape in shapes.items():
            if len(shapes) > 1 and rng.random() < 0.2:
                continue  # left to propagation
            seeds.append(f"{name}={random_spec(rng, shape, mesh)}")
        if any(any(e != "_" for e in s.split("=", 1)[1].split(",")) for s in seeds):
            return seeds
    return seeds


@dataclass
class Case:
    id: str
    model: str
    mesh: str
    seeds: list[str] = field(default_factory=list)

    @property
    def world(self) -> int:
        return world_size(self.mesh)

    def shard_flags(self) -> list[str]:
        flags = ["--mesh", mesh_flag(self.mesh)]
        for s in self.seeds:
            flags += ["--shard", s]
        return flags


def cases_of(name: str, shapes: dict | None = None) -> list[Case]:
    s = SPECS[name]
    if shapes is None:
        shapes = build(name).shardable
    out = []
    offset = crc("mesh:" + name) % len(MESH_ORDER)
    for k in range(s.cases):
        for j in range(len(MESH_ORDER)):
            mesh = MESH_ORDER[(k + offset + j) % len(MESH_ORDER)]
            if splittable(shapes, mesh):
                break
        case_id = f"{name}-{mesh}-{k}"
        out.append(Case(case_id, name, mesh, random_seeds(case_id, shapes, mesh)))
    return out


def all_cases() -> list[Case]:
    return [c for name in SPECS for c in cases_of(name)]


def find_case(case_id: str) -> Case:
    for name in SPECS:
        if case_id.startswith(name + "-"):
            for c in cases_of(name):
                if c.id == case_id:
                    return c
    raise KeyError(case_id)


def write_case(model: Model, directory: Path) -> tuple[Path, dict[str, Path]]:
    """Writes model.onnx and one .npy per feed; returns their paths."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "model.onnx"
    onnx.save(model.proto, path)
    feeds = {}
    for name, value in model.feeds.items():
        feeds[name] = directory / f"{name}.npy"
        np.save(feeds[name], value)
    return path, feeds


def commands(case: Case, path: Path, feeds: dict[str, Path], shard_opt="shard-opt",
             shard_run="shard-run", out: Path | str = "out.npz", artifact: Path | None = None,
             mpirun: str = "mpirun", target: str = "cpu") -> tuple[list[str], list[str]]:
    """The shard-opt and mpirun command lines of a case."""
    artifact = artifact or Path(path).with_name(f"{case.id}.shard")
    compile_cmd = [str(shard_opt), str(path), *case.shard_flags(), "--target", target,
                   "-o", str(artifact)]
    run_cmd = [mpirun, "-np", str(case.world), "--oversubscribe", str(shard_run),
               str(artifact), "--output", str(out)]
    for name, f in feeds.items():
        run_cmd += ["--input", f"{name}={f}"]
    return compile_cmd, run_cmd


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m shardflow.sharding_cases",
                                 description="Write a differential sharding case and print "
                                             "the commands that reproduce it.")
    ap.add_argument("case", nargs="?", help="a case id, e.g. matmul_2d_weight-dp2tp2-0")
    ap.add_argument("--out", default="/tmp/shardflow-case", help="folder for model and feeds")
    ap.add_argument("--list", action="store_true", help="list every case with its seeds")
    ap.add_argument("--target", choices=["cpu", "cuda"], default="cpu",
                    help="compile for the CPU (default) or CUDA; a CUDA run without a GPU "
                         "goes through the stand-in libraries (tools/cuda-standin)")
    args = ap.parse_args(argv)
    if args.list:
        for c in all_cases():
            print(c.id, " ".join(c.shard_flags()))
        return 0
    if not args.case:
        ap.error("give a case id or --list")
    try:
        case = find_case(args.case)
    except KeyError:
        ap.error(f"no case '{args.case}' (--list shows them)")
    path, feeds = write_case(build(case.model), Path(args.out))
    from shardflow.toolchain import build_dir
    bin_dir = build_dir() / "bin"
    compile_cmd, run_cmd = commands(case, path, feeds, bin_dir / "shard-opt",
                                    bin_dir / "shard-run", Path(args.out) / "out.npz",
                                    target=args.target)
    print(" ".join(compile_cmd))
    if args.target == "cuda":
        run_cmd = [f"LD_LIBRARY_PATH={build_dir() / 'cuda-standin'}",
                   f"SHARDFLOW_STANDIN_GPUS={case.world}", "SHARDFLOW_STANDIN_SM=86", *run_cmd]
    print(" ".join(run_cmd))
    return 0


if __name__ == "__main__":
    sys.exit(main())
