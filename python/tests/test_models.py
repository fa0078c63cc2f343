"""Tests of the ONNX test-model generators (python/shardflow/models.py).

Every model must pass the full ONNX checker and run under onnxruntime (CPU).
The opset-23 ops of the Llama model (RMSNormalization, RotaryEmbedding,
Attention) are checked against float64 numpy references.

Run: .venv/bin/python -m pytest python/tests
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper, numpy_helper

PYTHON_DIR = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(PYTHON_DIR))

from shardflow import models  # noqa: E402

# Numeric tolerance of onnxruntime (float32) against the float64 references:
# relative error 1e-5, i.e. |ort - ref| <= RTOL * |ref| elementwise, where the
# absolute floor is RTOL times the largest |ref| of the tensor (so that
# entries that are nearly zero are judged relative to the tensor's scale).
RTOL = 1e-5


def assert_close(actual: np.ndarray, ref: np.ndarray, rtol: float = RTOL) -> None:
    ref = np.asarray(ref, dtype=np.float64)
    np.testing.assert_allclose(actual.astype(np.float64), ref, rtol=rtol,
                               atol=rtol * float(np.max(np.abs(ref))))


def session(model: onnx.ModelProto | str | Path) -> ort.InferenceSession:
    src = model.SerializeToString() if isinstance(model, onnx.ModelProto) else str(model)
    return ort.InferenceSession(src, providers=["CPUExecutionProvider"])


def run(model, feeds) -> list[np.ndarray]:
    return session(model).run(None, feeds)


# name, kwargs, expected output shapes (for batch=2, seq=8 where symbolic)
CASES = [
    ("mlp", {}, [(2, 10)]),
    ("mlp", {"layers": 3, "symbolic": True}, [(2, 10)]),
    ("gpt2", {}, [(2, 8, 128)]),
    ("gpt2", {"causal_mask": "constant"}, [(2, 8, 128)]),
    ("gpt2", {"symbolic": True}, [(2, 8, 128)]),
    ("bert", {}, [(2, 8, 64), (2, 64)]),
    ("bert", {"symbolic": True}, [(2, 8, 64), (2, 64)]),
    ("resnet", {}, [(1, 10)]),
    ("resnet", {"layers": 3, "batch": 2, "image": 48}, [(2, 10)]),
    ("llama", {}, [(2, 8, 128)]),
    ("llama", {"layout": "3d"}, [(2, 8, 128)]),
    ("llama", {"position_ids_input": True, "symbolic": True}, [(2, 8, 128)]),
    ("neox", {}, [(2, 8, 128)]),
    ("neox", {"symbolic": True, "rotary_pct": 0.5}, [(2, 8, 128)]),
]


@pytest.mark.parametrize("name,kwargs,shapes", CASES,
                         ids=[f"{n}-{'-'.join(f'{k}={v}' for k, v in kw.items()) or 'default'}"
                              for n, kw, _ in CASES])
def test_model_checks_and_runs(name, kwargs, shapes):
    model = models.MODELS[name](**kwargs)
    assert [(o.domain, o.version) for o in model.opset_import] == [("", 23)]
    assert model.ir_version == 10
    onnx.checker.check_model(model, full_check=True)
    outs = run(model, models.random_inputs(model, vocab=128))
    assert [o.shape for o in outs] == shapes
    for o in outs:
        assert o.dtype == np.float32
        assert np.isfinite(o).all()
    if kwargs.get("symbolic"):
        dims = [d.dim_param for d in model.graph.input[0].type.tensor_type.shape.dim]
        assert dims[0] == "batch"
        if name in ("gpt2", "bert", "llama"):
            assert dims[1] == "seq"


def test_expected_ops():
    ops = {name: {n.op_type for n in models.MODELS[name]().graph.node} for name in models.MODELS}
    assert {"Gemm", "MatMul", "Add", "Relu", "Gelu", "Softmax"} <= ops["mlp"]
    assert {"Shape", "Gather", "Unsqueeze", "Concat", "Reshape", "Range", "Split", "Transpose",
            "LayerNormalization", "Trilu", "Where", "Div", "Softmax", "Gelu"} <= ops["gpt2"]
    assert {"Cast", "Sub", "Mul", "Slice", "Gemm", "Tanh", "Gelu", "LayerNormalization"} <= ops["bert"]
    assert {"Conv", "BatchNormalization", "MaxPool", "GlobalAveragePool", "Flatten", "Gemm",
            "Add", "Relu"} <= ops["resnet"]
    assert {"RMSNormalization", "RotaryEmbedding", "Attention", "Sigmoid", "Mul",
            "Range", "Expand"} <= ops["llama"]
    assert {"LayerNormalization", "Reshape", "Slice", "Concat", "Neg", "Trilu", "Where",
            "Softmax", "Gelu"} <= ops["neox"]
    gelu = [n for n in models.gpt2().graph.node if n.op_type == "Gelu"]
    assert all(helper.get_attribute_value(a) == b"tanh" for n in gelu for a in n.attribute)
    convs = [n for n in models.resnet().graph.node if n.op_type == "Conv"]
    assert any(helper.get_attribute_value(a) > 1 for n in convs for a in n.attribute if a.name == "group")
    attn = next(n for n in models.llama(layout="3d").graph.node if n.op_type == "Attention")
    attrs = {a.name: helper.get_attribute_value(a) for a in attn.attribute}
    assert attrs == {"is_causal": 1, "q_num_heads": 4, "kv_num_heads": 2}


def test_symbolic_dims_take_other_sizes():
    model = models.gpt2(symbolic=True)
    (logits,) = run(model, models.random_inputs(model, dims={"batch": 3, "seq": 5}, vocab=128))
    assert logits.shape == (3, 5, 128)
    model = models.llama(symbolic=True)
    (logits,) = run(model, models.random_inputs(model, dims={"batch": 1, "seq": 11}, vocab=128))
    assert logits.shape == (1, 11, 128)


def test_deterministic():
    a = models.gpt2().SerializeToString()
    assert a == models.gpt2().SerializeToString()
    assert a != models.gpt2(seed=1).SerializeToString()


def test_gpt2_is_causal_and_masks_agree():
    trilu, const = models.gpt2(), models.gpt2(causal_mask="constant")
    feeds = models.random_inputs(trilu, vocab=128)
    (a,) = run(trilu, feeds)
    (b,) = run(const, feeds)
    np.testing.assert_array_equal(a, b)
    feeds["input_ids"][:, -1] = (feeds["input_ids"][:, -1] + 1) % 128
    (c,) = run(trilu, feeds)
    np.testing.assert_array_equal(a[:, :-1], c[:, :-1])
    assert not np.allclose(a[:, -1], c[:, -1])


def test_bert_attention_mask():
    model = models.bert()
    feeds = models.random_inputs(model, vocab=128)
    mask = feeds["attention_mask"]
    assert (mask == 0).any()
    hidden, _ = run(model, feeds)
    feeds["input_ids"] = np.where(mask == 0, (feeds["input_ids"] + 7) % 128, feeds["input_ids"])
    hidden2, _ = run(model, feeds)
    keep = mask.astype(bool)
    np.testing.assert_allclose(hidden[keep], hidden2[keep], rtol=0, atol=1e-6)


def test_llama_layouts_agree():
    m4, m3 = models.llama(), models.llama(layout="3d")
    feeds = models.random_inputs(m4, vocab=128)
    (a,) = run(m4, feeds)
    (b,) = run(m3, feeds)
    np.testing.assert_allclose(a, b, rtol=0, atol=1e-5)


# ---------------------------------------------------------------------------
# float64 numpy references of the opset-23 ops and of the whole Llama model.
# ---------------------------------------------------------------------------


def ref_rms_norm(x, w, eps):
    x = x.astype(np.float64)
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w.astype(np.float64)


def ref_rotary(x, cos, sin, pos, num_heads=None):
    """RotaryEmbedding (interleaved=0, full rotation). x: [B, H, S, d], or
    [B, S, H*d] with num_heads. cos/sin: [max_pos, d/2]; pos: [B, S]."""
    x = x.astype(np.float64)
    three_d = x.ndim == 3
    if three_d:
        bsz, s, hd = x.shape
        x = x.reshape(bsz, s, num_heads, hd // num_heads).transpose(0, 2, 1, 3)
    c = cos.astype(np.float64)[pos][:, None]           # [B, 1, S, d/2]
    sn = sin.astype(np.float64)[pos][:, None]
    x1, x2 = np.split(x, 2, axis=-1)
    y = np.concatenate([x1 * c - x2 * sn, x1 * sn + x2 * c], axis=-1)
    if three_d:
        y = y.transpose(0, 2, 1, 3).reshape(bsz, s, hd)
    return y


def ref_attention(q, k, v, q_heads=None, kv_heads=None):
    """Causal grouped-query attention, default scale 1/sqrt(head_dim).
    4-D inputs [B, H, S, d], or 3-D [B, S, H*d] with the head counts."""
    q, k, v = (t.astype(np.float64) for t in (q, k, v))
    three_d = q.ndim == 3
    if three_d:
        def heads(t, h):
            bsz, s, hd = t.shape
            return t.reshape(bsz, s, h, hd // h).transpose(0, 2, 1, 3)
        q, k, v = heads(q, q_heads), heads(k, kv_heads), heads(v, kv_heads)
    rep = q.shape[1] // k.shape[1]
    k, v = np.repeat(k, rep, axis=1), np.repeat(v, rep, axis=1)
    s = q @ k.transpose(0, 1, 3, 2) / np.sqrt(q.shape[-1])
    n = s.shape[-1]
    s = np.where(np.tril(np.ones((n, n), dtype=bool)), s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    y = (p / p.sum(-1, keepdims=True)) @ v
    if three_d:
        bsz, h, sq, d = y.shape
        y = y.transpose(0, 2, 1, 3).reshape(bsz, sq, h * d)
    return y


def one_op_model(model: onnx.ModelProto, op_type: str, shapes: dict[str, list[int]]):
    """The model's first ``op_type`` node alone, its non-initializer inputs
    made graph inputs of the given shapes, its initializers copied."""
    node = next(n for n in model.graph.node if n.op_type == op_type)
    inits = {t.name: t for t in model.graph.initializer}
    graph_inputs, graph_inits = [], []
    for name in node.input:
        if name in inits:
            graph_inits.append(inits[name])
        else:
            elem = onnx.TensorProto.INT64 if name == "pos" else onnx.TensorProto.FLOAT
            graph_inputs.append(helper.make_tensor_value_info(name, elem, shapes[name]))
    single = onnx.NodeProto()
    single.CopyFrom(node)
    single.output[:] = ["y"]
    g = helper.make_graph([single], op_type, graph_inputs,
                          [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, shapes["y"])],
                          initializer=graph_inits)
    m = helper.make_model(g, opset_imports=list(model.opset_import), ir_version=model.ir_version)
    onnx.checker.check_model(m, full_check=True)
    return m, node


def attrs_of(node):
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


LLAMA = dict(hidden=64, heads=4, kv_heads=2, seq=8, batch=2, vocab=128)


def llama_for_op_tests(layout):
    """The Llama model with position ids as a graph input renamed 'pos'."""
    model = models.llama(**LLAMA, layout=layout, position_ids_input=True)
    for n in model.graph.node:
        n.input[:] = ["pos" if i == "position_ids" else i for i in n.input]
    return model


def test_llama_rms_norm_matches_numpy():
    model = llama_for_op_tests("4d")
    x_name = next(n for n in model.graph.node if n.op_type == "RMSNormalization").input[0]
    m, node = one_op_model(model, "RMSNormalization", {x_name: [2, 8, 64], "y": [2, 8, 64]})
    w = numpy_helper.to_array(next(t for t in model.graph.initializer if t.name == node.input[1]))
    x = np.random.default_rng(1).standard_normal((2, 8, 64), dtype=np.float32) * 3
    (y,) = run(m, {x_name: x})
    assert_close(y, ref_rms_norm(x, w, attrs_of(node)["epsilon"]))


@pytest.mark.parametrize("layout", ["4d", "3d"])
def test_llama_rotary_embedding_matches_numpy(layout):
    model = llama_for_op_tests(layout)
    node = next(n for n in model.graph.node if n.op_type == "RotaryEmbedding")
    shape = [2, 4, 8, 16] if layout == "4d" else [2, 8, 64]
    m, node = one_op_model(model, "RotaryEmbedding", {node.input[0]: shape, "pos": [2, 8], "y": shape})
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    cos, sin = inits[node.input[1]], inits[node.input[2]]
    rng = np.random.default_rng(2)
    x = rng.standard_normal(shape, dtype=np.float32)
    pos = rng.integers(0, cos.shape[0], size=(2, 8), dtype=np.int64)   # arbitrary positions
    (y,) = run(m, {node.input[0]: x, "pos": pos})
    assert_close(y, ref_rotary(x, cos, sin, pos, attrs_of(node).get("num_heads")))


@pytest.mark.parametrize("layout", ["4d", "3d"])
def test_llama_attention_matches_numpy(layout):
    model = llama_for_op_tests(layout)
    node = next(n for n in model.graph.node if n.op_type == "Attention")
    if layout == "4d":
        shapes = dict(zip(node.input, ([2, 4, 8, 16], [2, 2, 8, 16], [2, 2, 8, 16])), y=[2, 4, 8, 16])
    else:
        shapes = dict(zip(node.input, ([2, 8, 64], [2, 8, 32], [2, 8, 32])), y=[2, 8, 64])
    m, node = one_op_model(model, "Attention", shapes)
    assert attrs_of(node)["is_causal"] == 1
    rng = np.random.default_rng(3)
    q, k, v = (rng.standard_normal(shapes[n], dtype=np.float32) for n in node.input)
    (y,) = run(m, dict(zip(node.input, (q, k, v))))
    attrs = attrs_of(node)
    assert_close(y, ref_attention(q, k, v, attrs.get("q_num_heads"), attrs.get("kv_num_heads")))


def ref_llama(model: onnx.ModelProto, ids: np.ndarray, layers: int, heads: int, kv_heads: int,
              eps: float = 1e-6) -> np.ndarray:
    """Whole Llama forward pass in float64 with the model's own weights."""
    w = {t.name: numpy_helper.to_array(t).astype(np.float64) for t in model.graph.initializer
         if t.data_type == onnx.TensorProto.FLOAT}
    cos, sin = w["rotary_emb.cos_cache"], w["rotary_emb.sin_cache"]
    bsz, s = ids.shape
    pos = np.broadcast_to(np.arange(s), (bsz, s))
    x = w["embed_tokens.weight"][ids]
    hidden = x.shape[-1]
    d = hidden // heads

    def split(t, h):
        return t.reshape(bsz, s, h, d).transpose(0, 2, 1, 3)

    for i in range(layers):
        p = f"layers.{i}"
        h = ref_rms_norm(x, w[f"{p}.input_layernorm.weight"], eps)
        q = ref_rotary(split(h @ w[f"{p}.self_attn.q_proj.weight"], heads), cos, sin, pos)
        k = ref_rotary(split(h @ w[f"{p}.self_attn.k_proj.weight"], kv_heads), cos, sin, pos)
        v = split(h @ w[f"{p}.self_attn.v_proj.weight"], kv_heads)
        a = ref_attention(q, k, v).transpose(0, 2, 1, 3).reshape(bsz, s, hidden)
        x = x + a @ w[f"{p}.self_attn.o_proj.weight"]
        h = ref_rms_norm(x, w[f"{p}.post_attention_layernorm.weight"], eps)
        g = h @ w[f"{p}.mlp.gate_proj.weight"]
        u = h @ w[f"{p}.mlp.up_proj.weight"]
        x = x + (g / (1 + np.exp(-g)) * u) @ w[f"{p}.mlp.down_proj.weight"]
    return ref_rms_norm(x, w["norm.weight"], eps) @ w["lm_head.weight"]


@pytest.mark.parametrize("layout", ["4d", "3d"])
def test_llama_model_matches_numpy(layout):
    model = models.llama(**LLAMA, layout=layout)
    ids = models.random_inputs(model, vocab=128)["input_ids"]
    (logits,) = run(model, {"input_ids": ids})
    assert_close(logits, ref_llama(model, ids, layers=2, heads=4, kv_heads=2))


# ---------------------------------------------------------------------------
# Saving.
# ---------------------------------------------------------------------------


def test_save_external_data(tmp_path):
    model = models.gpt2(hidden=128, vocab=512)
    inline = models.save(model, tmp_path / "inline.onnx")
    path = models.save(model, tmp_path / "gpt2.onnx", external_data=True)
    data = tmp_path / "gpt2.data"
    assert data.exists()
    assert path.stat().st_size < 64 * 1024
    assert data.stat().st_size > 0.95 * models.weight_bytes(model)
    assert inline.stat().st_size > models.weight_bytes(model)
    assert len(model.graph.initializer[0].raw_data) > 0        # the argument is not modified
    onnx.checker.check_model(str(path), full_check=True)
    feeds = models.random_inputs(model, vocab=512)
    np.testing.assert_array_equal(run(path, feeds)[0], run(model, feeds)[0])
    models.save(model, path, external_data=True)                # rewrite replaces, not appends
    assert data.stat().st_size < 1.05 * models.weight_bytes(model)


def test_streamed_external_data_matches(tmp_path):
    ref = models.llama(hidden=128, vocab=256)
    streamed = models.generate_to_file("llama", tmp_path / "llama.onnx", hidden=128, vocab=256)
    assert (tmp_path / "llama.data").exists()
    assert (tmp_path / "llama.onnx").stat().st_size < 64 * 1024
    assert models.weight_bytes(streamed) == models.weight_bytes(ref)
    assert models.weight_bytes(models.shape_only("llama", hidden=128, vocab=256)) == models.weight_bytes(ref)
    loaded = onnx.load(str(tmp_path / "llama.onnx"))               # loads the external data
    for a, b in zip(loaded.graph.initializer, ref.graph.initializer):
        assert a.name == b.name
        np.testing.assert_array_equal(numpy_helper.to_array(a), numpy_helper.to_array(b))
    for a in streamed.graph.initializer:
        if a.data_location == onnx.TensorProto.EXTERNAL:
            offset = int(next(e.value for e in a.external_data if e.key == "offset"))
            assert offset % 4096 == 0


def test_cli(tmp_path):
    out = tmp_path / "m.onnx"
    env = dict(os.environ, PYTHONPATH=str(PYTHON_DIR))
    res = subprocess.run([sys.executable, "-m", "shardflow.models", "gpt2", "--out", str(out),
                          "--external-data", "--layers", "1", "--hidden", "32", "--heads", "2",
                          "--seq", "4", "--batch", "1", "--vocab", "64", "--symbolic"],
                         env=env, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "m.data").exists()
    model = onnx.load(str(out), load_external_data=False)
    assert [d.dim_param for d in model.graph.input[0].type.tensor_type.shape.dim] == ["batch", "seq"]
    res = subprocess.run([sys.executable, "-m", "shardflow.models", "resnet", "--out", str(out),
                          "--vocab", "3"], env=env, capture_output=True, text=True, timeout=60)
    assert res.returncode != 0 and "takes no --vocab" in res.stderr
