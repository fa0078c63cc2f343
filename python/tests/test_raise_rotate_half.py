"""nn-raise-rotate-half on rotary embeddings as exporters write them out.

Hugging Face's Llama (and Mistral, Qwen, GPT-NeoX) computes
`q * cos + rotate_half(q) * sin` with rotate_half(x) = Concat(-x2, x1)
over the halves of the last dimension, taken by two Slices (TorchScript
and dynamo exports: `x[..., :h]`, `x[..., h:]` with an INT64_MAX end) or
one Split. Raised, the partner is one nn.rotate_half: the CPU artifact runs
one rotate_half kernel and no slice, neg or concat; on CUDA the partner,
the products by cos and sin and their sum are one generated launch (and
the query's and key's, siblings, one launch together). Concats that are not
a rotate_half stay. Every variant matches onnxruntime: the CPU artifact
within a relative L2 error of 1e-6 (the rewrite moves no arithmetic), the
CUDA artifact (shard-run on the CUDA stand-ins, shardflow.standin) within
rtol 1e-6 and an atol of 1e-6 times the output's largest magnitude.
"""
from __future__ import annotations

import re
import shutil
import subprocess
import zlib

import numpy as np
import pytest
from onnx import parser

from shardflow import models, toolchain, standin
from test_cuda_standin import standin_dir

B, H, KV, S, D = 2, 4, 2, 6, 16
HALVES = {
    # name: (initializers, the nodes computing x1 and x2 from `{x}`)
    "slices_int64_max": (
        "int64[1] s0 = {0}, int64[1] h = {8}, int64[1] big = {9223372036854775807}, "
        "int64[1] ax = {-1}",
        "{x}1 = Slice({x}, s0, h, ax) {x}2 = Slice({x}, h, big, ax)"),
    "slices_positive_axis": (
        "int64[1] s0 = {0}, int64[1] h = {8}, int64[1] end = {16}, int64[1] ax = {3}",
        "{x}1 = Slice({x}, s0, h, ax) {x}2 = Slice({x}, h, end, ax)"),
    "slices_negative_start": (
        "int64[1] s0 = {0}, int64[1] h = {8}, int64[1] mh = {-8}, int64[1] big = {100}, "
        "int64[1] ax = {-1}",
        "{x}1 = Slice({x}, s0, h, ax) {x}2 = Slice({x}, mh, big, ax)"),
    "split": (
        "int64[2] sizes = {8, 8}",
        "{x}1, {x}2 = Split <axis = -1> ({x}, sizes)"),
}


def _model(name, partner="Concat <axis = -1> ({x}n, {x}1)"):
    inits, halves = HALVES[name]
    body = ""
    for x in ("q", "k"):
        body += (f" {halves.format(x=x)} {x}n = Neg({x}2) {x}r = {partner.format(x=x)}"
                 f" {x}c = Mul({x}, cos) {x}s = Mul({x}r, sin) {x}y = Add({x}c, {x}s)")
    text = ('<ir_version: 8, opset_import: ["" : 17]>\n'
            f"g (float[{B},{H},{S},{D}] q, float[{B},{KV},{S},{D}] k,"
            f" float[{B},1,{S},{D}] cos, float[{B},1,{S},{D}] sin)"
            f" => (float[{B},{H},{S},{D}] qy, float[{B},{KV},{S},{D}] ky) <{inits}> {{{body} }}")
    return parser.parse_model(text)


def _case(name, tmp_path, partner=None):
    """The model (saved as m.onnx), its random inputs and onnxruntime's
    outputs [qy, ky]."""
    model = _model(name, partner) if partner else _model(name)
    path = tmp_path / "m.onnx"
    path.write_bytes(model.SerializeToString())
    feeds = models.random_inputs(model, zlib.crc32(f"{name}{partner}".encode()))
    want = toolchain.run_onnxruntime_model(model, feeds)
    return path, feeds, [want["qy"], want["ky"]]


def _shard_opt(*args):
    out = subprocess.run([str(toolchain.tool("shard-opt")), *map(str, args)],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return out


def _close(got, want, what):
    scale = float(np.abs(want).max())
    np.testing.assert_allclose(np.asarray(got, np.float64), want, rtol=1e-6, atol=1e-6 * scale,
                               err_msg=what)


@pytest.mark.parametrize("name", sorted(HALVES))
def test_cpu_artifact_runs_one_rotate_half_kernel(name, tmp_path):
    path, feeds, want = _case(name, tmp_path)
    for raised in (True, False):
        artifact = tmp_path / f"m.{raised}.shard"
        _shard_opt(path, "--target", "cpu", f"--raise-rotate-half={str(raised).lower()}",
                   "-o", artifact)
        kernels = re.findall(r"^kernel (\w+)", artifact.read_text(), re.M)
        copies = [k for k in kernels if k in ("slice", "split", "neg", "concat")]
        if raised:
            assert kernels.count("rotate_half") == 2 and not copies, kernels
        else:
            assert "rotate_half" not in kernels and copies, kernels
        got = toolchain.run_artifact(artifact, feeds)
        for out, ref in zip(("qy", "ky"), want):
            err = toolchain.relative_error(got[out], ref)
            assert err < 1e-6, f"{name} raised={raised} {out}: relative L2 error {err:.3g}"


@pytest.mark.parametrize("name", sorted(HALVES))
def test_cuda_rotary_is_one_generated_launch(name, tmp_path):
    path, feeds, want = _case(name, tmp_path)
    for raised in (True, False):
        artifact = tmp_path / f"m.{raised}.shard"
        ir = standin.compile_cuda(path, artifact, f"--raise-rotate-half={str(raised).lower()}")
        launches = re.findall(r"kernel = @shardflow_kernels::@(\w+)", ir)
        if raised:
            # The query's and key's partner, products and sum: siblings in
            # one launch, no copy.
            assert launches == ["k0_rotate_half_mul_mul_add_rotate_half_mul_mul_add"], launches
            assert '"rt.kernel"' not in ir, ir
        else:
            # Per tensor: the halves' copies (two slices or a split) and
            # the concat's, a negation and the products with their sum.
            assert len(launches) == 4 and ir.count('"rt.kernel"') in (4, 6), launches
        standin_dir()  # skips when the build has no CUDA executor
        outputs = standin.run(artifact, feeds)
        got = [outputs["qy"], outputs["ky"]]
        for g, ref, out in zip(got, want, ("qy", "ky")):
            _close(g, ref, f"{name} raised={raised} {out}")


@pytest.mark.parametrize("partner", ["Concat <axis = -1> ({x}1, {x}n)",
                                     "Concat <axis = -1> ({x}n, {x}2)",
                                     "Concat <axis = -1> ({x}2, {x}1)"])
def test_other_concats_stay(partner, tmp_path):
    """Halves in the other order, the negated second half twice, or the
    halves swapped without the negation: not a rotate_half; nothing is
    raised and the results still match."""
    path, feeds, want = _case("slices_int64_max", tmp_path, partner)
    out = _shard_opt(path, "--raise-rotate-half", "--nn-raise-rotate-half=explain=true")
    assert "rotate_half" not in out.stdout + out.stderr, out.stdout
    artifact = tmp_path / "m.shard"
    _shard_opt(path, "--target", "cpu", "-o", artifact)
    assert "rotate_half" not in artifact.read_text()
    got = toolchain.run_artifact(artifact, feeds)
    for out_name, ref in zip(("qy", "ky"), want):
        assert toolchain.relative_error(got[out_name], ref) < 1e-6, out_name


def test_tensor_parallel_rotary_matches(tmp_path):
    """The raised partner under --mesh tp=2 (heads split, the last
    dimension whole): each rank's CPU program, run by mpirun, against
    onnxruntime."""
    path, feeds, want = _case("slices_int64_max", tmp_path)
    artifact = tmp_path / "m.shard"
    _shard_opt(path, "--target", "cpu", "--mesh", "tp=2", "--shard", "q=_,tp,_,_",
               "--shard", "k=_,tp,_,_", "-o", artifact)
    assert "rotate_half" in artifact.read_text()
    got = toolchain.run_artifact(artifact, feeds,
                                launcher=[shutil.which("mpirun"), "-np", "2", "--oversubscribe"])
    for out_name, ref in zip(("qy", "ky"), want):
        assert toolchain.relative_error(got[out_name], ref) < 1e-6, out_name
