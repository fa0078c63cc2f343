"""ONNX's backend node tests through the CUDA target's generated code.

Every attempted node test (the set test_onnx_backend runs on the CPU) is
compiled with `--convert-nn-to-rt --cuda-codegen-pipeline`; an input the
importer needs as a constant (axes, k, split sizes) is pinned to the data
set's value with --input-value, as the CPU runner does. When that
succeeds, `shardflow.gpu_emulator` runs the program (generated kernels as
the GPU would, the runtime's cuBLASLt, attention and data-movement calls by
numpy references) on the test's first data set, and the outputs must match
the test's expected outputs with onnx's own check and tolerances.

Tests whose programs do not compile for CUDA (an op or element type with no
CUDA path) are counted, not run; everything that compiles must match.
About 40 s on 2 cores.
"""
from __future__ import annotations

import subprocess
import warnings

import numpy as np
import onnx
from onnx import numpy_helper
from onnx.backend.test.runner import Runner

from shardflow import backend_tests, gpu_emulator, pipeline

# Compared tests on 2026-11-22: 550 of the 552 attempted; a drop means
# generated code lost coverage.
MIN_COMPARED = 550


def _run_one(info, data_dir, shard_opt):
    folder = data_dir / info.name
    model = onnx.load(str(folder / "model.onnx"), load_external_data=False)
    initializers = {t.name for t in model.graph.initializer}
    data = sorted(folder.glob("test_data_set_*"))[0]
    inputs = {v.name: (j, v) for j, v in enumerate(model.graph.input)
              if v.name not in initializers}
    # Inputs the importer needs as constants (axes, k, split sizes, ...) are
    # pinned to the data set's value, as the CPU node runner does.
    pinned: list[str] = []
    while True:
        cmd = [shard_opt, "model.onnx", "--convert-nn-to-rt", "--cuda-codegen-pipeline",
               "--mlir-print-op-generic"]
        feeds = []
        for name, (j, v) in inputs.items():
            path = f"{data.relative_to(folder)}/input_{j}.pb"
            if name in pinned:
                cmd += ["--input-value", f"{name}={path}"]
                continue
            t = onnx.load_tensor(str(folder / path))
            feeds.append(numpy_helper.to_array(t))
            if any(not d.HasField("dim_value") for d in v.type.tensor_type.shape.dim):
                cmd += ["--input-shape", f"{name}={','.join(map(str, t.dims))}"]
        out = subprocess.run(cmd, cwd=folder, capture_output=True, text=True, timeout=120)
        if out.returncode == 0:
            break
        wanted = [n for n in backend_tests.inputs_to_pin(out.stderr)
                  if n in inputs and n not in pinned]
        if not wanted:
            return "not compiled", out.stderr.strip().splitlines()[0] if out.stderr.strip() else ""
        pinned += wanted
    try:
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            got = gpu_emulator.run_program(out.stdout, feeds)
    except NotImplementedError as e:
        return "emulator gap", str(e)
    except Exception as e:  # noqa: BLE001 - any other failure is a finding
        return "crashed", repr(e)
    expected = [numpy_helper.to_array(onnx.load_tensor(str(data / f"output_{j}.pb")))
                for j in range(len(model.graph.output))]
    try:
        Runner.assert_similar_outputs(expected, [np.asarray(g) for g in got],
                                      rtol=info.rtol, atol=info.atol)
    except AssertionError as e:
        return "wrong", " ".join(str(e).split())[:300]
    return "passed", ""


def test_node_tests_match_through_generated_cuda_code():
    data_dir = backend_tests.node_data_dir()
    shard_opt = str(pipeline.tool("shard-opt"))
    outcomes: dict[str, list[tuple[str, str]]] = {}
    for info in backend_tests.collect(data_dir):
        if info.skip:
            continue
        status, message = _run_one(info, data_dir, shard_opt)
        outcomes.setdefault(status, []).append((info.name, message))
    bad = [f"{status}: {name}: {message}" for status in ("wrong", "crashed", "emulator gap")
           for name, message in outcomes.get(status, [])]
    assert not bad, "\n".join(bad)
    compared = len(outcomes.get("passed", []))
    assert compared >= MIN_COMPARED, (
        f"only {compared} node tests compile for CUDA; not compiled:\n" +
        "\n".join(f"{n}: {m}" for n, m in outcomes.get("not compiled", [])))
