"""ONNX op handlers that jaxonnxruntime 0.3.0 lacks, registered for
train_reference.py (import this module before converting a model).

jaxonnxruntime finds its handlers among the direct subclasses of
`jaxonnxruntime.core.handler.Handler`, registered with `register_op`, and
picks the method `version_<since>` for the model's opset (`since` is the
op's schema version in force at that opset). Inputs that must be static
under `jax.jit` (axes, repeats) are read from the concrete inputs jaxonnxruntime
gives a handler while it traces the graph once (which needs
`jaxort_only_allow_initializers_as_static_args` off, as train_reference.py
sets it), so a model converted here is fixed to those values.

Added: LayerNormalization, GatherND, IsNaN, Greater, GreaterOrEqual, Gelu,
CumSum, Tile; replaced: Softmax (the same values, but a zero gradient for
a row of -inf scores instead of NaN; see there). Every one is checked
against onnxruntime on ONNX's backend node tests, and its gradient against
central differences, by `train_reference.py --check-handlers` (results in
README.md).
"""
from __future__ import annotations

import math
from typing import Sequence

import jax
import numpy as np
from jax import numpy as jnp
from jaxonnxruntime import onnx_ops  # noqa: F401  (the library's handlers first:
from jaxonnxruntime.core import handler  # of two for one op, the later wins)
from jaxonnxruntime.core import onnx_node
from jaxonnxruntime.core import onnx_utils

OnnxNode = onnx_node.OnnxNode

# The op types this module adds (what --check-handlers tests).
ADDED_OPS: list[str] = []


def _register(op_type: str):
    def deco(cls):
        ADDED_OPS.append(op_type)
        return handler.register_op(op_type)(cls)
    return deco


def _versions(cls, versions: Sequence[int], make):
    """Give cls a classmethod version_<v> for every v, each returning
    make(node, inputs)."""
    for v in versions:
        def method(klass, node, inputs, _v=v):
            return make(node, inputs)
        setattr(cls, f"version_{v}", classmethod(method))
    return cls


def _static_ints(value) -> tuple[int, ...]:
    return tuple(int(v) for v in np.asarray(value).reshape(-1).tolist())


# --------------------------------------------------------------------------
# LayerNormalization (17)

def _layer_norm_impl(x, scale=None, bias=None, *, axis, epsilon, stash_dtype, n_outputs):
    rank = x.ndim
    axis = axis % rank
    axes = tuple(range(axis, rank))
    xs = x.astype(stash_dtype)
    mean = jnp.mean(xs, axis=axes, keepdims=True)
    d = xs - mean
    var = jnp.mean(d * d, axis=axes, keepdims=True)
    inv_std = 1.0 / jnp.sqrt(var + jnp.asarray(epsilon, stash_dtype))
    normalized = (d * inv_std).astype(x.dtype)
    y = normalized * scale
    if bias is not None:
        y = y + bias
    outs = [y, mean, inv_std]
    return outs[:n_outputs] if n_outputs > 1 else y


def _make_layer_norm(node: OnnxNode, inputs):
    stash = int(node.attrs.get("stash_type", 1))
    stash_dtype = onnx_utils.tensor_dtype_to_jnp_dtype(stash)
    axis = int(node.attrs.get("axis", -1))
    epsilon = float(node.attrs.get("epsilon", 1e-5))
    n_outputs = len(node.outputs)

    def fn(*args):
        x = args[0]
        scale = args[1]
        bias = args[2] if len(args) > 2 else None
        return _layer_norm_impl(x, scale, bias, axis=axis, epsilon=epsilon,
                                stash_dtype=stash_dtype, n_outputs=n_outputs)
    return fn


@_register("LayerNormalization")
class LayerNormalization(handler.Handler):
    pass


_versions(LayerNormalization, [17], _make_layer_norm)


# --------------------------------------------------------------------------
# GatherND (11, 12, 13)

def _gather_nd(data, indices, batch_dims):
    k = indices.shape[-1]
    b = batch_dims
    batch_shape = data.shape[:b]
    nb = int(np.prod(batch_shape)) if b else 1
    out_shape = indices.shape[:-1] + data.shape[b + k:]
    d = data.reshape((nb,) + data.shape[b:])
    idx = indices.reshape((nb, -1, k)).astype(jnp.int64)
    dims = jnp.asarray(data.shape[b:b + k], dtype=jnp.int64)
    idx = jnp.where(idx < 0, idx + dims, idx)

    def one(db, ib):  # db [*data.shape[b:]], ib [M, k]
        return db[tuple(ib[:, j] for j in range(k))]

    out = jax.vmap(one)(d, idx)
    return out.reshape(out_shape)


def _make_gather_nd(node: OnnxNode, inputs):
    batch_dims = int(node.attrs.get("batch_dims", 0))
    return lambda data, indices: _gather_nd(data, indices, batch_dims)


@_register("GatherND")
class GatherND(handler.Handler):
    pass


_versions(GatherND, [11, 12, 13], _make_gather_nd)


# --------------------------------------------------------------------------
# Elementwise: IsNaN, Greater, GreaterOrEqual, Gelu

@_register("IsNaN")
class IsNaN(handler.Handler):
    pass


_versions(IsNaN, [9, 13, 20], lambda node, inputs: (lambda x: jnp.isnan(x)))


@_register("Greater")
class Greater(handler.Handler):
    pass


_versions(Greater, [7, 9, 13], lambda node, inputs: (lambda a, b: jnp.greater(a, b)))


@_register("GreaterOrEqual")
class GreaterOrEqual(handler.Handler):
    pass


_versions(GreaterOrEqual, [12, 16],
          lambda node, inputs: (lambda a, b: jnp.greater_equal(a, b)))


def _make_gelu(node: OnnxNode, inputs):
    approximate = node.attrs.get("approximate", "none")
    if isinstance(approximate, bytes):
        approximate = approximate.decode()

    def fn(x):
        half = jnp.asarray(0.5, x.dtype)
        one = jnp.asarray(1.0, x.dtype)
        if approximate == "tanh":
            c = jnp.asarray(math.sqrt(2.0 / math.pi), x.dtype)
            return half * x * (one + jnp.tanh(c * (x + jnp.asarray(0.044715, x.dtype) * x ** 3)))
        if approximate != "none":
            raise ValueError(f"Gelu approximate={approximate!r}")
        return half * x * (one + jax.lax.erf(x / jnp.asarray(math.sqrt(2.0), x.dtype)))
    return fn


@_register("Gelu")
class Gelu(handler.Handler):
    pass


_versions(Gelu, [20], _make_gelu)


# --------------------------------------------------------------------------
# CumSum (11, 14): the axis input is static.

def _make_cumsum(node: OnnxNode, inputs):
    axis = _static_ints(inputs[1])[0]
    exclusive = int(node.attrs.get("exclusive", 0))
    reverse = int(node.attrs.get("reverse", 0))

    def fn(x, _axis=None):
        ax = axis % x.ndim
        y = jnp.flip(x, ax) if reverse else x
        c = jnp.cumsum(y, axis=ax, dtype=x.dtype)
        if exclusive:
            pad = [(0, 0)] * x.ndim
            pad[ax] = (1, 0)
            c = jnp.pad(c, pad)
            c = jax.lax.slice_in_dim(c, 0, x.shape[ax], axis=ax)
        return jnp.flip(c, ax) if reverse else c
    return fn


@_register("CumSum")
class CumSum(handler.Handler):
    pass


_versions(CumSum, [11, 14], _make_cumsum)


# --------------------------------------------------------------------------
# Tile (6, 13): the repeats input is static.

def _make_tile(node: OnnxNode, inputs):
    repeats = _static_ints(inputs[1])
    return lambda x, _repeats=None: jnp.tile(x, repeats)


@_register("Tile")
class Tile(handler.Handler):
    pass


_versions(Tile, [6, 13], _make_tile)


# --------------------------------------------------------------------------
# Softmax (1, 11, 13), replacing jaxonnxruntime's: the same values (a row
# of -inf scores gives NaN, as in onnxruntime), but such a row's gradient
# is zero instead of NaN. Exporters guard those rows (a padding query
# whose keys are all masked) with Where(IsNaN(p), 0, p), so the function
# does not depend on their scores and its derivative there is 0; plain
# autodiff of jax.nn.softmax computes NaN * 0 = NaN and spreads it through
# the whole backward. (Shardflow's rule gives such a row a zero cotangent
# too: docs/training.md, Choices.) jaxonnxruntime's own version_1/11 apply
# the softmax along `axis` alone; these flatten to 2-D at `axis` as those
# versions specify.

def _safe_softmax(x, axis):
    top = jnp.max(x, axis=axis, keepdims=True)
    dead = top == -jnp.inf
    p = jax.nn.softmax(jnp.where(dead, jnp.zeros((), x.dtype), x), axis=axis)
    return jnp.where(dead, jnp.asarray(jnp.nan, x.dtype), p)


def _make_softmax_13(node: OnnxNode, inputs):
    axis = int(node.attrs.get("axis", -1))
    return lambda x: _safe_softmax(x, axis % x.ndim)


def _make_softmax_1(node: OnnxNode, inputs):
    axis = int(node.attrs.get("axis", 1))

    def fn(x):
        ax = axis % x.ndim if x.ndim else 0
        rows = int(np.prod(x.shape[:ax])) if ax else 1
        flat = x.reshape((rows, -1))
        return _safe_softmax(flat, 1).reshape(x.shape)
    return fn


@_register("Softmax")
class Softmax(handler.Handler):
    pass


_versions(Softmax, [1, 11], _make_softmax_1)
_versions(Softmax, [13], _make_softmax_13)
