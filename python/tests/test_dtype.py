"""Mixed precision (--dtype bf16 / f16): the zoo models compiled to compute
in a 16-bit float type, run by shard-run on the CPU, against onnxruntime's
f32 result.

Norm: relative L2 error ||ours - ort||_2 / ||ort||_2 over each output.
Tolerances: 2e-2 for bf16 (8-bit mantissa), 5e-3 for f16 (11-bit). Measured
on these models (default sizes, 2 layers, this file's seeds): bf16 1.7e-3
(mlp) to 6.7e-3 (bert), f16 2.2e-4 (mlp) to 9.5e-4 (bert); kernels
accumulate in f32 (matmul, attention) or double (norms, reductions), so the
error is the 16-bit storage of weights and activations.

The artifact keeps the graph's f32 inputs and outputs; every weight buffer
is in the low type and records `source-dtype=f32` (the file holds f32 and
the runtime converts once at load). Under sharding the weights are sliced
first and converted after, so the slice table still describes f32 bytes.
"""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from shardflow import models, toolchain  # noqa: E402
from test_e2e_zoo import random_inputs  # noqa: E402

TOLERANCE = {"bf16": 2e-2, "f16": 5e-3}
MPIRUN = shutil.which("mpirun")


def check_artifact(text: str, dtype: str) -> None:
    weights = [line for line in text.splitlines() if re.match(r"buffer \d+ weight ", line)]
    assert weights
    for line in weights:
        assert line.split()[3] == dtype, line
        assert "source-dtype=f32" in line, line
    for line in text.splitlines():
        if re.match(r"buffer \d+ input ", line):
            assert line.split()[3] in ("f32", "i64"), line


def compare(model, path: Path, artifact: Path, dtype: str, seed: str, launcher=None) -> None:
    inputs = random_inputs(model, np.random.default_rng(zlib.crc32(seed.encode())))
    if launcher:
        ours = toolchain.run_artifact(artifact, inputs, launcher=launcher)
    else:
        ours = toolchain.run_artifact(artifact, inputs)
    reference = toolchain.run_onnxruntime(path, inputs)
    assert set(ours) == set(reference)
    for key, ref in reference.items():
        assert ours[key].shape == ref.shape and ours[key].dtype == ref.dtype, key
        err = toolchain.relative_error(ours[key], ref)
        assert err < TOLERANCE[dtype], f"{seed}/{key}: relative L2 error {err:.3g}"
        # Not f32 by accident: 16-bit storage leaves a visible error.
        assert err > 1e-5, f"{seed}/{key}: error {err:.3g} looks like an f32 run"


@pytest.mark.parametrize("dtype", ["bf16", "f16"])
@pytest.mark.parametrize("name", ["mlp", "gpt2", "bert", "llama"])
def test_zoo_in_low_precision_matches_onnxruntime(tmp_path, name, dtype):
    model = getattr(models, name)()
    path = tmp_path / f"{name}.onnx"
    models.save(model, path)
    artifact = toolchain.compile_model(path, tmp_path / f"{name}.shard", extra=["--dtype", dtype])
    check_artifact(artifact.read_text(), dtype)
    compare(model, path, artifact, dtype, f"{name}-{dtype}")


def test_ir_computes_in_bf16(tmp_path):
    """Between the entry casts and the exit casts nothing is f32 but the
    weights themselves, each read only by its cast."""
    path = tmp_path / "gpt2.onnx"
    models.save(models.gpt2(), path)
    out = subprocess.run([str(toolchain.tool("shard-opt")), str(path), "--dtype", "bf16"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    body = [line.strip() for line in out.stdout.splitlines() if re.match(r"\s*%", line)]
    weights = [line for line in body if " nn.weight " in line]
    assert weights and all(line.endswith("xf32>") for line in weights)
    down = [line for line in body if " nn.cast " in line and "{to = bf16} : (tensor<" in line
            and "xf32>)" in line]
    up = [line for line in body if " nn.cast " in line and "{to = f32}" in line]
    # One cast per weight, one back to f32 for the logits (the input is i64).
    assert len(down) == len(weights) and len(up) == 1
    for line in body:
        if " nn.weight " in line or " nn.cast " in line:
            continue
        assert "xf32>" not in line, line


@pytest.mark.skipif(MPIRUN is None, reason="mpirun is missing")
@pytest.mark.parametrize("name,flags", [("gpt2", []), ("gpt2", ["--raise-attention"]),
                                        ("llama", [])],
                         ids=["gpt2", "gpt2-raised", "llama"])
def test_sharded_low_precision(tmp_path, name, flags):
    """--mesh dp=2,tp=2 --strategy megatron --dtype bf16: the weights are
    sliced as in f32 and converted at load; 4 ranks against onnxruntime."""
    model = getattr(models, name)()
    path = tmp_path / f"{name}.onnx"
    models.save(model, path)
    artifact = toolchain.compile_model(
        path, tmp_path / f"{name}.shard",
        extra=["--mesh", "dp=2,tp=2", "--strategy", "megatron", "--dtype", "bf16", *flags])
    text = artifact.read_text()
    check_artifact(text, "bf16")
    sliced = [line for line in text.splitlines() if " weight " in line and " global=" in line]
    assert sliced, "megatron sliced no weight"
    assert "all_reduce" in text
    launcher = [MPIRUN, "-np", "4", "--oversubscribe"]
    compare(model, path, artifact, "bf16", f"{name}-sharded", launcher=launcher)


@pytest.mark.parametrize("dtype", ["bf16", "f16"])
def test_outputs_in_the_compute_type(tmp_path, dtype):
    """--outputs-in-dtype: the logits stay in the low type (the artifact's
    output buffer is half the size and nothing casts them back); shard-run
    writes f16 to .npz as it is and bf16 as float32 (numpy has no bfloat16;
    the widening is exact), within the same tolerance of onnxruntime.
    Without --dtype it is refused."""
    model = models.gpt2()
    path = tmp_path / "gpt2.onnx"
    models.save(model, path)
    artifact = toolchain.compile_model(path, tmp_path / "gpt2.shard",
                                      extra=["--dtype", dtype, "--outputs-in-dtype"])
    text = artifact.read_text()
    check_artifact(text, dtype)
    out_id = re.search(r"^output logits (\d+)$", text, re.M).group(1)
    assert re.search(rf"^buffer {out_id} arena {dtype} ", text, re.M), text
    default = toolchain.compile_model(path, tmp_path / "f32-out.shard", extra=["--dtype", dtype])
    out_id = re.search(r"^output logits (\d+)$", default.read_text(), re.M).group(1)
    assert re.search(rf"^buffer {out_id} arena f32 ", default.read_text(), re.M)
    inputs = random_inputs(model, np.random.default_rng(7))
    ours = toolchain.run_artifact(artifact, inputs)["logits"]
    assert ours.dtype == {"bf16": np.float32, "f16": np.float16}[dtype]
    err = toolchain.relative_error(ours.astype(np.float32),
                                  toolchain.run_onnxruntime(path, inputs)["logits"])
    assert 1e-5 < err < TOLERANCE[dtype], err

    refused = subprocess.run([str(toolchain.tool("shard-opt")), str(path), "--target", "cpu",
                              "--outputs-in-dtype", "-o", str(tmp_path / "x.shard")],
                             capture_output=True, text=True)
    assert refused.returncode != 0
    assert "--outputs-in-dtype needs --dtype bf16 or f16" in refused.stderr
