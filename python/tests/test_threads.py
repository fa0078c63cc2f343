"""shard-run --threads N: the same bits for every thread count, and
onnxruntime's results.

The kernels split work across threads only so that each output element
(elementwise ops) or each output row (softmax, normalizations, reductions,
attention's (batch, head) pairs, ...) is computed by exactly one thread in
the same order as with one thread. So outputs with --threads 2 and 3 must
be bitwise equal to those with --threads 1, and all of them must match
onnxruntime.

Sizes are chosen above the kernels' threading thresholds (about 16K
elements per range): the zoo models at benchmark-like sizes, and one-node
models for each threaded kernel, including attention with several blocks
of query rows. Tolerances against onnxruntime: relative L2 error 1e-5 for
the zoo models (as test_e2e_zoo); rtol/atol 1e-5 for one-node models,
1e-4 rtol for the summing kernels (attention), and exact for integer and
data-movement results.
"""
from __future__ import annotations

import os
import re
import subprocess
import zlib
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from shardflow import models, toolchain

THREADS = (1, 2, 3)
ZOO_TOLERANCE = 1e-5
F32 = {"rtol": 1e-5, "atol": 1e-5}
SUM = {"rtol": 1e-4, "atol": 1e-5}


def rng_for(name: str) -> np.random.Generator:
    return np.random.default_rng(zlib.crc32(name.encode()))


def run_all_thread_counts(artifact, inputs) -> dict[int, dict[str, np.ndarray]]:
    return {t: toolchain.run_artifact(artifact, inputs, extra=["--threads", str(t)])
            for t in THREADS}


def assert_bitwise_equal(results: dict[int, dict[str, np.ndarray]]):
    one = results[1]
    for t, outs in results.items():
        assert set(outs) == set(one)
        for key, value in outs.items():
            assert value.dtype == one[key].dtype and value.shape == one[key].shape, key
            # Compare bytes: NaN payloads and -0.0 must match too.
            assert value.tobytes() == one[key].tobytes(), \
                f"{key}: --threads {t} differs from --threads 1"


# --------------------------------------------------------------------------
# The model zoo
# --------------------------------------------------------------------------

ZOO = {
    "mlp": dict(hidden=512, batch=64, in_features=256),
    "gpt2": dict(layers=2, hidden=128, heads=4, seq=64, batch=4, vocab=512),
    "bert": dict(layers=2, hidden=128, heads=4, seq=64, batch=4, vocab=512),
    "resnet": dict(hidden=16, batch=2, image=64),
    "llama": dict(layers=2, hidden=128, heads=4, kv_heads=2, seq=64, batch=4, vocab=512),
}


def zoo_inputs(model: onnx.ModelProto, rng: np.random.Generator, vocab: int) -> dict:
    inputs = {}
    for value in model.graph.input:
        tt = value.type.tensor_type
        shape = [d.dim_value for d in tt.shape.dim]
        if tt.elem_type != onnx.TensorProto.INT64:
            inputs[value.name] = rng.standard_normal(shape).astype(np.float32)
        elif value.name == "attention_mask":
            mask = np.ones(shape, np.int64)
            mask[:, -5:] = rng.integers(0, 2, size=(shape[0], 5))
            inputs[value.name] = mask
        elif value.name == "token_type_ids":
            inputs[value.name] = rng.integers(0, 2, size=shape, dtype=np.int64)
        elif value.name == "position_ids":
            inputs[value.name] = np.broadcast_to(np.arange(shape[1]), shape).astype(np.int64)
        else:
            inputs[value.name] = rng.integers(0, vocab, size=shape, dtype=np.int64)
    return inputs


@pytest.mark.parametrize("name", list(ZOO))
def test_zoo_same_bits_for_every_thread_count(tmp_path, name):
    config = ZOO[name]
    model = getattr(models, name)(**config)
    path = tmp_path / f"{name}.onnx"
    models.save(model, path, external_data=True)
    artifact = toolchain.compile_model(path, tmp_path / f"{name}.shard")
    inputs = zoo_inputs(model, rng_for(name), config.get("vocab", 128))
    results = run_all_thread_counts(artifact, inputs)
    assert_bitwise_equal(results)
    reference = toolchain.run_onnxruntime(path, inputs)
    for key, ref in reference.items():
        err = toolchain.relative_error(results[2][key], ref)
        assert err < ZOO_TOLERANCE, f"{name}/{key}: relative L2 error {err:.3g}"


# --------------------------------------------------------------------------
# One node per threaded kernel
# --------------------------------------------------------------------------

def f32(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


def node_case(op, inputs, attrs=None, consts=(), outputs=1, out_dtypes=None, opset=18,
              tol=F32):
    """A one-node model; `inputs` are (name, array) pairs, None for an absent
    optional input; names in `consts` become initializers."""
    names = [n if a is not None else "" for n, a in inputs]
    outs = [f"y{i}" for i in range(outputs)]
    node = helper.make_node(op, names, outs, **(attrs or {}))
    graph_inputs, inits = [], []
    for name, array in inputs:
        if array is None:
            continue
        if name in consts:
            inits.append(numpy_helper.from_array(np.asarray(array), name))
        else:
            graph_inputs.append(helper.make_tensor_value_info(
                name, helper.np_dtype_to_tensor_dtype(array.dtype), array.shape))
    dtypes = out_dtypes or [inputs[0][1].dtype] * outputs
    graph_outputs = [helper.make_tensor_value_info(
        o, helper.np_dtype_to_tensor_dtype(np.dtype(t)), None) for o, t in zip(outs, dtypes)]
    graph = helper.make_graph([node], "kernel", graph_inputs, graph_outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                              ir_version=8)
    feeds = {n: a for n, a in inputs if a is not None and n not in consts}
    return model, feeds, tol


def kernel_cases():
    r = rng_for("kernels")
    c = {}
    big = f32(r, 48, 96, 64)  # 294912 elements
    c["add_same_shape"] = node_case("Add", [("a", big), ("b", f32(r, 48, 96, 64))])
    c["mul_broadcast_rows"] = node_case("Mul", [("a", big), ("b", f32(r, 96, 1))])
    # Runs of 333 elements: range bounds (multiples of 64) fall inside runs.
    c["add_odd_rows"] = node_case("Add", [("a", f32(r, 517, 333)), ("b", f32(r, 333))])
    c["sub_broadcast_both"] = node_case("Sub", [("a", f32(r, 48, 1, 64)), ("b", f32(r, 96, 1))])
    c["div_int"] = node_case("Div", [("a", r.integers(-1000, 1000, (300, 257))),
                                     ("b", r.integers(1, 50, (257,)))], tol=None)
    c["pow_scalar_exponent"] = node_case("Pow", [("a", np.abs(big)),
                                                 ("b", np.array(1.5, np.float32))])
    c["less"] = node_case("Less", [("a", big), ("b", f32(r, 64))], out_dtypes=[np.bool_],
                          tol=None)
    c["where"] = node_case("Where", [("c", r.random((48, 96, 64)) < 0.5), ("x", big),
                                     ("y", f32(r, 96, 64))], out_dtypes=[np.float32])
    c["erf"] = node_case("Erf", [("x", big)])
    c["tanh"] = node_case("Tanh", [("x", big)])
    c["exp"] = node_case("Exp", [("x", big)])
    c["sigmoid"] = node_case("Sigmoid", [("x", big)])
    c["gelu_tanh"] = node_case("Gelu", [("x", big)], {"approximate": "tanh"}, opset=20)
    c["clip"] = node_case("Clip", [("x", big), ("lo", np.array(-0.5, np.float32)),
                                   ("hi", np.array(0.7, np.float32))], consts=("lo", "hi"))
    c["cast_to_f16"] = node_case("Cast", [("x", big)], {"to": onnx.TensorProto.FLOAT16},
                                 out_dtypes=[np.float16], tol=None)
    c["softmax_last"] = node_case("Softmax", [("x", f32(r, 4, 8, 64, 130))], {"axis": -1})
    c["softmax_strided"] = node_case("Softmax", [("x", f32(r, 64, 40, 33))], {"axis": 1})
    c["log_softmax"] = node_case("LogSoftmax", [("x", f32(r, 256, 300))], {"axis": -1})
    c["layer_norm"] = node_case("LayerNormalization", [("x", f32(r, 4, 130, 256)),
                                                       ("s", f32(r, 256)), ("b", f32(r, 256))],
                                {"axis": -1, "epsilon": 1e-5}, consts=("s", "b"))
    c["rms_norm"] = node_case("RMSNormalization", [("x", f32(r, 4, 130, 256)),
                                                   ("s", f32(r, 256))], {"axis": -1},
                              consts=("s",), opset=23)
    c["batch_norm"] = node_case("BatchNormalization", [
        ("x", f32(r, 4, 24, 40, 40)), ("s", f32(r, 24)), ("b", f32(r, 24)), ("m", f32(r, 24)),
        ("v", np.abs(f32(r, 24)) + 0.5)], consts=("s", "b", "m", "v"))
    c["reduce_sum_last"] = node_case("ReduceSum", [("x", f32(r, 300, 257)),
                                                   ("axes", np.array([-1]))], consts=("axes",))
    c["reduce_mean_middle"] = node_case("ReduceMean", [("x", f32(r, 64, 50, 33)),
                                                       ("axes", np.array([1]))],
                                        {"keepdims": 0}, consts=("axes",))
    c["reduce_max_two_axes"] = node_case("ReduceMax", [("x", f32(r, 40, 30, 20, 17)),
                                                       ("axes", np.array([1, 3]))],
                                         consts=("axes",))
    c["reduce_sum_int"] = node_case("ReduceSum", [("x", r.integers(-99, 99, (300, 257))),
                                                  ("axes", np.array([1]))], consts=("axes",),
                                    tol=None)
    c["cumsum"] = node_case("CumSum", [("x", f32(r, 64, 40, 33)), ("axis", np.array(1))],
                            consts=("axis",))
    c["topk"] = node_case("TopK", [("x", f32(r, 600, 300)), ("k", np.array([5]))],
                          {"axis": -1}, consts=("k",), outputs=2,
                          out_dtypes=[np.float32, np.int64], tol=None)
    table = f32(r, 1000, 96)
    c["gather_rows"] = node_case("Gather", [("t", table),
                                            ("i", r.integers(-1000, 1000, (16, 64)))],
                                 {"axis": 0}, tol=None)
    c["gather_axis1"] = node_case("Gather", [("t", f32(r, 64, 300, 8)),
                                             ("i", r.integers(0, 300, (200,)))],
                                  {"axis": 1}, tol=None)
    c["transpose"] = node_case("Transpose", [("x", f32(r, 8, 64, 12, 32))],
                               {"perm": [0, 2, 1, 3]}, tol=None)
    c["transpose_2d"] = node_case("Transpose", [("x", f32(r, 513, 257))], tol=None)
    c["slice"] = node_case("Slice", [("x", f32(r, 64, 300, 16)), ("s", np.array([1, 3])),
                                     ("e", np.array([290, 15])), ("a", np.array([1, 2])),
                                     ("st", np.array([2, 1]))],
                           consts=("s", "e", "a", "st"), tol=None)
    c["expand"] = node_case("Expand", [("x", f32(r, 1, 300, 1)),
                                       ("shape", np.array([64, 300, 16]))],
                            consts=("shape",), tol=None)

    def att(q, k, v, mask=None, **attrs):
        return node_case("Attention", [("q", q), ("k", k), ("v", v), ("mask", mask)], attrs,
                         opset=23, tol=SUM)
    # 300 query rows: several blocks of rows per (batch, head).
    c["attention_mha"] = att(f32(r, 2, 4, 300, 32), f32(r, 2, 4, 300, 32),
                             f32(r, 2, 4, 300, 24))
    c["attention_gqa_causal"] = att(f32(r, 2, 6, 300, 16), f32(r, 2, 2, 300, 16),
                                    f32(r, 2, 2, 300, 16), is_causal=1)
    keep = r.random((2, 1, 200, 310)) < 0.7
    keep[..., 0] = True
    c["attention_bool_mask"] = att(f32(r, 2, 3, 200, 16), f32(r, 2, 3, 310, 16),
                                   f32(r, 2, 3, 310, 16), keep)
    c["attention_float_mask_softcap"] = att(f32(r, 1, 4, 200, 16) * 3, f32(r, 1, 4, 150, 16) * 3,
                                            f32(r, 1, 4, 150, 16), f32(r, 200, 150),
                                            softcap=2.5, scale=0.3)
    c["attention_3d"] = att(f32(r, 2, 130, 4 * 16), f32(r, 2, 140, 2 * 16),
                            f32(r, 2, 140, 2 * 8), q_num_heads=4, kv_num_heads=2)
    pos = r.integers(0, 200, (4, 130))
    c["rotary"] = node_case("RotaryEmbedding", [("x", f32(r, 4, 8, 130, 32)),
                                                ("cos", f32(r, 200, 16)),
                                                ("sin", f32(r, 200, 16)), ("pos", pos)],
                            opset=23)
    return c


KERNELS = kernel_cases()


@pytest.mark.parametrize("name", list(KERNELS))
def test_kernel_same_bits_for_every_thread_count(tmp_path, name):
    model, feeds, tol = KERNELS[name]
    path = tmp_path / "model.onnx"
    onnx.save(model, path)
    artifact = toolchain.compile_model(path, tmp_path / "model.shard")
    results = run_all_thread_counts(artifact, feeds)
    assert_bitwise_equal(results)
    reference = toolchain.run_onnxruntime(path, feeds)
    for i, ref in enumerate(reference.values()):
        got = results[3][f"y{i}"]
        assert got.shape == ref.shape and got.dtype == ref.dtype
        if tol is None:
            np.testing.assert_array_equal(got, ref)
        else:
            np.testing.assert_allclose(got, ref, **tol)


def test_error_in_a_worker_thread_is_reported(tmp_path):
    """Integer division by zero found by any thread fails the run with the
    kernel's message, as with one thread, naming the kernel (once) and its
    ONNX node."""
    a = np.arange(200000, dtype=np.int64).reshape(400, 500)
    b = np.ones((400, 500), np.int64)
    b[397, 499] = 0  # in the last range
    model, feeds, _ = node_case("Div", [("a", a), ("b", b)])
    path = tmp_path / "model.onnx"
    onnx.save(model, path)
    artifact = toolchain.compile_model(path, tmp_path / "model.shard")
    for t in THREADS:
        with pytest.raises(RuntimeError, match=r"kernel 'div' \(ONNX node '[^']+', "
                                               r"instruction \d+\): integer division by zero"):
            toolchain.run_artifact(artifact, feeds, extra=["--threads", str(t)])


def test_gemms_never_run_openblas_sse_fallback_on_a_vector_cpu(tmp_path):
    """OpenBLAS picks its kernels from the CPU's model number and falls back
    to its SSE3 "Prescott" kernels for a model it does not know (a
    Sapphire Rapids Xeon under a hypervisor: 3x slower than its AVX-512
    kernels). shard-run then starts again with OPENBLAS_CORETYPE set to
    what the CPU can run and says so under --verbose; a core the user
    asked for is kept. Both give onnxruntime's results."""
    r = rng_for("blas_core")
    x, w = f32(r, 64, 256), f32(r, 256, 512)
    model, feeds, _ = node_case("MatMul", [("x", x), ("w", w)], consts=("w",))
    path = tmp_path / "model.onnx"
    onnx.save(model, path)
    artifact = toolchain.compile_model(path, tmp_path / "model.shard")
    np.save(tmp_path / "x.npy", x)
    reference = toolchain.run_onnxruntime(path, {"x": x})["y0"]

    def run(env):
        env = {**{k: v for k, v in os.environ.items() if k != "OPENBLAS_CORETYPE"}, **env}
        proc = subprocess.run([str(toolchain.tool("shard-run")), str(artifact), "--input",
                               f"x={tmp_path / 'x.npy'}", "--output", str(tmp_path / "y.npy"),
                               "--verbose"], capture_output=True, text=True, env=env)
        assert proc.returncode == 0, proc.stderr
        np.testing.assert_allclose(np.load(tmp_path / "y.npy"), reference, **SUM)
        m = re.search(r"CPU GEMMs: OpenBLAS's (\w+) kernels", proc.stderr)
        return m.group(1) if m else None, proc.stderr

    core, err = run({})
    if core is None:
        pytest.skip("shard-run is built without OpenBLAS")
    sse = {"prescott", "core2", "penryn", "dunnington", "nehalem", "atom", "unknown"}
    flags = Path("/proc/cpuinfo").read_text()
    if re.search(r"\bavx2\b", flags) and re.search(r"\bfma\b", flags):
        assert core.lower() not in sse, err
    fallback = re.search(r"set by shard-run: OpenBLAS picked (\w+)", err)
    if fallback:
        assert fallback.group(1).lower() in sse, err
    asked, err = run({"OPENBLAS_CORETYPE": "Prescott"})
    assert asked == "Prescott" and "set by shard-run" not in err, err
