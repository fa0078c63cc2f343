"""shard-run's CUDA executor, run on the CPU through stand-in libraries.

tools/cuda-standin builds libcuda.so.1, libcublasLt.so.<major> and
libnccl.so.2 that implement the calls shard-run makes from the libraries'
documented semantics, on the host: device memory is host memory, streams
defer their work until the host waits, the runtime's own kernels run
through their host emulation, the compiler's generated kernels run by
interpreting their PTX (on sm_86, where shard-run loads the artifact's
compute_80 PTX rather than a cubin), GEMMs are computed from cuBLASLt's
column-major definition, NCCL has communicators of one rank. With
LD_LIBRARY_PATH pointing at them, a whole CUDA artifact runs here: weight
upload and conversion, the generated kernels as NVPTX emitted them, the
cuBLASLt descriptors (transposes, leading dimensions, batches, epilogues,
alignments), launch arguments, shared-memory opt-in, the two-stream
schedule, NCCL bootstrap and the error paths. Each program runs twice,
preferring the compute stream and then the communication stream, so a
missing stream dependency shows as a wrong result.

References are independent: numpy float64 for the smoke cases,
onnxruntime for compiled models and the zoo (relative error: f32 1e-4,
bf16 2e-2, f16 1e-2). test_cuda_standin_nodes.py runs ONNX's node tests
the same way.
"""
import os
import re
import subprocess
from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from shardflow import cuda_smoke, cuda_zoo, toolchain, profile_report, standin

ORDERS = ("first", "last")


def standin_dir() -> Path:
    build = toolchain.build_dir()
    lib = standin.library_dir()
    if not (lib / "libcuda.so.1").exists():
        cache = (build / "CMakeCache.txt").read_text()
        if "SHARDFLOW_ENABLE_CUDA:BOOL=ON" in cache:
            pytest.fail(f"{lib} has no stand-in libraries although the CUDA executor is built")
        pytest.skip("built without the CUDA executor")
    return lib


def standin_env(world: int = 1, nccl_dir: Path | None = None) -> dict[str, str]:
    """What runs shard-run, or each rank of an mpirun of `world` ranks, on
    the stand-ins (shardflow.standin.environment); skips without them."""
    standin_dir()
    return standin.environment(world, nccl_dir)


def run_standin(*args, order="first", env=None, timeout=300):
    lib = standin_dir()
    full = {**os.environ, "LD_LIBRARY_PATH": f"{lib}:{os.environ.get('LD_LIBRARY_PATH', '')}",
            "SHARDFLOW_STANDIN_ORDER": order, **(env or {})}
    out = subprocess.run([str(toolchain.tool("shard-run")), *map(str, args)],
                         capture_output=True, text=True, timeout=timeout, env=full)
    return out.returncode, out.stderr


@pytest.fixture(scope="module")
def smoke_cases(tmp_path_factory):
    return cuda_smoke.build(tmp_path_factory.mktemp("smoke"))


@pytest.mark.parametrize("order", ORDERS)
def test_smoke_cases_match_their_references(smoke_cases, order, tmp_path):
    assert len(smoke_cases) >= 10
    for case in smoke_cases:
        inputs = case.with_name(case.stem + ".inputs.npz")
        got = tmp_path / f"{case.stem}.npz"
        rc, err = run_standin(case, "--inputs", inputs, "--output", got, order=order)
        assert rc == 0, (case.name, err)
        with np.load(case.with_name(case.stem + ".expected.npz")) as want, np.load(got) as out:
            assert sorted(want.files) == sorted(out.files), case.name
            for name in want.files:
                tol = cuda_smoke.TOLERANCE[want[name].dtype]
                np.testing.assert_allclose(out[name].astype(np.float64),
                                           want[name].astype(np.float64), rtol=tol, atol=tol,
                                           err_msg=f"{case.name} ({order}): {name}")


def block_model(path: Path, hidden=64, heads=4, kv_heads=2, batch=2, seq=16, vocab=37,
                out_vocab=101, seed=0) -> Path:
    """Embedding, a fused QKV projection split in three, causal grouped-query
    attention, bias, gelu (tanh) and relu epilogues, and a vocabulary
    projection whose rows are not 16-byte aligned: only runtime kernels
    (cuBLASLt, attention, gather), no generated ones."""
    rng = np.random.default_rng(seed)
    inits = []

    def w(name, *shape, scale=0.2):
        inits.append(numpy_helper.from_array(
            (rng.standard_normal(shape) * scale).astype(np.float32), name))
        return name

    kv = kv_heads * hidden // heads
    inits.append(numpy_helper.from_array(np.array([hidden, kv, kv], np.int64), "split_sizes"))
    node = helper.make_node
    nodes = [node("Gather", [w("wte", vocab, hidden, scale=1.0), "ids"], ["x"], name="embed"),
             node("MatMul", ["x", w("w_qkv", hidden, hidden + 2 * kv)], ["qkv0"]),
             node("Add", ["qkv0", w("b_qkv", hidden + 2 * kv)], ["qkv"]),
             node("Split", ["qkv", "split_sizes"], ["q", "k", "v"], axis=-1),
             node("Attention", ["q", "k", "v"], ["a"], is_causal=1, q_num_heads=heads,
                  kv_num_heads=kv_heads),
             node("MatMul", ["a", w("w_o", hidden, hidden)], ["o0"]),
             node("Add", ["o0", w("b_o", hidden)], ["o"]),
             node("MatMul", ["o", w("w_1", hidden, 4 * hidden)], ["f0"]),
             node("Add", ["f0", w("b_1", 4 * hidden)], ["f1"]),
             node("Gelu", ["f1"], ["f"], approximate="tanh"),
             node("MatMul", ["f", w("w_2", 4 * hidden, hidden)], ["g0"]),
             node("Add", ["g0", w("b_2", hidden)], ["g"]),
             node("Relu", ["g"], ["r"]),
             node("MatMul", ["r", w("w_vocab", hidden, out_vocab)], ["logits"])]
    graph = helper.make_graph(
        nodes, "block", [helper.make_tensor_value_info("ids", TensorProto.INT64, [batch, seq])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [batch, seq, out_vocab])],
        inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)],
                                ir_version=10), path)
    return path


def compile_cuda(model: Path, dtype: str) -> Path:
    artifact = model.with_name(f"{model.stem}.{dtype}.shard")
    out = subprocess.run([str(toolchain.tool("shard-opt")), str(model), "--target", "cuda",
                          "--dtype", dtype, "-o", str(artifact)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    # It runs on sm_90, where generated kernels would be cubins, which the
    # stand-in cannot run: this model must have none.
    assert "kernel launch" not in artifact.read_text(), "the model now has a generated kernel"
    return artifact


def onnxruntime_logits(model: Path, ids: np.ndarray) -> np.ndarray:
    import onnxruntime as ort

    return ort.InferenceSession(str(model), providers=["CPUExecutionProvider"]).run(
        None, {"ids": ids})[0]


# (shape, the attention kernel each dtype must use): head size 16 takes the
# SIMT kernel, 64 the tensor-core one for bf16.
BLOCKS = {"d16": (dict(hidden=64, heads=4, kv_heads=2, seq=16),
                  {"f32": "sf_attention_simt_f32_dv64", "bf16": "sf_attention_simt_bf16_dv64",
                   "f16": "sf_attention_simt_f16_dv64"}),
          "d64": (dict(hidden=128, heads=2, kv_heads=1, seq=80),
                  {"f32": "sf_attention_simt_f32_dv64", "bf16": "sf_attention_mma_bf16_d64_plain",
                   "f16": "sf_attention_mma_f16_d64_plain"})}


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("dtype", ["f32", "bf16", "f16"])
@pytest.mark.parametrize("block", sorted(BLOCKS))
def test_compiled_model_matches_onnxruntime(block, dtype, order, tmp_path):
    shape, kernels = BLOCKS[block]
    model = block_model(tmp_path / "block.onnx", **shape)
    artifact = compile_cuda(model, dtype)
    # Negative ids count from the end, as in ONNX's Gather.
    ids = np.random.default_rng(1).integers(-37, 37, (2, shape["seq"])).astype(np.int64)
    np.savez(tmp_path / "in.npz", ids=ids)
    trace = tmp_path / "trace.txt"
    rc, err = run_standin(artifact, "--weights", tmp_path, "--inputs", tmp_path / "in.npz",
                          "--output", tmp_path / "out.npz", order=order,
                          env={"SHARDFLOW_STANDIN_TRACE": str(trace)})
    assert rc == 0, err
    want = onnxruntime_logits(model, ids).astype(np.float64)
    got = np.load(tmp_path / "out.npz")["logits"].astype(np.float64)
    tol = {"f32": 1e-4, "bf16": 2e-2, "f16": 1e-2}[dtype]
    error = np.abs(got - want).max() / np.abs(want).max()
    assert error < tol, f"relative error {error:.2e} (tolerance {tol})"
    ran = trace.read_text()
    assert f"launch {kernels[dtype]} " in ran, ran
    # Q, K and V from one GEMM of the fused weight, read in place by the
    # attention (no split copy), the epilogues, and the vocabulary
    # projection (101 columns) loaded transposed, writing rows of 104
    # (gemm-padding) whose first 101 elements one 2-D copy downloads.
    assert ran.count(" bias\n") == 1 + 1 and " gelu_bias\n" in ran and " relu_bias\n" in ran, ran
    assert not re.search(r"copy 2D \d+ x", ran) and "sf_strided_copy" not in ran, ran
    rows = 2 * shape["seq"]
    width = 101 * 4  # the logits are f32 whatever the dtype
    assert ran.count(f"copy 2D device to host {rows} x {width} B") == 1, ran
    vocab_gemm = re.search(r"gemm \S+ m=104 n=\d+ k=\d+ (\w+)", ran)
    assert vocab_gemm and vocab_gemm.group(1) == "transA", ran
    assert "nccl all_reduce" in ran  # the health check


def test_padded_logits_download_into_page_locked_memory(tmp_path):
    """The block model's padded logits (104-wide rows, 101 of them output)
    come down with one 2-D copy into page-locked memory too (from the
    second run under auto, from the first under always), with the bits of
    the pageable download; unpadded (--cuda-disable gemm-padding) the same
    bits come from a plain copy."""
    model = block_model(tmp_path / "block.onnx")
    artifact = compile_cuda(model, "f32")
    text = artifact.read_text()
    assert re.search(r"^output logits \d+ columns=101$", text, re.M), text
    unpadded = tmp_path / "unpadded.shard"
    out = subprocess.run([str(toolchain.tool("shard-opt")), str(model), "--target", "cuda",
                          "-o", str(unpadded), "--cuda-disable", "gemm-padding"],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "columns=" not in unpadded.read_text()
    ids = np.random.default_rng(2).integers(0, 37, (2, 16)).astype(np.int64)
    np.savez(tmp_path / "in.npz", ids=ids)
    logits = {}
    for mode, shard, extra in (("never", artifact, ["--pinned-memory", "never"]),
                               ("auto", artifact, []),
                               ("always", artifact, ["--pinned-memory", "always"]),
                               ("unpadded", unpadded, [])):
        trace = tmp_path / f"{mode}.trace"
        rc, err = run_standin(shard, "--weights", tmp_path, "--inputs", tmp_path / "in.npz",
                              "--output", tmp_path / f"{mode}.npz", "--repeat", "2", *extra,
                              env={"SHARDFLOW_STANDIN_TRACE": str(trace)})
        assert rc == 0, (mode, err)
        downloads = re.findall(r"copy (2D device to host 32 x 404 B|device to host \d+ B)"
                               r"( \(pinned\))?", trace.read_text())
        logit_downloads = [d for d in downloads if d[0].startswith("2D") or d[0].endswith(
            f" {32 * 101 * 4} B")]
        pinned = [bool(p) for _, p in logit_downloads]
        assert pinned == {"never": [False, False], "auto": [False, True],
                          "always": [True, True], "unpadded": [False, True]}[mode], (mode, downloads)
        assert all(d.startswith("2D") == (mode != "unpadded") for d, _ in logit_downloads)
        with np.load(tmp_path / f"{mode}.npz") as f:
            logits[mode] = f["logits"]
    assert logits["never"].shape == (2, 16, 101)
    for mode in ("auto", "always", "unpadded"):
        assert np.array_equal(logits[mode], logits["never"]), mode
    want = onnxruntime_logits(model, ids)
    assert np.abs(logits["never"] - want).max() / np.abs(want).max() < 1e-4


def relu_artifact(tmp_path):
    """A CUDA artifact of one generated kernel: y = relu(x), x [4, 8]."""
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"], name="act")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 8])])
    model = tmp_path / "relu.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)],
                                ir_version=10), model)
    artifact = tmp_path / "relu.shard"
    out = subprocess.run([str(toolchain.tool("shard-opt")), str(model), "--target", "cuda", "-o",
                          str(artifact)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return artifact


def test_generated_kernels_run_from_ptx_and_cubins_are_refused(tmp_path):
    artifact = relu_artifact(tmp_path)
    x = np.linspace(-2, 2, 32, dtype=np.float32).reshape(4, 8)
    np.savez(tmp_path / "in.npz", x=x)
    # sm_90 loads the module's cubin: the function is found, and refused at
    # its launch, with the way to its PTX.
    rc, err = run_standin(artifact, "--inputs", tmp_path / "in.npz", "--output",
                          tmp_path / "out.npz", env={"SHARDFLOW_STANDIN_SM": "90"})
    assert rc == 1, err
    assert re.search(r"cannot run generated kernel 'k0_relu': it was loaded from a cubin", err)
    assert "SHARDFLOW_STANDIN_SM=86" in err, err
    assert "cuLaunchKernel failed: CUDA_ERROR_NOT_SUPPORTED" in err, err
    # sm_86 loads the PTX (through the JIT call), which runs.
    rc, err = run_standin(artifact, "--inputs", tmp_path / "in.npz", "--output",
                          tmp_path / "out.npz", env={"SHARDFLOW_STANDIN_SM": "86"})
    assert rc == 0, err
    np.testing.assert_array_equal(np.load(tmp_path / "out.npz")["y"], np.maximum(x, 0))


def test_generated_kernels_refuse_buffers_not_16_byte_aligned(tmp_path):
    """Generated kernels load and store up to 16 bytes a thread: shard-run
    refuses, at load, a launch whose buffer does not start at a multiple
    of 16 bytes (an artifact edited to put the output at arena offset 4),
    naming the kernel and the buffer."""
    artifact = relu_artifact(tmp_path)
    np.savez(tmp_path / "in.npz", x=np.ones((4, 8), np.float32))
    text = artifact.read_text()
    assert "\narena 128\n" in text and "arena f32 4x8 offset=0" in text, text
    moved = tmp_path / "moved.shard"
    moved.write_text(text.replace("\narena 128\n", "\narena 256\n")
                     .replace("arena f32 4x8 offset=0", "arena f32 4x8 offset=4"))
    rc, err = run_standin(moved, "--inputs", tmp_path / "in.npz", "--output",
                          tmp_path / "out.npz", env={"SHARDFLOW_STANDIN_SM": "86"})
    assert rc == 1, err
    assert "generated kernel 'k0_relu' takes buffer 1, which does not start at a multiple " \
           "of 16 bytes" in err, err
    # At offset 16 it runs.
    moved.write_text(text.replace("\narena 128\n", "\narena 256\n")
                     .replace("arena f32 4x8 offset=0", "arena f32 4x8 offset=16"))
    rc, err = run_standin(moved, "--inputs", tmp_path / "in.npz", "--output",
                          tmp_path / "out.npz", env={"SHARDFLOW_STANDIN_SM": "86"})
    assert rc == 0, err
    np.testing.assert_array_equal(np.load(tmp_path / "out.npz")["y"], np.ones((4, 8)))


ZOO_TOLERANCE = {"f32": 1e-4, "bf16": 2e-2}


@pytest.fixture(scope="module")
def zoo(tmp_path_factory):
    """tools/gpu-check.sh's cases (python -m shardflow.cuda_zoo)."""
    standin_dir()
    out = tmp_path_factory.mktemp("zoo")
    cuda_zoo.write_cases(out, toolchain.tool("shard-opt"))
    cuda_zoo.write_check_cases(out, toolchain.tool("shard-opt"))
    return out


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("dtype", sorted(ZOO_TOLERANCE))
def test_zoo_models_match_onnxruntime(zoo, dtype, order, tmp_path):
    """The GPU check's models, world size 1, generated kernels from their
    PTX: against onnxruntime (measured: f32 about 4e-7, bf16 about 1e-2)."""
    tol = ZOO_TOLERANCE[dtype]
    for name in cuda_zoo.MODELS:
        base = zoo / dtype / name
        trace = tmp_path / f"{name}.trace"
        rc, err = run_standin(f"{base}.shard", "--inputs", f"{base}.inputs.npz", "--output",
                              tmp_path / f"{name}.npz", order=order,
                              env={"SHARDFLOW_STANDIN_SM": "86",
                                   "SHARDFLOW_STANDIN_TRACE": str(trace)})
        assert rc == 0, (name, err)
        ran = trace.read_text()
        assert re.search(r"launch k\d+_\w+ .* \(PTX\)\n", ran), (name, ran)
        assert "nccl all_reduce" in ran, name
        check_zoo_outputs(base, tmp_path / f"{name}.npz", tol)


@pytest.mark.parametrize("disable", ["vector-accesses", "packed-qkv", "gemm-epilogues",
                                     "gemm-residuals",
                                     "vector-accesses,packed-qkv,gemm-epilogues,gemm-residuals"])
def test_codegen_features_turned_off_still_match(zoo, disable, tmp_path):
    """`shard-opt --cuda-disable` (what the GPT-2 bench times against the
    default, to measure each feature) changes the program and not its
    results: the zoo's GPT-2 in bf16 against onnxruntime, with the trace
    showing the feature gone."""
    base = zoo / "bf16" / "gpt2"
    artifact = tmp_path / "gpt2.shard"
    out = subprocess.run([str(toolchain.tool("shard-opt")), f"{base}.onnx", "--target", "cuda",
                          "--dtype", "bf16", "--cuda-disable", disable, "-o", str(artifact),
                          "--dump-ptx", str(tmp_path / "gpt2.ptx")],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    trace = tmp_path / "trace.txt"
    rc, err = run_standin(artifact, "--inputs", f"{base}.inputs.npz", "--output",
                          tmp_path / "out.npz", env={"SHARDFLOW_STANDIN_SM": "86",
                                                     "SHARDFLOW_STANDIN_TRACE": str(trace)})
    assert rc == 0, err
    check_zoo_outputs(base, tmp_path / "out.npz", ZOO_TOLERANCE["bf16"])
    ran, ptx, text = trace.read_text(), (tmp_path / "gpt2.ptx").read_text(), artifact.read_text()
    default = (zoo / "bf16" / "gpt2.shard").read_text()
    assert "packed_qkv" in default and " epilogue=s:bias" in default
    assert ("ld.global.v4" in ptx) == ("vector-accesses" not in disable), ptx
    assert ("packed_qkv" in text) == ("packed-qkv" not in disable)
    assert (" gelu_bias\n" in ran) == ("gemm-epilogues" not in disable), ran
    # The residual adds ride on the GEMMs that end each block (after their
    # bias epilogue): cuBLASLt's C.
    residuals = "gemm-residuals" not in disable and "gemm-epilogues" not in disable
    assert (" +C bias\n" in ran) == residuals, ran
    matmuls = len(re.findall(r"^kernel matmul ", text, re.M))
    assert matmuls == len(re.findall(r"^kernel matmul ", default, re.M)) + (
        2 * 2 if "packed-qkv" in disable else 0)  # three GEMMs for one, in each of 2 layers


def test_sibling_fusion_gives_the_bits_of_separate_launches(zoo, tmp_path):
    """convert-rt-to-gpu's sibling fusion (shard-opt --cuda-disable
    sibling-fusion turns it off): in the zoo's Llama the query's and the
    key's rotary embeddings (4 and 2 heads) run as one launch per layer,
    each in its own blocks, from the PTX; the outputs are the bits of the
    two launches, and match onnxruntime."""
    for dtype in ("f32", "bf16"):
        base = zoo / dtype / "llama"
        artifact = tmp_path / f"{dtype}.separate.shard"
        out = subprocess.run([str(toolchain.tool("shard-opt")), f"{base}.onnx", "--target", "cuda",
                              *(["--dtype", "bf16"] if dtype == "bf16" else []),
                              "--cuda-disable", "sibling-fusion", "-o", str(artifact)],
                             capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
        outputs, rotary, launches = {}, {}, {}
        for mode, shard in (("fused", f"{base}.shard"), ("separate", artifact)):
            trace = tmp_path / f"{dtype}.{mode}.trace"
            outputs[mode] = tmp_path / f"{dtype}.{mode}.npz"
            rc, err = run_standin(shard, "--inputs", f"{base}.inputs.npz", "--output",
                                  outputs[mode], env={"SHARDFLOW_STANDIN_SM": "86",
                                                      "SHARDFLOW_STANDIN_TRACE": str(trace)})
            assert rc == 0, (dtype, mode, err)
            ran = trace.read_text()
            rotary[mode] = re.findall(r"launch (k\d+(?:_rotary_embedding)+) .*\(PTX\)", ran)
            launches[mode] = len(re.findall(r"launch k\d+_\w+ ", ran))
        # Two layers: a launch of both per layer, or one of each.
        pair = "_rotary_embedding_rotary_embedding"
        assert len(rotary["fused"]) == 2, rotary
        assert all(name.endswith(pair) for name in rotary["fused"]), rotary
        assert len(rotary["separate"]) == 4, rotary
        assert not any(name.endswith(pair) for name in rotary["separate"]), rotary
        assert launches["fused"] == launches["separate"] - 2, launches
        assert_same_bits(outputs["separate"], [outputs["fused"]], dtype)
        check_zoo_outputs(base, outputs["fused"], ZOO_TOLERANCE[dtype])


def test_outputs_in_the_compute_type(zoo, tmp_path):
    """--dtype bf16 --outputs-in-dtype: the last GEMM writes the logits in
    bf16 (the default writes them in f32 itself), shard-run brings them
    back and writes them as float32; against onnxruntime as the default."""
    base = zoo / "bf16" / "gpt2"
    artifact = tmp_path / "gpt2.shard"
    out = subprocess.run([str(toolchain.tool("shard-opt")), f"{base}.onnx", "--target", "cuda",
                          "--dtype", "bf16", "--outputs-in-dtype", "-o", str(artifact)],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    for text, dtype in ((artifact.read_text(), "bf16"),
                        ((zoo / "bf16" / "gpt2.shard").read_text(), "f32")):
        out_id = re.search(r"^output logits (\d+)$", text, re.M).group(1)
        assert re.search(rf"^buffer {out_id} arena {dtype} ", text, re.M), dtype
        assert re.search(rf"^kernel matmul .* out={out_id} ", text, re.M), dtype
    rc, err = run_standin(artifact, "--inputs", f"{base}.inputs.npz", "--output",
                          tmp_path / "out.npz", env={"SHARDFLOW_STANDIN_SM": "86"})
    assert rc == 0, err
    assert np.load(tmp_path / "out.npz")["logits"].dtype == np.float32
    check_zoo_outputs(base, tmp_path / "out.npz", ZOO_TOLERANCE["bf16"])


def check_zoo_outputs(base: Path, got_path: Path, tol: float):
    """Every output in got_path against BASE.expected.npz (onnxruntime):
    max |difference| / max |reference| under tol."""
    with np.load(f"{base}.expected.npz") as want, np.load(got_path) as got:
        assert sorted(want.files) == sorted(got.files), base.name
        for out in want.files:
            w, g = want[out].astype(np.float64), got[out].astype(np.float64)
            error = np.abs(g - w).max() / np.abs(w).max()
            assert error < tol, f"{base.parent.name} {base.name} {out}: relative error {error:.2e}"


def assert_same_bits(reference: Path, others: list[Path], label: str):
    """Every output in each of `others` (.npz) is bit for bit the one in
    `reference` (NaNs where it has NaNs)."""
    with np.load(reference) as want:
        for path in others:
            with np.load(path) as got:
                assert sorted(got.files) == sorted(want.files), (label, path.name)
                for out in want.files:
                    assert np.array_equal(want[out], got[out], equal_nan=True), \
                        (label, path.name, out)


def mpirun_standin(world, *args, env=None, ranks_env=None, timeout=120):
    """shard-run under `mpirun -np world` on the stand-ins, one stand-in GPU
    per rank; ranks_env gives some ranks variables of their own (an MPMD
    launch: {rank: {name: value}})."""
    from test_mpi import ENV, MPIRUN  # mpirun as root, oversubscribed

    assert MPIRUN, "mpirun is missing: run tools/setup.sh (openmpi-bin)"
    extra = {**standin_env(world), **(env or {})}
    common = [a for key in extra for a in ("-x", key)]
    program = [str(toolchain.tool("shard-run")), *map(str, args)]
    cmd = [MPIRUN, "--oversubscribe"]
    for rank in range(world):
        own = [a for k, v in (ranks_env or {}).get(rank, {}).items() for a in ("-x", f"{k}={v}")]
        cmd += ([":"] if rank else []) + ["-np", "1", *common, *own, *program]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                         env={**ENV, **extra})
    return out.returncode, out.stdout + out.stderr


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("dtype", sorted(ZOO_TOLERANCE))
def test_zoo_tensor_parallel_models_on_four_ranks(zoo, dtype, order, tmp_path):
    """gpt2 and llama sharded dp=2,tp=2 (megatron), under mpirun -np 4: the
    executor's NCCL bootstrap (MPI broadcast of unique ids, one communicator
    per tp and dp group), its all_reduce and all_gather calls, and the
    generated kernels of each rank's shard, against onnxruntime on the
    whole model (measured: f32 about 5e-7, bf16 about 7e-3)."""
    tol = ZOO_TOLERANCE[dtype]
    nccl = tmp_path / "nccl"
    nccl.mkdir()
    for name in cuda_zoo.SHARDED:
        base = zoo / dtype / f"{name}-tp"
        trace = tmp_path / f"{name}.trace"
        rc, log = mpirun_standin(4, f"{base}.shard", "--weights", f"{base}.onnx", "--inputs",
                                 f"{base}.inputs.npz", "--output", tmp_path / f"{name}.npz",
                                 env={"SHARDFLOW_STANDIN_ORDER": order,
                                      "SHARDFLOW_STANDIN_TRACE": str(trace),
                                      "SHARDFLOW_STANDIN_NCCL_DIR": str(nccl)})
        assert rc == 0, (name, log)
        ran = trace.read_text()
        # The world's health check and the groups' collectives, from all ranks.
        for rank in range(4):
            assert f"nccl all_reduce 4 B (collective #1 of rank {rank} of 4)" in ran, ran
        assert re.search(r"nccl all_reduce \d+ B \(collective #\d+ of rank 1 of 2\)", ran), ran
        assert re.search(r"nccl all_gather \d+ B \(collective #\d+ of rank 0 of 2\)", ran), ran
        assert not list(nccl.iterdir()), "the communicators' files are left behind"
        if name == "gpt2":  # each rank's heads of Q, K and V from one GEMM, read in place
            assert "packed_qkv=is:32,32,32" in Path(f"{base}.shard").read_text()
        check_zoo_outputs(base, tmp_path / f"{name}.npz", tol)


def traced_operations(trace: Path) -> tuple[Counter, Counter]:
    """The trace's operations without their stream: (those queued directly,
    those launched from a CUDA graph, "graph: " taken off)."""
    direct, graphed = Counter(), Counter()
    for line in trace.read_text().splitlines():
        op = line.split(": ", 1)[1]
        if op.startswith("graph: "):
            graphed[op.removeprefix("graph: ")] += 1
        else:
            direct[op] += 1
    return direct, graphed


@pytest.mark.parametrize("order", ORDERS)
def test_cuda_graph_replays_the_program(zoo, order, tmp_path):
    """shard-run --cuda-graph captures the program at the first run and
    launches it as one graph at every run: each zoo model (bf16) gives the
    bits of the run without the graph (--no-cuda-graph), and the trace
    shows the same operations, the program's all coming from the graph. By
    default the program is captured at the second run: the first runs it
    operation by operation, the others launch the graph, with the same
    bits."""
    runs = 3
    for name in cuda_zoo.MODELS:
        base = zoo / "bf16" / name
        outputs, traces = {}, {}
        for mode, extra in (("plain", ["--no-cuda-graph"]), ("auto", ["--verbose"]),
                            ("graph", ["--cuda-graph", "--verbose"])):
            traces[mode] = tmp_path / f"{name}.{mode}.trace"
            outputs[mode] = tmp_path / f"{name}.{mode}.npz"
            rc, err = run_standin(f"{base}.shard", "--inputs", f"{base}.inputs.npz", "--output",
                                  outputs[mode], "--repeat", str(runs), *extra, order=order,
                                  env={"SHARDFLOW_STANDIN_SM": "86",
                                       "SHARDFLOW_STANDIN_TRACE": str(traces[mode])})
            assert rc == 0, (name, mode, err)
            if mode != "plain":
                assert re.search(r"rank 0 captured (\d+) operations into a CUDA graph", err), err
                assert err.count("into a CUDA graph") == 1, err
        for mode in ("auto", "graph"):
            with np.load(outputs["plain"]) as plain, np.load(outputs[mode]) as graph:
                assert plain.files == graph.files
                for out in plain.files:
                    assert np.array_equal(plain[out], graph[out], equal_nan=True), (name, out)
        check_zoo_outputs(base, outputs["graph"], ZOO_TOLERANCE["bf16"])
        plain_ops, none = traced_operations(traces["plain"])
        direct, graphed = traced_operations(traces["graph"])
        assert not none, name
        assert graphed and all(n % runs == 0 for n in graphed.values()), (name, graphed)
        assert not any(op.startswith("launch") or op.startswith("gemm") for op in direct), direct
        assert direct + graphed == plain_ops, name
        # Auto: the first run's program operation by operation, the other
        # two runs' from the graph.
        direct, graphed = traced_operations(traces["auto"])
        assert direct + graphed == plain_ops, name
        kernels = [op for op in plain_ops if op.startswith("launch") or op.startswith("gemm")]
        assert kernels, name
        for op in kernels:
            once = plain_ops[op] // runs
            assert (direct[op], graphed[op]) == (once, (runs - 1) * once), (name, op)


def test_cuda_graph_on_four_ranks(zoo, tmp_path):
    """--cuda-graph under mpirun -np 4 (dp=2,tp=2): the collectives are
    captured on the communication stream and numbered anew at each launch,
    so the ranks' runs still meet; results against onnxruntime."""
    nccl = tmp_path / "nccl"
    nccl.mkdir()
    for name in cuda_zoo.SHARDED:
        base = zoo / "f32" / f"{name}-tp"
        trace = tmp_path / f"{name}.trace"
        rc, log = mpirun_standin(4, f"{base}.shard", "--weights", f"{base}.onnx", "--inputs",
                                 f"{base}.inputs.npz", "--output", tmp_path / f"{name}.npz",
                                 "--cuda-graph", "--repeat", "2",
                                 env={"SHARDFLOW_STANDIN_ORDER": "last",
                                      "SHARDFLOW_STANDIN_TRACE": str(trace),
                                      "SHARDFLOW_STANDIN_NCCL_DIR": str(nccl)})
        assert rc == 0, (name, log)
        ran = trace.read_text()
        for rank in range(2):
            assert re.search(rf"graph: nccl all_reduce \d+ B \(collective #\d+ of rank {rank} "
                             r"of 2\)", ran), ran
        check_zoo_outputs(base, tmp_path / f"{name}.npz", ZOO_TOLERANCE["f32"])
    # By default a program with collectives runs operation by operation
    # at every run: NCCL inside a graph is only taken when asked for.
    name = cuda_zoo.SHARDED[0]
    base = zoo / "f32" / f"{name}-tp"
    trace = tmp_path / "default.trace"
    rc, log = mpirun_standin(4, f"{base}.shard", "--weights", f"{base}.onnx", "--inputs",
                             f"{base}.inputs.npz", "--output", tmp_path / "default.npz",
                             "--repeat", "3", "--verbose",
                             env={"SHARDFLOW_STANDIN_TRACE": str(trace),
                                  "SHARDFLOW_STANDIN_NCCL_DIR": str(nccl)})
    assert rc == 0, log
    assert "CUDA graph" not in log and "graph: " not in trace.read_text(), log
    assert "nccl all_reduce" in trace.read_text()
    check_zoo_outputs(base, tmp_path / "default.npz", ZOO_TOLERANCE["f32"])


def test_cuda_graph_is_refused_with_profile(zoo, tmp_path):
    """--cuda-graph and --profile conflict; the default graph steps aside
    for --profile instead (the runs after the first are profiled, as
    without a graph)."""
    base = zoo / "f32" / "mlp"
    rc, err = run_standin(f"{base}.shard", "--inputs", f"{base}.inputs.npz", "--cuda-graph",
                          "--profile", env={"SHARDFLOW_STANDIN_SM": "86"})
    assert rc == 1 and "--cuda-graph and --profile do not go together" in err, err
    rc, err = run_standin(f"{base}.shard", "--inputs", f"{base}.inputs.npz", "--profile",
                          "--repeat", "3", "--verbose", env={"SHARDFLOW_STANDIN_SM": "86"})
    assert rc == 0 and "profile: mean of 2 runs" in err and "CUDA graph" not in err, err


@pytest.mark.parametrize("order", ORDERS)
def test_grouped_gemms_give_the_bits_of_separate_ones(zoo, order, tmp_path):
    """Sibling GEMMs grouped (the default, or --group-gemms): the zoo's Llama
    (grouped-query attention, so key and value have one width, and gate
    and up another) runs its sibling projections as pointer-array batched
    cuBLASLt calls, alone and captured in a CUDA graph; the outputs are the
    bits of the GEMMs run one by one (--no-group-gemms). A cuBLASLt with no
    pointer-array algorithm gets them one by one again."""
    for dtype in ("f32", "bf16"):
        base = zoo / dtype / "llama"
        outputs, gemms = {}, {}
        for mode, extra, env in (("plain", ["--no-group-gemms"], {}), ("default", [], {}),
                                 ("grouped", ["--group-gemms"], {}),
                                 ("graph", ["--cuda-graph"], {}),
                                 ("refused", [],
                                  {"SHARDFLOW_STANDIN_CUBLASLT": "no-pointer-array"})):
            trace = tmp_path / f"{dtype}.{mode}.trace"
            outputs[mode] = tmp_path / f"{dtype}.{mode}.npz"
            rc, err = run_standin(f"{base}.shard", "--inputs", f"{base}.inputs.npz", "--output",
                                  outputs[mode], "--verbose", *extra, order=order,
                                  env={"SHARDFLOW_STANDIN_SM": "86",
                                       "SHARDFLOW_STANDIN_TRACE": str(trace), **env})
            assert rc == 0, (dtype, mode, err)
            ran = trace.read_text()
            gemms[mode] = len(re.findall(r": (?:graph: )?gemm ", ran))
            batched = re.findall(r": (?:graph: )?gemm [^\n]* batch=(\d+) \(pointer array\)", ran)
            if mode in ("default", "grouped", "graph"):
                # Two layers, each with key/value and gate/up in pairs.
                assert "runs 8 GEMMs as 4 pointer-array batched calls" in err, err
                assert batched == ["2"] * 4, ran
                assert gemms[mode] == gemms["plain"] - 4, (gemms, ran)
            else:
                assert not batched, ran
            if mode == "refused":
                assert err.count("no pointer-array algorithm for 2 GEMMs") == 4, err
                assert gemms[mode] == gemms["plain"], gemms
        assert_same_bits(outputs["plain"],
                         [outputs[mode] for mode in ("default", "grouped", "graph", "refused")],
                         dtype)
        check_zoo_outputs(base, outputs["grouped"], ZOO_TOLERANCE[dtype])


def test_gemm_autotune_keeps_the_fastest_algorithm(zoo, tmp_path):
    """shard-run --gemm-autotune: with three algorithms a GEMM (the stand-in
    makes the heuristic's last the fastest), every distinct problem keeps
    the third, plain and pointer-array ones (--group-gemms) alike, also
    under a CUDA graph; the outputs are the bits of the untuned run. With
    one algorithm there is nothing to tune."""
    base = zoo / "f32" / "llama"
    outputs = {}
    for mode, extra, algos in (("plain", [], "3"), ("one", ["--gemm-autotune"], "1"),
                               ("tuned", ["--gemm-autotune"], "3"),
                               ("grouped", ["--gemm-autotune", "--group-gemms", "--cuda-graph"],
                                "3")):
        outputs[mode] = tmp_path / f"{mode}.npz"
        rc, err = run_standin(f"{base}.shard", "--inputs", f"{base}.inputs.npz", "--output",
                              outputs[mode], "--verbose", *extra,
                              env={"SHARDFLOW_STANDIN_SM": "86",
                                   "SHARDFLOW_STANDIN_CUBLASLT_ALGOS": algos})
        assert rc == 0, (mode, err)
        kept = re.findall(r"GEMM m=\d+ n=\d+ k=\d+[^\n]*: algorithm (\d) of (\d) kept", err)
        summary = re.search(r"tuned (\d+) GEMM problems in \d+ ms \(--gemm-autotune\): "
                            r"(\d+) changed", err)
        if mode == "plain":
            assert not kept and not summary, err
        elif mode == "one":
            assert not kept and summary and summary.group(1) == "0", err
        else:
            assert kept and all(k == ("3", "3") for k in kept), err
            assert summary and int(summary.group(1)) == len(kept) == int(summary.group(2)), err
        if mode == "grouped":
            assert re.search(r"GEMM m=\d+ n=\d+ k=\d+ batch=2 \(instruction", err), err
    assert_same_bits(outputs["plain"], [outputs[m] for m in ("one", "tuned", "grouped")],
                     "llama")
    check_zoo_outputs(base, outputs["tuned"], ZOO_TOLERANCE["f32"])


def test_gemm_autotune_file_replays_the_choices(zoo, tmp_path):
    """--gemm-autotune-file FILE: the first load times every GEMM problem
    and writes its choices; the next takes them from FILE without timing
    any, with the same outputs bit for bit. Choices recorded for another
    GPU are timed again and replaced; a file that is not ours is refused,
    naming it."""
    base = zoo / "f32" / "llama"
    choices = tmp_path / "choices.txt"
    env = {"SHARDFLOW_STANDIN_SM": "86", "SHARDFLOW_STANDIN_CUBLASLT_ALGOS": "3"}

    def load(name, *extra):
        out = tmp_path / f"{name}.npz"
        rc, err = run_standin(f"{base}.shard", "--inputs", f"{base}.inputs.npz", "--output", out,
                              "--verbose", "--gemm-autotune-file", choices, *extra, env=env)
        return rc, err, out

    rc, err, first = load("first")
    assert rc == 0, err
    timed = re.findall(r"GEMM m=\d+ n=\d+ k=\d+[^\n]*: algorithm (\d) of (\d) kept", err)
    assert timed and all(t == ("3", "3") for t in timed), err
    assert f"took 0 GEMM choices from {choices}" in err, err
    lines = choices.read_text().splitlines()
    assert lines[0] == "shardflow-gemm-autotune 1", lines
    assert lines[1].startswith("gpu ") and lines[2].startswith("cublaslt "), lines
    records = [line.split() for line in lines if line.startswith("gemm ")]
    assert len(records) == len(timed) and all(r[2:] == ["2", "3"] for r in records), lines

    rc, err, second = load("second")
    assert rc == 0, err
    assert not re.search(r"algorithm \d of \d kept", err), err
    assert f"took {len(records)} GEMM choices from {choices}" in err, err
    assert_same_bits(first, [second], "llama")
    assert choices.read_text().splitlines() == lines

    # Choices for another GPU: timed again, and the file says this one.
    choices.write_text("\n".join(["shardflow-gemm-autotune 1", "gpu Another GPU"] + lines[2:])
                       + "\n")
    rc, err, third = load("third")
    assert rc == 0, err
    assert "holds choices for Another GPU" in err and "timing the GEMMs again" in err, err
    assert len(re.findall(r"algorithm 3 of 3 kept", err)) == len(records), err
    assert choices.read_text().splitlines() == lines
    assert_same_bits(first, [third], "llama")

    choices.write_text("not ours\n")
    rc, err, _ = load("refused")
    assert rc != 0
    assert f"--gemm-autotune-file {choices}, line 1: not a file of GEMM choices" in err, err


def test_grouped_gemms_on_four_ranks(zoo, tmp_path):
    """--group-gemms in each rank's megatron program (dp=2,tp=2): the ranks'
    key/value and gate/up column blocks are grouped too; onnxruntime's
    results."""
    nccl = tmp_path / "nccl"
    nccl.mkdir()
    base = zoo / "f32" / "llama-tp"
    rc, log = mpirun_standin(4, f"{base}.shard", "--weights", f"{base}.onnx", "--inputs",
                             f"{base}.inputs.npz", "--output", tmp_path / "out.npz",
                             "--group-gemms", "--verbose",
                             env={"SHARDFLOW_STANDIN_NCCL_DIR": str(nccl)})
    assert rc == 0, log
    assert log.count("GEMMs as 4 pointer-array batched calls") == 4, log
    check_zoo_outputs(base, tmp_path / "out.npz", ZOO_TOLERANCE["f32"])


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_pinned_memory_gives_the_bits_of_pageable_memory(zoo, dtype, tmp_path):
    """--pinned-memory never|auto|always on three load threads: weights
    staged in page-locked memory (read when the copy runs, not when it is
    queued, by the stand-in as by a GPU: a staging block reused too early
    would send wrong bytes) and outputs downloaded into it give the bits of
    pageable memory. The trace shows which copies went through page-locked
    memory: all staged weights (with --dtype bf16 converted into it, in f32
    copied from the mapping), and the outputs from the second run on under
    auto. A driver that refuses page-locked memory gets pageable copies."""
    runs = 2
    for name in ("gpt2", "llama", "resnet"):
        base = zoo / dtype / name
        outputs = {}
        for mode in ("never", "auto", "always", "refused"):
            trace = tmp_path / f"{name}.{mode}.trace"
            outputs[mode] = tmp_path / f"{name}.{mode}.npz"
            env = {"SHARDFLOW_STANDIN_SM": "86", "SHARDFLOW_STANDIN_TRACE": str(trace)}
            if mode == "refused":
                env["SHARDFLOW_STANDIN_PINNED_LIMIT"] = "0"
            rc, err = run_standin(f"{base}.shard", "--inputs", f"{base}.inputs.npz", "--output",
                                  outputs[mode], "--repeat", str(runs), "--load-threads", "3",
                                  "--verbose", "--pinned-memory",
                                  "always" if mode == "refused" else mode, env=env, order="last")
            assert rc == 0, (name, mode, err)
            uploaded = re.search(r"uploaded (\d+) weight bytes, (\d+) of them from page-locked "
                                 r"staging", err)
            assert uploaded, err
            total, staged = map(int, uploaded.groups())
            ran = trace.read_text()
            pinned_up = [int(b) for b in re.findall(r"copy host to device (\d+) B \(pinned\)", ran)]
            with np.load(outputs[mode]) as got:
                n_outputs = len(got.files)
            pinned_down = len(re.findall(r"copy device to host \d+ B \(pinned\)", ran))
            # --verbose: each kind of download, with the runs it took.
            downloads = dict(re.findall(r"outputs downloaded \(\d+ bytes, ([a-z-]+) memory\): "
                                        r"best [0-9.]+ ms \([0-9.]+ GB/s\) over (\d+) runs", err))
            assert downloads == {"always": {"page-locked": str(runs)},
                                 "auto": {"pageable": "1", "page-locked": str(runs - 1)}
                                 }.get(mode, {"pageable": str(runs)}), (mode, err)
            if mode == "always":
                assert staged == total > 0 and sum(pinned_up) == total, (name, err)
                assert pinned_down == runs * n_outputs, (name, ran)
            elif mode == "auto":  # the zoo's weights are far below 256 MiB
                assert staged == 0 and not pinned_up, (name, err)
                assert pinned_down == (runs - 1) * n_outputs, (name, ran)
            else:
                assert staged == 0 and not pinned_up and not pinned_down, (name, mode, ran)
            if mode == "refused":
                assert "no page-locked host memory for weight staging" in err, err
                assert "no page-locked host memory for an output" in err, err
        assert_same_bits(outputs["never"],
                         [outputs[mode] for mode in ("auto", "always", "refused")], name)
        check_zoo_outputs(base, outputs["always"], ZOO_TOLERANCE[dtype])


def test_ranks_sharing_a_gpu_are_refused(zoo, tmp_path):
    # Four ranks, two stand-in GPUs: local ranks 0 and 2 both take GPU 0,
    # which NCCL refuses ("Duplicate GPU detected").
    base = zoo / "f32" / "gpt2-tp"
    rc, log = mpirun_standin(4, f"{base}.shard", "--weights", f"{base}.onnx", "--inputs",
                             f"{base}.inputs.npz", "--output", tmp_path / "out.npz",
                             env={"SHARDFLOW_STANDIN_GPUS": "2",
                                  "SHARDFLOW_STANDIN_NCCL_DIR": str(tmp_path)})
    assert rc != 0, log
    assert "Duplicate GPU detected: rank 0 and rank 2 both use device 0" in log, log
    assert "several ranks on one GPU are not supported by NCCL" in log, log


def test_a_failing_rank_stops_the_job(zoo, tmp_path):
    # Rank 2's NCCL reports a remote error after its first collective: it
    # aborts its communicators and the MPI job, naming the reason.
    base = zoo / "f32" / "gpt2-tp"
    rc, log = mpirun_standin(4, f"{base}.shard", "--weights", f"{base}.onnx", "--inputs",
                             f"{base}.inputs.npz", "--output", tmp_path / "out.npz",
                             env={"SHARDFLOW_STANDIN_NCCL_DIR": str(tmp_path)},
                             ranks_env={2: {"SHARDFLOW_STANDIN_NCCL": "fail"}}, timeout=60)
    assert rc != 0, log
    assert re.search(r"error: rank 2: NCCL failed during the NCCL health check: .*remote", log), log


@pytest.mark.parametrize("case", sorted(cuda_zoo.CHECK_CASES))
def test_kernel_errors_name_the_node(zoo, case, tmp_path):
    """Bad inputs found by a kernel (generated ones write a status word the
    executor reads after the run) stop the run, naming the ONNX node."""
    base = zoo / "checks" / case
    rc, err = run_standin(f"{base}.shard", "--inputs", f"{base}.inputs.npz", "--output",
                          tmp_path / "out.npz", env={"SHARDFLOW_STANDIN_SM": "86"})
    assert rc == 1, err
    for phrase in cuda_zoo.CHECK_CASES[case][2]:
        assert phrase in err, err
    assert "the outputs of this run are not valid" in err, err


def attention_model(path: Path, head: int, seq=8) -> Path:
    shape = [1, 1, seq, head]
    graph = helper.make_graph(
        [helper.make_node("Attention", ["q", "k", "v"], ["y"])], "attn",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, shape) for n in "qkv"],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)],
                                ir_version=10), path)
    return path


def test_shared_memory_beyond_the_device_is_named(tmp_path):
    # The SIMT attention with head size 256 needs about 146 KB of shared
    # memory: sm_90 allows it (and the result is right), sm_86 does not.
    model = attention_model(tmp_path / "attn.onnx", 256)
    artifact = compile_cuda(model, "f32")
    rng = np.random.default_rng(3)
    feeds = {n: rng.standard_normal((1, 1, 8, 256)).astype(np.float32) for n in "qkv"}
    np.savez(tmp_path / "in.npz", **feeds)
    args = (artifact, "--inputs", tmp_path / "in.npz", "--output", tmp_path / "out.npz")
    rc, err = run_standin(*args, env={"SHARDFLOW_STANDIN_SM": "90"})
    assert rc == 0, err
    import onnxruntime as ort

    want = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    np.testing.assert_allclose(np.load(tmp_path / "out.npz")["y"], want, rtol=1e-4, atol=1e-5)
    rc, err = run_standin(*args, env={"SHARDFLOW_STANDIN_SM": "86"})
    assert rc == 1, err
    assert re.search(r"sf_attention_simt_f32_dv256 needs \d+ bytes of shared memory per block; "
                     r".*\(sm_86\) allows 101376", err), err


@pytest.fixture(scope="module")
def small_artifact(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("small")
    model = block_model(tmp / "block.onnx")
    return compile_cuda(model, "f32"), tmp


def test_nccl_that_never_connects_times_out(small_artifact):
    artifact, tmp = small_artifact
    np.savez(tmp / "in.npz", ids=np.zeros((2, 16), np.int64))
    rc, err = run_standin(artifact, "--weights", tmp, "--inputs", tmp / "in.npz", "--output",
                          tmp / "out.npz", "--collective-timeout", "0.5",
                          env={"SHARDFLOW_STANDIN_NCCL": "hang"}, timeout=60)
    assert rc == 1, err
    assert "ncclCommInitRankConfig (creating the communicator) did not finish within 0.5 s " \
           "(--collective-timeout)" in err, err


def test_nccl_error_aborts_with_its_reason(small_artifact):
    artifact, tmp = small_artifact
    np.savez(tmp / "in.npz", ids=np.zeros((2, 16), np.int64))
    rc, err = run_standin(artifact, "--weights", tmp, "--inputs", tmp / "in.npz", "--output",
                          tmp / "out.npz", env={"SHARDFLOW_STANDIN_NCCL": "fail"})
    assert rc == 1, err
    assert "NCCL failed during the NCCL health check: ncclRemoteError" in err or \
           re.search(r"NCCL failed during the NCCL health check: .*remote process exited", err), err


def test_index_out_of_range_names_the_node(small_artifact):
    artifact, tmp = small_artifact
    ids = np.zeros((2, 16), np.int64)
    ids[1, 3] = 40  # the vocabulary has 37 rows
    np.savez(tmp / "bad.npz", ids=ids)
    rc, err = run_standin(artifact, "--weights", tmp, "--inputs", tmp / "bad.npz", "--output",
                          tmp / "out.npz")
    assert rc == 1, err
    assert re.search(r"kernel 'gather' \(ONNX node 'embed'\).*index 40 read from the data is out "
                     r"of range", err), err


def test_verbose_reports_the_device_and_gpu_time(small_artifact):
    artifact, tmp = small_artifact
    np.savez(tmp / "in.npz", ids=np.zeros((2, 16), np.int64))
    rc, err = run_standin(artifact, "--weights", tmp, "--inputs", tmp / "in.npz", "--output",
                          tmp / "out.npz", "--verbose", "--repeat", "3")
    assert rc == 0, err
    assert "Shardflow CUDA stand-in (host emulation, sm_90)" in err, err
    assert re.search(r"GPU program time: best [0-9.]+ ms, median [0-9.]+ ms", err), err


def test_profile_times_every_operation(zoo, tmp_path):
    """shard-run --profile on a CUDA artifact: one line per kind of
    operation whose counts are the artifact's, times that add up to the
    summed line, and the slowest operations named by ONNX node."""
    base = zoo / "bf16" / "gpt2"
    rc, err = run_standin(f"{base}.shard", "--inputs", f"{base}.inputs.npz", "--profile",
                          "--repeat", "3", env={"SHARDFLOW_STANDIN_SM": "86"})
    assert rc == 0, err
    assert "profile: mean of 2 runs (rank 0; GPU time per operation, CUDA events)" in err, err
    program, summed, kinds = profile_report.parse(err)
    want = profile_report.artifact_kinds(Path(f"{base}.shard").read_text())
    assert {k: c for k, (c, _) in kinds.items()} == want, (kinds, want)
    assert {"attention", "matmul gelu_bias", "generated layer_normalization"} <= set(kinds)
    assert abs(sum(ms for _, ms in kinds.values()) - summed) <= 0.002 * len(kinds) + 1e-3
    # One stream of compute: the operations fit in the program's time.
    assert 0 < summed <= program * 1.01, (summed, program)
    assert re.search(r"^  #\d+ +[0-9.]+ ms  attention  \(ONNX node '/h\.\d/attn/", err, re.M), err
    assert re.search(r"^  #\d+ +[0-9.]+ ms  generated \w+  \(function k\d+_\w+\)$", err,
                     re.M), err


def test_attention_kernel_is_chosen_at_run_time(zoo, tmp_path):
    """shard-run --attention-kernel: a head size 64 GPT-2 block in bf16 runs
    each attention kernel the option names (the stand-in's trace shows
    which), all within bf16's tolerance of onnxruntime; a tensor-core kernel
    asked for where it does not apply (f32, head size 16) fails naming the
    ONNX node; an unknown name is refused."""
    from shardflow import models

    model = models.gpt2(layers=1, hidden=128, heads=2, seq=24, batch=1, vocab=64)
    path = tmp_path / "d64.onnx"
    models.save(model, path)
    feeds = models.random_inputs(model, seed=1, vocab=64)
    np.savez(tmp_path / "in.npz", **feeds)
    (want,) = toolchain.run_onnxruntime(path, feeds).values()
    artifact = tmp_path / "d64.shard"
    out = subprocess.run([str(toolchain.tool("shard-opt")), str(path), "--target", "cuda",
                          "--dtype", "bf16", "-o", str(artifact)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    # Causal, no mask, no softcap: the tensor-core kernels without the
    # general score rule.
    functions = {"auto": "sf_attention_mma_bf16_d64_plain",
                 "mma": "sf_attention_mma_bf16_d64_plain",
                 "mma2": "sf_attention_mma2_bf16_d64_plain", "simt": "sf_attention_simt_bf16_dv64"}
    for kernel, function in functions.items():
        trace = tmp_path / f"{kernel}.trace"
        rc, err = run_standin(artifact, "--inputs", tmp_path / "in.npz", "--output",
                              tmp_path / "out.npz", "--attention-kernel", kernel,
                              env={"SHARDFLOW_STANDIN_SM": "86",
                                   "SHARDFLOW_STANDIN_TRACE": str(trace)})
        assert rc == 0, (kernel, err)
        assert set(re.findall(r"sf_attention_\w+", trace.read_text())) == {function}, kernel
        got = np.load(tmp_path / "out.npz")["logits"]
        error = np.abs(got - want).max() / np.abs(want).max()
        assert error < ZOO_TOLERANCE["bf16"], (kernel, error)

    base = zoo / "f32" / "gpt2"
    rc, err = run_standin(f"{base}.shard", "--inputs", f"{base}.inputs.npz",
                          "--attention-kernel", "mma2", env={"SHARDFLOW_STANDIN_SM": "86"})
    assert rc == 1 and "kernel 'attention' (ONNX node '/h.0/attn/" in err, err
    assert "the tensor-core kernel needs f16/bf16" in err, err
    rc, err = run_standin(f"{base}.shard", "--attention-kernel", "fast")
    assert rc == 1 and "--attention-kernel takes auto, mma, mma2 or simt, got 'fast'" in err, err


def test_data_movement_matches_onnxruntime(tmp_path):
    # Transpose, a stepped slice, a constant pad, concat, split and expand:
    # the runtime's copy, pad and strided-copy kernels, exactly.
    def ints(name, values):
        return numpy_helper.from_array(np.array(values, np.int64), name)

    node = helper.make_node
    inits = [ints("starts", [1, 0]), ints("ends", [7, 5]), ints("axes", [1, 3]),
             ints("steps", [2, 1]), ints("pads", [0, 1, 0, 2, 0, 0, 1, 0]),
             ints("shape", [2, 4, 3, 7]), ints("sizes", [2, 4]),
             numpy_helper.from_array(np.array(0.5, np.float32), "value")]
    nodes = [node("Transpose", ["x"], ["t"], perm=[0, 2, 1, 3]),
             node("Slice", ["t", "starts", "ends", "axes", "steps"], ["s"]),
             node("Pad", ["s", "pads", "value"], ["p"], mode="constant"),
             node("Concat", ["p", "y"], ["cat"], axis=1),
             node("Split", ["cat", "sizes"], ["a", "b"], axis=1),
             node("Expand", ["z", "shape"], ["e"])]
    shapes = {"x": [2, 3, 8, 6], "y": [2, 2, 4, 7], "z": [2, 1, 3, 1]}
    graph = helper.make_graph(
        nodes, "moves",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in shapes.items()],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in "abe"], inits)
    model = tmp_path / "moves.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)],
                                ir_version=10), model)
    artifact = compile_cuda(model, "f32")
    rng = np.random.default_rng(0)
    feeds = {n: rng.standard_normal(s).astype(np.float32) for n, s in shapes.items()}
    np.savez(tmp_path / "in.npz", **feeds)
    import onnxruntime as ort

    want = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"]).run(None, feeds)
    for order in ORDERS:
        rc, err = run_standin(artifact, "--inputs", tmp_path / "in.npz", "--output",
                              tmp_path / "out.npz", order=order)
        assert rc == 0, err
        with np.load(tmp_path / "out.npz") as got:
            for name, value in zip("abe", want):
                np.testing.assert_array_equal(got[name], value, err_msg=f"{name} ({order})")


def test_mod_and_arg_reductions_match_onnxruntime(tmp_path):
    # Mod with the divisor's sign (integers) and the dividend's (fmod, floats
    # and integers), ArgMax with ties (the last index) and ReduceProd /
    # ReduceMin over the last axis (row reductions): generated kernels
    # against onnxruntime (opset 13: the node tests of Mod are opset 28).
    node = helper.make_node
    nodes = [node("Mod", ["i", "j"], ["m"]),
             node("Mod", ["i", "j"], ["mf"], fmod=1),
             node("Mod", ["x", "y"], ["xf"], fmod=1),
             node("ArgMax", ["r"], ["am"], axis=1, select_last_index=1),
             node("ArgMin", ["x"], ["an"], axis=-1, keepdims=0),
             node("ReduceProd", ["x"], ["rp"], axes=[-1]),
             node("ReduceMin", ["x"], ["rm"], axes=[-1], keepdims=0)]
    rng = np.random.default_rng(0)
    feeds = {"i": rng.integers(-50, 50, (4, 64)).astype(np.int32),
             "j": (rng.integers(1, 8, (64,)) * rng.choice([-1, 1], 64)).astype(np.int32),
             "x": rng.uniform(-2, 2, (4, 64)).astype(np.float32),
             "y": rng.choice([-1.5, 0.75, 2.0], (64,)).astype(np.float32),
             "r": rng.integers(-2, 3, (4, 8, 3)).astype(np.float32)}
    graph = helper.make_graph(
        nodes, "mods",
        [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
         for n, v in feeds.items()],
        [helper.make_tensor_value_info(n, t, None) for n, t in
         [("m", TensorProto.INT32), ("mf", TensorProto.INT32), ("xf", TensorProto.FLOAT),
          ("am", TensorProto.INT64), ("an", TensorProto.INT64), ("rp", TensorProto.FLOAT),
          ("rm", TensorProto.FLOAT)]])
    model = tmp_path / "mods.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)],
                                ir_version=8), model)
    # Generated kernels: run as PTX on a stand-in sm_86.
    artifact = tmp_path / "mods.shard"
    out = subprocess.run([str(toolchain.tool("shard-opt")), str(model), "--target", "cuda",
                          "-o", str(artifact)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    np.savez(tmp_path / "in.npz", **feeds)
    import onnxruntime as ort

    names = ["m", "mf", "xf", "am", "an", "rp", "rm"]
    want = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"]).run(names, feeds)
    rc, err = run_standin(artifact, "--inputs", tmp_path / "in.npz", "--output",
                          tmp_path / "out.npz", env={"SHARDFLOW_STANDIN_SM": "86"})
    assert rc == 0, err
    with np.load(tmp_path / "out.npz") as got:
        for name, value in zip(names, want):
            np.testing.assert_allclose(got[name], value, rtol=1e-5, atol=1e-6, err_msg=name)


def test_allow_tf32_reaches_cublaslt(tmp_path):
    # Full f32 by default; with --allow-tf32 the products take TF32's 10-bit
    # mantissa, which shows as a larger but bounded error.
    model = block_model(tmp_path / "block.onnx", **BLOCKS["d64"][0])
    artifact = compile_cuda(model, "f32")
    ids = np.random.default_rng(1).integers(0, 37, (2, 80)).astype(np.int64)
    np.savez(tmp_path / "in.npz", ids=ids)
    want = onnxruntime_logits(model, ids).astype(np.float64)
    errors = {}
    for flags in ([], ["--allow-tf32"]):
        rc, err = run_standin(artifact, "--weights", tmp_path, "--inputs", tmp_path / "in.npz",
                              "--output", tmp_path / "out.npz", *flags)
        assert rc == 0, err
        got = np.load(tmp_path / "out.npz")["logits"].astype(np.float64)
        errors[bool(flags)] = np.abs(got - want).max() / np.abs(want).max()
    assert errors[False] < 1e-5, errors
    assert 1e-4 < errors[True] < 5e-3, errors


def test_a_device_that_does_not_exist_is_refused(small_artifact):
    artifact, tmp = small_artifact
    np.savez(tmp / "in.npz", ids=np.zeros((2, 16), np.int64))
    rc, err = run_standin(artifact, "--weights", tmp, "--inputs", tmp / "in.npz", "--output",
                          tmp / "out.npz", "--device", "3")
    assert rc == 1 and "--device 3 does not exist: this machine has 1 GPU(s)" in err, err


def test_a_program_larger_than_the_gpu_memory_is_refused(small_artifact):
    """A program whose activations, weights, inputs and cuBLASLt workspace
    exceed the GPU's free memory fails before allocating anything, naming
    what it needs and what the GPU has; with just enough memory it runs."""
    artifact, tmp = small_artifact
    np.savez(tmp / "in.npz", ids=np.zeros((2, 16), np.int64))
    args = (artifact, "--weights", tmp, "--inputs", tmp / "in.npz", "--output", tmp / "out.npz")
    rc, err = run_standin(*args, env={"SHARDFLOW_STANDIN_MEMORY": "4096"})
    assert rc == 1, err
    m = re.search(r"the program needs ([\d.]+) GiB \(activations (\d+) bytes, weights (\d+) "
                  r"bytes, inputs (\d+) bytes, cuBLASLt workspace 0.03 GiB\) of GPU memory on "
                  r"rank 0, and Shardflow CUDA stand-in \(host emulation, sm_90\) has 4096 "
                  r"bytes free of 4096 bytes: more ranks", err)
    assert m, err
    needed = sum(int(m.group(i)) for i in (2, 3, 4)) + (32 << 20)
    assert m.group(1) == f"{needed / 2 ** 30:.2f}", err
    # With that much and some to spare (the stand-in's allocator rounds each
    # allocation to 256 bytes; the NCCL health check and the GEMMs' pointer
    # arrays take a little more) it runs.
    rc, err = run_standin(*args, env={"SHARDFLOW_STANDIN_MEMORY": str(needed + 64 * 1024)})
    assert rc == 0, err


def test_kernel_check_gpu_path_runs_on_the_standin():
    # tools/cuda-kernel-check without --emulate drives the kernels through
    # the driver API (module from the fatbin, shared-memory opt-in, launch
    # parameters, copies back), as it will on a GPU: a subset here.
    tool = toolchain.tool("cuda-kernel-check")
    lib = standin_dir()
    env = {**os.environ, "LD_LIBRARY_PATH": str(lib)}
    for subset, cases in (("pad", 45), ("Sq170", 2)):
        out = subprocess.run([str(tool), "--filter", subset], capture_output=True, text=True,
                             timeout=300, env=env)
        assert out.returncode == 0, out.stdout[-2000:] + out.stderr
        assert "device: Shardflow CUDA stand-in" in out.stdout, out.stdout
        assert f"{cases} passed, 0 failed" in out.stdout, out.stdout[-2000:]


def test_batches_without_a_strided_algorithm_run_one_gemm_each(smoke_cases, tmp_path):
    # A batch that repeats one matrix (stride 0) may have no cuBLASLt
    # algorithm; the executor then runs one GEMM per batch.
    for case in smoke_cases:
        if case.stem != "matmul_repeat_a":
            continue
        trace = tmp_path / "trace.txt"
        rc, err = run_standin(case, "--inputs", case.with_name(case.stem + ".inputs.npz"),
                              "--output", tmp_path / "out.npz",
                              env={"SHARDFLOW_STANDIN_CUBLASLT": "no-zero-stride",
                                   "SHARDFLOW_STANDIN_TRACE": str(trace)})
        assert rc == 0, err
        gemms = [line for line in trace.read_text().splitlines() if "gemm" in line]
        assert len(gemms) == 3 and not any("batch=" in g for g in gemms), gemms
        with np.load(case.with_name(case.stem + ".expected.npz")) as want, \
                np.load(tmp_path / "out.npz") as got:
            np.testing.assert_allclose(got["y"], want["y"], rtol=1e-4, atol=1e-4)
        return
    pytest.fail("no matmul_repeat_a smoke case")


def bench_on_the_standins(monkeypatch, script: str):
    """bench/SCRIPT as a module, with shard-run's runs going to the
    stand-ins (generated kernels from their PTX)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(Path(script).stem,
                                                  toolchain.ROOT / "bench" / script)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    monkeypatch.setenv("LD_LIBRARY_PATH",
                       f"{standin_dir()}:{os.environ.get('LD_LIBRARY_PATH', '')}")
    monkeypatch.setenv("SHARDFLOW_STANDIN_SM", "86")
    return bench


def test_llama_bench_runs_on_the_standins(tmp_path, monkeypatch, capsys):
    """bench/llama_group_gemms_bench.py, which tools/gpu-session.sh
    bench-llama runs on the lent GPU machine, end to end on the stand-ins
    in a 1-layer, 64-wide form: both steps succeed, and every comparison
    it prints (sibling GEMMs grouped, sibling fusion; the small shape also
    under --cuda-graph) finds identical logits. Its times mean nothing here."""
    bench = bench_on_the_standins(monkeypatch, "llama_group_gemms_bench.py")
    monkeypatch.setattr(bench, "CONFIG", dict(layers=1, hidden=64, heads=4, kv_heads=4,
                                              intermediate=128, vocab=256, max_pos=64))
    monkeypatch.setattr(bench, "SHAPES", {"large": (2, 16), "small": (1, 8)})
    out = tmp_path / "llama"
    assert bench.main(["prepare", "--out", str(out),
                       "--shard-opt", str(toolchain.tool("shard-opt"))]) == 0
    assert bench.main(["run", "--dir", str(out), "--shard-run", str(toolchain.tool("shard-run")),
                       "--repeat", "1"]) == 0
    printed = capsys.readouterr().out
    grouped = re.findall(r"^llama \w+ .*--no-group-gemms [0-9.]+ ms, grouped [0-9.]+ ms.*"
                         r"pointer-array.*logits identical\)$", printed, re.M)
    siblings = re.findall(r"^llama \w+ .*sibling fusion [0-9.]+ ms.*\(logits identical\)$",
                          printed, re.M)
    assert len(grouped) == 3 and len(siblings) == 3, printed


class _OnnxruntimeTorchSide:
    """Stands in for the GPT-2 bench's PyTorch side (no PyTorch here): the
    reference logits from onnxruntime on the same graph and weights, and a
    fixed time per forward. It counts the compiled forwards asked for."""

    compiled = []

    def __init__(self, model_path, cfg):
        import onnxruntime as ort

        self.session = ort.InferenceSession(str(model_path), providers=["CPUExecutionProvider"])

    def reference(self, ids):
        return self.session.run(["logits"], {"input_ids": ids})[0]

    bf16_logits = reference

    def time(self, ids, compiled, half, repeat):
        if compiled:
            self.compiled.append((half, ids.shape))
        return 1e-3

    def sdpa(self, shape, repeat):
        assert shape == (2, 2, 16, 64)
        return 1e-4


def test_gpt2_bench_runs_on_the_standins(tmp_path, monkeypatch, capsys):
    """bench/gpt2_gpu_bench.py, the GPU session's measurement of the
    issue's goal, end to end on the stand-ins in a 1-layer, 128-wide form
    (head size 64, so the two-tile attention kernel applies), with
    onnxruntime standing in for PyTorch: every part runs, in order, each
    of our artifacts' logits agree with the reference, and every
    torch.compile form is compiled for its own shape. A part past the time
    budget is skipped and said so; an unknown part is refused by name."""
    bench = bench_on_the_standins(monkeypatch, "gpt2_gpu_bench.py")
    monkeypatch.setattr(bench, "CONFIG", dict(layers=1, hidden=128, heads=2, seq=16, batch=2,
                                              vocab=96, max_pos=32))
    monkeypatch.setattr(bench, "SMALL", (1, 8))
    monkeypatch.setattr(bench, "TorchSide", _OnnxruntimeTorchSide)
    out = tmp_path / "gpt2s"
    assert bench.main(["prepare", "--out", str(out),
                       "--shard-opt", str(toolchain.tool("shard-opt"))]) == 0
    # `run` takes the small shape from what prepare wrote, not from its own
    # module (the GPU machine runs it in another process).
    monkeypatch.setattr(bench, "SMALL", None)
    run = ["run", "--dir", str(out), "--shard-run", str(toolchain.tool("shard-run")),
           "--repeat", "1"]
    _OnnxruntimeTorchSide.compiled = []
    status = bench.main(run)
    printed = capsys.readouterr().out
    assert status == 0, printed
    done = re.findall(r"^part (\w+): done in [0-9.]+ s$", printed, re.M)
    assert done == list(bench.PARTS), printed
    # The device as shard-run names it, before PyTorch is loaded.
    assert re.search(r"^device: Shardflow CUDA stand-in .*; date: ", printed, re.M), printed
    assert re.search(r"^ratio ours/eager [0-9.]+ ", printed, re.M), printed
    assert re.search(r"^ratio ours/compile [0-9.]+ ", printed, re.M), printed
    errors = [float(e) for e in re.findall(r"(?:logits error|error vs torch f32: ours) "
                                           r"([0-9.e+-]+)", printed)]
    # core, mma2, autotune twice (timed, replayed), graph, 5 ablations,
    # small twice, half.
    assert len(errors) == 13 and max(errors) < 2e-2, printed
    assert re.search(r"^shardflow with --gemm-autotune-file, replayed +[0-9.]+ ms", printed,
                     re.M), printed
    assert "profile: " in printed and "matmul" in printed
    # The profile's attention time (one layer) against the stand-in SDPA's.
    assert re.search(r"^attention per layer: ours [0-9.]+ ms, torch SDPA 0.100 ms", printed,
                     re.M), printed
    assert _OnnxruntimeTorchSide.compiled == [(False, (2, 16)), (False, (1, 8)),
                                              (True, (2, 16))], _OnnxruntimeTorchSide.compiled
    # Past the budget: skipped, not run.
    assert bench.main(run + ["--parts", "profile,graph", "--budget", "1e-9"]) == 0
    printed = capsys.readouterr().out
    assert re.findall(r"^part (\w+): skipped", printed, re.M) == ["profile", "graph"], printed
    with pytest.raises(SystemExit, match="unknown part.*speed"):
        bench.main(run + ["--parts", "core,speed"])
