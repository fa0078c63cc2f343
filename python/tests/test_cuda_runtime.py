"""shard-run's CUDA side, as far as a machine without a GPU can check it.

shard-run links no CUDA library (the driver, cuBLASLt and NCCL are loaded
at run time), so the same binary runs CPU artifacts anywhere and refuses a
`target cuda` artifact on a machine without the driver with a clear message
and exit code 1. Mixed-precision weights (`source-dtype`: the file holds
f32, the buffer is f16 or bf16, or the reverse) are converted at load by
the CPU executor too; they are checked here against numpy references.
The GPU itself is exercised by tools/gpu-check.sh on a GPU machine.
"""
import ctypes
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

from shardflow import models, toolchain

CUDA_LIBRARIES = ("libcuda", "libcudart", "libcublas", "libcublasLt", "libnccl")


def shard_run(*args, env=None, timeout=60):
    out = subprocess.run([str(toolchain.tool("shard-run")), *map(str, args)],
                         capture_output=True, text=True, timeout=timeout,
                         env={**os.environ, **(env or {})})
    return out.returncode, out.stdout, out.stderr


def have_driver() -> bool:
    try:
        ctypes.CDLL("libcuda.so.1")
        return True
    except OSError:
        return False


def shard_run_binaries():
    """The suite's shard-run and, when built, the runtime-only ones."""
    build = toolchain.build_dir()
    candidates = [build / "bin" / "shard-run", Path(f"{build}-runtime-only") / "bin" / "shard-run"]
    extra = os.environ.get("SHARDFLOW_RUNTIME_ONLY_BUILD_DIR")
    if extra:
        candidates.append(Path(extra) / "bin" / "shard-run")
    return [c for c in candidates if c.exists()]


def test_shard_run_links_no_cuda_library():
    binaries = shard_run_binaries()
    assert binaries, "no shard-run built"
    for binary in binaries:
        needed = subprocess.run(["ldd", str(binary)], capture_output=True, text=True,
                                check=True).stdout
        for line in needed.splitlines():
            name = line.strip().split(" ")[0]
            assert not name.startswith(CUDA_LIBRARIES), f"{binary} links {name}:\n{needed}"


def crc32c(data: bytes) -> int:
    """CRC-32C (Castagnoli), bitwise: small inputs only."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 & -(crc & 1))
    return crc ^ 0xFFFFFFFF


def test_crc32c_reference():
    assert crc32c(b"123456789") == 0xE3069283


# A small CUDA artifact as shard-opt --target cuda would write it: a
# compiler-generated module (its bytes need not be valid here: loading the
# driver fails first), a launch, a cuBLASLt matmul and a collective.
CUDA_ARTIFACT = """shardflow-artifact 4
target cuda
world-size 1
model-dir .
arena 256
buffer 0 input f32 2x4 name=x
buffer 1 constant f32 4x2 data={weights}
buffer 2 arena f32 2x2 offset=0
buffer 3 arena f32 2x2 offset=64
module fused arch=sm_90 format=cubin data=AAECAw==
module fused arch=compute_80 format=ptx data=Ly8gcHR4Cg==
kernel matmul in=0,1 out=2
kernel launch in=2 out=3 module=s:fused function=s:relu_0 grid=is:1,1,1 block=is:4,1,1 shared=i:0
collective all_reduce in=3 out=3 groups=is:0 group_size=i:1 reduction=s:sum
output y 3
end
"""


@pytest.fixture(scope="module")
def cuda_artifact(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("cuda-artifact")
    weights = np.arange(8, dtype=np.float32).tobytes().hex()
    path = tmp / "tiny.shard"
    path.write_text(CUDA_ARTIFACT.format(weights=weights))
    np.save(tmp / "x.npy", np.ones((2, 4), np.float32))
    return tmp, path


def expect_cuda_refused(err):
    assert "shard-run: error: this artifact targets 'cuda', but " in err, err
    if "built without CUDA support" in err:
        return  # a shard-run built with -DSHARDFLOW_ENABLE_CUDA=OFF
    assert "libcuda.so.1 could not be loaded (" in err, err
    assert "is the NVIDIA driver installed?" in err, err


@pytest.mark.skipif(have_driver(), reason="this machine has an NVIDIA driver")
def test_cuda_artifact_without_driver_fails_clearly(cuda_artifact):
    tmp, path = cuda_artifact
    rc, _, err = shard_run(path, "--input", f"x={tmp / 'x.npy'}")
    assert rc == 1, (rc, err)  # an error, not a crash (negative) or a hang
    expect_cuda_refused(err)
    # The CUDA flags are accepted; the answer is the same.
    rc, _, err = shard_run(path, "--input", f"x={tmp / 'x.npy'}", "--device", "0",
                           "--allow-tf32", "--collective-timeout", "5")
    assert rc == 1, (rc, err)
    expect_cuda_refused(err)


@pytest.mark.skipif(have_driver(), reason="this machine has an NVIDIA driver")
def test_every_runtime_only_build_refuses_cuda_cleanly(cuda_artifact):
    tmp, path = cuda_artifact
    for binary in shard_run_binaries():
        out = subprocess.run([str(binary), str(path), "--input", f"x={tmp / 'x.npy'}"],
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 1, (binary, out.returncode, out.stderr)
        expect_cuda_refused(out.stderr)


def test_cuda_flags_are_checked(cuda_artifact):
    tmp, path = cuda_artifact
    for args, phrase in [(["--device", "-1"], "--device must be a GPU number"),
                         (["--device", "one"], "--device must be a GPU number"),
                         (["--collective-timeout", "0"], "--collective-timeout must be a positive"),
                         (["--collective-timeout"], "--collective-timeout needs a value"),
                         (["--pinned-memory", "sometimes"],
                          "--pinned-memory takes auto, always or never, got 'sometimes'")]:
        rc, _, err = shard_run(path, *args)
        assert rc == 1 and phrase in err, (args, err)


def test_help_documents_the_cuda_flags():
    rc, out, _ = shard_run("--help")
    assert rc == 0
    for phrase in ("--device N", "--allow-tf32", "--collective-timeout SECONDS", "--load-threads N",
                   "--cuda-graph", "--no-cuda-graph", "--pinned-memory auto|always|never",
                   "--group-gemms", "--no-group-gemms", "--gemm-autotune",
                   "--gemm-autotune-file FILE",
                   "`target cuda` one needs an NVIDIA GPU", "libcuda.so.1", "default 600"):
        assert phrase in out, phrase


def test_cpu_artifact_still_runs(tmp_path):
    # The same binary, with no driver anywhere, runs a CPU artifact.
    model = tmp_path / "mlp.onnx"
    models.save(models.mlp(), model, external_data=True)
    artifact = toolchain.compile_model(model, tmp_path / "mlp.shard")
    x = np.random.default_rng(0).standard_normal((2, 16)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    rc, _, err = shard_run(artifact, "--input", f"x={tmp_path / 'x.npy'}",
                           "--output", tmp_path / "out.npz")
    assert rc == 0, err
    with np.load(tmp_path / "out.npz") as out:
        assert all(np.isfinite(out[k]).all() for k in out.files)


#
# Mixed-precision weights on the CPU executor.
#

def bf16_round(x: np.ndarray) -> np.ndarray:
    """f32 -> bf16 -> f32 with round to nearest even (NaN stays NaN)."""
    u = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16
    out = r.astype(np.uint32).view(np.float32).copy()
    out[np.isnan(x)] = np.nan
    return out


def write_weight_artifact(tmp: Path, lines: list[str], arena: int) -> Path:
    text = "\n".join(["shardflow-artifact 4", "target cpu", "world-size 1",
                      f"model-dir {tmp}", f"arena {arena}", *lines, "end", ""])
    path = tmp / "mixed.shard"
    path.write_text(text)
    return path


def run_cpu(path: Path, tmp: Path, *inputs: str) -> dict:
    rc, _, err = shard_run(path, *inputs, "--output", tmp / "out.npz")
    assert rc == 0, err
    with np.load(tmp / "out.npz") as out:
        return {k: out[k] for k in out.files}


def special_f32() -> np.ndarray:
    """Values that exercise rounding: ties both ways, overflow, subnormals."""
    bits = np.array([0x3F808000, 0x3F818000, 0x3F808001, 0x3F807FFF, 0x7F7FFFFF,
                     0x00000001, 0x00010000, 0x80000000, 0x7F800000, 0xFF800000,
                     0x477FF000, 0x477FEFFF, 0x33000000, 0x33400000, 0x387FE000,
                     0x38800000], dtype=np.uint32)
    rng = np.random.default_rng(1)
    return np.concatenate([bits.view(np.float32),
                           rng.standard_normal(48).astype(np.float32) * 100])


def compile_graph(tmp: Path, graph: str, name: str = "m") -> Path:
    """An ONNX-text graph (opset 20) saved as NAME.onnx and compiled for the CPU."""
    import onnx
    from onnx import parser

    path = tmp / f"{name}.onnx"
    onnx.save(parser.parse_model('<ir_version: 8, opset_import: ["" : 20]>\n' + graph), path)
    return toolchain.compile_model(path, tmp / f"{name}.shard")


def test_bf16_outputs_are_written_as_float32(tmp_path):
    """numpy has no bfloat16: shard-run widens bf16 outputs to float32 in
    .npy and .npz files (exact) and says so; .pb keeps bfloat16. The
    reference is ml_dtypes' float32 -> bfloat16 rounding."""
    import ml_dtypes
    import onnx
    from onnx import numpy_helper

    artifact = compile_graph(tmp_path, "g (float[64] x) => (bfloat16[64] y, float[64] z) {"
                             " y = Cast <to = 16> (x) z = Neg(x) }")
    x = special_f32()
    np.save(tmp_path / "x.npy", x)
    want = x.astype(ml_dtypes.bfloat16).astype(np.float32)
    rc, _, err = shard_run(artifact, "--input", f"x={tmp_path / 'x.npy'}",
                           "--output", tmp_path / "out.npz")
    assert rc == 0, err
    assert "output 'y' is bf16, which numpy has no type for: written as float32" in err
    assert "'z'" not in err
    with np.load(tmp_path / "out.npz") as out:
        assert out["y"].dtype == np.float32 and out["z"].dtype == np.float32
        np.testing.assert_array_equal(out["y"], want)
        np.testing.assert_array_equal(out["z"], -x)
    # One output: .npy widens too, .pb keeps the type.
    artifact = compile_graph(tmp_path, "g (float[64] x) => (bfloat16[64] y) {"
                             " y = Cast <to = 16> (x) }", "single")
    for name in ("y.npy", "y.pb"):
        rc, _, err = shard_run(artifact, "--input", f"x={tmp_path / 'x.npy'}",
                               "--output", tmp_path / name)
        assert rc == 0, err
    np.testing.assert_array_equal(np.load(tmp_path / "y.npy"), want)
    proto = onnx.load_tensor(str(tmp_path / "y.pb"))
    assert proto.data_type == onnx.TensorProto.BFLOAT16
    np.testing.assert_array_equal(numpy_helper.to_array(proto).astype(np.float32), want)


def test_bf16_inputs_take_float32(tmp_path):
    """A bf16 graph input takes float32 data from .npy and .npz files,
    rounded to nearest even with a note (numpy has no bfloat16), as well as
    bfloat16 from a .pb; other types are still refused. The reference is
    ml_dtypes' rounding, read back exactly through a Cast to float."""
    import ml_dtypes
    import onnx
    from onnx import helper

    artifact = compile_graph(tmp_path, "g (bfloat16[64] x) => (float[64] y) {"
                             " y = Cast <to = 1> (x) }")
    x = special_f32()
    want = x.astype(ml_dtypes.bfloat16).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    np.savez(tmp_path / "x.npz", x=x)
    bits = x.astype(ml_dtypes.bfloat16).view(np.uint16)
    proto = helper.make_tensor("x", onnx.TensorProto.BFLOAT16, [64], bits.tobytes(), raw=True)
    (tmp_path / "x.pb").write_bytes(proto.SerializeToString())
    for given in (["--input", f"x={tmp_path / 'x.npy'}"], ["--inputs", tmp_path / "x.npz"],
                  ["--input", f"x={tmp_path / 'x.pb'}"]):
        rc, _, err = shard_run(artifact, *given, "--output", tmp_path / "y.npy")
        assert rc == 0, err
        note = "input 'x' is bf16, which numpy has no type for: its float32 values were rounded"
        assert (note in err) == (not str(given[1]).endswith(".pb")), err
        np.testing.assert_array_equal(np.load(tmp_path / "y.npy"), want)
    np.save(tmp_path / "x64.npy", x.astype(np.float64))
    rc, _, err = shard_run(artifact, "--input", f"x={tmp_path / 'x64.npy'}")
    assert rc != 0 and "input 'x' is f64[64] but the model was compiled for bf16[64]" in err, err


def test_bf16_weight_from_f32_file(tmp_path):
    w = special_f32().reshape(8, 8)
    (tmp_path / "w.bin").write_bytes(b"\0" * 16 + w.tobytes())
    crc = crc32c(w.tobytes())
    path = write_weight_artifact(tmp_path, [
        f"buffer 0 weight bf16 8x8 name=w storage=external file=w.bin offset=16 size=256 "
        f"source-dtype=f32 crc32c={crc:08x}",
        "buffer 1 arena f32 8x8 offset=0",
        "kernel cast in=0 out=1",
        "output w 1"], arena=256)
    got = run_cpu(path, tmp_path)["w"]
    want = bf16_round(w)
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


def test_f16_weight_from_f32_file_in_a_matmul(tmp_path):
    rng = np.random.default_rng(2)
    # Ties around 1.0 and random values (no overflow: the products stay
    # far from f16's range).
    w = np.concatenate([special_f32()[:4], rng.standard_normal(16).astype(np.float32)])
    w = w.reshape(4, 5)
    x = rng.standard_normal((3, 4)).astype(np.float16)
    (tmp_path / "w.bin").write_bytes(w.tobytes())
    np.save(tmp_path / "x.npy", x)
    path = write_weight_artifact(tmp_path, [
        "buffer 0 input f16 3x4 name=x",
        f"buffer 1 weight f16 4x5 name=w storage=external file=w.bin offset=0 size=80 "
        f"source-dtype=f32 crc32c={crc32c(w.tobytes()):08x}",
        "buffer 2 arena f16 3x5 offset=0",
        "buffer 3 arena f32 4x5 offset=64",
        "kernel matmul in=0,1 out=2",
        "kernel cast in=1 out=3",
        "output y 2",
        "output w 3"], arena=192)
    out = run_cpu(path, tmp_path, "--input", f"x={tmp_path / 'x.npy'}")
    # numpy's f32 -> f16 rounds to nearest even, with overflow to inf.
    with np.errstate(over="ignore"):
        w16 = w.astype(np.float16)
    np.testing.assert_array_equal(out["w"], w16.astype(np.float32))
    want = (x.astype(np.float64) @ w16.astype(np.float64)).astype(np.float16)
    got = out["y"]
    assert got.dtype == np.float16
    # One f16 rounding of the result apart (plus the kernel's f32 sums).
    np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32),
                               rtol=2e-3, atol=2e-3)


def test_f32_weight_from_f16_file(tmp_path):
    # The reverse (f16 in the file, f32 buffer) is exact.
    w = np.random.default_rng(3).standard_normal((6, 2)).astype(np.float16)
    (tmp_path / "w.bin").write_bytes(w.tobytes())
    path = write_weight_artifact(tmp_path, [
        f"buffer 0 weight f32 6x2 name=w storage=external file=w.bin offset=0 size=24 "
        f"source-dtype=f16 crc32c={crc32c(w.tobytes()):08x}",
        "buffer 1 arena f32 6x2 offset=0",
        "kernel cast in=0 out=1",
        "output w 1"], arena=64)
    np.testing.assert_array_equal(run_cpu(path, tmp_path)["w"], w.astype(np.float32))


def test_sliced_mixed_precision_weight(tmp_path):
    # A column slice (strided in the file) is gathered, checked against the
    # checksum of its file bytes, then converted.
    whole = np.random.default_rng(4).standard_normal((4, 6)).astype(np.float32)
    (tmp_path / "w.bin").write_bytes(whole.tobytes())
    part = np.ascontiguousarray(whole[:, 2:5])
    path = write_weight_artifact(tmp_path, [
        f"buffer 0 weight bf16 4x3 name=w storage=external file=w.bin offset=0 size=48 "
        f"source-dtype=f32 global=4x6 starts=0,2 crc32c={crc32c(part.tobytes()):08x}",
        "buffer 1 arena f32 4x3 offset=0",
        "kernel cast in=0 out=1",
        "output w 1"], arena=64)
    np.testing.assert_array_equal(run_cpu(path, tmp_path)["w"], bf16_round(part))


def test_permuted_sliced_weight_in_a_transposed_matmul(tmp_path):
    # The layout cuda-transpose-misaligned-gemm-weights gives a GEMM weight
    # with misaligned rows: a column slice (5..9) of a [6, 10] f32 weight,
    # checked against the checksum of its file bytes (stored order),
    # converted to bf16, then loaded transposed as [5, 6] and read by a
    # matmul with trans_b.
    rng = np.random.default_rng(5)
    whole = rng.standard_normal((6, 10)).astype(np.float32)
    (tmp_path / "w.bin").write_bytes(whole.tobytes())
    part = np.ascontiguousarray(whole[:, 5:])
    x = rng.standard_normal((3, 6)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    path = write_weight_artifact(tmp_path, [
        "buffer 0 input f32 3x6 name=x",
        f"buffer 1 weight bf16 5x6 name=w storage=external file=w.bin offset=0 size=120 "
        f"source-dtype=f32 permutation=1,0 global=6x10 starts=0,5 "
        f"crc32c={crc32c(part.tobytes()):08x}",
        "buffer 2 arena f32 5x6 offset=0", "buffer 3 arena f32 3x5 offset=128",
        "kernel cast in=1 out=2", "kernel matmul in=0,2 out=3 trans_b=i:1",
        "output w 2", "output y 3"], arena=256)
    out = run_cpu(path, tmp_path, "--input", f"x={tmp_path / 'x.npy'}")
    np.testing.assert_array_equal(out["w"], bf16_round(part).T)
    want = x.astype(np.float64) @ bf16_round(part).astype(np.float64)
    np.testing.assert_allclose(out["y"], want, rtol=1e-5, atol=1e-5)


def test_permuted_three_dimensional_weight(tmp_path):
    # Any permutation (the compiler writes [1, 0]; the format takes more):
    # a [3, 4, 5] weight held as [5, 3, 4], crossing the loader's 32 x 32
    # tiles in its last dimensions.
    w = np.arange(3 * 40 * 37, dtype=np.float32).reshape(3, 40, 37)
    (tmp_path / "w.bin").write_bytes(w.tobytes())
    path = write_weight_artifact(tmp_path, [
        f"buffer 0 weight f32 37x3x40 name=w storage=external file=w.bin offset=0 "
        f"size={w.nbytes} permutation=2,0,1 crc32c={crc32c(w.tobytes()):08x}",
        "buffer 1 arena f64 37x3x40 offset=0",
        "kernel cast in=0 out=1",
        "output w 1"], arena=w.size * 8)
    np.testing.assert_array_equal(run_cpu(path, tmp_path)["w"], np.transpose(w, (2, 0, 1)))


@pytest.mark.parametrize("perm,message", [("1,1", "permutation 1,1 is not a permutation"),
                                          ("0,1,2", "not a permutation of its 2 dimensions")])
def test_bad_weight_permutation_is_refused(perm, message, tmp_path):
    (tmp_path / "w.bin").write_bytes(np.ones((2, 3), np.float32).tobytes())
    path = write_weight_artifact(tmp_path, [
        f"buffer 0 weight f32 2x3 name=w storage=external file=w.bin offset=0 size=24 "
        f"permutation={perm}",
        "buffer 1 arena f32 2x3 offset=0",
        "kernel cast in=0 out=1",
        "output w 1"], arena=64)
    rc, _, err = shard_run(path, "--output", tmp_path / "out.npz")
    assert rc == 1 and "weight 'w'" in err and message in err, err


def test_mixed_precision_checksum_covers_the_file_bytes(tmp_path):
    w = np.ones((2, 2), np.float32)
    (tmp_path / "w.bin").write_bytes(w.tobytes())
    converted = np.full((2, 2), 0x3F80, np.uint16).tobytes()  # the bf16 bytes
    path = write_weight_artifact(tmp_path, [
        f"buffer 0 weight bf16 2x2 name=w storage=external file=w.bin offset=0 size=16 "
        f"source-dtype=f32 crc32c={crc32c(converted):08x}",
        "buffer 1 arena f32 2x2 offset=0",
        "kernel cast in=0 out=1",
        "output w 1"], arena=64)
    rc, _, err = shard_run(path, "--output", tmp_path / "out.npz")
    assert rc == 1 and "weight 'w'" in err and "has checksum" in err, err


def test_unsupported_source_dtype_is_refused(tmp_path):
    w = np.ones(4, np.float32)
    (tmp_path / "w.bin").write_bytes(w.tobytes())
    path = write_weight_artifact(tmp_path, [
        "buffer 0 weight i64 4 name=w storage=external file=w.bin offset=0 size=16 "
        "source-dtype=f32",
        "buffer 1 arena i64 4 offset=0",
        "kernel cast in=0 out=1",
        "output w 1"], arena=64)
    rc, _, err = shard_run(path, "--output", tmp_path / "out.npz")
    assert rc == 1, err
    assert "weight 'w' (source-dtype f32): cannot convert f32 to i64" in err, err


#
# The GPU smoke cases (shardflow.cuda_smoke), checked on the CPU executor:
# their references must hold before tools/gpu-check.sh trusts them.
#

def test_gpu_smoke_cases_match_their_references_on_the_cpu(tmp_path):
    from shardflow import cuda_smoke

    cases = cuda_smoke.build(tmp_path / "smoke")
    assert len(cases) >= 10
    for case in cases:
        cpu = case.with_suffix(".cpu.shard")
        cpu.write_text(case.read_text().replace("target cuda", "target cpu", 1))
        inputs = case.with_name(case.stem + ".inputs.npz")
        rc, _, err = shard_run(cpu, "--inputs", inputs, "--output", tmp_path / "out.npz")
        assert rc == 0, (case.name, err)
        with np.load(case.with_name(case.stem + ".expected.npz")) as want, \
                np.load(tmp_path / "out.npz") as got:
            assert sorted(want.files) == sorted(got.files), case.name
            for name in want.files:
                tol = cuda_smoke.TOLERANCE[want[name].dtype]
                np.testing.assert_allclose(got[name].astype(np.float64),
                                           want[name].astype(np.float64), rtol=tol,
                                           atol=tol, err_msg=f"{case.name}: {name}")


def test_cpu_attention_refuses_packed_qkv(tmp_path):
    """`packed_qkv` (query, key and value read in one fused buffer) is what
    cuda-read-attention-inputs-in-place makes for the CUDA attention; an
    artifact that hands it to the CPU kernel is refused by name, not
    computed with the wrong head size."""
    lines = ["buffer 0 input f32 1x2x12 name=qkv",
             "buffer 1 arena f32 1x2x4 offset=0",
             "kernel attention in=0,0,0 out=1 kv_num_heads=i:2 q_num_heads=i:2 "
             "packed_qkv=is:4,4,4",
             "output y 1"]
    path = write_weight_artifact(tmp_path, lines, 128)
    np.save(tmp_path / "qkv.npy", np.ones((1, 2, 12), np.float32))
    rc, _, err = shard_run(path, "--input", f"qkv={tmp_path / 'qkv.npy'}", "--output",
                           tmp_path / "out.npz")
    assert rc == 1, err
    assert "packed_qkv" in err and "CUDA artifact's form" in err, err
    # Without it the same kernel computes (3-D heads of the whole row).
    path.write_text(path.read_text().replace(" packed_qkv=is:4,4,4", "")
                    .replace("1x2x4 offset=0", "1x2x12 offset=0"))
    rc, _, err = shard_run(path, "--input", f"qkv={tmp_path / 'qkv.npy'}", "--output",
                           tmp_path / "out.npz")
    assert rc == 0, err
