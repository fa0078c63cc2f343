"""shard-run refuses bad input with a clear message and exit code 1.

Every case names what is wrong (the tensor, the file, the flag); none may
crash (a negative return code) or hang.
"""
import os
import shutil
import subprocess

import numpy as np
import pytest

from shardflow import models, toolchain


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("run-errors")
    path = tmp / "mlp.onnx"
    models.save(models.mlp(), path, external_data=True)
    artifact = toolchain.compile_model(path, tmp / "mlp.shard")
    x = np.zeros((2, 16), np.float32)
    np.save(tmp / "x.npy", x)
    return tmp, artifact


def shard_run(*args, env=None):
    out = subprocess.run([str(toolchain.tool("shard-run")), *map(str, args)],
                         capture_output=True, text=True, timeout=60,
                         env={**os.environ, **(env or {})})
    return out.returncode, out.stderr


def expect_error(phrase, *args, env=None):
    rc, err = shard_run(*args, env=env)
    assert rc == 1, (rc, err)
    assert "shard-run: error:" in err and phrase in err, err


def test_missing_input(compiled):
    tmp, artifact = compiled
    expect_error("input 'x' (f32[2,16]) was not given", artifact)


def test_wrong_shape(compiled):
    tmp, artifact = compiled
    np.save(tmp / "bad.npy", np.zeros((3, 16), np.float32))
    expect_error("input 'x' is f32[3,16] but the model was compiled for f32[2,16]",
                 artifact, "--input", f"x={tmp / 'bad.npy'}")


def test_wrong_dtype(compiled):
    tmp, artifact = compiled
    np.save(tmp / "bad64.npy", np.zeros((2, 16), np.float64))
    expect_error("input 'x' is f64[2,16]", artifact, "--input", f"x={tmp / 'bad64.npy'}")


def test_unknown_input(compiled):
    tmp, artifact = compiled
    expect_error("'y' is not an input of this model", artifact,
                 "--input", f"x={tmp / 'x.npy'}", "--input", f"y={tmp / 'x.npy'}")


def test_not_an_npy(compiled):
    tmp, artifact = compiled
    (tmp / "junk.npy").write_bytes(b"hello")
    expect_error("not a .npy file", artifact, "--input", f"x={tmp / 'junk.npy'}")


def test_version_mismatch(compiled):
    tmp, artifact = compiled
    text = artifact.read_text().replace("shardflow-artifact 4", "shardflow-artifact 99", 1)
    (tmp / "v99.shard").write_text(text)
    expect_error("artifact format version 99 is not supported", tmp / "v99.shard")


def test_target_mismatch(compiled):
    # A target this shard-run has no executor for (a CUDA artifact would run
    # on a machine with a GPU).
    tmp, artifact = compiled
    (tmp / "rocm.shard").write_text(artifact.read_text().replace("target cpu", "target rocm", 1))
    expect_error("rocm", tmp / "rocm.shard", "--input", f"x={tmp / 'x.npy'}")


def test_truncated_artifact(compiled):
    tmp, artifact = compiled
    text = artifact.read_text()
    (tmp / "cut.shard").write_text(text[: len(text) // 2])
    rc, err = shard_run(tmp / "cut.shard")
    assert rc == 1 and "shard-run: error:" in err, err


def test_launcher_and_mpi_disagree(compiled):
    # The launcher's environment says 4 ranks, but MPI (started without that
    # launcher) sees 1: typically a shard-run built against another MPI.
    # (World-size mismatches under a real mpirun are in test_mpi.py.)
    tmp, artifact = compiled
    expect_error("the launcher started 4 ranks but MPI reports 1", artifact,
                 env={"OMPI_COMM_WORLD_SIZE": "4"})


def test_missing_weight_file(compiled):
    tmp, artifact = compiled
    elsewhere = tmp / "elsewhere"
    elsewhere.mkdir(exist_ok=True)
    expect_error("cannot open weight file", artifact, "--weights", elsewhere,
                 "--input", f"x={tmp / 'x.npy'}")


def test_short_weight_file(compiled):
    tmp, artifact = compiled
    short = tmp / "short"
    short.mkdir(exist_ok=True)
    data = (tmp / "mlp.data").read_bytes()
    (short / "mlp.data").write_bytes(data[: len(data) // 2])
    expect_error("wrong or modified weight file", artifact, "--weights", short / "mlp.onnx",
                 "--input", f"x={tmp / 'x.npy'}")


def test_modified_weight_fails_its_checksum(compiled):
    tmp, artifact = compiled
    changed = tmp / "changed"
    changed.mkdir(exist_ok=True)
    data = bytearray((tmp / "mlp.data").read_bytes())
    data[len(data) // 2] ^= 0x01  # one flipped bit in the middle of some weight
    (changed / "mlp.data").write_bytes(bytes(data))
    args = [artifact, "--weights", changed / "mlp.onnx", "--input", f"x={tmp / 'x.npy'}"]
    rc, err = shard_run(*args)
    assert rc == 1, err
    assert "shard-run: error: weight '" in err and "has checksum" in err, err
    assert "the weight file changed since compilation" in err, err
    # Checked on loader threads, the failure is still reported, once.
    rc, err = shard_run(*args, "--load-threads", "4")
    assert rc == 1 and err.count("has checksum") == 1, err
    # The check can be skipped on purpose.
    rc, err = shard_run(*args, "--no-verify-weights")
    assert rc == 0, err


def test_artifact_records_a_checksum_per_weight(compiled):
    tmp, artifact = compiled
    weights = [line for line in artifact.read_text().splitlines() if " weight " in line]
    assert weights and all(" crc32c=" in line for line in weights), weights


def test_bad_flags(compiled):
    tmp, artifact = compiled
    expect_error("unknown option '--frobnicate'", artifact, "--frobnicate")
    expect_error("--threads must be a positive integer", artifact, "--threads", "0")
    expect_error("no artifact given", "--threads", "2")
    for bad in ("0", "two", "2x", "5000"):
        expect_error(f"--load-threads must be a number of threads from 1 to 1024, got '{bad}'",
                     artifact, "--load-threads", bad)


def test_load_threads_load_the_same_weights(tmp_path):
    # Weights converted to bf16 at load (--dtype) on one thread and on
    # several: the outputs must be the same bits.
    path = tmp_path / "gpt2.onnx"
    model = models.gpt2(layers=2, hidden=64, heads=4, seq=8, batch=2, vocab=128)
    models.save(model, path, external_data=True)
    artifact = toolchain.compile_model(path, tmp_path / "gpt2.shard", extra=["--dtype", "bf16"])
    assert "source-dtype=f32" in artifact.read_text()
    ids = np.random.default_rng(0).integers(0, 128, (2, 8), dtype=np.int64)
    one = toolchain.run_artifact(artifact, {"input_ids": ids}, extra=["--load-threads", "1"])
    for threads in ("3", "16"):
        many = toolchain.run_artifact(artifact, {"input_ids": ids},
                                     extra=["--load-threads", threads])
        assert one.keys() == many.keys()
        for name in one:
            assert np.array_equal(one[name], many[name], equal_nan=True), (threads, name)


def test_weights_from_a_renamed_model(tmp_path):
    """--weights FILE.onnx reads the weights stored inside the model from
    that file, whatever its name: a compiled model renamed and moved (the
    original gone) still runs, with the same outputs."""
    path = tmp_path / "mlp.onnx"
    models.save(models.mlp(), path)
    artifact = toolchain.compile_model(path, tmp_path / "mlp.shard")
    assert "storage=embedded file=mlp.onnx" in artifact.read_text()
    np.save(tmp_path / "x.npy", np.random.default_rng(0).standard_normal((2, 16), np.float32))
    rc, err = shard_run(artifact, "--input", f"x={tmp_path / 'x.npy'}", "--output",
                        tmp_path / "before.npz")
    assert rc == 0, err
    moved = tmp_path / "elsewhere"
    moved.mkdir()
    shutil.move(path, moved / "renamed.onnx")
    expect_error("cannot open weight file", artifact, "--input", f"x={tmp_path / 'x.npy'}")
    rc, err = shard_run(artifact, "--weights", moved / "renamed.onnx", "--input",
                        f"x={tmp_path / 'x.npy'}", "--output", tmp_path / "after.npz")
    assert rc == 0, err
    with np.load(tmp_path / "before.npz") as a, np.load(tmp_path / "after.npz") as b:
        assert a.files == b.files
        for k in a.files:
            np.testing.assert_array_equal(a[k], b[k])
