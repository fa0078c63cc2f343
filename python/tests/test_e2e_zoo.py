"""The generated model zoo, compiled for the CPU and run by shard-run,
matches onnxruntime on fresh random inputs.

Norm: relative L2 error ||ours - ort||_2 / ||ort||_2 over each output,
float32 models, tolerance 1e-5 (the issue's goal). Integer inputs (token ids,
masks) are drawn inside their valid ranges.
"""
import re
import subprocess
import zlib

import numpy as np
import onnx
import pytest

from shardflow import models, toolchain

TOLERANCE = 1e-5


def random_inputs(model: onnx.ModelProto, rng: np.random.Generator) -> dict:
    inputs = {}
    for value in model.graph.input:
        tt = value.type.tensor_type
        shape = [d.dim_value for d in tt.shape.dim]
        if tt.elem_type == onnx.TensorProto.INT64:
            if value.name == "attention_mask":
                mask = np.ones(shape, np.int64)
                mask[:, -2:] = rng.integers(0, 2, size=(shape[0], 2))
                inputs[value.name] = mask
            elif value.name == "token_type_ids":
                inputs[value.name] = rng.integers(0, 2, size=shape, dtype=np.int64)
            elif value.name == "position_ids":
                inputs[value.name] = np.broadcast_to(np.arange(shape[1]), shape).astype(np.int64)
            else:  # token ids: the generators' default vocabulary is 128
                inputs[value.name] = rng.integers(0, 128, size=shape, dtype=np.int64)
        else:
            inputs[value.name] = rng.standard_normal(shape).astype(np.float32)
    return inputs


@pytest.mark.parametrize("name", ["mlp", "gpt2", "bert", "resnet", "llama", "neox"])
@pytest.mark.parametrize("external", [False, True], ids=["embedded", "external"])
def test_zoo_matches_onnxruntime(tmp_path, name, external):
    model = getattr(models, name)()
    path = tmp_path / f"{name}.onnx"
    models.save(model, path, external_data=external)
    artifact = toolchain.compile_model(path, tmp_path / f"{name}.shard")
    rng = np.random.default_rng(zlib.crc32(f"{name}-{external}".encode()))
    inputs = random_inputs(model, rng)
    ours = toolchain.run_artifact(artifact, inputs)
    reference = toolchain.run_onnxruntime(path, inputs)
    assert set(ours) == set(reference)
    for key, ref in reference.items():
        assert ours[key].shape == ref.shape and ours[key].dtype == ref.dtype, key
        err = toolchain.relative_error(ours[key], ref)
        assert err < TOLERANCE, f"{name}/{key}: relative L2 error {err:.3g}"


@pytest.mark.parametrize("name", ["gpt2", "resnet"])
def test_profile_on_the_cpu(tmp_path, name):
    """shard-run --profile on a CPU artifact: the host time of every
    operation, one line per kind with the artifact's counts, the kinds'
    times adding up to the summed line, which the program's time bounds."""
    from shardflow import profile_report

    model = getattr(models, name)()
    path = tmp_path / f"{name}.onnx"
    models.save(model, path)
    artifact = toolchain.compile_model(path, tmp_path / f"{name}.shard")
    np.savez(tmp_path / "in.npz", **random_inputs(model, np.random.default_rng(3)))
    out = subprocess.run([str(toolchain.tool("shard-run")), str(artifact), "--inputs",
                          str(tmp_path / "in.npz"), "--profile", "--repeat", "4"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "profile: mean of 3 runs (rank 0; host time per operation)" in out.stderr
    program, summed, kinds = profile_report.parse(out.stderr)
    assert {k: c for k, (c, _) in kinds.items()} == \
        profile_report.artifact_kinds(artifact.read_text())
    assert abs(sum(ms for _, ms in kinds.values()) - summed) <= 0.002 * len(kinds) + 1e-3
    assert 0 < summed <= program
    assert re.search(r"^  #\d+ +[0-9.]+ ms  \w+  \(ONNX node '", out.stderr, re.M), out.stderr
