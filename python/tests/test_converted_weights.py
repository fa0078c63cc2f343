"""Weights that cannot be mapped in place still run.

A weight stored as protobuf varints (int64_data, int32_data) or read from
ONNX text has no byte offset in the model file; shard-opt writes it once to
ARTIFACT.weights next to the artifact. The results must match onnxruntime
exactly (integers) or within 1e-6 (floats: the same additions in the same
order).
"""
import numpy as np
import onnx
from onnx import TensorProto, helper

from shardflow import toolchain


def test_varint_initializers_from_a_binary_model(tmp_path):
    rng = np.random.default_rng(7)
    ids = rng.integers(-50, 50, size=(64, 32)).astype(np.int64)
    table = rng.integers(0, 16, size=(600,)).astype(np.int64)
    # make_tensor without raw=True stores int64_data: varint-encoded.
    a = helper.make_tensor("a", TensorProto.INT64, ids.shape, ids.ravel().tolist())
    t = helper.make_tensor("t", TensorProto.INT64, table.shape, table.ravel().tolist())
    assert not a.raw_data and a.int64_data
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "a"], ["s"], name="add"),
         helper.make_node("Gather", ["t", "i"], ["g"], name="gather")],
        "varints",
        [helper.make_tensor_value_info("x", TensorProto.INT64, [64, 32]),
         helper.make_tensor_value_info("i", TensorProto.INT64, [5])],
        [helper.make_tensor_value_info("s", TensorProto.INT64, [64, 32]),
         helper.make_tensor_value_info("g", TensorProto.INT64, [5])],
        [a, t])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=8)
    path = tmp_path / "varints.onnx"
    onnx.save(model, path)
    artifact = toolchain.compile_model(path, tmp_path / "varints.shard")
    text = artifact.read_text()
    assert "storage=artifact" in text and (tmp_path / "varints.shard.weights").exists()
    inputs = {"x": rng.integers(-9, 9, size=(64, 32)).astype(np.int64),
              "i": np.array([0, 5, 599, 17, 300], np.int64)}
    ours = toolchain.run_artifact(artifact, inputs)
    ref = toolchain.run_onnxruntime(path, inputs)
    for k in ref:
        np.testing.assert_array_equal(ours[k], ref[k])


def test_onnx_text_model_with_large_weights(tmp_path):
    values = ", ".join(f"{(i % 17) * 0.25 - 2.0:.2f}" for i in range(512))
    text = f"""
    <ir_version: 8, opset_import: ["" : 18]>
    g (float[4, 512] x) => (float[4, 512] y) <float[512] w = {{{values}}}> {{
      y = Mul(x, w)
    }}
    """
    path = tmp_path / "text.onnxtxt"
    path.write_text(text)
    artifact = toolchain.compile_model(path, tmp_path / "text.shard")
    assert "storage=artifact" in artifact.read_text()
    x = np.random.default_rng(1).standard_normal((4, 512)).astype(np.float32)
    ours = toolchain.run_artifact(artifact, {"x": x})["y"]
    ref = toolchain.run_onnxruntime_model(onnx.parser.parse_model(text), {"x": x})["y"]
    np.testing.assert_allclose(ours, ref, rtol=1e-6, atol=0)


def test_artifact_to_stdout_with_unmappable_weights_is_refused(tmp_path):
    import subprocess
    text = ("<ir_version: 8, opset_import: [\"\" : 18]>\n"
            "g (float[300] x) => (float[300] y) <float[300] w = {"
            + ", ".join(["1.0"] * 300) + "}> { y = Add(x, w) }\n")
    path = tmp_path / "m.onnxtxt"
    path.write_text(text)
    out = subprocess.run([str(toolchain.tool("shard-opt")), str(path), "--target", "cpu",
                          "-o", "-"], capture_output=True, text=True)
    assert out.returncode == 1
    assert "weight 'w' is not byte-addressable in its file" in out.stderr
