"""Generators of deterministic ONNX test models for the Shardflow importer.

Every generator returns an ``onnx.ModelProto`` with the default-domain opset
23 and IR version 10, float32 weights drawn from a seeded numpy RNG (the same
arguments give the same bytes), and small sizes by default:

* ``mlp``    -- Gemm / MatMul+Add, Relu, Gelu, Softmax.
* ``gpt2``   -- GPT-2 style decoder; head reshapes use the exporter's shape
  arithmetic (Shape -> Gather -> Unsqueeze -> Concat -> Reshape).
* ``bert``   -- BERT style encoder with an additive attention mask and pooler.
* ``resnet`` -- ResNet style CNN (strided, padded and grouped Conv, BatchNorm).
* ``llama``  -- Llama style decoder built on the opset-23 ops
  RMSNormalization, RotaryEmbedding and Attention (grouped-query, causal).

Models can be written with ``save`` (optionally with all initializers in one
external ``.data`` file), or with ``generate_to_file``, which streams the
weights straight into the external data file so that a model of a gigabyte
never has to be held in memory.

Command line (with ``PYTHONPATH=python``)::

    python -m shardflow.models gpt2 --out /tmp/gpt2.onnx --layers 2 --symbolic
    python -m shardflow.models llama --out /tmp/llama.onnx --external-data
"""

from __future__ import annotations

import argparse
import contextlib
import inspect
import math
import os
import sys
from pathlib import Path
from typing import Callable, Iterator, Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 23
IR_VERSION = 10

_F32 = TensorProto.FLOAT
_I64 = TensorProto.INT64

Dim = int | str


# --------------------------------------------------------------------------
# Initializer sinks: where the weights go.
# --------------------------------------------------------------------------


class _InlineSink:
    """Keeps every initializer inside the ModelProto."""

    materialize = True

    def add(self, name: str, array: np.ndarray) -> TensorProto:
        return numpy_helper.from_array(array, name)


class _CountingSink:
    """Makes no data at all; the builder only records names, shapes, bytes."""

    materialize = False

    def add_shape(self, name: str, shape: Sequence[int], dtype) -> TensorProto:
        t = TensorProto()
        t.name = name
        t.data_type = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
        t.dims.extend(shape)
        return t


class _ExternalSink:
    """Streams initializers of at least ``size_threshold`` bytes into one file.

    The tensors get ``data_location = EXTERNAL`` with ``location``, ``offset``
    and ``length`` entries, exactly as ``onnx.save_model(...,
    save_as_external_data=True, all_tensors_to_one_file=True)`` writes them.
    Offsets are aligned to ``alignment`` bytes so the file can be mmapped.
    """

    materialize = True

    def __init__(self, data_path: Path, size_threshold: int = 1024, alignment: int = 4096):
        if sys.byteorder != "little":
            raise RuntimeError("external data is written little-endian only")
        self.path = Path(data_path)
        self.location = self.path.name
        self.size_threshold = size_threshold
        self.alignment = alignment
        self._file = open(self.path, "wb")
        self._offset = 0

    def add(self, name: str, array: np.ndarray) -> TensorProto:
        if array.nbytes < self.size_threshold:
            return numpy_helper.from_array(array, name)
        array = np.ascontiguousarray(array)
        pad = (-self._offset) % self.alignment
        if pad:
            self._file.write(b"\0" * pad)
            self._offset += pad
        t = TensorProto()
        t.name = name
        t.data_type = helper.np_dtype_to_tensor_dtype(array.dtype)
        t.dims.extend(array.shape)
        self._file.write(memoryview(array).cast("B"))
        for key, value in (("location", self.location), ("offset", str(self._offset)),
                           ("length", str(array.nbytes))):
            entry = t.external_data.add()
            entry.key, entry.value = key, value
        t.data_location = TensorProto.EXTERNAL
        self._offset += array.nbytes
        return t

    def close(self) -> None:
        self._file.close()


# --------------------------------------------------------------------------
# Graph builder.
# --------------------------------------------------------------------------


class GraphBuilder:
    """Small helper around ``onnx.helper`` that names nodes the way the
    PyTorch exporter does (``/h.0/attn/MatMul``, ``/h.0/attn/MatMul_output_0``)."""

    def __init__(self, name: str, seed: int = 0, sink=None):
        self.name = name
        self.rng = np.random.default_rng(seed)
        self.sink = sink if sink is not None else _InlineSink()
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[TensorProto] = []
        self.inputs: list[onnx.ValueInfoProto] = []
        self.outputs: list[onnx.ValueInfoProto] = []
        self._scope: list[str] = []
        self._used: set[str] = set()

    # -- naming ------------------------------------------------------------
    @contextlib.contextmanager
    def scope(self, name: str) -> Iterator[None]:
        self._scope.append(name)
        try:
            yield
        finally:
            self._scope.pop()

    def _unique(self, base: str) -> str:
        name, i = base, 0
        while name in self._used:
            i += 1
            name = f"{base}_{i}"
        self._used.add(name)
        return name

    # -- graph interface ---------------------------------------------------
    def input(self, name: str, elem_type: int, shape: Sequence[Dim]) -> str:
        self._used.add(name)
        self.inputs.append(helper.make_tensor_value_info(name, elem_type, list(shape)))
        return name

    def output(self, value: str, name: str, elem_type: int, shape: Sequence[Dim]) -> str:
        """Declares graph output ``name`` for ``value`` by renaming ``value``
        (in its producer and its consumers so far). Returns ``name``, which
        later consumers must use."""
        producer = next((n for n in self.nodes if value in n.output), None)
        if producer is None or name in self._used:
            self.op("Identity", [value], out_names=[name])
        else:
            self._used.add(name)
            for n in self.nodes:
                for seq in (n.input, n.output):
                    for i, v in enumerate(seq):
                        if v == value:
                            seq[i] = name
        self.outputs.append(helper.make_tensor_value_info(name, elem_type, list(shape)))
        return name

    def op(self, op_type: str, inputs: Sequence[str], outputs: int = 1,
           out_names: Sequence[str] | None = None, **attrs):
        prefix = "/" + "/".join(self._scope) + "/" if self._scope else "/"
        node_name = self._unique(prefix + op_type)
        if out_names is None:
            out_names = [self._unique(f"{node_name}_output_{i}") for i in range(outputs)]
        else:
            for n in out_names:
                self._used.add(n)
        self.nodes.append(helper.make_node(op_type, list(inputs), list(out_names),
                                           name=node_name, **attrs))
        return out_names[0] if len(out_names) == 1 else list(out_names)

    def const(self, value, dtype=None) -> str:
        """A ``Constant`` node (how exporters write small shape constants)."""
        if dtype is None:
            dtype = np.int64 if np.issubdtype(np.asarray(value).dtype, np.integer) else np.float32
        arr = np.asarray(value, dtype=dtype)
        return self.op("Constant", [], value=numpy_helper.from_array(arr, "value"))

    # -- initializers ------------------------------------------------------
    def tensor(self, name: str, array: np.ndarray) -> str:
        """An initializer with given contents (caches, masks, index tables)."""
        self._used.add(name)
        if self.sink.materialize:
            self.initializers.append(self.sink.add(name, np.asarray(array)))
        else:
            self.initializers.append(self.sink.add_shape(name, np.shape(array), np.asarray(array).dtype))
        return name

    def param(self, name: str, shape: Sequence[int], std: float = 0.02,
              mean: float = 0.0, kind: str = "normal") -> str:
        """A random float32 weight: ``mean + std * N(0, 1)`` or, for
        ``kind="uniform"``, uniform in ``[mean - std, mean + std)``."""
        self._used.add(name)
        shape = [int(s) for s in shape]
        if not self.sink.materialize:
            self.initializers.append(self.sink.add_shape(name, shape, np.float32))
            return name
        if kind == "normal":
            arr = self.rng.standard_normal(shape, dtype=np.float32)
        elif kind == "uniform":
            arr = self.rng.random(shape, dtype=np.float32)
            arr *= 2.0
            arr -= 1.0
        else:
            raise ValueError(kind)
        if std != 1.0:
            arr *= np.float32(std)
        if mean != 0.0:
            arr += np.float32(mean)
        self.initializers.append(self.sink.add(name, arr))
        del arr
        return name

    # -- result ------------------------------------------------------------
    def model(self, doc: str = "") -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, self.name, self.inputs, self.outputs,
                                  initializer=self.initializers)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                                  ir_version=IR_VERSION, producer_name="shardflow.models",
                                  doc_string=doc)
        return model


# --------------------------------------------------------------------------
# Shared building blocks.
# --------------------------------------------------------------------------


def _dims(batch: int, seq: int | None, symbolic: bool) -> tuple[Dim, Dim | None]:
    if symbolic:
        return "batch", ("seq" if seq is not None else None)
    return batch, seq


def _linear(b: GraphBuilder, x: str, in_f: int, out_f: int, prefix: str,
            bias: bool = True, std: float = 0.02) -> str:
    """``x @ W + b`` with W stored [in, out] (as exporters write nn.Linear)."""
    w = b.param(f"{prefix}.weight", [in_f, out_f], std=std)
    y = b.op("MatMul", [x, w])
    if bias:
        y = b.op("Add", [y, b.param(f"{prefix}.bias", [out_f], std=0.02)])
    return y


def _layer_norm(b: GraphBuilder, x: str, dim: int, prefix: str, eps: float = 1e-5) -> str:
    g = b.param(f"{prefix}.weight", [dim], std=0.1, mean=1.0)
    beta = b.param(f"{prefix}.bias", [dim], std=0.1)
    return b.op("LayerNormalization", [x, g, beta], axis=-1, epsilon=eps)


def _rms_norm(b: GraphBuilder, x: str, dim: int, prefix: str, eps: float = 1e-6) -> str:
    g = b.param(f"{prefix}.weight", [dim], std=0.1, mean=1.0)
    return b.op("RMSNormalization", [x, g], axis=-1, epsilon=eps)


def _batch_seq(b: GraphBuilder, x: str) -> tuple[str, str, str, str]:
    """``Shape -> Gather(0) / Gather(1) -> Unsqueeze`` on a [batch, seq, ...]
    tensor; returns (batch, seq) as scalars and as 1-element tensors."""
    shape = b.op("Shape", [x])
    bt = b.op("Gather", [shape, b.const(0)], axis=0)
    sq = b.op("Gather", [shape, b.const(1)], axis=0)
    bu = b.op("Unsqueeze", [bt, b.const([0])])
    su = b.op("Unsqueeze", [sq, b.const([0])])
    return bt, sq, bu, su


def _split_heads(b: GraphBuilder, x: str, heads: int, head_dim: int,
                 perm: Sequence[int] = (0, 2, 1, 3)) -> str:
    """[B, S, H*d] -> Reshape [B, S, H, d] (shape computed from x) -> Transpose."""
    _, _, bu, su = _batch_seq(b, x)
    target = b.op("Concat", [bu, su, b.const([heads]), b.const([head_dim])], axis=0)
    r = b.op("Reshape", [x, target])
    return b.op("Transpose", [r], perm=list(perm))


def _merge_heads(b: GraphBuilder, x: str, like: str, hidden: int) -> str:
    """[B, H, S, d] -> Transpose [B, S, H, d] -> Reshape [B, S, H*d]."""
    t = b.op("Transpose", [x], perm=[0, 2, 1, 3])
    _, _, bu, su = _batch_seq(b, like)
    target = b.op("Concat", [bu, su, b.const([hidden])], axis=0)
    return b.op("Reshape", [t, target])


def _check_heads(hidden: int, heads: int) -> int:
    if hidden % heads:
        raise ValueError(f"hidden ({hidden}) must be a multiple of heads ({heads})")
    return hidden // heads


# --------------------------------------------------------------------------
# Models.
# --------------------------------------------------------------------------


def mlp(layers: int = 2, hidden: int = 32, batch: int = 2, in_features: int = 16,
        classes: int = 10, symbolic: bool = False, seed: int = 0, _sink=None) -> onnx.ModelProto:
    """Multi-layer perceptron: hidden layer i is ``Gemm(transB=1) + Relu`` for
    even i and ``MatMul + Add + Gelu`` for odd i; the head is a Gemm followed by
    Softmax. Input ``x`` [batch, in_features] -> output ``probs`` [batch, classes]."""
    b = GraphBuilder("mlp", seed, _sink)
    bdim, _ = _dims(batch, None, symbolic)
    x = b.input("x", _F32, [bdim, in_features])
    width = in_features
    for i in range(layers):
        with b.scope(f"layers.{i}"):
            if i % 2 == 0:
                w = b.param(f"layers.{i}.weight", [hidden, width], std=1.0 / math.sqrt(width))
                bias = b.param(f"layers.{i}.bias", [hidden], std=0.02)
                x = b.op("Gemm", [x, w, bias], transB=1)
                x = b.op("Relu", [x])
            else:
                x = _linear(b, x, width, hidden, f"layers.{i}", std=1.0 / math.sqrt(width))
                x = b.op("Gelu", [x])
        width = hidden
    with b.scope("head"):
        w = b.param("head.weight", [classes, width], std=1.0 / math.sqrt(width))
        bias = b.param("head.bias", [classes], std=0.02)
        x = b.op("Gemm", [x, w, bias], transB=1)
        x = b.op("Softmax", [x], axis=-1)
    b.output(x, "probs", _F32, [bdim, classes])
    return b.model("MLP test model")


def gpt2(layers: int = 2, hidden: int = 64, heads: int = 4, seq: int = 8, batch: int = 2,
         vocab: int = 128, max_pos: int | None = None, causal_mask: str = "trilu",
         parallel_residual: bool = False, symbolic: bool = False, seed: int = 0,
         _sink=None) -> onnx.ModelProto:
    """GPT-2 style decoder (pre-LN, fused QKV, tanh-Gelu MLP, untied LM head).

    Input ``input_ids`` int64 [batch, seq] -> output ``logits`` [batch, seq, vocab].
    ``symbolic=True`` makes batch and seq the dim_params "batch" and "seq".
    ``causal_mask``: "trilu" builds it at run time (ConstantOfShape -> Trilu ->
    Cast(bool)); "constant" slices a stored lower-triangular bool buffer
    [1, 1, max_pos, max_pos] as GPT-2 exports do. Either way it feeds a Where.
    ``parallel_residual=True`` makes each layer GPT-NeoX's and GPT-J's
    parallel block: ``x + (mlp(ln_2(x)) + attn(ln_1(x)))``, the two branches
    added first, as GPT-NeoX writes it.
    """
    d = _check_heads(hidden, heads)
    max_pos = max(seq, 128) if max_pos is None else max_pos
    if max_pos < seq:
        raise ValueError("max_pos must be >= seq")
    b = GraphBuilder("gpt2", seed, _sink)
    bdim, sdim = _dims(batch, seq, symbolic)
    ids = b.input("input_ids", _I64, [bdim, sdim])

    with b.scope("embeddings"):
        wte = b.param("wte.weight", [vocab, hidden], std=0.02)
        wpe = b.param("wpe.weight", [max_pos, hidden], std=0.01)
        tok = b.op("Gather", [wte, ids], axis=0)
        _, seqlen, _, su = _batch_seq(b, ids)
        pos = b.op("Range", [b.const(0), seqlen, b.const(1)])
        pos = b.op("Unsqueeze", [pos, b.const([0])])
        x = b.op("Add", [tok, b.op("Gather", [wpe, pos], axis=0)])

    with b.scope("causal_mask"):
        square = b.op("Concat", [su, su], axis=0)
        if causal_mask == "trilu":
            one = helper.make_tensor("value", _F32, [1], [1.0])
            ones = b.op("ConstantOfShape", [square], value=one)
            tri = b.op("Trilu", [ones], upper=0)
            mask = b.op("Cast", [tri], to=TensorProto.BOOL)
        elif causal_mask == "constant":
            buf = b.tensor("causal_bias", np.tril(np.ones((max_pos, max_pos), dtype=bool))[None, None])
            mask = b.op("Slice", [buf, b.const([0, 0]), square, b.const([2, 3])])
        else:
            raise ValueError(f"causal_mask must be 'trilu' or 'constant', not {causal_mask!r}")
        neg = b.const(np.finfo(np.float32).min, np.float32)
        scale = b.const(math.sqrt(d), np.float32)

    for i in range(layers):
        p = f"h.{i}"
        with b.scope(p):
            with b.scope("attn"):
                h = _layer_norm(b, x, hidden, f"{p}.ln_1")
                qkv = _linear(b, h, hidden, 3 * hidden, f"{p}.attn.c_attn")
                q, k, v = b.op("Split", [qkv, b.const([hidden] * 3)], outputs=3, axis=-1)
                q = _split_heads(b, q, heads, d)                  # [B, H, S, d]
                k = _split_heads(b, k, heads, d, (0, 2, 3, 1))    # [B, H, d, S]
                v = _split_heads(b, v, heads, d)                  # [B, H, S, d]
                s = b.op("Div", [b.op("MatMul", [q, k]), scale])
                s = b.op("Where", [mask, s, neg])
                a = b.op("MatMul", [b.op("Softmax", [s], axis=-1), v])
                a = _merge_heads(b, a, h, hidden)
                a = _linear(b, a, hidden, hidden, f"{p}.attn.c_proj")
                if not parallel_residual:
                    x = b.op("Add", [x, a])
            with b.scope("mlp"):
                h = _layer_norm(b, x, hidden, f"{p}.ln_2")
                h = _linear(b, h, hidden, 4 * hidden, f"{p}.mlp.c_fc")
                h = b.op("Gelu", [h], approximate="tanh")
                h = _linear(b, h, 4 * hidden, hidden, f"{p}.mlp.c_proj")
                if parallel_residual:
                    h = b.op("Add", [h, a])
                x = b.op("Add", [x, h])

    with b.scope("lm_head"):
        x = _layer_norm(b, x, hidden, "ln_f")
        logits = b.op("MatMul", [x, b.param("lm_head.weight", [hidden, vocab], std=0.02)])
    b.output(logits, "logits", _F32, [bdim, sdim, vocab])
    return b.model("GPT-2 style decoder test model")


def bert(layers: int = 2, hidden: int = 64, heads: int = 4, seq: int = 8, batch: int = 2,
         vocab: int = 128, type_vocab: int = 2, max_pos: int | None = None,
         symbolic: bool = False, seed: int = 0, _sink=None) -> onnx.ModelProto:
    """BERT style encoder (post-LN, bidirectional attention, exact Gelu MLP).

    Inputs ``input_ids``, ``token_type_ids``, ``attention_mask`` (int64
    [batch, seq], mask 1 = attend); outputs ``last_hidden_state`` [batch, seq,
    hidden] and ``pooler_output`` [batch, hidden] (first token, Gemm, Tanh).
    The additive mask is Unsqueeze -> Cast -> Sub(1, m) -> Mul(-10000).
    Position ids are a Slice of a stored [1, max_pos] int64 table.
    """
    d = _check_heads(hidden, heads)
    max_pos = max(seq, 128) if max_pos is None else max_pos
    b = GraphBuilder("bert", seed, _sink)
    bdim, sdim = _dims(batch, seq, symbolic)
    ids = b.input("input_ids", _I64, [bdim, sdim])
    types = b.input("token_type_ids", _I64, [bdim, sdim])
    amask = b.input("attention_mask", _I64, [bdim, sdim])

    with b.scope("embeddings"):
        we = b.param("embeddings.word_embeddings.weight", [vocab, hidden], std=0.02)
        te = b.param("embeddings.token_type_embeddings.weight", [type_vocab, hidden], std=0.02)
        pe = b.param("embeddings.position_embeddings.weight", [max_pos, hidden], std=0.02)
        table = b.tensor("embeddings.position_ids", np.arange(max_pos, dtype=np.int64)[None])
        _, _, _, su = _batch_seq(b, ids)
        pos = b.op("Slice", [table, b.const([0]), su, b.const([1])])
        x = b.op("Add", [b.op("Gather", [we, ids], axis=0), b.op("Gather", [te, types], axis=0)])
        x = b.op("Add", [x, b.op("Gather", [pe, pos], axis=0)])
        x = _layer_norm(b, x, hidden, "embeddings.LayerNorm", eps=1e-12)

    with b.scope("extended_attention_mask"):
        m = b.op("Unsqueeze", [amask, b.const([1, 2])])          # [B, 1, 1, S]
        m = b.op("Cast", [m], to=_F32)
        m = b.op("Sub", [b.const(1.0, np.float32), m])
        add_mask = b.op("Mul", [m, b.const(-10000.0, np.float32)])
        scale = b.const(math.sqrt(d), np.float32)

    for i in range(layers):
        p = f"encoder.layer.{i}"
        with b.scope(p):
            with b.scope("attention"):
                q = _split_heads(b, _linear(b, x, hidden, hidden, f"{p}.attention.self.query"), heads, d)
                k = _split_heads(b, _linear(b, x, hidden, hidden, f"{p}.attention.self.key"),
                                 heads, d, (0, 2, 3, 1))
                v = _split_heads(b, _linear(b, x, hidden, hidden, f"{p}.attention.self.value"), heads, d)
                s = b.op("Div", [b.op("MatMul", [q, k]), scale])
                s = b.op("Add", [s, add_mask])
                a = b.op("MatMul", [b.op("Softmax", [s], axis=-1), v])
                a = _merge_heads(b, a, x, hidden)
                a = _linear(b, a, hidden, hidden, f"{p}.attention.output.dense")
                x = _layer_norm(b, b.op("Add", [a, x]), hidden, f"{p}.attention.output.LayerNorm", 1e-12)
            with b.scope("mlp"):
                h = _linear(b, x, hidden, 4 * hidden, f"{p}.intermediate.dense")
                h = b.op("Gelu", [h])
                h = _linear(b, h, 4 * hidden, hidden, f"{p}.output.dense")
                x = _layer_norm(b, b.op("Add", [h, x]), hidden, f"{p}.output.LayerNorm", 1e-12)

    x = b.output(x, "last_hidden_state", _F32, [bdim, sdim, hidden])
    with b.scope("pooler"):
        first = b.op("Gather", [x, b.const(0)], axis=1)             # [B, hidden]
        w = b.param("pooler.dense.weight", [hidden, hidden], std=0.02)
        bias = b.param("pooler.dense.bias", [hidden], std=0.02)
        pooled = b.op("Tanh", [b.op("Gemm", [first, w, bias], transB=1)])
    b.output(pooled, "pooler_output", _F32, [bdim, hidden])
    return b.model("BERT style encoder test model")


def resnet(layers: int = 2, hidden: int = 8, batch: int = 1, image: int = 32,
           classes: int = 10, groups: int = 4, symbolic: bool = False, seed: int = 0,
           _sink=None) -> onnx.ModelProto:
    """ResNet style CNN. ``hidden`` is the stem width, ``layers`` the number of
    stages (stage i has width hidden * 2**i and stride 2 for i > 0).

    Stem: Conv 7x7/2 pad 3 -> BatchNormalization -> Relu -> MaxPool 3x3/2 pad 1.
    Block: Conv 3x3 (stride) -> BN -> Relu -> grouped Conv 3x3 (group=groups,
    with bias) -> BN, shortcut Conv 1x1 (stride) + BN where the shape changes,
    residual Add -> Relu. Head: GlobalAveragePool -> Flatten -> Gemm.
    Input ``pixel_values`` [batch, 3, image, image] -> output ``logits``.
    """
    b = GraphBuilder("resnet", seed, _sink)
    bdim, _ = _dims(batch, None, symbolic)
    x = b.input("pixel_values", _F32, [bdim, 3, image, image])

    def conv(x, cin, cout, k, stride, pad, name, group=1, bias=False):
        w = b.param(f"{name}.weight", [cout, cin // group, k, k],
                    std=math.sqrt(2.0 / (cin // group * k * k)))
        ins = [x, w] + ([b.param(f"{name}.bias", [cout], std=0.02)] if bias else [])
        return b.op("Conv", ins, kernel_shape=[k, k], strides=[stride, stride],
                    pads=[pad] * 4, group=group)

    def bn(x, c, name):
        return b.op("BatchNormalization", [
            x,
            b.param(f"{name}.weight", [c], std=0.1, mean=1.0),
            b.param(f"{name}.bias", [c], std=0.1),
            b.param(f"{name}.running_mean", [c], std=0.1),
            b.param(f"{name}.running_var", [c], std=0.25, mean=1.0, kind="uniform"),
        ], epsilon=1e-5)

    with b.scope("stem"):
        x = conv(x, 3, hidden, 7, 2, 3, "conv1")
        x = b.op("Relu", [bn(x, hidden, "bn1")])
        x = b.op("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    cin = hidden
    for i in range(layers):
        cout = hidden * 2 ** i
        stride = 1 if i == 0 else 2
        g = groups if cout % groups == 0 else 1
        p = f"layer{i + 1}"
        with b.scope(p):
            y = conv(x, cin, cout, 3, stride, 1, f"{p}.conv1")
            y = b.op("Relu", [bn(y, cout, f"{p}.bn1")])
            y = conv(y, cout, cout, 3, 1, 1, f"{p}.conv2", group=g, bias=True)
            y = bn(y, cout, f"{p}.bn2")
            if stride != 1 or cin != cout:
                sc = bn(conv(x, cin, cout, 1, stride, 0, f"{p}.downsample.0"), cout, f"{p}.downsample.1")
            else:
                sc = x
            x = b.op("Relu", [b.op("Add", [y, sc])])
        cin = cout
    with b.scope("head"):
        x = b.op("Flatten", [b.op("GlobalAveragePool", [x])], axis=1)
        w = b.param("fc.weight", [classes, cin], std=1.0 / math.sqrt(cin))
        x = b.op("Gemm", [x, w, b.param("fc.bias", [classes], std=0.02)], transB=1)
    b.output(x, "logits", _F32, [bdim, classes])
    return b.model("ResNet style CNN test model")


def rope_cache(max_pos: int, head_dim: int, theta: float = 10000.0) -> tuple[np.ndarray, np.ndarray]:
    """cos/sin caches [max_pos, head_dim / 2] for RotaryEmbedding (float32)."""
    inv = 1.0 / theta ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
    ang = np.outer(np.arange(max_pos, dtype=np.float64), inv)
    return np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32)


def _rotate_written(b: GraphBuilder, x: str, cos: str, sin: str, d: int) -> str:
    """x * cos + rotate_half(x) * sin, rotate_half written out as Hugging
    Face's exports write it (Slice, Slice, Neg, Concat)."""
    x1 = b.op("Slice", [x, b.const([0]), b.const([d // 2]), b.const([-1])])
    x2 = b.op("Slice", [x, b.const([d // 2]), b.const([2**63 - 1]), b.const([-1])])
    rotated = b.op("Concat", [b.op("Neg", [x2]), x1], axis=-1)
    return b.op("Add", [b.op("Mul", [x, cos]), b.op("Mul", [rotated, sin])])


def _rms_norm_written(b: GraphBuilder, x: str, dim: int, prefix: str, eps: float = 1e-6) -> str:
    """Hugging Face's LlamaRMSNorm as TorchScript exports it: weight *
    (x * 1 / sqrt(mean(x^2) + eps))."""
    g = b.param(f"{prefix}.weight", [dim], std=0.1, mean=1.0)
    var = b.op("ReduceMean", [b.op("Pow", [x, b.const(2.0, np.float32)]), b.const([-1])],
               keepdims=1)
    inv = b.op("Reciprocal", [b.op("Sqrt", [b.op("Add", [var, b.const(eps, np.float32)])])])
    return b.op("Mul", [g, b.op("Mul", [x, inv])])


def _attention_written(b: GraphBuilder, q: str, k: str, v: str, causal: str, group: int,
                       d: int) -> str:
    """Hugging Face's eager attention: K and V repeated per query-head
    group, softmax(q k^T * d^-0.5 + causal) v, all [B, H, S, d]."""
    def repeat(x: str) -> str:
        if group == 1:
            return x
        shape = b.op("Shape", [x])
        grouped = b.op("Concat", [b.op("Slice", [shape, b.const([0]), b.const([2])]),
                                  b.const([group]),
                                  b.op("Slice", [shape, b.const([2]), b.const([4])])], axis=0)
        wide = b.op("Expand", [b.op("Unsqueeze", [x, b.const([2])]), grouped])
        merged = b.op("Concat", [b.op("Slice", [shape, b.const([0]), b.const([1])]),
                                 b.const([-1]),
                                 b.op("Slice", [shape, b.const([2]), b.const([4])])], axis=0)
        return b.op("Reshape", [wide, merged])
    k, v = repeat(k), repeat(v)
    s = b.op("Mul", [b.op("MatMul", [q, b.op("Transpose", [k], perm=[0, 1, 3, 2])]),
                     b.const(d ** -0.5, np.float32)])
    p = b.op("Softmax", [b.op("Add", [s, causal])], axis=-1)
    return b.op("MatMul", [p, v])


def llama(layers: int = 2, hidden: int = 64, heads: int = 4, kv_heads: int = 2, seq: int = 8,
          batch: int = 2, vocab: int = 128, intermediate: int | None = None,
          max_pos: int | None = None, rope_theta: float = 10000.0, eps: float = 1e-6,
          position_ids_input: bool = False, layout: str = "4d", rotary: str = "op",
          export: str = "ops", symbolic: bool = False, seed: int = 0,
          _sink=None) -> onnx.ModelProto:
    """Llama style decoder on the opset-23 ops.

    Per layer: RMSNormalization -> q/k/v MatMul (no bias; q has ``heads``, k/v
    ``kv_heads`` heads) -> RotaryEmbedding on q and k (cos/sin caches
    [max_pos, head_dim/2] as initializers, with position ids) -> Attention
    (is_causal=1, grouped-query: heads > kv_heads) -> o MatMul -> residual Add;
    RMSNormalization -> SwiGLU MLP (gate * Sigmoid(gate) * up, down) -> Add.
    Final RMSNormalization and an LM-head MatMul.

    ``layout="4d"``: heads split with the exporter's Reshape/Transpose, 4-D
    [B, H, S, d] RotaryEmbedding and Attention (head counts given by shapes).
    ``layout="3d"``: 3-D RotaryEmbedding (num_heads) and Attention with the
    q_num_heads / kv_num_heads attributes, no Reshape/Transpose.
    ``rotary="written"`` (4-D only): the rotation as Hugging Face's exports
    write it out, ``q * cos + rotate_half(q) * sin`` with rotate_half(x) =
    Concat(-x[..., d/2:], x[..., :d/2]) (two Slices, an INT64_MAX end),
    cos and sin gathered by the position ids from full-width caches
    [max_pos, d] (each angle twice) and unsqueezed to [B, 1, S, d].
    ``export="hf"`` (4-D only): everything written out as a TorchScript
    export of Hugging Face's Llama writes it: the rotation as above, RMSNorm
    as Pow, ReduceMean, Add, Sqrt, Reciprocal and the weight's Mul, and the
    attention materialized (MatMul with K transposed, a Mul by the scale,
    an additive causal mask from Trilu and Where, Softmax, MatMul), K and V
    repeated per query-head group (Unsqueeze, Expand, Reshape).
    Position ids: graph input ``position_ids`` int64 [batch, seq] if
    ``position_ids_input``, else Range -> Unsqueeze -> Expand.
    Input ``input_ids`` int64 [batch, seq] -> output ``logits`` [batch, seq, vocab].
    """
    d = _check_heads(hidden, heads)
    if heads % kv_heads:
        raise ValueError("heads must be a multiple of kv_heads")
    if d % 2:
        raise ValueError("head_dim must be even for RotaryEmbedding")
    if layout not in ("4d", "3d"):
        raise ValueError("layout must be '4d' or '3d'")
    if export not in ("ops", "hf") or (export == "hf" and layout != "4d"):
        raise ValueError("export must be 'ops', or 'hf' with layout '4d'")
    if export == "hf":
        rotary = "written"
    if rotary not in ("op", "written") or (rotary == "written" and layout != "4d"):
        raise ValueError("rotary must be 'op', or 'written' with layout '4d'")
    if intermediate is None:
        intermediate = -(-8 * hidden // 3 // 16) * 16
    max_pos = max(seq, 128) if max_pos is None else max_pos
    b = GraphBuilder("llama", seed, _sink)
    bdim, sdim = _dims(batch, seq, symbolic)
    ids = b.input("input_ids", _I64, [bdim, sdim])

    with b.scope("embed_tokens"):
        x = b.op("Gather", [b.param("embed_tokens.weight", [vocab, hidden], std=0.02), ids], axis=0)
    with b.scope("rotary_emb"):
        cos, sin = rope_cache(max_pos, d, rope_theta)
        if rotary == "op":
            cos = b.tensor("rotary_emb.cos_cache", cos)
            sin = b.tensor("rotary_emb.sin_cache", sin)
        if position_ids_input:
            pos = b.input("position_ids", _I64, [bdim, sdim])
        else:
            _, seqlen, bu, su = _batch_seq(b, ids)
            pos = b.op("Range", [b.const(0), seqlen, b.const(1)])
            pos = b.op("Unsqueeze", [pos, b.const([0])])
            pos = b.op("Expand", [pos, b.op("Concat", [bu, su], axis=0)])
        if rotary == "written":
            # Full-width caches (each angle twice, as torch.cat((freqs,
            # freqs), -1) makes them), gathered per position: [B, 1, S, d].
            full = [b.tensor(f"rotary_emb.{n}_full", np.concatenate([c, c], axis=1))
                    for n, c in (("cos", cos), ("sin", sin))]
            cos, sin = (b.op("Unsqueeze", [b.op("Gather", [c, pos], axis=0), b.const([1])])
                        for c in full)

    norm = _rms_norm_written if export == "hf" else _rms_norm
    if export == "hf":
        with b.scope("causal_mask"):
            # 0 on and below the diagonal, the lowest float above it: [S, S].
            _, _, _, su = _batch_seq(b, ids)
            one = helper.make_tensor("value", _F32, [1], [1.0])
            ones = b.op("ConstantOfShape", [b.op("Concat", [su, su], axis=0)], value=one)
            lower = b.op("Cast", [b.op("Trilu", [ones], upper=0)], to=TensorProto.BOOL)
            causal = b.op("Where", [lower, b.const(0.0, np.float32),
                                    b.const(np.finfo(np.float32).min, np.float32)])

    for i in range(layers):
        p = f"layers.{i}"
        with b.scope(p):
            with b.scope("self_attn"):
                h = norm(b, x, hidden, f"{p}.input_layernorm", eps)
                q = _linear(b, h, hidden, heads * d, f"{p}.self_attn.q_proj", bias=False)
                k = _linear(b, h, hidden, kv_heads * d, f"{p}.self_attn.k_proj", bias=False)
                v = _linear(b, h, hidden, kv_heads * d, f"{p}.self_attn.v_proj", bias=False)
                if layout == "4d" and rotary == "written":
                    q = _rotate_written(b, _split_heads(b, q, heads, d), cos, sin, d)
                    k = _rotate_written(b, _split_heads(b, k, kv_heads, d), cos, sin, d)
                    v = _split_heads(b, v, kv_heads, d)
                    if export == "hf":
                        a = _attention_written(b, q, k, v, causal, heads // kv_heads, d)
                    else:
                        a = b.op("Attention", [q, k, v], is_causal=1)
                    a = _merge_heads(b, a, h, heads * d)
                elif layout == "4d":
                    q = b.op("RotaryEmbedding", [_split_heads(b, q, heads, d), cos, sin, pos])
                    k = b.op("RotaryEmbedding", [_split_heads(b, k, kv_heads, d), cos, sin, pos])
                    v = _split_heads(b, v, kv_heads, d)
                    a = b.op("Attention", [q, k, v], is_causal=1)
                    a = _merge_heads(b, a, h, heads * d)
                else:
                    q = b.op("RotaryEmbedding", [q, cos, sin, pos], num_heads=heads)
                    k = b.op("RotaryEmbedding", [k, cos, sin, pos], num_heads=kv_heads)
                    a = b.op("Attention", [q, k, v], is_causal=1,
                             q_num_heads=heads, kv_num_heads=kv_heads)
                a = _linear(b, a, heads * d, hidden, f"{p}.self_attn.o_proj", bias=False)
                x = b.op("Add", [x, a])
            with b.scope("mlp"):
                h = norm(b, x, hidden, f"{p}.post_attention_layernorm", eps)
                gate = _linear(b, h, hidden, intermediate, f"{p}.mlp.gate_proj", bias=False)
                up = _linear(b, h, hidden, intermediate, f"{p}.mlp.up_proj", bias=False)
                act = b.op("Mul", [gate, b.op("Sigmoid", [gate])])
                h = b.op("Mul", [act, up])
                h = _linear(b, h, intermediate, hidden, f"{p}.mlp.down_proj", bias=False)
                x = b.op("Add", [x, h])

    with b.scope("lm_head"):
        x = norm(b, x, hidden, "norm", eps)
        logits = b.op("MatMul", [x, b.param("lm_head.weight", [hidden, vocab], std=0.02)])
    b.output(logits, "logits", _F32, [bdim, sdim, vocab])
    return b.model("Llama style decoder test model")


def neox(layers: int = 2, hidden: int = 64, heads: int = 4, seq: int = 8, batch: int = 2,
         vocab: int = 128, rotary_pct: float = 0.25, max_pos: int | None = None,
         eps: float = 1e-5, symbolic: bool = False, seed: int = 0,
         _sink=None) -> onnx.ModelProto:
    """GPT-NeoX (Pythia) style decoder, written as a TorchScript export of
    Hugging Face's GPTNeoX writes it.

    Per layer, the parallel block ``x + (mlp(ln_2(x)) + attn(ln_1(x)))``:
    one fused query_key_value projection (with bias) viewed per head as
    [B, S, heads, 3 * d] and sliced into q, k and v (each head's three
    together, not three blocks); the rotation on the first ``rotary_pct`` of
    each head's dimensions only (Slices, ``q * cos + rotate_half(q) * sin``
    written out, Concat with the rest), cos and sin gathered by position
    from full-width caches; the attention materialized with an additive
    causal mask; a dense projection with bias; the MLP dense_h_to_4h, exact
    Gelu, dense_4h_to_h. Final LayerNormalization and an untied embed_out.
    Input ``input_ids`` int64 [batch, seq] -> output ``logits`` [batch, seq, vocab].
    """
    d = _check_heads(hidden, heads)
    rot = int(d * rotary_pct)
    if rot < 2 or rot % 2:
        raise ValueError(f"rotary_pct {rotary_pct} of head size {d} must be a positive even "
                         "number of dimensions")
    max_pos = max(seq, 128) if max_pos is None else max_pos
    b = GraphBuilder("neox", seed, _sink)
    bdim, sdim = _dims(batch, seq, symbolic)
    ids = b.input("input_ids", _I64, [bdim, sdim])
    int_max = 2**63 - 1

    with b.scope("embed_in"):
        x = b.op("Gather", [b.param("embed_in.weight", [vocab, hidden], std=0.02), ids], axis=0)
    with b.scope("rotary_emb"):
        cos, sin = rope_cache(max_pos, rot)
        _, seqlen, bu, su = _batch_seq(b, ids)
        pos = b.op("Unsqueeze", [b.op("Range", [b.const(0), seqlen, b.const(1)]), b.const([0])])
        full = [b.tensor(f"rotary_emb.{n}_cached", np.concatenate([c, c], axis=1))
                for n, c in (("cos", cos), ("sin", sin))]
        cos, sin = (b.op("Unsqueeze", [b.op("Gather", [c, pos], axis=0), b.const([1])])
                    for c in full)
    with b.scope("causal_mask"):
        one = helper.make_tensor("value", _F32, [1], [1.0])
        ones = b.op("ConstantOfShape", [b.op("Concat", [su, su], axis=0)], value=one)
        lower = b.op("Cast", [b.op("Trilu", [ones], upper=0)], to=TensorProto.BOOL)
        causal = b.op("Where", [lower, b.const(0.0, np.float32),
                                b.const(np.finfo(np.float32).min, np.float32)])

    def part(t: str, start: int, end: int) -> str:
        return b.op("Slice", [t, b.const([start]), b.const([end]), b.const([-1])])

    for i in range(layers):
        p = f"layers.{i}"
        with b.scope(p):
            with b.scope("attention"):
                h = _layer_norm(b, x, hidden, f"{p}.input_layernorm", eps)
                qkv = _linear(b, h, hidden, 3 * hidden, f"{p}.attention.query_key_value")
                _, _, hb, hs = _batch_seq(b, qkv)
                qkv = b.op("Reshape", [qkv, b.op("Concat", [hb, hs, b.const([heads]),
                                                            b.const([3 * d])], axis=0)])
                q, k, v = (b.op("Transpose", [part(qkv, j * d, (j + 1) * d)], perm=[0, 2, 1, 3])
                           for j in range(3))
                q, k = (b.op("Concat", [_rotate_written(b, part(t, 0, rot), cos, sin, rot),
                                        part(t, rot, int_max)], axis=-1) for t in (q, k))
                a = _attention_written(b, q, k, v, causal, 1, d)
                a = _merge_heads(b, a, h, hidden)
                a = _linear(b, a, hidden, hidden, f"{p}.attention.dense")
            with b.scope("mlp"):
                h = _layer_norm(b, x, hidden, f"{p}.post_attention_layernorm", eps)
                h = _linear(b, h, hidden, 4 * hidden, f"{p}.mlp.dense_h_to_4h")
                h = b.op("Gelu", [h])
                h = _linear(b, h, 4 * hidden, hidden, f"{p}.mlp.dense_4h_to_h")
                x = b.op("Add", [b.op("Add", [h, a]), x])

    with b.scope("embed_out"):
        x = _layer_norm(b, x, hidden, "final_layer_norm", eps)
        logits = b.op("MatMul", [x, b.param("embed_out.weight", [hidden, vocab], std=0.02)])
    b.output(logits, "logits", _F32, [bdim, sdim, vocab])
    return b.model("GPT-NeoX style decoder test model")


MODELS: dict[str, Callable[..., onnx.ModelProto]] = {
    "mlp": mlp,
    "gpt2": gpt2,
    "bert": bert,
    "resnet": resnet,
    "llama": llama,
    "neox": neox,
}


# --------------------------------------------------------------------------
# Saving, streaming, inspection.
# --------------------------------------------------------------------------


def data_location(path: str | os.PathLike) -> str:
    """Name of the external data file of ``path``: ``model.onnx`` -> ``model.data``."""
    return Path(path).stem + ".data"


def save(model: onnx.ModelProto, path: str | os.PathLike, external_data: bool = False,
         size_threshold: int = 1024) -> Path:
    """Writes ``model`` to ``path``. With ``external_data`` every initializer of
    at least ``size_threshold`` bytes goes into one file ``<stem>.data`` next to
    it (an existing one is replaced). ``model`` itself is not modified."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if not external_data:
        onnx.save_model(model, str(path))
        return path
    location = data_location(path)
    data = path.parent / location
    if data.exists():
        data.unlink()        # onnx appends to an existing data file
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    onnx.save_model(copy, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                    location=location, size_threshold=size_threshold)
    return path


def generate_to_file(name: str, path: str | os.PathLike, external_data: bool = True,
                     size_threshold: int = 1024, **config) -> onnx.ModelProto:
    """Builds model ``name`` with ``config`` and writes it to ``path``.

    With ``external_data`` the weights are streamed into ``<stem>.data`` while
    they are generated (one tensor in memory at a time), which is what large
    models need; the bytes are identical to ``save(MODELS[name](**config),
    path, external_data=True)`` apart from alignment padding (4 KiB).
    Returns the written ModelProto (without the external weights).
    """
    gen = MODELS[name]
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if not external_data:
        model = gen(**config)
        save(model, path)
        return model
    sink = _ExternalSink(path.parent / data_location(path), size_threshold)
    try:
        model = gen(**config, _sink=sink)
    finally:
        sink.close()
    onnx.save_model(model, str(path))
    return model


def weight_bytes(model: onnx.ModelProto) -> int:
    """Total bytes of the initializers, whether inline or external."""
    total = 0
    for t in model.graph.initializer:
        n = int(np.prod(t.dims, dtype=np.int64)) if len(t.dims) else 1
        total += n * helper.tensor_dtype_to_np_dtype(t.data_type).itemsize
    return total


def shape_only(name: str, **config) -> onnx.ModelProto:
    """The model's graph with data-less initializers (dims and types only):
    cheap to build at any size, for counting nodes and weight bytes. Not a
    valid model to run."""
    return MODELS[name](**config, _sink=_CountingSink())


def random_inputs(model: onnx.ModelProto, seed: int = 0, dims: dict[str, int] | None = None,
                  vocab: int | None = None) -> dict[str, np.ndarray]:
    """Random feeds for the model's inputs. Symbolic dims are taken from
    ``dims`` (default batch=2, seq=8). Integer inputs get valid ids:
    ``input_ids`` below ``vocab``, ``token_type_ids`` in {0, 1}, masks with
    leading ones, ``position_ids`` = arange."""
    rng = np.random.default_rng(seed)
    dims = {"batch": 2, "seq": 8, **(dims or {})}
    feeds = {}
    for vi in model.graph.input:
        tt = vi.type.tensor_type
        shape = [d.dim_value if d.HasField("dim_value") else dims[d.dim_param] for d in tt.shape.dim]
        if tt.elem_type == _F32:
            feeds[vi.name] = rng.standard_normal(shape, dtype=np.float32)
        elif vi.name == "input_ids":
            feeds[vi.name] = rng.integers(0, vocab or 2, size=shape, dtype=np.int64)
        elif vi.name == "token_type_ids":
            feeds[vi.name] = rng.integers(0, 2, size=shape, dtype=np.int64)
        elif vi.name == "attention_mask":
            m = np.ones(shape, dtype=np.int64)
            m[..., shape[-1] * 3 // 4:][: shape[0] // 2] = 0   # pad the tail of half the rows
            feeds[vi.name] = m
        elif vi.name == "position_ids":
            feeds[vi.name] = np.broadcast_to(np.arange(shape[-1], dtype=np.int64), shape).copy()
        else:
            raise ValueError(f"don't know how to feed input {vi.name}")
    return feeds


# --------------------------------------------------------------------------
# Command line.
# --------------------------------------------------------------------------

_SIZE_FLAGS = ("layers", "hidden", "heads", "kv_heads", "seq", "batch", "vocab")


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m shardflow.models",
        description="Write a deterministic opset-23 ONNX test model.")
    ap.add_argument("name", choices=sorted(MODELS))
    ap.add_argument("--out", required=True, help="output .onnx path")
    ap.add_argument("--external-data", action="store_true",
                    help="put initializers in one <stem>.data file next to the model "
                         "(streamed while generated)")
    ap.add_argument("--size-threshold", type=int, default=1024,
                    help="smallest initializer (bytes) moved to external data (default 1024)")
    for flag in _SIZE_FLAGS:
        ap.add_argument("--" + flag.replace("_", "-"), type=int, default=None, dest=flag)
    ap.add_argument("--symbolic", action="store_true",
                    help="symbolic batch/seq dims (dim_param 'batch' / 'seq')")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--causal-mask", choices=["trilu", "constant"], default=None, help="gpt2 only")
    ap.add_argument("--parallel-residual", action="store_true", default=None,
                    help="gpt2 only: GPT-NeoX's parallel attention and MLP block")
    ap.add_argument("--layout", choices=["4d", "3d"], default=None, help="llama only")
    ap.add_argument("--position-ids-input", action="store_true", default=None, help="llama only")
    ap.add_argument("--export", choices=["ops", "hf"], default=None,
                    help="llama only: the opset-23 ops, or everything written out as a "
                         "TorchScript export of Hugging Face's Llama writes it (needs "
                         "--layout 4d)")
    ap.add_argument("--rotary", choices=["op", "written"], default=None,
                    help="llama only: RotaryEmbedding, or written out as Hugging Face "
                         "exports it (slices, neg, concat; needs --layout 4d)")
    ap.add_argument("--no-check", action="store_true", help="skip onnx.checker")
    args = ap.parse_args(argv)

    gen = MODELS[args.name]
    accepted = inspect.signature(gen).parameters
    config = {}
    for key in _SIZE_FLAGS + ("causal_mask", "parallel_residual", "layout", "position_ids_input",
                              "rotary", "export"):
        value = getattr(args, key)
        if value is None:
            continue
        if key not in accepted:
            ap.error(f"model {args.name} takes no --{key.replace('_', '-')}")
        config[key] = value
    config["seed"] = args.seed
    if args.symbolic:
        config["symbolic"] = True

    try:
        model = generate_to_file(args.name, args.out, external_data=args.external_data,
                                 size_threshold=args.size_threshold, **config)
    except ValueError as e:  # a configuration the model does not take
        ap.error(f"{args.name}: {e}")
    if not args.no_check:
        onnx.checker.check_model(str(args.out), full_check=True)
    extra = f" + {data_location(args.out)}" if args.external_data else ""
    print(f"wrote {args.out}{extra}: {len(model.graph.node)} nodes, "
          f"{len(model.graph.initializer)} initializers, {weight_bytes(model)} weight bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
