"""nn-raise-normalization and nn-raise-gelu on whole models.

Norms: layer norms written out as an
opset-13 exporter writes them (ReduceMean with an axes attribute, Sub, Pow,
Sqrt, Div, gamma, beta), as opset 18 does (axes as an input, x * x), and
Llama's RMSNorm (Pow, ReduceMean, Sqrt, Reciprocal or 1 / Sqrt, weight
first), each after a residual add.

With --target the chain becomes one nn.layer_normalization or
nn.rms_normalization: the CPU artifact runs one norm kernel and no
reduce_mean, the CUDA target one generated launch (the residual add as its
prologue) where the written-out chain takes three or four. Both match
onnxruntime: the CPU artifact within a relative L2 error of 1e-5, the
CUDA artifact (shard-run on the CUDA stand-ins, shardflow.standin) within
rtol 1e-5 and an atol of 1e-5 times the output's largest magnitude.

GELU: GPT-2's tanh form and BERT's erf form written out (opset 13) after a
MatMul and a bias Add. On the CPU the chain becomes one gelu kernel; on
CUDA the tanh form rides on the GEMM (cuBLASLt's gelu_bias epilogue, no
generated kernel at all) and the erf form is one generated kernel after
the GEMM's bias epilogue. CPU results against onnxruntime as above; the
generated code of the chain alone (after a residual add) on the CUDA
stand-ins, with an atol of 1e-5 (erf and tanh approximations differ by a
few 1e-7 between libdevice and onnxruntime).
"""
from __future__ import annotations

import re
import subprocess
import zlib

import numpy as np
import onnxruntime as ort
import pytest
from onnx import parser

from shardflow import toolchain, standin
from test_cuda_standin import standin_dir

CASES = {
    # name: (opset, graph body after the residual add `x = Add(a, res)`,
    #        launches of the written-out chain on the CUDA target)
    "layer_norm_opset13": (13, """
        m = ReduceMean <axes = [-1], keepdims = 1> (x)
        d = Sub(x, m)
        two = Constant <value = float {2.0}> ()
        p = Pow(d, two)
        v = ReduceMean <axes = [-1], keepdims = 1> (p)
        eps = Constant <value = float {1e-5}> ()
        ve = Add(v, eps)
        s = Sqrt(ve)
        n = Div(d, s)
        gn = Mul(n, g)
        y = Add(gn, b)""", 4),
    "layer_norm_opset18": (18, """
        ax = Constant <value = int64[1] {2}> ()
        m = ReduceMean <keepdims = 1> (x, ax)
        d = Sub(x, m)
        p = Mul(d, d)
        v = ReduceMean <keepdims = 1> (p, ax)
        eps = Constant <value = float {1e-12}> ()
        ve = Add(eps, v)
        s = Sqrt(ve)
        n = Div(d, s)
        gn = Mul(g, n)
        y = Add(b, gn)""", 4),
    "rms_norm_reciprocal": (18, """
        two = Constant <value = float {2.0}> ()
        p = Pow(x, two)
        ax = Constant <value = int64[1] {-1}> ()
        v = ReduceMean <keepdims = 1> (p, ax)
        eps = Constant <value = float {1e-6}> ()
        ve = Add(v, eps)
        s = Sqrt(ve)
        r = Reciprocal(s)
        n = Mul(x, r)
        y = Mul(g, n)""", 3),
    "rms_norm_one_over": (13, """
        p = Mul(x, x)
        v = ReduceMean <axes = [2], keepdims = 1> (p)
        eps = Constant <value = float {1e-6}> ()
        ve = Add(v, eps)
        s = Sqrt(ve)
        one = Constant <value = float {1.0}> ()
        r = Div(one, s)
        n = Mul(r, x)
        y = Mul(n, g)""", 3),
}
SHAPE = (2, 5, 48)


def _model(name):
    opset, body, _ = CASES[name]
    s = ",".join(map(str, SHAPE))
    text = (f'<ir_version: 8, opset_import: ["" : {opset}]>\n'
            f"g (float[{s}] a, float[{s}] res, float[{SHAPE[-1]}] g, float[{SHAPE[-1]}] b)"
            f" => (float[{s}] y) {{ x = Add(a, res) {body} }}")
    return parser.parse_model(text)


def _feeds(model, name):
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    feeds = {}
    for inp in model.graph.input:
        shape = [d.dim_value for d in inp.type.tensor_type.shape.dim]
        # Rows with a mean far from zero: the centring matters.
        feeds[inp.name] = (rng.standard_normal(shape) * 2 + 0.5).astype(np.float32)
    return feeds


def _onnxruntime(model, feeds):
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)[0]


def _shard_opt(*args):
    out = subprocess.run([str(toolchain.tool("shard-opt")), *map(str, args)],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return out


@pytest.mark.parametrize("name", sorted(CASES))
def test_cpu_artifact_runs_one_norm_kernel(name, tmp_path):
    model = _model(name)
    path = tmp_path / "m.onnx"
    path.write_bytes(model.SerializeToString())
    feeds = _feeds(model, name)
    want = _onnxruntime(model, feeds)
    kind = "layer_normalization" if name.startswith("layer") else "rms_normalization"
    for raise_norms in (True, False):
        artifact = tmp_path / f"m.{raise_norms}.shard"
        _shard_opt(path, "--target", "cpu", f"--raise-normalization={str(raise_norms).lower()}",
                   "-o", artifact)
        text = artifact.read_text()
        kernels = re.findall(r"^kernel (\w+)", text, re.M)
        if raise_norms:
            assert kernels.count(kind) == 1 and "reduce_mean" not in kernels, kernels
        else:
            assert kind not in kernels and kernels.count("reduce_mean") >= 1, kernels
        got = toolchain.run_artifact(artifact, feeds)["y"]
        err = toolchain.relative_error(got, want)
        assert err < 1e-5, f"{name} raised={raise_norms}: relative L2 error {err:.3g}"


@pytest.mark.parametrize("name", sorted(CASES))
def test_cuda_norm_is_one_generated_launch(name, tmp_path):
    model = _model(name)
    path = tmp_path / "m.onnx"
    path.write_bytes(model.SerializeToString())
    feeds = _feeds(model, name)
    want = _onnxruntime(model, feeds)
    written_out = CASES[name][2]
    standin_dir()  # skips when the build has no CUDA executor
    for raise_norms, launches in ((True, 1), (False, written_out)):
        artifact = tmp_path / f"m.{raise_norms}.shard"
        ir = standin.compile_cuda(path, artifact,
                                  f"--raise-normalization={str(raise_norms).lower()}")
        assert ir.count('"rt.launch"') == launches, (raise_norms, ir)
        assert '"rt.kernel"' not in ir
        got = standin.run(artifact, feeds)["y"]
        scale = float(np.abs(want).max())
        np.testing.assert_allclose(got.astype(np.float64), want, rtol=1e-5, atol=1e-5 * scale,
                                   err_msg=f"{name} raised={raise_norms}")


GELU = {
    # name: (graph body computing y from h, the tanh form?)
    "gelu_tanh_gpt2": ("""
        half = Constant <value = float {0.5}> ()
        hh = Mul(half, h)
        three = Constant <value = float {3.0}> ()
        cube = Pow(h, three)
        k = Constant <value = float {0.044715}> ()
        kc = Mul(k, cube)
        inner = Add(h, kc)
        c = Constant <value = float {0.7978845608}> ()
        arg = Mul(c, inner)
        t = Tanh(arg)
        one = Constant <value = float {1.0}> ()
        o = Add(one, t)
        y = Mul(hh, o)""", True),
    "gelu_erf_bert": ("""
        s = Constant <value = float {1.4142135623730951}> ()
        d = Div(h, s)
        e = Erf(d)
        one = Constant <value = float {1.0}> ()
        o = Add(e, one)
        ho = Mul(h, o)
        half = Constant <value = float {0.5}> ()
        y = Mul(ho, half)""", False),
}


def _gelu_model(name, after_matmul):
    body, _ = GELU[name]
    if after_matmul:
        head = ("g (float[4,6,32] a, float[32,64] w, float[64] bias) => (float[4,6,64] y) {"
                " mm = MatMul(a, w) h = Add(mm, bias)")
    else:
        head = "g (float[4,6,64] a, float[4,6,64] res) => (float[4,6,64] y) { h = Add(a, res)"
    return parser.parse_model(f'<ir_version: 8, opset_import: ["" : 13]>\n{head} {body} }}')


@pytest.mark.parametrize("name", sorted(GELU))
def test_written_out_gelu_is_one_kernel(name, tmp_path):
    tanh = GELU[name][1]
    model = _gelu_model(name, after_matmul=True)
    path = tmp_path / "m.onnx"
    path.write_bytes(model.SerializeToString())
    feeds = _feeds(model, name)
    want = _onnxruntime(model, feeds)
    for raise_gelu in (True, False):
        flag = f"--raise-gelu={str(raise_gelu).lower()}"
        artifact = tmp_path / f"m.{raise_gelu}.shard"
        _shard_opt(path, "--target", "cpu", flag, "-o", artifact)
        kernels = re.findall(r"^kernel (\w+)", artifact.read_text(), re.M)
        expected = "erf" not in kernels and "tanh" not in kernels and kernels.count("gelu") == 1
        assert expected == raise_gelu, kernels
        got = toolchain.run_artifact(artifact, feeds)["y"]
        err = toolchain.relative_error(got, want)
        assert err < 1e-5, f"{name} raised={raise_gelu}: relative L2 error {err:.3g}"
        # CUDA: the tanh form is the GEMM's epilogue, the erf form one
        # generated kernel after the GEMM's bias epilogue.
        cuda = tmp_path / f"m.{raise_gelu}.cuda.shard"
        _shard_opt(path, "--target", "cuda", flag, "-o", cuda)
        text = cuda.read_text()
        launches = re.findall(r"^kernel launch .* function=s:(\w+)", text, re.M)
        if raise_gelu and tanh:
            assert " epilogue=s:gelu_bias" in text and not launches, text
        elif raise_gelu:
            assert " epilogue=s:bias" in text and len(launches) == 1, launches
            assert launches[0].endswith("_gelu"), launches
        else:
            assert "gelu_bias" not in text and len(launches) == 1, launches


@pytest.mark.parametrize("name", sorted(GELU))
def test_raised_gelu_generated_code_matches_onnxruntime(name, tmp_path):
    model = _gelu_model(name, after_matmul=False)
    path = tmp_path / "m.onnx"
    path.write_bytes(model.SerializeToString())
    feeds = _feeds(model, name)
    want = _onnxruntime(model, feeds)
    artifact = tmp_path / "m.shard"
    ir = standin.compile_cuda(path, artifact, "--raise-gelu")
    assert ir.count('"rt.launch"') == 1 and "_add_gelu" in ir, ir
    standin_dir()  # skips when the build has no CUDA executor
    got = standin.run(artifact, feeds)["y"]
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=1e-5,
                               atol=1e-5 * float(np.abs(want).max()), err_msg=name)
