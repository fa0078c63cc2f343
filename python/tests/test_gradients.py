"""Gradients of nn-differentiate against finite differences.

Per op: each case is one ONNX node in float64 whose result y is reduced to
the scalar loss sum(y * C), C a fixed random cotangent (so every element of
y counts, with its own weight). The model is imported (`shard-opt
--compile-to=import`), differentiated against its inputs
(`--nn-differentiate=wrt=inputs`), compiled for the CPU and run by
shard-run; its `grad:<input>` results are compared with central
differences (h = 1e-6) of the same loss computed by onnx's reference
evaluator (an implementation of the ONNX semantics independent of ours;
numpy for Erf and Gelu, onnxruntime for a negative Pad):
|ours - fd| <= 1e-7 + 1e-6 |fd|. Inputs are drawn away from the points
where an op is not differentiable (relu and abs at 0, ties of max/min).

Whole models: every real export (test/real-exports) with `nn-append-loss`
(cross-entropy on the logits, mean squared error on an encoder's hidden
state) and `nn-differentiate` against every weight, in float32: the loss
against numpy on onnxruntime's outputs, and the gradient's norm against
onnxruntime's central difference of the loss along the gradient. About
15 s in all on 2 cores.
"""
from __future__ import annotations

import math
import subprocess
import zlib

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from shardflow import toolchain

F64 = np.float64
H = 1e-6
RTOL, ATOL = 1e-6, 1e-7


def _away(rng, shape, low=0.3, high=2.0):
    """Values with |x| in [low, high), either sign."""
    return rng.uniform(low, high, shape) * rng.choice([-1.0, 1.0], shape)


def _pos(rng, shape):
    return rng.uniform(0.3, 2.0, shape)


def _any(rng, shape):
    return rng.uniform(-1.5, 1.5, shape)


# name -> (op, [(input shape, sampler)], attrs, constant inputs)
CASES = {
    "add_bcast": ("Add", [((2, 3), _any), ((3,), _any)], {}, {}),
    "sub_bcast": ("Sub", [((2, 3), _any), ((2, 1), _any)], {}, {}),
    "mul_bcast": ("Mul", [((2, 1, 3), _any), ((4, 3), _any)], {}, {}),
    "div_bcast": ("Div", [((2, 3), _any), ((3,), _away)], {}, {}),
    "pow": ("Pow", [((2, 3), _pos), ((3,), _any)], {}, {}),
    "max": ("Max", [((2, 3), _any), ((2, 3), _any)], {}, {}),
    "min_bcast": ("Min", [((2, 3), _any), ((3,), _any)], {}, {}),
    "neg": ("Neg", [((2, 3), _any)], {}, {}),
    "exp": ("Exp", [((2, 3), _any)], {}, {}),
    "log": ("Log", [((2, 3), _pos)], {}, {}),
    "sqrt": ("Sqrt", [((2, 3), _pos)], {}, {}),
    "reciprocal": ("Reciprocal", [((2, 3), _away)], {}, {}),
    "tanh": ("Tanh", [((2, 3), _any)], {}, {}),
    "sigmoid": ("Sigmoid", [((2, 3), _any)], {}, {}),
    "erf": ("Erf", [((2, 3), _any)], {}, {}),
    "sin": ("Sin", [((2, 3), _any)], {}, {}),
    "cos": ("Cos", [((2, 3), _any)], {}, {}),
    "relu": ("Relu", [((2, 3), _away)], {}, {}),
    "abs": ("Abs", [((2, 3), _away)], {}, {}),
    "identity": ("Identity", [((2, 3), _any)], {}, {}),
    "transpose": ("Transpose", [((2, 3, 4), _any)], {"perm": [2, 0, 1]}, {}),
    "flatten": ("Flatten", [((2, 3, 2), _any)], {"axis": 2}, {}),
    "reshape": ("Reshape", [((2, 3, 2), _any)], {}, {"shape": np.array([3, 4], np.int64)}),
    "unsqueeze": ("Unsqueeze", [((2, 3), _any)], {}, {"axes": np.array([1], np.int64)}),
    "squeeze": ("Squeeze", [((2, 1, 3), _any)], {}, {"axes": np.array([1], np.int64)}),
    "expand": ("Expand", [((3, 1), _any)], {}, {"shape": np.array([2, 3, 4], np.int64)}),
    "reduce_sum": ("ReduceSum", [((2, 3, 4), _any)], {"keepdims": 0},
                   {"axes": np.array([0, 2], np.int64)}),
    "reduce_mean_keep": ("ReduceMean", [((2, 3, 4), _any)], {"keepdims": 1},
                         {"axes": np.array([1], np.int64)}),
    "softmax": ("Softmax", [((2, 5), _any)], {"axis": -1}, {}),
    "softmax_axis0": ("Softmax", [((3, 4), _any)], {"axis": 0}, {}),
    "log_softmax": ("LogSoftmax", [((2, 5), _any)], {"axis": 1}, {}),
    "matmul": ("MatMul", [((2, 3), _any), ((3, 4), _any)], {}, {}),
    "matmul_batched_rhs_shared": ("MatMul", [((2, 2, 3), _any), ((3, 4), _any)], {}, {}),
    "matmul_batched_lhs_shared": ("MatMul", [((2, 3), _any), ((2, 3, 4), _any)], {}, {}),
    "gemm_transposed": ("Gemm", [((3, 2), _any), ((4, 3), _any), ((4,), _any)],
                        {"transA": 1, "transB": 1, "alpha": 0.5, "beta": 2.0}, {}),
    "gemm": ("Gemm", [((2, 3), _any), ((3, 4), _any), ((2, 1), _any)], {}, {}),
    "leaky_relu": ("LeakyRelu", [((2, 3), _away)], {"alpha": 0.1}, {}),
    "clip": ("Clip", [((3, 4), _any)], {},
             {"lo": np.array(-0.5, F64), "hi": np.array(0.8, F64)}),
    "gelu": ("Gelu", [((2, 5), _any)], {}, {}),
    "gelu_tanh": ("Gelu", [((2, 5), _any)], {"approximate": "tanh"}, {}),
    "layer_norm": ("LayerNormalization", [((2, 3, 4), _any), ((4,), _any), ((4,), _any)],
                   {"axis": -1, "epsilon": 1e-5}, {}),
    "layer_norm_axis1": ("LayerNormalization", [((2, 3, 4), _any), ((3, 4), _any)],
                         {"axis": 1}, {}),
    "rms_norm": ("RMSNormalization", [((2, 3, 4), _any), ((4,), _any)], {"axis": -1}, {}),
    # A scale broadcast to the normalized [3, 4]: its cotangent sums rows.
    "rms_norm_axis1_scale_bcast": ("RMSNormalization", [((2, 3, 4), _any), ((1, 4), _any)],
                                   {"axis": 1}, {}),
    "rotary": ("RotaryEmbedding", [((1, 3, 8), _any)], {"num_heads": 2},
               {"cos": np.cos(np.arange(6).reshape(3, 2) * 0.7),
                "sin": np.sin(np.arange(6).reshape(3, 2) * 0.7),
                "pos": np.array([[0, 2, 1]], np.int64)}),
    "cumsum": ("CumSum", [((2, 4), _any)], {}, {"axis": np.array(1, np.int64)}),
    "cumsum_exclusive_reverse": ("CumSum", [((3, 2), _any)], {"exclusive": 1, "reverse": 1},
                                 {"axis": np.array(0, np.int64)}),
    "trilu_lower": ("Trilu", [((3, 4), _any)], {"upper": 0}, {}),
    "reduce_max": ("ReduceMax", [((2, 3, 4), _any)], {"keepdims": 0},
                   {"axes": np.array([1], np.int64)}),
    "reduce_min_keep": ("ReduceMin", [((2, 3, 4), _any)], {"keepdims": 1},
                        {"axes": np.array([0, 2], np.int64)}),
    "concat": ("Concat", [((2, 3), _any), ((2, 2), _any)], {"axis": 1}, {}),
    "split": ("Split", [((2, 6), _any)], {"axis": 1}, {"sizes": np.array([2, 4], np.int64)}),
    "slice": ("Slice", [((3, 5), _any)], {},
              {"starts": np.array([1, -4], np.int64), "ends": np.array([3, 4], np.int64),
               "axes": np.array([0, 1], np.int64)}),
    "gather_rows": ("Gather", [((5, 3), _any)], {},
                    {"idx": np.array([[0, 2], [4, 0], [-1, 0]], np.int64)}),
    "pad": ("Pad", [((2, 3), _any)], {},
            {"pads": np.array([1, 0, 0, 2], np.int64)}),
    "pad_crop": ("Pad", [((3, 4), _any)], {},
                 {"pads": np.array([-1, 1, 0, -2], np.int64)}),
    "mod_fmod": ("Mod", [((2, 3), _any), ((3,), _away)], {"fmod": 1}, {}),
    "reduce_prod": ("ReduceProd", [((2, 3, 4), _any)], {"keepdims": 0},
                    {"axes": np.array([1], np.int64)}),
    "topk": ("TopK", [((3, 5), _any)], {"axis": -1}, {"k": np.array([2], np.int64)}),
    "attention": ("Attention", [((1, 2, 3, 4), _any), ((1, 2, 5, 4), _any),
                                ((1, 2, 5, 3), _any)], {}, {}),
    "attention_gqa_causal": ("Attention", [((2, 4, 3, 4), _any), ((2, 2, 3, 4), _any),
                                           ((2, 2, 3, 4), _any)],
                             {"is_causal": 1, "scale": 0.5}, {}),
    "attention_mask_softcap": ("Attention", [((1, 2, 3, 4), _any), ((1, 2, 5, 4), _any),
                                             ((1, 2, 5, 3), _any), ((3, 5), _any)],
                               {"softcap": 2.0}, {}),
    # A boolean mask (a constant: not differentiated) with a fully masked
    # query row, and 3-D [B, S, H*D] inputs with grouped-query heads: the
    # fused backward (nn.attention_grad) handles both.
    "attention_boolmask_softcap": ("Attention", [((1, 2, 3, 4), _any), ((1, 2, 5, 4), _any),
                                                 ((1, 2, 5, 3), _any)],
                                   {"softcap": 1.5},
                                   {"mask": np.array([[1, 0, 1, 1, 0], [0, 0, 0, 0, 0],
                                                      [1, 1, 1, 0, 1]], bool)}),
    "attention_3d_gqa": ("Attention", [((2, 3, 8), _any), ((2, 4, 4), _any), ((2, 4, 6), _any)],
                         {"q_num_heads": 4, "kv_num_heads": 2}, {}),
    "conv_patches": ("Conv", [((2, 3, 8, 8), _any), ((4, 3, 4, 4), _any), ((4,), _any)],
                     {"strides": [4, 4]}, {}),
    "conv_padded_dilated": ("Conv", [((1, 2, 5, 6), _any), ((3, 2, 2, 3), _any)],
                            {"pads": [1, 0, 0, 2], "dilations": [2, 1]}, {}),
    "conv_1d": ("Conv", [((2, 2, 7), _any), ((3, 2, 3), _any), ((3,), _any)],
                {"pads": [1, 1]}, {}),
    "global_average_pool": ("GlobalAveragePool", [((2, 3, 4, 2), _any)], {}, {}),
    "batch_norm": ("BatchNormalization", [((2, 3, 4), _any), ((3,), _any), ((3,), _any),
                                          ((3,), _any), ((3,), _pos)], {"epsilon": 1e-3}, {}),
    "einsum_contract": ("Einsum", [((2, 3, 4), _any), ((4, 5), _any)],
                        {"equation": "bij,jk->bik"}, {}),
    "einsum_outer_sum": ("Einsum", [((3, 4), _any), ((4, 2), _any), ((2,), _any)],
                         {"equation": "ij,jk,k->i"}, {}),
    "gather_elements": ("GatherElements", [((3, 4), _any)], {"axis": 1},
                        {"idx": np.array([[0, 3, 3], [-1, 1, 0], [2, 2, 2]], np.int64)}),
    "softmax_cross_entropy": ("SoftmaxCrossEntropyLoss", [((4, 5), _any)],
                              {"ignore_index": 2, "reduction": "mean"},
                              {"labels": np.array([1, 2, 4, 0], np.int64)}),
    "max_pool": ("MaxPool", [((2, 2, 5, 4), _any)],
                 {"kernel_shape": [2, 2], "strides": [2, 1], "pads": [1, 0, 0, 0]}, {}),
    "conv_strided_padded": ("Conv", [((1, 2, 7, 8), _any), ((3, 2, 3, 2), _any)],
                            {"strides": [2, 3], "pads": [1, 0, 1, 1]}, {}),
    # Pads not counted: the windows at the border divide by fewer.
    "average_pool": ("AveragePool", [((2, 2, 5, 4), _any)],
                     {"kernel_shape": [2, 3], "strides": [2, 1], "pads": [1, 0, 0, 1]}, {}),
    "average_pool_include_pad_1d": ("AveragePool", [((1, 3, 7), _any)],
                                    {"kernel_shape": [3], "strides": [2], "pads": [1, 1],
                                     "count_include_pad": 1}, {}),
    "average_pool_dilated": ("AveragePool", [((1, 2, 6, 5), _any)],
                             {"kernel_shape": [2, 2], "dilations": [2, 1], "strides": [1, 2]},
                             {}),
    "scatter_nd": ("ScatterND", [((4, 3), _any), ((2, 3), _any)], {},
                   {"idx": np.array([[3], [1]], np.int64)}),
    "scatter_nd_add_tuples": ("ScatterND", [((3, 4, 2), _any), ((3, 2), _any)],
                              {"reduction": "add"},
                              {"idx": np.array([[0, 1], [2, 3], [0, 1]], np.int64)}),
}
# Inputs that are constants of the case (none now).
CONSTANT_INPUTS: dict[str, set[str]] = {}
# The node's inputs in ONNX's order, where constants come between floats.
INPUT_ORDER = {"scatter_nd": ["x0", "idx", "x1"], "scatter_nd_add_tuples": ["x0", "idx", "x1"]}
# Cases whose op needs a later opset than 18, and ops with several results
# (each gets its own cotangent in the loss).
OPSET = {"gelu": 20, "gelu_tanh": 20, "rms_norm": 23, "rms_norm_axis1_scale_bcast": 23, "rotary": 23, "attention": 23,
         "attention_gqa_causal": 23, "attention_mask_softcap": 23,
         "attention_boolmask_softcap": 23, "attention_3d_gqa": 23, "average_pool_dilated": 19}
OUTPUTS = {"split": 2, "topk": 2}
# Results that are not differentiable (topk's indices): left out of the loss.
INTEGER_OUTPUTS = {"topk": {"y1"}}


# onnx's reference Pad refuses negative pads (a crop): onnxruntime then.
ORT_LOSS = {"pad_crop"}


def _evaluator(name, model):
    if name in ORT_LOSS:
        import onnxruntime as ort

        return ort.InferenceSession(model.SerializeToString(),
                                    providers=["CPUExecutionProvider"])
    return ReferenceEvaluator(model)


def _model(name):
    op, inputs, attrs, consts = CASES[name]
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    feeds = {f"x{i}": sampler(rng, shape).astype(F64)
             for i, (shape, sampler) in enumerate(inputs)}
    opset = OPSET.get(name, 18)
    outputs = [f"y{k}" for k in range(OUTPUTS.get(name, 1))]
    node = helper.make_node(op, INPUT_ORDER.get(name, list(feeds) + list(consts)), outputs,
                            **attrs)
    fixed = CONSTANT_INPUTS.get(name, set())
    inits = [numpy_helper.from_array(v, n) for n, v in consts.items()]
    inits += [numpy_helper.from_array(feeds.pop(n), n) for n in sorted(fixed)]
    # The results' shapes from the reference evaluator, for the cotangents.
    probe = helper.make_graph(
        [node], "probe",
        [helper.make_tensor_value_info(n, TensorProto.DOUBLE, v.shape) for n, v in feeds.items()],
        [helper.make_tensor_value_info(y, TensorProto.DOUBLE, None) for y in outputs], inits)
    probe_model = helper.make_model(probe, opset_imports=[helper.make_opsetid("", opset)],
                                    ir_version=10)
    shapes = [y.shape for y in _evaluator(name, probe_model).run(None, feeds)]
    nodes, terms = [node], []
    for y, shape in zip(outputs, shapes):
        if y in INTEGER_OUTPUTS.get(name, ()):
            continue
        inits.append(numpy_helper.from_array(rng.uniform(-1, 1, shape).astype(F64), f"c{y}"))
        nodes += [helper.make_node("Mul", [y, f"c{y}"], [f"m{y}"]),
                  helper.make_node("ReduceSum", [f"m{y}"], [f"s{y}"], keepdims=0)]
        terms.append(f"s{y}")
    nodes.append(helper.make_node("Sum", terms, ["loss"]) if len(terms) > 1
                 else helper.make_node("Identity", terms, ["loss"]))
    graph = helper.make_graph(
        nodes, name,
        [helper.make_tensor_value_info(n, TensorProto.DOUBLE, v.shape) for n, v in feeds.items()],
        [helper.make_tensor_value_info("loss", TensorProto.DOUBLE, [])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                             ir_version=10), feeds


# onnx's reference Erf is a polynomial approximation, whose differences
# over h = 1e-6 are noise: the loss of that case uses the C library's erf.
_ERF = np.vectorize(math.erf)
NUMPY_LOSS = {"erf": lambda f, cot: float(np.sum(_ERF(f["x0"]) * cot)),
              # The gelu's normal CDF too.
              "gelu": lambda f, cot: float(np.sum(
                  0.5 * f["x0"] * (1 + _ERF(f["x0"] / math.sqrt(2))) * cot))}


def _finite_differences(name, model, feeds):
    ref = _evaluator(name, model)
    loss = lambda f: float(ref.run(["loss"], f)[0])  # noqa: E731
    if name in NUMPY_LOSS:
        cot = next(numpy_helper.to_array(t) for t in model.graph.initializer if t.name == "cy0")
        loss = lambda f: NUMPY_LOSS[name](f, cot)  # noqa: E731
    grads = {}
    for input_name, x in feeds.items():
        g = np.zeros_like(x)
        for i in np.ndindex(x.shape):
            plus, minus = x.copy(), x.copy()
            plus[i] += H
            minus[i] -= H
            g[i] = (loss({**feeds, input_name: plus}) -
                    loss({**feeds, input_name: minus})) / (2 * H)
        grads[input_name] = g
    return grads


def _shard_opt(*args):
    out = subprocess.run([str(toolchain.tool("shard-opt")), *map(str, args)],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return out


# Cases only the fused backward differentiates (the composed attention
# backward takes 4-D inputs): test_fused_gradient_matches_finite_differences.
FUSED_ONLY = {"attention_3d_gqa"}


def _differentiate_option(fused):
    """nn-differentiate against the inputs, with every fused backward op
    (fused=all, the CPU target's form) or none."""
    return "--nn-differentiate=wrt=inputs loss=loss" + (" fused=all" if fused else "")


def _check_against_finite_differences(tmp_path, name, fused):
    """Differentiates case `name` against its inputs (with the fused
    backward ops or without), runs it on the CPU and compares with central
    differences; returns the differentiated program's text."""
    model, feeds = _model(name)
    onnx.save(model, tmp_path / "model.onnx")
    _shard_opt(tmp_path / "model.onnx", "--compile-to=import", "-o", tmp_path / "nn.mlir")
    _shard_opt(tmp_path / "nn.mlir", _differentiate_option(fused), "-o", tmp_path / "grad.mlir")
    _shard_opt(tmp_path / "grad.mlir", "--target", "cpu", "-o", tmp_path / "grad.shard")
    ours = toolchain.run_artifact(tmp_path / "grad.shard", feeds)
    want = _finite_differences(name, model, feeds)
    for x, g in want.items():
        np.testing.assert_allclose(ours[f"grad:{x}"], g, rtol=RTOL, atol=ATOL,
                                   err_msg=f"d loss / d {x}")
    return (tmp_path / "grad.mlir").read_text()


@pytest.mark.parametrize("name", sorted(set(CASES) - FUSED_ONLY))
def test_gradient_matches_finite_differences(tmp_path, name):
    _check_against_finite_differences(tmp_path, name, False)


# The fused backward ops (nn-differentiate's fused=all, the CPU target's
# form) and the op each case must become; the float mask that is an input
# wants a cotangent, which only the composed backward gives.
FUSED = {"gelu": "nn.gelu_grad", "gelu_tanh": "nn.gelu_grad",
         "layer_norm": "nn.normalization_grad", "layer_norm_axis1": "nn.normalization_grad",
         "rms_norm": "nn.normalization_grad", "rms_norm_axis1_scale_bcast": "nn.normalization_grad",
         "attention": "nn.attention_grad", "attention_gqa_causal": "nn.attention_grad",
         "attention_boolmask_softcap": "nn.attention_grad",
         "attention_3d_gqa": "nn.attention_grad", "attention_mask_softcap": None}


@pytest.mark.parametrize("name", sorted(FUSED))
def test_fused_gradient_matches_finite_differences(tmp_path, name):
    program = _check_against_finite_differences(tmp_path, name, True)
    if FUSED[name]:
        assert FUSED[name] in program, program
    else:
        assert "nn.attention_grad" not in program, program


def _attention_model(q_shape, kv_shape, attrs, mask=None, dtype=np.float32):
    """One Attention node (opset 23) and the loss sum(y * C)."""
    rng = np.random.default_rng(7)
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    feeds = {"q": rng.uniform(-1.5, 1.5, q_shape).astype(dtype),
             "k": rng.uniform(-1.5, 1.5, kv_shape[0]).astype(dtype),
             "v": rng.uniform(-1.5, 1.5, kv_shape[1]).astype(dtype)}
    inits = []
    names = ["q", "k", "v"]
    if mask is not None:
        inits.append(numpy_helper.from_array(mask, "mask"))
        names.append("mask")
    probe = ReferenceEvaluator(helper.make_model(helper.make_graph(
        [helper.make_node("Attention", names, ["y"], **attrs)], "probe",
        [helper.make_tensor_value_info(n, elem, v.shape) for n, v in feeds.items()],
        [helper.make_tensor_value_info("y", elem, None)], inits),
        opset_imports=[helper.make_opsetid("", 23)], ir_version=10))
    y = probe.run(None, feeds)[0]
    inits.append(numpy_helper.from_array(rng.uniform(-1, 1, y.shape).astype(dtype), "c"))
    graph = helper.make_graph(
        [helper.make_node("Attention", names, ["y"], **attrs),
         helper.make_node("Mul", ["y", "c"], ["m"]),
         helper.make_node("ReduceSum", ["m"], ["loss"], keepdims=0)], "attention",
        [helper.make_tensor_value_info(n, elem, v.shape) for n, v in feeds.items()],
        [helper.make_tensor_value_info("loss", elem, [])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)],
                             ir_version=10), feeds


# Shapes past one block of query rows (32 under a causal mask, up to 256
# otherwise) and head sizes of real models; each fused run against the
# composed backward of the same program (4-D: the composed form's), in
# f32.
FUSED_ATTENTION = {
    "causal_gqa_blocks": ((2, 4, 70, 16), ((2, 2, 70, 16), (2, 2, 70, 16)), {"is_causal": 1}, None),
    "cross_lengths": ((1, 2, 40, 32), ((1, 2, 300, 32), (1, 2, 300, 24)), {"scale": 0.3}, None),
    "softcap_bool_mask": ((2, 4, 33, 16), ((2, 2, 45, 16), (2, 2, 45, 16)), {"softcap": 3.0},
                          np.random.default_rng(3).uniform(0, 1, (2, 1, 33, 45)) > 0.3),
}


@pytest.mark.parametrize("case", sorted(FUSED_ATTENTION))
def test_fused_attention_backward_matches_composition(tmp_path, case):
    q_shape, kv_shapes, attrs, mask = FUSED_ATTENTION[case]
    if mask is not None:
        mask[0, 0, 5, :] = False  # a fully masked row: zeros
    model, feeds = _attention_model(q_shape, kv_shapes, attrs, mask)
    onnx.save(model, tmp_path / "model.onnx")
    _shard_opt(tmp_path / "model.onnx", "--compile-to=import", "-o", tmp_path / "nn.mlir")
    grads = {}
    for fused in (True, False):
        _shard_opt(tmp_path / "nn.mlir", _differentiate_option(fused),
                   "-o", tmp_path / f"grad-{fused}.mlir")
        assert ("nn.attention_grad" in (tmp_path / f"grad-{fused}.mlir").read_text()) == fused
        _shard_opt(tmp_path / f"grad-{fused}.mlir", "--target", "cpu",
                   "-o", tmp_path / f"grad-{fused}.shard")
        grads[fused] = toolchain.run_artifact(tmp_path / f"grad-{fused}.shard", feeds)
    for x in feeds:
        got, want = grads[True][f"grad:{x}"], grads[False][f"grad:{x}"]
        assert np.abs(want).max() > 1e-3
        np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-5 * np.abs(want).max(),
                                   err_msg=f"d loss / d {x}")


# The CUDA attention backward (a warp per query row for dQ and the rows'
# log-sum-exp and rowsum(P * dP), then a warp per key row for dK and dV)
# on the CUDA stand-ins, against the CPU kernel: the composition cases,
# smaller (the CPU's row blocks do not matter here and every emulated
# thread is a fiber), and a 3-D grouped-query causal one, f32.
CUDA_ATTENTION = {
    "causal_gqa": ((1, 4, 40, 16), ((1, 2, 40, 16), (1, 2, 40, 16)), {"is_causal": 1}, None),
    "cross_lengths": ((1, 2, 24, 32), ((1, 2, 100, 32), (1, 2, 100, 24)), {"scale": 0.3}, None),
    "softcap_bool_mask": ((1, 4, 33, 16), ((1, 2, 45, 16), (1, 2, 45, 16)), {"softcap": 3.0},
                          np.random.default_rng(3).uniform(0, 1, (1, 1, 33, 45)) > 0.3),
    "3d_gqa_causal": ((2, 33, 4 * 16), ((2, 33, 2 * 16), (2, 33, 2 * 16)),
                      {"q_num_heads": 4, "kv_num_heads": 2, "is_causal": 1}, None)}


@pytest.mark.parametrize("case", sorted(CUDA_ATTENTION))
def test_fused_attention_backward_on_cuda_matches_cpu(tmp_path, case):
    from shardflow import standin
    if not (standin.library_dir() / "libcuda.so.1").exists():
        pytest.skip("the CUDA stand-ins are not built (no CUDA toolkit)")
    q_shape, kv_shapes, attrs, mask = CUDA_ATTENTION[case]
    if mask is not None:
        mask = mask.copy()
        mask[0, 0, 5, :] = False  # a fully masked row: zeros
    model, feeds = _attention_model(q_shape, kv_shapes, attrs, mask)
    onnx.save(model, tmp_path / "model.onnx")
    _shard_opt(tmp_path / "model.onnx", "--compile-to=import", "-o", tmp_path / "nn.mlir")
    _shard_opt(tmp_path / "nn.mlir", _differentiate_option(True), "-o", tmp_path / "grad.mlir")
    _shard_opt(tmp_path / "grad.mlir", "--target", "cpu", "-o", tmp_path / "cpu.shard")
    want = toolchain.run_artifact(tmp_path / "cpu.shard", feeds)
    ir = standin.compile_cuda(tmp_path / "grad.mlir", tmp_path / "cuda.shard")
    assert '"attention_grad"' in ir
    got = standin.run(tmp_path / "cuda.shard", feeds)
    for x in feeds:
        w, g = want[f"grad:{x}"], got[f"grad:{x}"]
        assert np.abs(w).max() > 1e-3
        np.testing.assert_allclose(g, w, rtol=2e-4, atol=2e-5 * np.abs(w).max(),
                                   err_msg=f"d loss / d {x}")


# Norms over rows longer than a vector step and more rows than one partial
# sum of the scale's cotangent (32), in f32: fused against composed.
FUSED_NORMS = {
    "layer_norm_rows": ("LayerNormalization", (3, 50, 96), -1, True, 17),
    "layer_norm_2d_rows": ("LayerNormalization", (70, 6, 40), 1, False, 17),
    "rms_norm_rows": ("RMSNormalization", (4, 40, 130), -1, False, 23),
}


@pytest.mark.parametrize("case", sorted(FUSED_NORMS))
def test_fused_normalization_backward_matches_composition(tmp_path, case):
    op, shape, axis, bias, opset = FUSED_NORMS[case]
    rng = np.random.default_rng(11)
    norm_shape = shape[axis:]
    feeds = {"x": (rng.standard_normal(shape) * 3 + 1).astype(np.float32),
             "scale": rng.uniform(0.5, 1.5, norm_shape).astype(np.float32)}
    names = ["x", "scale"]
    if bias:
        feeds["bias"] = rng.uniform(-1, 1, norm_shape).astype(np.float32)
        names.append("bias")
    inits = [numpy_helper.from_array(rng.uniform(-1, 1, shape).astype(np.float32), "c")]
    graph = helper.make_graph(
        [helper.make_node(op, names, ["y"], axis=axis),
         helper.make_node("Mul", ["y", "c"], ["m"]),
         helper.make_node("ReduceSum", ["m"], ["loss"], keepdims=0)], "norm",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, v.shape) for n, v in feeds.items()],
        [helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                                ir_version=10), tmp_path / "model.onnx")
    _shard_opt(tmp_path / "model.onnx", "--compile-to=import", "-o", tmp_path / "nn.mlir")
    grads = {}
    for fused in (True, False):
        _shard_opt(tmp_path / "nn.mlir", _differentiate_option(fused),
                   "-o", tmp_path / f"grad-{fused}.mlir")
        text = (tmp_path / f"grad-{fused}.mlir").read_text()
        assert ("nn.normalization_grad" in text and "nn.normalization_scale_grad" in text) == fused
        _shard_opt(tmp_path / f"grad-{fused}.mlir", "--target", "cpu",
                   "-o", tmp_path / f"grad-{fused}.shard")
        grads[fused] = toolchain.run_artifact(tmp_path / f"grad-{fused}.shard", feeds,
                                              extra=["--threads", "2"])
    # The fused kernels' sums do not depend on the thread count.
    one = toolchain.run_artifact(tmp_path / "grad-True.shard", feeds, extra=["--threads", "1"])
    for x in feeds:
        got, want = grads[True][f"grad:{x}"], grads[False][f"grad:{x}"]
        np.testing.assert_array_equal(one[f"grad:{x}"], got)
        assert np.abs(want).max() > 1e-2
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5 * np.abs(want).max(),
                                   err_msg=f"d loss / d {x}")


# The fused backward ops the CUDA target writes (nn.gelu_grad: generated
# elementwise code; nn.normalization_grad: a generated row kernel;
# nn.normalization_scale_grad: rewritten into the forward row kernel, a
# product and a row sum), run on the CUDA stand-ins against the CPU
# backend's kernels, in f32.
CUDA_FUSED = {
    "layer_norm_rows": ("LayerNormalization", (3, 50, 96), {"axis": -1}, True, 17),
    "layer_norm_block_rows": ("LayerNormalization", (6, 1100), {"axis": -1}, False, 17),
    "rms_norm_2d_rows": ("RMSNormalization", (70, 6, 40), {"axis": 1}, False, 23),
    "gelu": ("Gelu", (7, 130), {}, False, 20),
    "gelu_tanh": ("Gelu", (7, 130), {"approximate": "tanh"}, False, 20),
}


@pytest.mark.parametrize("case", sorted(CUDA_FUSED))
def test_fused_backward_on_cuda_matches_cpu(tmp_path, case):
    from shardflow import standin
    if not (standin.library_dir() / "libcuda.so.1").exists():
        pytest.skip("the CUDA stand-ins are not built (no CUDA toolkit)")
    op, shape, attrs, bias, opset = CUDA_FUSED[case]
    rng = np.random.default_rng(5)
    feeds = {"x": (rng.standard_normal(shape) * 2 + 0.5).astype(np.float32)}
    names = ["x"]
    if op != "Gelu":
        norm_shape = shape[attrs["axis"]:]
        feeds["scale"] = rng.uniform(0.5, 1.5, norm_shape).astype(np.float32)
        names.append("scale")
        if bias:
            feeds["bias"] = rng.uniform(-1, 1, norm_shape).astype(np.float32)
            names.append("bias")
    inits = [numpy_helper.from_array(rng.uniform(-1, 1, shape).astype(np.float32), "c")]
    graph = helper.make_graph(
        [helper.make_node(op, names, ["y"], **attrs),
         helper.make_node("Mul", ["y", "c"], ["m"]),
         helper.make_node("ReduceSum", ["m"], ["loss"], keepdims=0)], case,
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, v.shape) for n, v in feeds.items()],
        [helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                                ir_version=10), tmp_path / "model.onnx")
    _shard_opt(tmp_path / "model.onnx", "--compile-to=import", "-o", tmp_path / "nn.mlir")
    _shard_opt(tmp_path / "nn.mlir",
               "--nn-differentiate=wrt=inputs loss=loss fused=gelu,normalization",
               "-o", tmp_path / "grad.mlir")
    text = (tmp_path / "grad.mlir").read_text()
    assert ("nn.gelu_grad" if op == "Gelu" else "nn.normalization_scale_grad") in text
    _shard_opt(tmp_path / "grad.mlir", "--target", "cpu", "-o", tmp_path / "cpu.shard")
    want = toolchain.run_artifact(tmp_path / "cpu.shard", feeds)
    ir = standin.compile_cuda(tmp_path / "grad.mlir", tmp_path / "cuda.shard")
    if op != "Gelu":
        # The scale's cotangent: the forward row kernel with the product
        # as its epilogue, then a row sum; the input's: one row kernel.
        assert "normalization_scale_grad" not in ir and "normalization_grad" in ir
    got = standin.run(tmp_path / "cuda.shard", feeds)
    for x in feeds:
        w, g = want[f"grad:{x}"], got[f"grad:{x}"]
        assert np.abs(w).max() > 1e-2
        np.testing.assert_allclose(g, w, rtol=2e-5, atol=2e-5 * np.abs(w).max(),
                                   err_msg=f"d loss / d {x}")


# nn-append-loss's cross-entropy differentiated against the logits, in
# float64, against central differences of the loss written out in numpy:
# the fused backward (nn.softmax_cross_entropy_grad) and the composed one;
# ignored positions, an ignore index that is also a class, and the row max
# taken in blocks (the form a vocabulary split over ranks gets).
CROSS_ENTROPY = {"default": ((2, 3, 6), -100, 1),
                 "ignore_index_is_a_class": ((4, 5), 2, 1),
                 "blocked_max": ((3, 8), -100, 4)}


def _cross_entropy_model(shape, dtype):
    """logits = x * c, c a constant: the model whose output nn-append-loss
    takes."""
    rng = np.random.default_rng(11)
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    c = rng.uniform(0.5, 1.5, shape).astype(dtype)
    graph = helper.make_graph(
        [helper.make_node("Mul", ["x", "c"], ["logits"])], "ce",
        [helper.make_tensor_value_info("x", elem, shape)],
        [helper.make_tensor_value_info("logits", elem, shape)],
        [numpy_helper.from_array(c, "c")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                             ir_version=10), c


def _cross_entropy_labels(shape, ignore, seed=12):
    labels = np.random.default_rng(seed).integers(0, shape[-1], shape[:-1]).astype(np.int64)
    labels.reshape(-1)[::3] = ignore
    return labels


def _differentiated_cross_entropy(tmp_path, model, ignore, blocks, fused):
    onnx.save(model, tmp_path / "model.onnx")
    _shard_opt(tmp_path / "model.onnx", "--compile-to=import", "-o", tmp_path / "nn.mlir")
    _shard_opt(tmp_path / "nn.mlir",
               f"--nn-append-loss=ignore-index={ignore} max-blocks={blocks}",
               "--nn-differentiate=wrt=inputs loss=loss" + (" fused=cross-entropy" if fused else ""),
               "-o", tmp_path / "grad.mlir")
    return tmp_path / "grad.mlir"


@pytest.mark.parametrize("fused", [False, True], ids=["composed", "fused"])
@pytest.mark.parametrize("case", sorted(CROSS_ENTROPY))
def test_cross_entropy_gradient_matches_finite_differences(tmp_path, case, fused):
    shape, ignore, blocks = CROSS_ENTROPY[case]
    model, c = _cross_entropy_model(shape, F64)
    grad = _differentiated_cross_entropy(tmp_path, model, ignore, blocks, fused)
    program = grad.read_text()
    assert ("nn.softmax_cross_entropy_grad" in program) == fused, program
    assert "nn.softmax_cross_entropy " not in program, program
    _shard_opt(grad, "--target", "cpu", "-o", tmp_path / "grad.shard")
    x = np.random.default_rng(13).uniform(-3, 3, shape)
    labels = _cross_entropy_labels(shape, ignore)
    ours = toolchain.run_artifact(tmp_path / "grad.shard", {"x": x, "labels": labels})
    valid = labels != ignore

    def loss(v):
        logits = v * c
        shifted = logits - logits.max(axis=-1, keepdims=True)
        logp = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
        picked = np.take_along_axis(logp, np.where(valid, labels, 0)[..., None], axis=-1)[..., 0]
        return float(-(picked * valid).sum() / max(valid.sum(), 1))

    assert abs(float(ours["loss"]) - loss(x)) <= 1e-12 * abs(loss(x))
    want = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        plus, minus = x.copy(), x.copy()
        plus[i] += H
        minus[i] -= H
        want[i] = (loss(plus) - loss(minus)) / (2 * H)
    # Ignored rows get exactly nothing.
    assert not np.any(ours["grad:x"][~valid])
    np.testing.assert_allclose(ours["grad:x"], want, rtol=RTOL, atol=ATOL)


def test_cross_entropy_backward_on_cuda_matches_cpu(tmp_path):
    """The fused cross-entropy backward as generated CUDA code (on the
    stand-ins) against the CPU kernel, in f32, over 30 rows of 1000
    classes with ignored positions."""
    from shardflow import standin
    if not (standin.library_dir() / "libcuda.so.1").exists():
        pytest.skip("the CUDA stand-ins are not built (no CUDA toolkit)")
    shape = (3, 10, 1000)
    model, _ = _cross_entropy_model(shape, np.float32)
    grad = _differentiated_cross_entropy(tmp_path, model, -100, 1, True)
    feeds = {"x": np.random.default_rng(14).uniform(-4, 4, shape).astype(np.float32),
             "labels": _cross_entropy_labels(shape, -100)}
    _shard_opt(grad, "--target", "cpu", "-o", tmp_path / "cpu.shard")
    want = toolchain.run_artifact(tmp_path / "cpu.shard", feeds)
    ir = standin.compile_cuda(grad, tmp_path / "cuda.shard")
    assert "softmax_cross_entropy_grad" in ir
    got = standin.run(tmp_path / "cuda.shard", feeds)
    w, g = want["grad:x"], got["grad:x"]
    assert np.abs(w).max() > 1e-4
    np.testing.assert_allclose(g, w, rtol=2e-5, atol=2e-5 * np.abs(w).max())
    assert abs(float(got["loss"]) - float(want["loss"])) <= 1e-5 * abs(float(want["loss"]))


def test_loss_must_be_a_float_scalar(tmp_path):
    mlir = tmp_path / "m.mlir"
    mlir.write_text(
        'func.func @main(%x: tensor<3xf64> {nn.name = "x"}) -> (tensor<3xf64> {nn.name = "y"}) {\n'
        '  %y = nn.exp %x : (tensor<3xf64>) -> tensor<3xf64>\n'
        '  return %y : tensor<3xf64>\n}\n')
    out = subprocess.run([str(toolchain.tool("shard-opt")), str(mlir),
                          "--nn-differentiate=wrt=inputs"], capture_output=True, text=True)
    assert out.returncode != 0
    assert "the loss 'y' must be a float scalar, got 'tensor<3xf64>'" in out.stderr


def test_an_op_without_a_rule_is_named(tmp_path):
    mlir = tmp_path / "m.mlir"
    mlir.write_text(
        'func.func @main(%x: tensor<4xf64> {nn.name = "x"}, %u: tensor<2xf64> {nn.name = "u"})'
        ' -> (tensor<f64> {nn.name = "l"}) {\n'
        '  %i = nn.constant dense<[[0], [2]]> : tensor<2x1xi64>\n'
        '  %p = nn.scatter_nd %x, %i, %u {reduction = "mul"}'
        ' : (tensor<4xf64>, tensor<2x1xi64>, tensor<2xf64>) -> tensor<4xf64>\n'
        '  %s = nn.reduce_sum %p {axes = array<i64: 0>, keepdims = false}'
        ' : (tensor<4xf64>) -> tensor<f64>\n'
        '  return %s : tensor<f64>\n}\n')
    out = subprocess.run([str(toolchain.tool("shard-opt")), str(mlir),
                          "--nn-differentiate=wrt=inputs"], capture_output=True, text=True)
    assert out.returncode != 0
    assert "'nn.scatter_nd' op has no gradient rule yet for reduction 'mul'" in out.stderr


# --------------------------------------------------------------------------
# Whole real exports: nn-append-loss, then nn-differentiate against every
# weight (the initializers over --embed-limit-bytes, nn.weight).
# --------------------------------------------------------------------------

from shardflow import real_exports  # noqa: E402

# Exports with an op that has no gradient rule yet on a weight's path
# (none on 2026-11-28).
NO_RULE_YET: dict[str, str] = {}
# Encoders' first output is a hidden state: a mean squared error to random
# targets; the others' are logits: cross-entropy.
ENCODER_FAMILIES = {"bert", "roberta", "distilbert", "minilm", "vit", "t5-encoder"}
GRAD_EXPORTS = [n for n in real_exports.export_names() if "8l" not in n]


def _is_encoder(export):
    family = export.entry["family"]
    return family in ENCODER_FAMILIES or export.entry.get("config", {}).get(
        "model_class") in ("BertModel", "T5EncoderModel", "RobertaModel", "DistilBertModel")


def _numpy_loss(output, labels, mse):
    output = output.astype(np.float64)
    if mse:
        return float(np.mean((output - labels) ** 2))
    shifted = output - output.max(axis=-1, keepdims=True)
    logp = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
    valid = labels != -100
    picked = np.take_along_axis(logp, np.where(valid, labels, 0)[..., None], axis=-1)[..., 0]
    return float(-(picked * valid).sum() / max(valid.sum(), 1))


@pytest.mark.parametrize("name", GRAD_EXPORTS)
def test_real_export_gradient_along_a_direction(tmp_path, name):
    """The loss against numpy on onnxruntime's outputs (1e-5), and the
    gradient's norm against the central difference of that loss along the
    gradient, computed by onnxruntime on the export with its weights moved
    by +-0.002 and +-0.001 of the unit gradient, extrapolated (within 1e-2
    relative + 5e-4: float32)."""
    export = real_exports.load(name)
    for f in export.folder.iterdir():  # the model and its external data
        (tmp_path / f.name).symlink_to(f)
    model_path = tmp_path / "model.onnx"
    flags = export.shape_flags(tmp_path)
    if name in NO_RULE_YET:
        _shard_opt(model_path, *flags, "--compile-to=import", "-o", tmp_path / "a.mlir")
        out = subprocess.run([str(toolchain.tool("shard-opt")), str(tmp_path / "a.mlir"),
                              "--nn-append-loss", "--nn-differentiate=loss=loss"],
                             capture_output=True, text=True)
        assert out.returncode != 0 and "has no gradient rule yet" in out.stderr, out.stderr
        pytest.xfail(NO_RULE_YET[name])
    mse = _is_encoder(export)
    inputs, expected = export.inputs(), export.expected()
    first = next(iter(expected))
    output = expected[first]
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    if mse:
        labels = rng.standard_normal(output.shape).astype(output.dtype)
    else:
        labels = rng.integers(0, output.shape[-1], output.shape[:-1]).astype(np.int64)
        labels.reshape(-1)[::5] = -100
        # Padding positions do not count (as in Hugging Face's training):
        # their queries see only masked keys, whose scores the mask's
        # finfo.min absorbs in float32, so that the float32 loss does not
        # depend on them while the exact one does.
        mask = inputs.get("attention_mask")
        if mask is not None and mask.shape == labels.shape:
            labels[mask == 0] = -100
    # With locations: they tell embedded initializers from other constants.
    _shard_opt(model_path, *flags, "--compile-to=import", "--mlir-print-debuginfo",
               "-o", tmp_path / "a.mlir")
    _shard_opt(tmp_path / "a.mlir", f"--nn-append-loss=kind={'mse' if mse else 'cross-entropy'}",
               "--nn-differentiate=loss=loss", "-o", tmp_path / "g.mlir")
    _shard_opt(tmp_path / "g.mlir", "--target", "cpu", "-o", tmp_path / "g.shard")
    ours = toolchain.run_artifact(tmp_path / "g.shard", {**inputs, "labels": labels})
    assert abs(ours["loss"] - _numpy_loss(output, labels, mse)) <= 1e-5 * abs(ours["loss"]) + 1e-6
    grads = {k[len("grad:"):]: v for k, v in ours.items() if k.startswith("grad:")}
    assert grads, "no weight was differentiated"
    # Along our gradient (unit norm over all the weights), the directional
    # derivative is our gradient's norm; the central difference gives the
    # true gradient's component along ours, which is smaller where ours
    # points elsewhere (a wrong sign, a missing term).
    norm = math.sqrt(sum(float((g.astype(np.float64) ** 2).sum()) for g in grads.values()))
    assert norm > 0 and math.isfinite(norm), f"gradient norm {norm}"
    direction = {k: g.astype(np.float64) / norm for k, g in grads.items()}
    along = norm
    model = onnx.load(str(export.model))
    original = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}

    def loss_at(eps):
        for t in model.graph.initializer:
            if t.name in direction:
                moved = original[t.name].astype(np.float64) + eps * direction[t.name]
                t.CopyFrom(numpy_helper.from_array(moved.astype(original[t.name].dtype), t.name))
        out = toolchain.run_onnxruntime_model(model, inputs)[first]
        return _numpy_loss(out, labels, mse)

    # Central differences at h and h/2, Richardson-extrapolated: the h^2
    # error term cancels (T5's curvature makes it 1-2% at h = 1e-2).
    def central_at(h):
        return (loss_at(h) - loss_at(-h)) / (2 * h)

    central = (4 * central_at(1e-3) - central_at(2e-3)) / 3
    assert abs(along - central) <= 1e-2 * abs(central) + 5e-4, \
        f"gradient norm {along:.6g}, central difference along it {central:.6g}"
