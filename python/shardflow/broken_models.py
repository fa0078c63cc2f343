"""A corpus of broken and hostile ONNX models for the Shardflow importer.

Each case is a model file that the importer must reject with one clear
``<path>: error: <reason>`` line and exit status 1: never a crash, a hang or
an abort. The cases start from valid models (``models.mlp``, ``models.gpt2``
and small hand-made graphs) and damage them: truncated and bit-flipped
files, non-ONNX bytes, ONNX text with syntax errors, bad element types and
dimensions, absurd sizes, inconsistent payloads, cycles and dangling edges,
bad attributes, hostile external-data references, unsupported opsets,
domains and ops, and ops whose constant folding must not crash.

``write_corpus(out_dir)`` writes every case (plus the side files some of
them need, such as external data) and ``manifest.json``, a list of
``{"file": ..., "expect": ...}`` where ``expect`` is a substring of the
error the importer must print. The models are written without the ONNX
checker, which rejects many of them on purpose.

Command line (with ``PYTHONPATH=python``)::

    python -m shardflow.broken_models /tmp/broken
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from shardflow import models

_F32 = TensorProto.FLOAT
_I64 = TensorProto.INT64
_INT64_MAX = 2**63 - 1


@dataclass
class Case:
    """One corpus entry: ``make()`` returns the model's bytes; ``side_files``
    maps names (next to the model) to the bytes of extra files it needs."""

    file: str
    expect: str
    make: Callable[[], bytes]
    side_files: dict[str, bytes] = field(default_factory=dict)


# --------------------------------------------------------------------------
# Building blocks.
# --------------------------------------------------------------------------


def _vi(name: str, elem: int, shape: Sequence[int | str] | None) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, None if shape is None else list(shape))


def _model(nodes: Sequence[onnx.NodeProto], inputs: Sequence[onnx.ValueInfoProto],
           outputs: Sequence[onnx.ValueInfoProto],
           initializers: Sequence[TensorProto] = (), opset: int = models.OPSET,
           ir_version: int = models.IR_VERSION,
           extra_opsets: Sequence[tuple[str, int]] = ()) -> onnx.ModelProto:
    graph = helper.make_graph(list(nodes), "broken", list(inputs), list(outputs),
                              initializer=list(initializers))
    opsets = [helper.make_opsetid("", opset)]
    opsets += [helper.make_opsetid(d, v) for d, v in extra_opsets]
    return helper.make_model(graph, opset_imports=opsets, ir_version=ir_version,
                             producer_name="shardflow.broken_models")


def _bytes(model: onnx.ModelProto) -> bytes:
    # SerializeToString never runs the checker.
    return model.SerializeToString()


def _unary_model(op: str = "Relu", shape: Sequence[int] = (2, 3), **attrs) -> onnx.ModelProto:
    """x -> op -> y, all float32 of ``shape``."""
    return _model([helper.make_node(op, ["x"], ["y"], name=op.lower(), **attrs)],
                  [_vi("x", _F32, shape)], [_vi("y", _F32, None)])


def _const(name: str, value, dtype=np.int64) -> onnx.NodeProto:
    """A Constant node producing ``name``."""
    arr = np.asarray(value, dtype=dtype)
    return helper.make_node("Constant", [], [name], name=f"const_{name}",
                            value=numpy_helper.from_array(arr, "value"))


def _weight_model(tensor: TensorProto, shape: Sequence[int] = (2, 2)) -> onnx.ModelProto:
    """y = x + w, with ``tensor`` as the initializer w."""
    return _model([helper.make_node("Add", ["x", tensor.name], ["y"], name="add")],
                  [_vi("x", _F32, shape)], [_vi("y", _F32, None)], [tensor])


def _raw_tensor(name: str, elem: int, dims: Sequence[int], raw: bytes) -> TensorProto:
    t = TensorProto()
    t.name = name
    t.data_type = elem
    t.dims.extend(dims)
    t.raw_data = raw
    return t


def _external_tensor(name: str, dims: Sequence[int], location: str, offset: int | None = None,
                     length: int | None = None) -> TensorProto:
    t = TensorProto()
    t.name = name
    t.data_type = _F32
    t.dims.extend(dims)
    t.data_location = TensorProto.EXTERNAL
    for key, value in (("location", location), ("offset", offset), ("length", length)):
        if value is not None:
            entry = t.external_data.add()
            entry.key = key
            entry.value = str(value)
    return t


def _mlp_bytes() -> bytes:
    return _bytes(models.mlp(layers=2, hidden=32, batch=2, in_features=16, classes=10))


def _gpt2_bytes() -> bytes:
    return _bytes(models.gpt2(layers=1, hidden=32, heads=2, seq=4, batch=1, vocab=32))


def _truncated(make: Callable[[], bytes], fraction: float | None = None,
               keep: int | None = None) -> Callable[[], bytes]:
    def cut() -> bytes:
        data = make()
        n = keep if keep is not None else int(len(data) * fraction)
        return data[:n] if n >= 0 else data[:len(data) + n]
    return cut


def _flipped(make: Callable[[], bytes], seed: int, flips: int) -> Callable[[], bytes]:
    """``flips`` random bytes XORed with random non-zero masks (seeded)."""
    def flip() -> bytes:
        data = bytearray(make())
        rng = random.Random(seed)
        for _ in range(flips):
            i = rng.randrange(len(data))
            data[i] ^= rng.randrange(1, 256)
        return bytes(data)
    return flip


_TEXT_HEADER = '<ir_version: 10, opset_import: ["" : 23]>\n'


def _text(body: str) -> Callable[[], bytes]:
    return lambda: (_TEXT_HEADER + body).encode()


def _text_nested_graphs(depth: int) -> Callable[[], bytes]:
    """If nodes nested ``depth`` deep through then_branch graphs: libonnx's
    text parser recursed once per level until the stack overflowed."""
    level = "y = If(c) <then_branch = g () => (float[2] y) {"
    body = ("main (bool c, float[2] x) => (float[2] y) {\n" + level * depth +
            "y = Relu(x)" + "}>" * depth + "\n}\n")
    return _text(body)


# --------------------------------------------------------------------------
# Hand-made broken graphs.
# --------------------------------------------------------------------------


def _cyclic() -> bytes:
    nodes = [helper.make_node("Add", ["x", "b"], ["a"], name="first"),
             helper.make_node("Relu", ["a"], ["b"], name="second"),
             helper.make_node("Identity", ["b"], ["y"], name="out")]
    return _bytes(_model(nodes, [_vi("x", _F32, [2])], [_vi("y", _F32, [2])]))


def _self_loop() -> bytes:
    nodes = [helper.make_node("Add", ["x", "y"], ["y"], name="loop")]
    return _bytes(_model(nodes, [_vi("x", _F32, [2])], [_vi("y", _F32, [2])]))


def _dangling() -> bytes:
    nodes = [helper.make_node("Add", ["x", "nowhere"], ["y"], name="add")]
    return _bytes(_model(nodes, [_vi("x", _F32, [2])], [_vi("y", _F32, [2])]))


def _missing_initializer() -> bytes:
    """The MLP with its first weight removed from the initializers."""
    model = models.mlp(layers=1, hidden=8, batch=2, in_features=4, classes=3)
    del model.graph.initializer[0]
    return _bytes(model)


def _duplicate_producer() -> bytes:
    nodes = [helper.make_node("Relu", ["x"], ["y"], name="relu"),
             helper.make_node("Neg", ["x"], ["y"], name="neg")]
    return _bytes(_model(nodes, [_vi("x", _F32, [2])], [_vi("y", _F32, [2])]))


def _duplicate_graph_output() -> bytes:
    nodes = [helper.make_node("Relu", ["x"], ["y"], name="relu")]
    return _bytes(_model(nodes, [_vi("x", _F32, [2])],
                         [_vi("y", _F32, [2]), _vi("y", _F32, [2])]))


def _duplicate_input() -> bytes:
    nodes = [helper.make_node("Relu", ["x"], ["y"], name="relu")]
    return _bytes(_model(nodes, [_vi("x", _F32, [2]), _vi("x", _F32, [2])],
                         [_vi("y", _F32, [2])]))


def _duplicate_initializer() -> bytes:
    w = numpy_helper.from_array(np.ones((2, 2), np.float32), "w")
    model = _weight_model(w)
    model.graph.initializer.append(w)
    return _bytes(model)


def _redefines_input() -> bytes:
    nodes = [helper.make_node("Relu", ["x"], ["x"], name="relu"),
             helper.make_node("Identity", ["x"], ["y"], name="id")]
    return _bytes(_model(nodes, [_vi("x", _F32, [2])], [_vi("y", _F32, [2])]))


def _output_not_produced() -> bytes:
    nodes = [helper.make_node("Relu", ["x"], ["y"], name="relu")]
    return _bytes(_model(nodes, [_vi("x", _F32, [2])],
                         [_vi("y", _F32, [2]), _vi("ghost", _F32, [2])]))


def _node_without_outputs() -> bytes:
    nodes = [helper.make_node("Relu", ["x"], [], name="relu"),
             helper.make_node("Identity", ["x"], ["y"], name="id")]
    return _bytes(_model(nodes, [_vi("x", _F32, [2])], [_vi("y", _F32, [2])]))


def _too_few_inputs() -> bytes:
    nodes = [helper.make_node("Gemm", ["x"], ["y"], name="gemm")]
    return _bytes(_model(nodes, [_vi("x", _F32, [2, 2])], [_vi("y", _F32, None)]))


def _empty_required_input() -> bytes:
    nodes = [helper.make_node("MatMul", ["x", ""], ["y"], name="matmul")]
    return _bytes(_model(nodes, [_vi("x", _F32, [2, 2])], [_vi("y", _F32, None)]))


def _input_type(elem: int) -> Callable[[], bytes]:
    return lambda: _bytes(_model([helper.make_node("Identity", ["x"], ["y"], name="id")],
                                 [_vi("x", elem, [2])], [_vi("y", elem, [2])]))


def _initializer_type(elem: int) -> bytes:
    return _bytes(_weight_model(_raw_tensor("w", elem, [2, 2], b"\0" * 16)))


def _negative_dim_initializer() -> bytes:
    return _bytes(_weight_model(_raw_tensor("w", _F32, [2, -2], b"")))


def _negative_dim_input() -> bytes:
    return _bytes(_model([helper.make_node("Relu", ["x"], ["y"], name="relu")],
                         [_vi("x", _F32, [2, -3])], [_vi("y", _F32, None)]))


def _huge_initializer() -> bytes:
    return _bytes(_weight_model(_raw_tensor("w", _F32, [1 << 21, 1 << 21], b"\0" * 16)))


def _huge_input() -> bytes:
    return _bytes(_model([helper.make_node("Relu", ["x"], ["y"], name="relu")],
                         [_vi("x", _F32, [1 << 30, 1 << 30, 1 << 30])],
                         [_vi("y", _F32, None)]))


def _reshape_to_rank(rank: int) -> bytes:
    """A Reshape to a rank-``rank`` shape of ones: the printed type's text
    grows with the rank and MLIR parses it back in time quadratic in it."""
    nodes = [_const("shape", np.ones(rank, np.int64)),
             helper.make_node("Reshape", ["x", "shape"], ["y"], name="reshape")]
    return _bytes(_model(nodes, [_vi("x", _F32, [1])], [_vi("y", _F32, None)]))


def _high_rank_input() -> bytes:
    return _bytes(_model([helper.make_node("Relu", ["x"], ["y"], name="relu")],
                         [_vi("x", _F32, [1] * 65)], [_vi("y", _F32, None)]))


def _high_rank_initializer() -> bytes:
    return _bytes(_weight_model(_raw_tensor("w", _F32, [1] * 65, b"\0" * 4), [1]))


def _raw_data_mismatch(dims: Sequence[int], nbytes: int) -> Callable[[], bytes]:
    return lambda: _bytes(_weight_model(_raw_tensor("w", _F32, dims, b"\0" * nbytes), dims))


def _float_data_mismatch(dims: Sequence[int], count: int) -> Callable[[], bytes]:
    def make() -> bytes:
        t = TensorProto()
        t.name = "w"
        t.data_type = _F32
        t.dims.extend(dims)
        t.float_data.extend([1.0] * count)
        return _bytes(_weight_model(t, dims))
    return make


def _nameless_initializer() -> bytes:
    model = _weight_model(numpy_helper.from_array(np.ones((2, 2), np.float32), "w"))
    extra = numpy_helper.from_array(np.ones((2,), np.float32), "")
    model.graph.initializer.append(extra)
    return _bytes(model)


def _huge_constant_without_data() -> bytes:
    """A Constant whose tensor claims 2^38 floats and holds none."""
    t = TensorProto()
    t.name = "value"
    t.data_type = _F32
    t.dims.extend([1 << 19, 1 << 19])
    nodes = [helper.make_node("Constant", [], ["c"], name="const", value=t),
             helper.make_node("Add", ["x", "c"], ["y"], name="add")]
    return _bytes(_model(nodes, [_vi("x", _F32, [2])], [_vi("y", _F32, None)]))


def _absurd_constant() -> bytes:
    t = TensorProto()
    t.name = "value"
    t.data_type = _F32
    t.dims.extend([1 << 30, 1 << 30])
    nodes = [helper.make_node("Constant", [], ["c"], name="const", value=t),
             helper.make_node("Add", ["x", "c"], ["y"], name="add")]
    return _bytes(_model(nodes, [_vi("x", _F32, [2])], [_vi("y", _F32, None)]))


def _absurd_constant_of_shape() -> bytes:
    nodes = [_const("shape", [1 << 30, 1 << 30]),
             helper.make_node("ConstantOfShape", ["shape"], ["c"], name="cos"),
             helper.make_node("Add", ["x", "c"], ["y"], name="add")]
    return _bytes(_model(nodes, [_vi("x", _F32, [2])], [_vi("y", _F32, None)]))


def _string_constant() -> bytes:
    t = helper.make_tensor("value", TensorProto.STRING, [1], [b"hi"])
    nodes = [helper.make_node("Constant", [], ["y"], name="const", value=t)]
    return _bytes(_model(nodes, [], [_vi("y", TensorProto.STRING, [1])]))


def _cast_to(to: int) -> Callable[[], bytes]:
    return lambda: _bytes(_unary_model("Cast", to=to))


def _axis_as_float() -> bytes:
    node = helper.make_node("Softmax", ["x"], ["y"], name="softmax")
    node.attribute.append(helper.make_attribute("axis", 1.0))
    return _bytes(_model([node], [_vi("x", _F32, [2, 3])], [_vi("y", _F32, None)]))


def _perm_as_int() -> bytes:
    node = helper.make_node("Transpose", ["x"], ["y"], name="transpose")
    node.attribute.append(helper.make_attribute("perm", 1))
    return _bytes(_model([node], [_vi("x", _F32, [2, 3])], [_vi("y", _F32, None)]))


def _concat_no_inputs() -> bytes:
    nodes = [helper.make_node("Concat", [], ["c"], name="concat", axis=0),
             helper.make_node("Add", ["x", "c"], ["y"], name="add")]
    return _bytes(_model(nodes, [_vi("x", _F32, [2])], [_vi("y", _F32, None)]))


def _split_num_outputs() -> bytes:
    nodes = [helper.make_node("Split", ["x"], ["a", "b"], name="split", axis=0, num_outputs=3)]
    return _bytes(_model(nodes, [_vi("x", _F32, [6])],
                         [_vi("a", _F32, None), _vi("b", _F32, None)]))


def _split_sizes() -> bytes:
    nodes = [_const("sizes", [2, 2]),
             helper.make_node("Split", ["x", "sizes"], ["a", "b"], name="split", axis=0)]
    return _bytes(_model(nodes, [_vi("x", _F32, [6])],
                         [_vi("a", _F32, None), _vi("b", _F32, None)]))


def _einsum(equation: str) -> Callable[[], bytes]:
    def make() -> bytes:
        nodes = [helper.make_node("Einsum", ["a", "b"], ["y"], name="einsum",
                                  equation=equation)]
        return _bytes(_model(nodes, [_vi("a", _F32, [2, 3]), _vi("b", _F32, [3, 4])],
                             [_vi("y", _F32, None)]))
    return make


def _if_subgraph() -> bytes:
    branch = helper.make_graph([helper.make_node("Relu", ["x"], ["r"], name="inner")],
                               "branch", [], [_vi("r", _F32, [2])])
    nodes = [helper.make_node("If", ["cond"], ["y"], name="if",
                              then_branch=branch, else_branch=branch)]
    return _bytes(_model(nodes, [_vi("cond", TensorProto.BOOL, []), _vi("x", _F32, [2])],
                         [_vi("y", _F32, [2])]))


def _other_domain() -> bytes:
    nodes = [helper.make_node("FusedGemm", ["x", "x"], ["y"], name="fused",
                              domain="com.microsoft")]
    return _bytes(_model(nodes, [_vi("x", _F32, [2, 2])], [_vi("y", _F32, None)],
                         extra_opsets=[("com.microsoft", 1)]))


def _unknown_op() -> bytes:
    return _bytes(_unary_model("NoSuchOp"))


def _opset(version: int, ir_version: int) -> Callable[[], bytes]:
    return lambda: _bytes(_model([helper.make_node("Relu", ["x"], ["y"], name="relu")],
                                 [_vi("x", _F32, [2])], [_vi("y", _F32, [2])],
                                 opset=version, ir_version=ir_version))


def _no_default_opset() -> bytes:
    model = _unary_model()
    model.opset_import[0].domain = "com.example"
    return _bytes(model)


def _no_graph() -> bytes:
    model = onnx.ModelProto()
    model.ir_version = models.IR_VERSION
    model.opset_import.add().version = models.OPSET
    return _bytes(model)


def _sequence_input() -> bytes:
    seq = helper.make_tensor_sequence_value_info("xs", _F32, [2])
    nodes = [helper.make_node("SequenceAt", ["xs", "i"], ["y"], name="at")]
    return _bytes(_model(nodes, [seq, _vi("i", _I64, [])], [_vi("y", _F32, None)]))


def _unshaped_input() -> bytes:
    return _bytes(_model([helper.make_node("Relu", ["x"], ["y"], name="relu")],
                         [_vi("x", _F32, None)], [_vi("y", _F32, None)]))


def _reshape_6_to_4() -> bytes:
    nodes = [_const("shape", [4]),
             helper.make_node("Reshape", ["x", "shape"], ["y"], name="reshape")]
    return _bytes(_model(nodes, [_vi("x", _F32, [2, 3])], [_vi("y", _F32, None)]))


def _gather_out_of_range(index: int) -> Callable[[], bytes]:
    """The exporter pattern Shape -> Gather -> Unsqueeze -> Reshape with a
    constant index outside the shape vector: folding must not crash."""
    def make() -> bytes:
        nodes = [helper.make_node("Shape", ["x"], ["s"], name="shape"),
                 _const("idx", index),
                 helper.make_node("Gather", ["s", "idx"], ["d"], name="gather", axis=0),
                 _const("axes", [0]),
                 helper.make_node("Unsqueeze", ["d", "axes"], ["d1"], name="unsqueeze"),
                 helper.make_node("Reshape", ["x", "d1"], ["y"], name="reshape")]
        return _bytes(_model(nodes, [_vi("x", _F32, [2, 3])], [_vi("y", _F32, None)]))
    return make


def _slice_huge_step() -> bytes:
    """A Slice of a constant with INT64_MAX ends and steps (overflow-prone
    arithmetic in inference and folding); the folded result then makes a
    Reshape to [2] of a 6-element tensor."""
    nodes = [_const("data", [2, 3, 4, 5]),
             _const("starts", [0]), _const("ends", [_INT64_MAX]), _const("steps", [_INT64_MAX]),
             helper.make_node("Slice", ["data", "starts", "ends", "starts", "steps"], ["s"],
                              name="slice"),
             helper.make_node("Reshape", ["x", "s"], ["y"], name="reshape")]
    return _bytes(_model(nodes, [_vi("x", _F32, [6])], [_vi("y", _F32, None)]))


def _slice_negative_huge_step() -> bytes:
    nodes = [_const("data", [2, 3, 4, 5]),
             _const("starts", [-1]), _const("ends", [-(2**63)]), _const("axes", [0]),
             _const("steps", [-(2**63)]),
             helper.make_node("Slice", ["data", "starts", "ends", "axes", "steps"], ["s"],
                              name="slice"),
             helper.make_node("Reshape", ["x", "s"], ["y"], name="reshape")]
    return _bytes(_model(nodes, [_vi("x", _F32, [6])], [_vi("y", _F32, None)]))


def _slice_zero_step() -> bytes:
    nodes = [_const("starts", [0]), _const("ends", [2]), _const("axes", [0]),
             _const("steps", [0]),
             helper.make_node("Slice", ["x", "starts", "ends", "axes", "steps"], ["y"],
                              name="slice")]
    return _bytes(_model(nodes, [_vi("x", _F32, [6])], [_vi("y", _F32, None)]))


def _pad_negative() -> bytes:
    nodes = [_const("pads", [-(2**62), 0]),
             helper.make_node("Pad", ["x", "pads"], ["y"], name="pad")]
    return _bytes(_model(nodes, [_vi("x", _F32, [6])], [_vi("y", _F32, None)]))


def _range_zero_delta() -> bytes:
    nodes = [_const("start", 0), _const("limit", 10), _const("delta", 0),
             helper.make_node("Range", ["start", "limit", "delta"], ["y"], name="range")]
    return _bytes(_model(nodes, [], [_vi("y", _I64, None)]))


def _topk_too_large() -> bytes:
    nodes = [_const("k", [10]),
             helper.make_node("TopK", ["x", "k"], ["v", "i"], name="topk")]
    return _bytes(_model(nodes, [_vi("x", _F32, [2, 3])],
                         [_vi("v", _F32, None), _vi("i", _I64, None)]))


def _topk_nan_k() -> bytes:
    nodes = [_const("k", [float("nan")], np.float32),
             helper.make_node("TopK", ["x", "k"], ["v", "i"], name="topk")]
    return _bytes(_model(nodes, [_vi("x", _F32, [2, 3])],
                         [_vi("v", _F32, None), _vi("i", _I64, None)]))


def _gather_scalar() -> bytes:
    nodes = [_const("idx", 0),
             helper.make_node("Gather", ["x", "idx"], ["y"], name="gather")]
    return _bytes(_model(nodes, [_vi("x", _F32, [])], [_vi("y", _F32, None)]))


def _rotary_scalar() -> bytes:
    nodes = [helper.make_node("RotaryEmbedding", ["x", "c", "s"], ["y"], name="rope")]
    return _bytes(_model(nodes, [_vi("x", _F32, []), _vi("c", _F32, [1, 1]),
                                 _vi("s", _F32, [1, 1])], [_vi("y", _F32, None)]))


def _matmul_mismatch() -> bytes:
    nodes = [helper.make_node("MatMul", ["a", "b"], ["y"], name="matmul")]
    return _bytes(_model(nodes, [_vi("a", _F32, [2, 3]), _vi("b", _F32, [4, 5])],
                         [_vi("y", _F32, None)]))


def _output_declared_shape() -> bytes:
    return _bytes(_model([helper.make_node("Relu", ["x"], ["y"], name="relu")],
                         [_vi("x", _F32, [2, 3])], [_vi("y", _F32, [3, 2])]))


def _output_declared_type() -> bytes:
    return _bytes(_model([helper.make_node("Relu", ["x"], ["y"], name="relu")],
                         [_vi("x", _F32, [2, 3])], [_vi("y", _I64, [2, 3])]))


def _conv_kernel_mismatch() -> bytes:
    w = numpy_helper.from_array(np.zeros((4, 3, 3, 3), np.float32), "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["y"], name="conv", kernel_shape=[5, 5])]
    return _bytes(_model(nodes, [_vi("x", _F32, [1, 3, 8, 8])], [_vi("y", _F32, None)], [w]))


def _nonconstant_axes() -> bytes:
    nodes = [helper.make_node("Unsqueeze", ["x", "axes"], ["y"], name="unsqueeze")]
    return _bytes(_model(nodes, [_vi("x", _F32, [2]), _vi("axes", _I64, [1])],
                         [_vi("y", _F32, None)]))


# External data: the model is written with a side file "weights.bin" of 16
# bytes (four floats); the initializer w is [2, 2] float32 (16 bytes).

_SIDE = {"weights.bin": np.arange(4, dtype=np.float32).tobytes()}


def _external(location: str, offset: int | None = None, length: int | None = None,
              dims: Sequence[int] = (2, 2)) -> Callable[[], bytes]:
    return lambda: _bytes(_weight_model(_external_tensor("w", dims, location, offset, length),
                                        dims))


# --------------------------------------------------------------------------
# The corpus.
# --------------------------------------------------------------------------

_PARSE_FAILED = "not a valid ONNX model"


def cases() -> list[Case]:
    """Every corpus case, in a stable order."""
    c: list[Case] = []

    def add(file: str, expect: str, make: Callable[[], bytes],
            side_files: dict[str, bytes] | None = None) -> None:
        c.append(Case(file, expect, make, dict(side_files or {})))

    # -- damaged files
    add("empty.onnx", "model has no graph", lambda: b"")
    add("not_onnx_png.onnx", _PARSE_FAILED,
        lambda: b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR\0\0\0\x01\0\0\0\x01\x08\x06\0\0\0")
    add("not_onnx_zeros.onnx", _PARSE_FAILED, lambda: b"\0" * 64)
    add("not_onnx_ff.onnx", _PARSE_FAILED, lambda: b"\xff" * 64)
    add("mlp_truncated_1byte.onnx", _PARSE_FAILED, _truncated(_mlp_bytes, keep=1))
    add("mlp_truncated_10pct.onnx", _PARSE_FAILED, _truncated(_mlp_bytes, 0.10))
    add("mlp_truncated_50pct.onnx", _PARSE_FAILED, _truncated(_mlp_bytes, 0.50))
    add("mlp_truncated_90pct.onnx", _PARSE_FAILED, _truncated(_mlp_bytes, 0.90))
    add("mlp_truncated_last_byte.onnx", _PARSE_FAILED, _truncated(_mlp_bytes, keep=-1))
    add("gpt2_truncated_33pct.onnx", _PARSE_FAILED, _truncated(_gpt2_bytes, 0.33))
    add("gpt2_truncated_75pct.onnx", _PARSE_FAILED, _truncated(_gpt2_bytes, 0.75))
    # Seeded flips; the seeds are chosen so that each damages the structure.
    add("mlp_flips_seed1.onnx", _PARSE_FAILED, _flipped(_mlp_bytes, 1, 64))
    add("mlp_flips_seed2.onnx", _PARSE_FAILED, _flipped(_mlp_bytes, 2, 64))
    add("gpt2_flips_seed3.onnx", _PARSE_FAILED, _flipped(_gpt2_bytes, 3, 64))
    add("gpt2_flips_seed4.onnx", _PARSE_FAILED, _flipped(_gpt2_bytes, 4, 64))

    # -- ONNX text with syntax errors
    add("text_unclosed_paren.onnxtxt", "cannot parse ONNX text",
        _text("g (float[2] x => (float[2] y) {\n  y = Relu(x)\n}\n"))
    add("text_missing_brace.onnxtxt", "cannot parse ONNX text",
        _text("g (float[2] x) => (float[2] y) {\n  y = Relu(x)\n"))
    add("text_bad_type.onnxtxt", "cannot parse ONNX text",
        _text("g (floaty[2] x) => (float[2] y) {\n  y = Relu(x)\n}\n"))
    add("text_bad_attribute.onnxtxt", "cannot parse ONNX text",
        _text("g (float[2] x) => (float[2] y) {\n  y = Softmax <axis = > (x)\n}\n"))
    add("text_header_only.onnxtxt", "cannot parse ONNX text", _text(""))
    add("text_nested_graphs_5000.onnxtxt",
        "brackets nest 5002 levels deep; at most 100 are supported", _text_nested_graphs(5000))
    add("text_int64_overflow.onnxtxt", "a number is malformed or out of range",
        _text("main (float[2] x) => (float[2] y) <int64[1] w = {99999999999999999999999}> {\n"
              "  y = Relu(x)\n}\n"))
    add("text_float_overflow.onnxtxt", "a number is malformed or out of range",
        _text("main (float[2] x) => (float[2] y) {\n  y = LeakyRelu <alpha = 1e999999> (x)\n}\n"))
    add("text_long_line.onnxtxt", "Expected character = not found",
        _text("main (float[2] x) => (float[2] y) { y = Relu(x) " + "z = Relu(x) " * 5000 +
              "q q q }\n"))

    # -- element types
    add("input_string.onnx", "unsupported element type STRING", _input_type(TensorProto.STRING))
    add("input_complex64.onnx", "unsupported element type COMPLEX64",
        _input_type(TensorProto.COMPLEX64))
    add("input_undefined_type.onnx", "unsupported element type unknown (99)", _input_type(99))
    add("initializer_undefined_type.onnx", "unsupported element type unknown (1234)",
        lambda: _initializer_type(1234))
    add("initializer_complex128.onnx", "unsupported element type COMPLEX128",
        lambda: _initializer_type(TensorProto.COMPLEX128))
    add("cast_to_undefined_type.onnx", "unsupported element type unknown (77)", _cast_to(77))
    add("cast_to_string.onnx", "unsupported element type STRING", _cast_to(TensorProto.STRING))
    add("constant_string.onnx", "unsupported element type STRING", _string_constant)

    # -- dimensions and sizes
    add("initializer_negative_dim.onnx", "negative dimension -2", _negative_dim_initializer)
    add("input_negative_dim.onnx", "negative dimension -3", _negative_dim_input)
    add("initializer_absurd_size.onnx", "is absurdly large", _huge_initializer)
    add("input_absurd_size.onnx", "is absurdly large", _huge_input)
    add("constant_absurd_size.onnx", "is absurdly large", _absurd_constant)
    add("constant_of_shape_absurd_size.onnx", "is absurdly large", _absurd_constant_of_shape)
    add("reshape_rank_100000.onnx", "result of rank 100000 exceeds the supported maximum rank 64",
        lambda: _reshape_to_rank(100000))
    add("input_rank_65.onnx", "graph input 'x' has rank 65, above the supported maximum rank 64",
        _high_rank_input)
    add("initializer_rank_65.onnx", "initializer 'w' has rank 65, above the supported maximum",
        _high_rank_initializer)
    add("constant_huge_without_data.onnx", "holds 0 values for a shape of 274877906944 elements",
        _huge_constant_without_data)
    add("raw_data_too_short.onnx", "has 12 bytes of raw data; its type needs 16",
        _raw_data_mismatch([2, 2], 12))
    add("raw_data_too_long_weight.onnx", "has 4100 bytes of data; its type needs 4096",
        _raw_data_mismatch([32, 32], 4100))
    add("float_data_count.onnx", "holds 3 values for a shape of 4 elements",
        _float_data_mismatch([2, 2], 3))
    add("float_data_count_weight.onnx", "has 4092 bytes of data; its type needs 4096",
        _float_data_mismatch([32, 32], 1023))

    # -- graph structure
    add("cycle.onnx", "the graph has a cycle", _cyclic)
    add("self_loop.onnx", "the graph has a cycle through node 'loop'", _self_loop)
    add("dangling_input.onnx", "input 'nowhere' is not produced by any node", _dangling)
    add("missing_initializer.onnx", "is not produced by any node, graph input or initializer",
        _missing_initializer)
    add("two_producers.onnx", "value 'y' is produced by two nodes", _duplicate_producer)
    add("duplicate_graph_output.onnx", "graph output 'y' is listed twice",
        _duplicate_graph_output)
    add("duplicate_graph_input.onnx", "graph input 'x' is listed twice", _duplicate_input)
    add("duplicate_initializer.onnx", "initializer 'w' is defined twice", _duplicate_initializer)
    add("nameless_initializer.onnx", "an initializer has no name", _nameless_initializer)
    add("redefines_input.onnx", "redefines 'x', a graph input", _redefines_input)
    add("output_not_produced.onnx", "graph output 'ghost' is not produced", _output_not_produced)
    add("node_without_outputs.onnx", "has no outputs", _node_without_outputs)
    add("output_declared_shape.onnx", "declared with a shape that disagrees",
        _output_declared_shape)
    add("output_declared_type.onnx", "declared with another element type",
        _output_declared_type)
    add("no_graph.onnx", "model has no graph", _no_graph)

    # -- nodes: inputs and attributes
    add("gemm_too_few_inputs.onnx", "expects 2 to 3 inputs, got 1", _too_few_inputs)
    add("matmul_empty_input.onnx", "required input #1 is missing", _empty_required_input)
    add("softmax_axis_float.onnx", "attribute 'axis' must be an int", _axis_as_float)
    add("transpose_perm_int.onnx", "attribute 'perm' must be a list of ints", _perm_as_int)
    add("softmax_axis_out_of_range.onnx", "axis 5 is out of range for rank 2",
        lambda: _bytes(_unary_model("Softmax", axis=5)))
    add("transpose_perm_out_of_range.onnx", "perm [0,5] is not a permutation",
        lambda: _bytes(_unary_model("Transpose", perm=[0, 5])))
    add("transpose_perm_repeated.onnx", "perm [1,1] is not a permutation",
        lambda: _bytes(_unary_model("Transpose", perm=[1, 1])))
    add("concat_no_inputs.onnx", "expects 1 to 65536 inputs, got 0", _concat_no_inputs)
    add("split_num_outputs.onnx", "num_outputs 3 must be positive and match the node's 2 outputs",
        _split_num_outputs)
    add("split_sizes.onnx", "do not add up to 6", _split_sizes)
    add("einsum_bad_arrow.onnx", "invalid equation 'ij,jk->i-k'", _einsum("ij,jk->i-k"))
    add("einsum_term_count.onnx", "equation has 3 input terms for 2 inputs", _einsum("ij,jk,k->i"))
    add("einsum_stray_dot.onnx", "malformed term 'i.j'", _einsum("i.j,jk->ik"))
    add("einsum_rank.onnx", "does not match operand rank", _einsum("ijk,jk->ik"))
    add("matmul_shapes.onnx", "contraction dimensions differ", _matmul_mismatch)
    add("conv_kernel_shape.onnx", "disagrees with the weight shape", _conv_kernel_mismatch)
    add("unsqueeze_nonconstant_axes.onnx", "is not a compile-time constant", _nonconstant_axes)
    add("reshape_6_to_4.onnx", "cannot reshape [2,3] (6 elements) to [4]", _reshape_6_to_4)
    add("gather_index_out_of_range.onnx", "index 7 is out of range", _gather_out_of_range(7))
    add("gather_negative_index_out_of_range.onnx", "index -3 is out of range",
        _gather_out_of_range(-3))
    add("gather_scalar_input.onnx", "input must have rank >= 1", _gather_scalar)
    add("slice_huge_step.onnx", "cannot reshape [6] (6 elements) to [2]", _slice_huge_step)
    add("slice_negative_huge_step.onnx", "cannot reshape [6] (6 elements) to [5]",
        _slice_negative_huge_step)
    add("slice_zero_step.onnx", "steps must be non-zero", _slice_zero_step)
    add("pad_negative.onnx", "pads make dimension 0 negative", _pad_negative)
    add("range_zero_delta.onnx", "delta non-zero", _range_zero_delta)
    add("topk_k_too_large.onnx", "k 10 is outside [0, 3]", _topk_too_large)
    add("topk_k_nan.onnx", "K input must be a finite integer", _topk_nan_k)
    add("rotary_scalar_input.onnx", "input must be 3-D or 4-D", _rotary_scalar)

    # -- opsets, domains, unsupported constructs
    add("opset_7.onnx", "model uses opset 7; supported opsets are 13 to 23", _opset(7, 3))
    add("opset_30.onnx", "model uses opset 30; supported opsets are 13 to 23", _opset(30, 10))
    add("no_default_opset.onnx", "imports no default-domain", _no_default_opset)
    add("other_domain.onnx", "operator is not supported in domain 'com.microsoft'",
        _other_domain)
    add("unknown_op.onnx", "operator is not supported", _unknown_op)
    add("if_subgraph.onnx", "(If, opset 23): operator is not supported", _if_subgraph)
    add("sequence_input.onnx", "graph input 'xs' is not a tensor", _sequence_input)
    add("input_without_shape.onnx", "graph input 'x' has no shape", _unshaped_input)

    # -- external data
    add("external_missing_file.onnx", "cannot be read", _external("missing.bin"))
    add("external_offset_past_end.onnx", "is too short", _external("weights.bin", offset=64),
        _SIDE)
    add("external_length_past_end.onnx", "is too short",
        _external("weights.bin", offset=8, dims=(2, 2)), _SIDE)
    add("external_length_mismatch.onnx", "has external length 64 but its type needs 16 bytes",
        _external("weights.bin", length=64), _SIDE)
    add("external_bad_offset.onnx", "bad external-data offset '-5'",
        _external("weights.bin", offset=-5), _SIDE)
    add("external_absolute_path.onnx", "outside the model's folder", _external("/etc/passwd"))
    add("external_parent_dir.onnx", "outside the model's folder",
        _external("../weights.bin"), _SIDE)
    add("external_no_location.onnx", "names no location", _external(""))
    return c


def write_corpus(out_dir: str | Path) -> list[dict[str, str]]:
    """Writes every case, its side files and manifest.json into ``out_dir``;
    returns the manifest ([{"file": ..., "expect": ...}])."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    manifest = []
    for case in cases():
        (out / case.file).write_bytes(case.make())
        for name, data in case.side_files.items():
            (out / name).write_bytes(data)
        manifest.append({"file": case.file, "expect": case.expect})
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    return manifest


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out_dir", help="folder to write the corpus and manifest.json into")
    args = parser.parse_args(argv)
    manifest = write_corpus(args.out_dir)
    print(f"wrote {len(manifest)} broken models to {args.out_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
