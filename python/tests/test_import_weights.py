"""The importer's weight table points at the right bytes.

For every nn.weight the importer emits, the bytes at (file, offset, size)
must equal the initializer as the onnx package reads it (numpy_helper), the
independent reference. Covers weights embedded in the .onnx file (raw_data
and packed float_data) and ONNX external data.
"""
import os
import re
import subprocess
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from shardflow import models

ROOT = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("SHARDFLOW_BUILD_DIR", ROOT / "build"))
SHARD_OPT = BUILD / "bin" / "shard-opt"

WEIGHT_RE = re.compile(
    r'nn\.weight "(?P<name>[^"]+)" \{(?P<attrs>[^}]*)\} : tensor<(?P<type>[^>]+)>')


def import_weights(path: Path, *extra: str):
    assert SHARD_OPT.exists(), f"{SHARD_OPT} is missing: build the project first"
    out = subprocess.run([str(SHARD_OPT), str(path), *extra], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    weights = {}
    for m in WEIGHT_RE.finditer(out.stdout):
        attrs = dict(re.findall(r'(\w+) = ("[^"]*"|-?\d+)', m.group("attrs")))
        weights[m.group("name")] = {k: v.strip('"') if v.startswith('"') else int(v.split()[0])
                                    for k, v in attrs.items()}
    return weights


def reference_arrays(path: Path):
    model = onnx.load(str(path), load_external_data=True)
    return {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}


def check_bytes(path: Path, weights, storage: str):
    ref = reference_arrays(path)
    assert weights, "no nn.weight in the imported IR"
    for name, w in weights.items():
        assert w["storage"] == storage, (name, w)
        blob = (path.parent / w["file"]).read_bytes()
        data = blob[w["offset"]:w["offset"] + w["size"]]
        expected = np.ascontiguousarray(ref[name]).astype("<f4").tobytes()
        assert w["size"] == len(expected), name
        assert data == expected, f"bytes of {name} differ"


@pytest.mark.parametrize("name", ["gpt2", "llama", "resnet"])
def test_embedded_raw_data(tmp_path, name):
    path = tmp_path / f"{name}.onnx"
    models.save(getattr(models, name)(), path)
    check_bytes(path, import_weights(path), "embedded")


@pytest.mark.parametrize("name", ["gpt2", "bert"])
def test_external_data(tmp_path, name):
    path = tmp_path / f"{name}.onnx"
    models.save(getattr(models, name)(), path, external_data=True)
    check_bytes(path, import_weights(path), "external")


def test_packed_float_data(tmp_path):
    # Initializers written as float_data (not raw_data) are byte-addressable
    # too: packed fixed32 values are little-endian IEEE floats.
    rng = np.random.default_rng(0)
    w = rng.standard_normal((32, 16)).astype(np.float32)
    init = onnx.helper.make_tensor("w", onnx.TensorProto.FLOAT, w.shape, w.ravel().tolist())
    assert not init.raw_data
    graph = onnx.helper.make_graph(
        [onnx.helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], "g",
        [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2, 32])],
        [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2, 16])],
        [init])
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 17)])
    path = tmp_path / "packed.onnx"
    onnx.save(model, str(path))
    check_bytes(path, import_weights(path), "embedded")


def test_embed_limit_moves_weights_into_constants(tmp_path):
    path = tmp_path / "mlp.onnx"
    models.save(models.mlp(), path)
    assert import_weights(path)
    assert import_weights(path, "--embed-limit-bytes=100000000") == {}
