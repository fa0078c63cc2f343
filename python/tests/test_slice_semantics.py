"""Slice bounds follow the ONNX specification for every sign and size.

Random Slice nodes on a constant input are imported; shard-opt folds them to
nn.constant, whose values must equal onnxruntime's results for the same
model. (onnxruntime follows the specification's clamping rule -- for a
negative step, start clamps to [0, dim - 1] -- where numpy slicing, and so
onnx's Python reference evaluator, would give an empty result.)

One class of bounds is left out: a negative step with an end at or past the
dimension. The specification clamps that end to dim - 1 (nothing is
selected when start is there too); onnxruntime reads it as "through element
0". We follow the specification; the test checks that case separately.
"""
import os
import re
import subprocess
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

ROOT = Path(__file__).resolve().parents[2]
SHARD_OPT = Path(os.environ.get("SHARDFLOW_BUILD_DIR", ROOT / "build")) / "bin" / "shard-opt"
BIG = 2**63 - 1


def fold_slices(cases, data):
    nodes, outputs, inits = [], [], [numpy_helper.from_array(data, "data")]
    for i, (start, end, step) in enumerate(cases):
        for part, value in (("s", start), ("e", end), ("t", step)):
            inits.append(numpy_helper.from_array(np.array([value], np.int64), f"{part}{i}"))
        nodes.append(helper.make_node("Slice", ["data", f"s{i}", f"e{i}", "zero", f"t{i}"],
                                      [f"y{i}"], name=f"slice{i}"))
        outputs.append(helper.make_tensor_value_info(f"y{i}", TensorProto.INT64, None))
    inits.append(numpy_helper.from_array(np.array([0], np.int64), "zero"))
    graph = helper.make_graph(nodes, "slices", [], outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)],
                              ir_version=8)
    reference = ort.InferenceSession(model.SerializeToString()).run(None, {})
    out = subprocess.run([str(SHARD_OPT), "-", "--input-format=onnx"],
                         input=model.SerializeToString(), capture_output=True, timeout=60)
    assert out.returncode == 0, out.stderr.decode()
    text = out.stdout.decode()
    ret = re.search(r"return (.*) :", text).group(1).split(", ")
    consts = {name: (body, int(count)) for name, body, count in
              re.findall(r"(%\w+) = nn.constant dense<(.*?)> : tensor<(\d+)xi64>", text)}
    results = []
    for name in ret:
        body, count = consts[name]
        values = [int(v) for v in re.findall(r"-?\d+", body)]
        if "[" not in body:  # a splat prints one value for the whole tensor
            values = values * count
        results.append(values[:count])
    return results, [r.tolist() for r in reference]


def test_slice_bounds_match_numpy():
    assert SHARD_OPT.exists(), f"{SHARD_OPT} is missing: build the project first"
    rng = np.random.default_rng(1)
    data = np.arange(7, dtype=np.int64) * 10
    bounds = [-BIG - 1, -9, -8, -7, -3, -1, 0, 1, 3, 6, 7, 8, BIG]
    cases = []
    while len(cases) < 200:
        start, end = int(rng.choice(bounds)), int(rng.choice(bounds))
        step = int(rng.choice([-BIG - 1, -3, -2, -1, 1, 2, 3, BIG]))
        if not (step < 0 and end >= len(data)):
            cases.append((start, end, step))
    got, expected = fold_slices(cases, data)
    for case, values, want in zip(cases, got, expected):
        assert values == want, (case, values, want)


def test_negative_step_end_past_dimension_follows_the_specification():
    # end = INT64_MAX clamps to dim - 1 = 6 for a negative step; starting at
    # 6 (start 7 clamps there too) leaves nothing to select.
    got, _ = fold_slices([(7, BIG, -3), (BIG, 7, -1)], np.arange(7, dtype=np.int64))
    assert got == [[], []]
