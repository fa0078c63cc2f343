"""onnxruntime's com.microsoft contrib ops (as its transformer optimizer and
onnxruntime-genai's model builder write them) match onnxruntime's CPU
kernels, one node at a time.

Each case is a one-node model (opset 17 plus com.microsoft 1, ir_version 8)
with seeded random inputs, compiled by shard-opt (--target cpu), run by
shard-run and compared with onnxruntime (graph optimizations off, so that
the node runs as written). Tolerances: rtol 1e-5 / atol 1e-5 for the
elementwise and normalization ops; rtol 1e-4 / atol 1e-5 for the attentions,
whose matmuls and softmax sum in another order than onnxruntime's;
rtol 4e-3 / atol 4e-3 for float16 (computed in float32 and rounded once,
where onnxruntime may round intermediate results).
Constant inputs (weights, total_sequence_length) are initializers.
"""
from __future__ import annotations

import math
import os
import re
import shutil
import subprocess
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

ROOT = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("SHARDFLOW_BUILD_DIR", ROOT / "build"))

F32 = {"rtol": 1e-5, "atol": 1e-5}
SUM = {"rtol": 1e-4, "atol": 1e-5}
HALF = {"rtol": 4e-3, "atol": 4e-3}
MS = "com.microsoft"


def tool(name: str) -> Path:
    path = BUILD / "bin" / name
    assert path.exists(), f"{path} is missing: build the project first (tools/build.sh)"
    return path


def rng_for(name: str) -> np.random.Generator:
    return np.random.default_rng(zlib.crc32(name.encode()))


@dataclass
class Case:
    op: str
    inputs: dict  # name -> array (graph inputs); "" entries are absent inputs
    outputs: list[str]
    attrs: dict = field(default_factory=dict)
    inits: dict = field(default_factory=dict)
    domain: str = MS
    tol: dict = field(default_factory=lambda: F32)
    order: list[str] | None = None  # node input order, "" for absent
    # The domain onnxruntime runs the op in, when it registers it elsewhere.
    ort_domain: str | None = None
    out_type: int = TensorProto.FLOAT


def onnx_type(a: np.ndarray) -> int:
    return helper.np_dtype_to_tensor_dtype(a.dtype)


def build_model(case: Case, domain: str | None = None) -> onnx.ModelProto:
    order = case.order or list(case.inputs) + list(case.inits)
    node = helper.make_node(case.op, order, case.outputs,
                            domain=case.domain if domain is None else domain, **case.attrs)
    ins = [helper.make_tensor_value_info(n, onnx_type(a), a.shape)
           for n, a in case.inputs.items()]
    outs = [helper.make_tensor_value_info(n, case.out_type, None) for n in case.outputs if n]
    inits = [numpy_helper.from_array(a, n) for n, a in case.inits.items()]
    graph = helper.make_graph([node], case.op, ins, outs, inits)
    return helper.make_model(graph, ir_version=8, opset_imports=[
        helper.make_opsetid("", 17), helper.make_opsetid(MS, 1)])


def run_ort(model: onnx.ModelProto, inputs: dict) -> list[np.ndarray]:
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(model.SerializeToString(), opts,
                                providers=["CPUExecutionProvider"])
    return sess.run(None, inputs)


def run_ours(model: onnx.ModelProto, inputs: dict, tmp_path: Path) -> dict:
    path = tmp_path / "model.onnx"
    onnx.save(model, path)
    artifact = tmp_path / "model.sfa"
    out = subprocess.run([str(tool("shard-opt")), str(path), "--target", "cpu", "-o",
                          str(artifact)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, f"shard-opt failed:\n{out.stderr}"
    cmd = [str(tool("shard-run")), str(artifact), "--output", str(tmp_path / "out.npz")]
    for name, array in inputs.items():
        p = tmp_path / f"in_{name}.npy"
        np.save(p, array)
        cmd += ["--input", f"{name}={p}"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, f"shard-run failed:\n{out.stderr}"
    with np.load(tmp_path / "out.npz") as data:
        return {k: data[k] for k in data.files}


def check(case: Case, tmp_path: Path):
    model = build_model(case)
    expected = run_ort(build_model(case, case.ort_domain), case.inputs)
    ours = run_ours(model, case.inputs, tmp_path)
    for name, want in zip([n for n in case.outputs if n], expected):
        got = ours[name]
        assert got.shape == want.shape, f"{name}: shape {got.shape} != {want.shape}"
        np.testing.assert_allclose(got, want, err_msg=name, **case.tol)


def f32(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


def mask01(rng, batch, seq):
    """A 0/1 int32 key mask with right padding: batch b keeps its first
    seq - b keys (at least one)."""
    m = np.ones((batch, seq), np.int32)
    for b in range(batch):
        m[b, max(1, seq - b):] = 0
    return m


def rope_caches(rng, positions, half):
    angles = rng.uniform(0, 3, (positions, half)).astype(np.float32)
    return np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)


def cases() -> dict[str, Case]:
    c: dict[str, Case] = {}
    r = rng_for("contrib")
    B, S, H = 2, 5, 16
    x, skip = f32(r, B, S, H), f32(r, B, S, H)
    gamma, beta, bias = f32(r, H), f32(r, H), f32(r, H)

    # Normalizations.
    c["skip_layer_norm"] = Case("SkipLayerNormalization",
                                {"x": x, "skip": skip, "gamma": gamma, "beta": beta,
                                 "bias": bias}, ["y", "mean", "inv_std", "sum"])
    c["skip_layer_norm_eps_no_beta"] = Case(
        "SkipLayerNormalization", {"x": x, "skip": skip[0:1], "gamma": gamma},
        ["y", "", "", "sum"], attrs={"epsilon": 1e-5})
    c["skip_layer_norm_2d_skip"] = Case(
        "SkipLayerNormalization", {"x": x, "skip": skip[0], "gamma": gamma, "beta": beta},
        ["y"])
    c["skip_simplified_layer_norm"] = Case(
        "SkipSimplifiedLayerNormalization",
        {"x": x, "skip": skip, "gamma": gamma, "bias": bias}, ["y", "", "inv_std", "sum"],
        attrs={"epsilon": 1e-6})
    c["skip_simplified_layer_norm_default_eps"] = Case(
        "SkipSimplifiedLayerNormalization", {"x": x, "skip": skip, "gamma": gamma}, ["y"])
    c["simplified_layer_norm_default_domain"] = Case(
        "SimplifiedLayerNormalization", {"x": x, "gamma": gamma}, ["y", "inv_std"],
        attrs={"epsilon": 1e-6}, domain="")
    # Written in com.microsoft by some builders; onnxruntime registers it in
    # the default domain only.
    c["simplified_layer_norm_com_microsoft"] = Case(
        "SimplifiedLayerNormalization", {"x": x, "gamma": gamma}, ["y"], ort_domain="")
    c["simplified_layer_norm_axis"] = Case(
        "SimplifiedLayerNormalization", {"x": x, "gamma": f32(r, S, H)}, ["y"],
        attrs={"axis": 1}, domain="")

    # float16.
    h16 = lambda *shape: r.standard_normal(shape).astype(np.float16)
    c["skip_layer_norm_f16"] = Case(
        "SkipLayerNormalization", {"x": h16(B, S, H), "skip": h16(B, S, H), "gamma": h16(H),
                                   "beta": h16(H), "bias": h16(H)}, ["y", "", "", "sum"],
        tol=HALF, out_type=TensorProto.FLOAT16)
    c["skip_simplified_layer_norm_f16"] = Case(
        "SkipSimplifiedLayerNormalization", {"x": h16(B, S, H), "skip": h16(B, S, H),
                                             "gamma": h16(H)}, ["y"],
        tol=HALF, out_type=TensorProto.FLOAT16)
    c["fast_gelu_f16"] = Case("FastGelu", {"x": h16(B, S, H), "bias": h16(H)}, ["y"],
                              tol=HALF, out_type=TensorProto.FLOAT16)

    # The Gelu family.
    g = f32(r, B, S, H) * 3
    c["gelu"] = Case("Gelu", {"x": g}, ["y"])
    c["bias_gelu"] = Case("BiasGelu", {"a": g, "b": bias}, ["y"])
    c["fast_gelu"] = Case("FastGelu", {"x": g}, ["y"])
    c["fast_gelu_bias"] = Case("FastGelu", {"x": g, "bias": bias}, ["y"])
    c["quick_gelu"] = Case("QuickGelu", {"x": g}, ["y"])
    c["quick_gelu_alpha"] = Case("QuickGelu", {"x": g}, ["y"], attrs={"alpha": 1.1})

    # RotaryEmbedding: input, position_ids, cos_cache, sin_cache.
    N, D, P = 2, 8, 12
    cos, sin = rope_caches(r, P, D // 2)
    pos = r.integers(0, P, (B, S)).astype(np.int64)
    xr = f32(r, B, S, N * D)
    c["rotary_3d"] = Case("RotaryEmbedding", {"x": xr, "pos": pos, "cos": cos, "sin": sin},
                          ["y"], attrs={"num_heads": N})
    c["rotary_3d_interleaved"] = Case(
        "RotaryEmbedding", {"x": xr, "pos": pos, "cos": cos, "sin": sin}, ["y"],
        attrs={"num_heads": N, "interleaved": 1})
    c["rotary_4d_offset"] = Case(
        "RotaryEmbedding", {"x": f32(r, B, N, S, D), "cos": cos, "sin": sin}, ["y"],
        inits={"pos": np.array([3], np.int64)}, order=["x", "pos", "cos", "sin"])
    cos4, sin4 = rope_caches(r, P, 2)
    c["rotary_partial"] = Case(
        "RotaryEmbedding", {"x": xr, "pos": pos, "cos": cos4, "sin": sin4}, ["y"],
        attrs={"num_heads": N, "rotary_embedding_dim": 4})

    # Attention: packed projection weights.
    Din, heads = 12, 2
    xa = f32(r, B, S, Din)
    w, wb = f32(r, Din, 3 * H) * 0.3, f32(r, 3 * H)
    m = mask01(r, B, S)
    att = dict(inits={"w": w, "wb": wb}, tol=SUM, attrs={"num_heads": heads})
    c["attention"] = Case("Attention", {"x": xa}, ["y"], order=["x", "w", "wb"], **att)
    c["attention_mask"] = Case("Attention", {"x": xa, "m": m}, ["y"],
                               order=["x", "w", "wb", "m"], **att)
    c["attention_gpt2"] = Case(
        "Attention", {"x": xa, "m": m}, ["y"], order=["x", "w", "wb", "m"],
        inits={"w": w, "wb": wb}, tol=SUM, attrs={"num_heads": heads, "unidirectional": 1})
    c["attention_causal_no_mask"] = Case(
        "Attention", {"x": xa}, ["y"], order=["x", "w", "wb"],
        inits={"w": w, "wb": wb}, tol=SUM, attrs={"num_heads": heads, "unidirectional": 1})
    c["attention_mask_index_end"] = Case(
        "Attention", {"x": xa, "m": np.array([S, 2], np.int32)}, ["y"],
        order=["x", "w", "wb", "m"], **att)
    # [2B]: the ends, then the starts (left padding).
    c["attention_mask_index_end_start"] = Case(
        "Attention", {"x": xa, "m": np.array([S, 4, 1, 0], np.int32)}, ["y"],
        order=["x", "w", "wb", "m"], **att)
    c["attention_scale_no_bias"] = Case(
        "Attention", {"x": xa}, ["y"], order=["x", "w"], inits={"w": w}, tol=SUM,
        attrs={"num_heads": heads, "scale": 0.2})
    c["attention_qkv_sizes"] = Case(
        "Attention", {"x": xa}, ["y"], order=["x", "w", "wb"],
        inits={"w": f32(r, Din, 40) * 0.3, "wb": f32(r, 40)}, tol=SUM,
        attrs={"num_heads": heads, "qkv_hidden_sizes": [16, 16, 8]})

    m3 = (r.uniform(0, 1, (B, S, S)) > 0.3).astype(np.int32)
    m3[:, :, 0] = 1
    c["attention_mask_3d"] = Case("Attention", {"x": xa, "m": m3}, ["y"],
                                  order=["x", "w", "wb", "m"], **att)
    # A batch whose keys are all masked: onnxruntime's finite filter value
    # leaves a softmax over the unmasked scores.
    dead = m.copy()
    dead[1] = 0
    c["attention_fully_masked_batch"] = Case("Attention", {"x": xa, "m": dead}, ["y"],
                                             order=["x", "w", "wb", "m"], **att)
    # Query rows whose visible keys (causal) are all masked.
    c["attention_causal_masked_rows"] = Case(
        "Attention", {"x": xa, "m": np.array([[0, 1, 0, 1, 1], [0, 0, 1, 1, 0]], np.int32)},
        ["y"], order=["x", "w", "wb", "m"], inits={"w": w, "wb": wb}, tol=SUM,
        attrs={"num_heads": heads, "unidirectional": 1})
    c["attention_filter_value_bias"] = Case(
        "Attention", {"x": xa, "m": m, "ab": f32(r, B, heads, S, S)}, ["y"],
        order=["x", "w", "wb", "m", "", "ab"], inits={"w": w, "wb": wb}, tol=SUM,
        attrs={"num_heads": heads, "mask_filter_value": -30.0, "unidirectional": 1})

    # MultiHeadAttention: separate Q/K/V.
    L = 7
    q, k, v = f32(r, B, S, H), f32(r, B, L, H), f32(r, B, L, H)
    mha = dict(tol=SUM, attrs={"num_heads": heads})
    c["mha"] = Case("MultiHeadAttention", {"q": q, "k": k, "v": v}, ["y"], **mha)
    c["mha_bias_mask"] = Case(
        "MultiHeadAttention",
        {"q": q, "k": k, "v": v, "b": f32(r, 3 * H), "m": mask01(r, B, L)}, ["y"], **mha)
    c["mha_attention_bias"] = Case(
        "MultiHeadAttention", {"q": q, "k": k, "v": v, "ab": f32(r, 1, heads, S, L)}, ["y"],
        order=["q", "k", "v", "", "", "ab"], **mha)
    c["mha_causal_end_positions"] = Case(
        "MultiHeadAttention", {"q": f32(r, B, L, H), "k": k, "v": v,
                               "m": np.array([L, 4], np.int32)}, ["y"],
        order=["q", "k", "v", "", "m"], tol=SUM, attrs={"num_heads": heads,
                                                         "unidirectional": 1})
    c["mha_causal_masked_rows"] = Case(
        "MultiHeadAttention", {"q": f32(r, B, L, H), "k": k, "v": v,
                               "m": np.array([[0, 0, 1, 1, 0, 1, 1], [0, 1, 1, 0, 1, 1, 0]],
                                             np.int32)}, ["y"],
        order=["q", "k", "v", "", "m"], tol=SUM, attrs={"num_heads": heads,
                                                         "unidirectional": 1})
    c["mha_scale"] = Case("MultiHeadAttention", {"q": q, "k": k, "v": v}, ["y"], tol=SUM,
                          attrs={"num_heads": heads, "scale": 0.5})
    c["mha_bnsh_kv"] = Case(
        "MultiHeadAttention",
        {"q": q, "k": f32(r, B, heads, L, H // heads), "v": f32(r, B, heads, L, H // heads)},
        ["y"], **mha)

    # GroupQueryAttention, prefill.
    Nq, Nkv, Dh = 4, 2, 16
    gq, gk, gv = f32(r, B, S, Nq * Dh), f32(r, B, S, Nkv * Dh), f32(r, B, S, Nkv * Dh)
    past = np.zeros((B, Nkv, 0, Dh), np.float32)
    seqlens = np.full((B,), S - 1, np.int32)
    gcos, gsin = rope_caches(r, 16, Dh // 2)
    gqa_in = {"q": gq, "k": gk, "v": gv, "pk": past, "pv": past, "sl": seqlens}
    gqa = dict(inits={"tot": np.array(S, np.int32)}, tol=SUM,
               order=["q", "k", "v", "pk", "pv", "sl", "tot"],
               attrs={"num_heads": Nq, "kv_num_heads": Nkv})
    c["gqa"] = Case("GroupQueryAttention", gqa_in, ["y", "pk_out", "pv_out"], **gqa)
    # Right padding: batch 1 has 3 tokens (seqlens_k = 2), as the model
    # builder computes seqlens_k from the attention mask.
    c["gqa_padded"] = Case(
        "GroupQueryAttention", {**gqa_in, "sl": np.array([S - 1, 2], np.int32)},
        ["y", "pk_out", "pv_out"], **gqa)
    c["gqa_rotary"] = Case(
        "GroupQueryAttention", {**gqa_in, "cos": gcos, "sin": gsin},
        ["y", "pk_out", "pv_out"], inits={"tot": np.array(S, np.int32)}, tol=SUM,
        order=["q", "k", "v", "pk", "pv", "sl", "tot", "cos", "sin"],
        attrs={"num_heads": Nq, "kv_num_heads": Nkv, "do_rotary": 1})
    c["gqa_rotary_interleaved"] = Case(
        "GroupQueryAttention", {**gqa_in, "cos": gcos, "sin": gsin}, ["y", "pk_out", "pv_out"],
        inits={"tot": np.array(S, np.int32)}, tol=SUM,
        order=["q", "k", "v", "pk", "pv", "sl", "tot", "cos", "sin"],
        attrs={"num_heads": Nq, "kv_num_heads": Nkv, "do_rotary": 1,
               "rotary_interleaved": 1})
    c["gqa_softcap_scale"] = Case(
        "GroupQueryAttention", gqa_in, ["y"], inits={"tot": np.array(S, np.int32)},
        tol=SUM, order=["q", "k", "v", "pk", "pv", "sl", "tot"],
        attrs={"num_heads": Nq, "kv_num_heads": Nkv, "softcap": 2.0, "scale": 0.3})
    c["gqa_packed"] = Case(
        "GroupQueryAttention",
        {"q": np.concatenate([gq, gk, gv], -1), "sl": seqlens}, ["y"],
        inits={"tot": np.array(S, np.int32)}, tol=SUM,
        order=["q", "", "", "", "", "sl", "tot"],
        attrs={"num_heads": Nq, "kv_num_heads": Nkv})

    # float16 attention.
    c["mha_f16"] = Case(
        "MultiHeadAttention", {"q": h16(B, S, H), "k": h16(B, L, H), "v": h16(B, L, H)}, ["y"],
        attrs={"num_heads": heads}, tol=HALF, out_type=TensorProto.FLOAT16)
    p16 = np.zeros((B, Nkv, 0, Dh), np.float16)
    c["gqa_rotary_f16"] = Case(
        "GroupQueryAttention",
        {"q": h16(B, S, Nq * Dh), "k": h16(B, S, Nkv * Dh), "v": h16(B, S, Nkv * Dh),
         "pk": p16, "pv": p16, "sl": np.array([S - 1, 2], np.int32),
         "cos": gcos.astype(np.float16), "sin": gsin.astype(np.float16)},
        ["y", "pk_out", "pv_out"], inits={"tot": np.array(S, np.int32)}, tol=HALF,
        order=["q", "k", "v", "pk", "pv", "sl", "tot", "cos", "sin"],
        attrs={"num_heads": Nq, "kv_num_heads": Nkv, "do_rotary": 1},
        out_type=TensorProto.FLOAT16)
    return c


CASES = cases()


@pytest.mark.parametrize("name", sorted(CASES))
def test_contrib_op(tmp_path, name):
    check(CASES[name], tmp_path)


# --------------------------------------------------------------------------
# Sharded: contrib blocks under --strategy megatron, against onnxruntime
# --------------------------------------------------------------------------

MPIRUN = shutil.which("mpirun")


def block_model(name: str) -> tuple[onnx.ModelProto, dict]:
    """A decoder block as the optimizer (gpt2: packed Attention, FastGelu,
    SkipLayerNormalization) or the genai builder (llama: Simplified norms,
    GroupQueryAttention prefill with rotary) writes it."""
    r = rng_for("block-" + name)
    B, S, H = 2, 8, 64
    inits, nodes = {}, []

    def w(n, *shape, scale=0.1):
        inits[n] = (r.standard_normal(shape) * scale).astype(np.float32)
        return n

    def node(op, ins, outs, domain=MS, **attrs):
        nodes.append(helper.make_node(op, ins, outs, domain=domain, **attrs))

    feeds = {"x": f32(r, B, S, H)}
    if name == "gpt2":
        feeds["mask"] = mask01(r, B, S)
        node("Attention", ["x", w("wqkv", H, 3 * H), w("bqkv", 3 * H), "mask"], ["a"],
             num_heads=4, unidirectional=1)
        node("MatMul", ["a", w("wo", H, H)], ["o"], domain="")
        node("SkipLayerNormalization", ["o", "x", w("g1", H, scale=1), w("b1", H),
                                        w("bo", H)], ["h", "", "", "res"])
        node("MatMul", ["h", w("w1", H, 4 * H)], ["u"], domain="")
        node("FastGelu", ["u", w("bu", 4 * H)], ["gu"])
        node("MatMul", ["gu", w("w2", 4 * H, H)], ["d"], domain="")
        node("SkipLayerNormalization", ["d", "res", w("g2", H, scale=1), w("b2", H),
                                        w("bd", H)], ["y"])
    else:
        Nq, Nkv, D = 4, 2, 16
        feeds["pk"] = np.zeros((B, Nkv, 0, D), np.float32)
        feeds["pv"] = np.zeros((B, Nkv, 0, D), np.float32)
        feeds["sl"] = np.array([S - 1, S - 3], np.int32)
        cos, sin = rope_caches(r, 32, D // 2)
        inits.update(cos=cos, sin=sin, tot=np.array(S, np.int32))
        node("SimplifiedLayerNormalization", ["x", w("g1", H, scale=1)], ["n"], domain="",
             epsilon=1e-6)
        node("MatMul", ["n", w("wq", H, Nq * D)], ["q"], domain="")
        node("MatMul", ["n", w("wk", H, Nkv * D)], ["k"], domain="")
        node("MatMul", ["n", w("wv", H, Nkv * D)], ["v"], domain="")
        node("GroupQueryAttention", ["q", "k", "v", "pk", "pv", "sl", "tot", "cos", "sin"],
             ["a", "present_k", "present_v"], num_heads=Nq, kv_num_heads=Nkv, do_rotary=1)
        node("MatMul", ["a", w("wo", Nq * D, H)], ["o"], domain="")
        node("SkipSimplifiedLayerNormalization", ["o", "x", w("g2", H, scale=1)],
             ["h", "", "", "res"], epsilon=1e-6)
        node("MatMul", ["h", w("wg", H, 2 * H)], ["gt"], domain="")
        node("QuickGelu", ["gt"], ["act"])
        node("MatMul", ["act", w("wd", 2 * H, H)], ["d"], domain="")
        node("Add", ["d", "res"], ["y"], domain="")
    ins = [helper.make_tensor_value_info(n, onnx_type(a), a.shape) for n, a in feeds.items()]
    outs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]
    if name == "llama":
        outs += [helper.make_tensor_value_info(n, TensorProto.FLOAT, None)
                 for n in ["present_k", "present_v"]]
    graph = helper.make_graph(nodes, name, ins, outs,
                              [numpy_helper.from_array(a, n) for n, a in inits.items()])
    model = helper.make_model(graph, ir_version=8, opset_imports=[
        helper.make_opsetid("", 17), helper.make_opsetid(MS, 1)])
    return model, feeds


@pytest.mark.skipif(MPIRUN is None, reason="mpirun is not installed")
@pytest.mark.parametrize("mesh,strategy", [("tp=2", "megatron"), ("dp=2,tp=2", "megatron-sp")])
@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_contrib_block_under_megatron(name, mesh, strategy, tmp_path):
    from shardflow import toolchain
    model, feeds = block_model(name)
    path = tmp_path / f"{name}.onnx"
    onnx.save(model, path)
    artifact = tmp_path / f"{name}.shard"
    cmd = [str(tool("shard-opt")), str(path), "--mesh", mesh, "--strategy", strategy,
           "--target", "cpu", "-o", str(artifact), "--report"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    report = out.stdout + out.stderr
    # Every projection is split by megatron (the packed QKV weight by heads):
    # the composition is the graph of a plain export.
    split, total = map(int, re.search(r"split weights: (\d+) of (\d+)", report).groups())
    assert split == total > 0, report
    world = math.prod(int(a.split("=")[1]) for a in mesh.split(","))
    ours = toolchain.run_artifact(artifact, feeds,
                                  launcher=[MPIRUN, "-np", str(world), "--oversubscribe"])
    want = run_ort(model, feeds)
    for i, out_name in enumerate([o.name for o in model.graph.output]):
        np.testing.assert_allclose(ours[out_name], want[i], err_msg=out_name, **SUM)


def test_gqa_prefill_as_the_model_builder_writes_it(tmp_path):
    """seqlens_k from the attention mask (ReduceSum - 1, int32) and
    total_sequence_length a graph input, pinned with --input-value."""
    r = rng_for("gqa-builder")
    B, S, Nq, Nkv, D = 2, 6, 4, 2, 16
    mask = np.ones((B, S), np.int64)
    mask[1, 4:] = 0
    cos, sin = rope_caches(r, 32, D // 2)
    feeds = {"q": f32(r, B, S, Nq * D), "k": f32(r, B, S, Nkv * D), "v": f32(r, B, S, Nkv * D),
             "attention_mask": mask, "past_key": np.zeros((B, Nkv, 0, D), np.float32),
             "past_value": np.zeros((B, Nkv, 0, D), np.float32),
             "total_sequence_length": np.array(S, np.int32)}
    nodes = [
        helper.make_node("ReduceSum", ["attention_mask", "one"], ["sum"], keepdims=0),
        helper.make_node("Sub", ["sum", "one"], ["last"]),
        helper.make_node("Cast", ["last"], ["seqlens_k"], to=TensorProto.INT32),
        helper.make_node("GroupQueryAttention",
                         ["q", "k", "v", "past_key", "past_value", "seqlens_k",
                          "total_sequence_length", "cos", "sin"],
                         ["y", "present_key", "present_value"], domain=MS,
                         num_heads=Nq, kv_num_heads=Nkv, do_rotary=1, local_window_size=-1),
    ]
    ins = [helper.make_tensor_value_info(n, onnx_type(a), a.shape) for n, a in feeds.items()]
    outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None)
            for n in ["y", "present_key", "present_value"]]
    inits = [numpy_helper.from_array(np.array([1], np.int64), "one"),
             numpy_helper.from_array(cos, "cos"), numpy_helper.from_array(sin, "sin")]
    model = helper.make_model(helper.make_graph(nodes, "gqa", ins, outs, inits), ir_version=8,
                              opset_imports=[helper.make_opsetid("", 17),
                                             helper.make_opsetid(MS, 1)])
    path = tmp_path / "model.onnx"
    onnx.save(model, path)
    np.save(tmp_path / "total.npy", feeds["total_sequence_length"])
    artifact = tmp_path / "model.shard"
    out = subprocess.run([str(tool("shard-opt")), str(path), "--input-value",
                          f"total_sequence_length={tmp_path / 'total.npy'}", "--target", "cpu",
                          "-o", str(artifact)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    from shardflow import toolchain
    ours = toolchain.run_artifact(artifact, {k: v for k, v in feeds.items()
                                             if k != "total_sequence_length"})
    want = run_ort(model, feeds)
    for name, w in zip(["y", "present_key", "present_value"], want):
        np.testing.assert_allclose(ours[name], w, err_msg=name, **SUM)
