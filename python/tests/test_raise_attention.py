"""nn-raise-attention on whole models: the zoo's transformers, whose
attention is written out as MatMul / Div / Where or Add / Softmax / MatMul
(gpt2, bert) or is already the opset-23 Attention op (llama), end with one
nn.attention per layer, and the compiled artifacts (`--target cpu
--raise-attention`) match onnxruntime.

Norm: relative L2 error ||ours - ort||_2 / ||ort||_2 over each output,
tolerance 1e-5, as test_e2e_zoo.py. A hand-built grouped-query model (K and
V repeated per head group with Unsqueeze / Expand / Reshape, the exporters'
repeat_kv) checks that the repeats are dropped for a grouped-query
nn.attention, and the sharding presets must behave the same with and
without raising (the pass runs before sharding).
"""
from __future__ import annotations

import math
import re
import shutil
import subprocess
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from shardflow import models, toolchain  # noqa: E402
from test_e2e_zoo import random_inputs  # noqa: E402

TOLERANCE = 1e-5
LAYERS = 3


def shard_opt(*args: str) -> subprocess.CompletedProcess:
    out = subprocess.run([str(toolchain.tool("shard-opt")), *map(str, args)],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return out


def compare_with_onnxruntime(model, path: Path, artifact: Path, seed: str) -> None:
    inputs = random_inputs(model, np.random.default_rng(zlib.crc32(seed.encode())))
    ours = toolchain.run_artifact(artifact, inputs)
    reference = toolchain.run_onnxruntime(path, inputs)
    assert set(ours) == set(reference)
    for key, ref in reference.items():
        assert ours[key].shape == ref.shape and ours[key].dtype == ref.dtype, key
        err = toolchain.relative_error(ours[key], ref)
        assert err < TOLERANCE, f"{seed}/{key}: relative L2 error {err:.3g}"


@pytest.mark.parametrize("name,config", [
    ("gpt2", {}),
    ("gpt2", {"causal_mask": "constant"}),
    ("bert", {}),
    ("llama", {}),
], ids=["gpt2", "gpt2-stored-mask", "bert", "llama"])
def test_zoo_raises_one_attention_per_layer(tmp_path, name, config):
    model = getattr(models, name)(layers=LAYERS, **config)
    path = tmp_path / f"{name}.onnx"
    models.save(model, path)
    ir = shard_opt(path, "--raise-attention").stdout
    assert ir.count("nn.attention") == LAYERS, ir
    assert "nn.softmax" not in ir
    if name == "gpt2" and not config:
        # The trilu-built mask is recognized as the causal mask.
        assert ir.count("is_causal = true") == LAYERS
        assert "nn.trilu" not in ir
    if config.get("causal_mask") == "constant":
        # A slice of a stored weight cannot be checked at compile time: it
        # stays a mask operand, never is_causal.
        assert "is_causal" not in ir
    if name == "bert":
        assert re.search(r"nn\.attention %\S+, %\S+, %\S+, %\S+ \{scale = 2\.5", ir), ir
    unraised = shard_opt(path, "--raise-attention=false").stdout
    expected = LAYERS if name == "llama" else 0
    assert unraised.count("nn.attention") == expected

    artifact = toolchain.compile_model(path, tmp_path / f"{name}.shard",
                                      extra=["--raise-attention"])
    assert artifact.read_text().count("kernel attention") == LAYERS
    compare_with_onnxruntime(model, path, artifact, f"{name}-{config}")


def test_cpu_target_does_not_raise_by_default(tmp_path):
    """--target cpu keeps materialized attention unless asked (shard-opt's
    --raise-attention help says why); --target cuda raises by default."""
    path = tmp_path / "gpt2.onnx"
    models.save(models.gpt2(layers=LAYERS), path)
    text = toolchain.compile_model(path, tmp_path / "gpt2.shard").read_text()
    assert "kernel attention" not in text
    assert text.count("kernel softmax") == LAYERS


def grouped_query_model(batch=2, heads=4, kv_heads=2, seq=8, dim=16):
    """Materialized causal grouped-query attention over graph inputs q, k, v,
    K and V repeated per group as Hugging Face's repeat_kv exports it."""
    group = heads // kv_heads
    nodes, inits = [], []

    def const(name, array):
        inits.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def repeat(x):
        nodes.append(helper.make_node("Unsqueeze", [x, const(f"{x}_axes", np.array([2]))],
                                      [f"{x}_1"]))
        nodes.append(helper.make_node(
            "Expand", [f"{x}_1", const(f"{x}_shape5", np.array([batch, kv_heads, group, seq, dim]))],
            [f"{x}_2"]))
        nodes.append(helper.make_node(
            "Reshape", [f"{x}_2", const(f"{x}_shape4", np.array([batch, heads, seq, dim]))],
            [f"{x}_rep"]))
        return f"{x}_rep"

    k, v = repeat("k"), repeat("v")
    nodes += [
        helper.make_node("Transpose", [k], ["kt"], perm=[0, 1, 3, 2]),
        helper.make_node("MatMul", ["q", "kt"], ["s"]),
        helper.make_node("Mul", ["s", const("scale", np.float32(1 / math.sqrt(dim)))], ["s1"]),
        helper.make_node("ConstantOfShape", [const("square", np.array([seq, seq]))], ["ones"],
                         value=helper.make_tensor("value", TensorProto.FLOAT, [1], [1.0])),
        helper.make_node("Trilu", ["ones"], ["tri"], upper=0),
        helper.make_node("Cast", ["tri"], ["keep"], to=TensorProto.BOOL),
        helper.make_node("Where", ["keep", "s1", const("fill", np.float32(-np.inf))], ["s2"]),
        helper.make_node("Softmax", ["s2"], ["p"], axis=-1),
        helper.make_node("MatMul", ["p", v], ["out"]),
    ]
    f32 = TensorProto.FLOAT
    graph = helper.make_graph(
        nodes, "gqa",
        [helper.make_tensor_value_info("q", f32, [batch, heads, seq, dim]),
         helper.make_tensor_value_info("k", f32, [batch, kv_heads, seq, dim]),
         helper.make_tensor_value_info("v", f32, [batch, kv_heads, seq, dim])],
        [helper.make_tensor_value_info("out", f32, [batch, heads, seq, dim])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", models.OPSET)],
                             ir_version=models.IR_VERSION)


def test_grouped_query_repeats_are_dropped(tmp_path):
    model = grouped_query_model()
    path = tmp_path / "gqa.onnx"
    models.save(model, path)
    ir = shard_opt(path, "--raise-attention").stdout
    assert "nn.expand" not in ir and "nn.softmax" not in ir, ir
    assert re.search(r"nn\.attention %arg0, %arg1, %arg2 \{is_causal = true, scale = 2\.5\S* : f32\} : "
                     r"\(tensor<2x4x8x16xf32>, tensor<2x2x8x16xf32>, tensor<2x2x8x16xf32>\)", ir), ir
    artifact = toolchain.compile_model(path, tmp_path / "gqa.shard", extra=["--raise-attention"])
    assert "kernel attention" in artifact.read_text()
    compare_with_onnxruntime(model, path, artifact, "gqa")


@pytest.mark.parametrize("name", ["gpt2", "bert"])
@pytest.mark.parametrize("strategy", ["dp", "megatron", "megatron-sp"])
def test_presets_shard_the_same_with_raising(tmp_path, name, strategy):
    """Raising runs before sharding: the presets find the same linear layers
    and propagation makes the same collectives and weight slices either way
    (the report's steps, bytes and parameter counts; not the arena, which
    follows the op order, nor the layers' op counts, which raising lowers)."""
    path = tmp_path / f"{name}.onnx"
    models.save(getattr(models, name)(), path)

    def report(flag: str) -> list[str]:
        err = shard_opt(path, "--mesh", "dp=2,tp=2", "--strategy", strategy, "--target", "cpu",
                        "--report", flag, "-o", tmp_path / "m.shard").stderr
        lines = [re.sub(r" \(.*\)$", "", line) for line in err.splitlines()]
        return [line for line in lines
                if "peak activation" not in line and not line.startswith("layers:")]

    raised, unraised = report("--raise-attention=true"), report("--raise-attention=false")
    assert any("parameters per rank" in line for line in raised)
    assert raised == unraised


@pytest.mark.skipif(shutil.which("mpirun") is None, reason="mpirun is missing")
@pytest.mark.parametrize("name", ["gpt2", "bert"])
def test_raised_and_sharded_matches_onnxruntime(tmp_path, name):
    """Raised, then sharded by megatron over dp=2,tp=2 (heads split over
    tp): 4 ranks under mpirun against onnxruntime."""
    model = getattr(models, name)()
    path = tmp_path / f"{name}.onnx"
    models.save(model, path)
    artifact = toolchain.compile_model(
        path, tmp_path / f"{name}.shard",
        extra=["--raise-attention", "--mesh", "dp=2,tp=2", "--strategy", "megatron"])
    text = artifact.read_text()
    assert text.count("kernel attention") == 2 and "all_reduce" in text
    inputs = random_inputs(model, np.random.default_rng(zlib.crc32(f"{name}-tp".encode())))
    ours = toolchain.run_artifact(artifact, inputs,
                                 launcher=[shutil.which("mpirun"), "-np", "4", "--oversubscribe"])
    reference = toolchain.run_onnxruntime(path, inputs)
    for key, ref in reference.items():
        err = toolchain.relative_error(ours[key], ref)
        assert err < TOLERANCE, f"{name}/{key}: relative L2 error {err:.3g}"
