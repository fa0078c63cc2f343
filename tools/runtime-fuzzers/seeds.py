"""Seed inputs for the runtime readers' fuzzers (tools/runtime-fuzzers).

usage: seeds.py KIND DIR [--shard-opt PATH]

Writes real files of KIND (artifact, npy, npz, tensorproto, autotune, data) into
DIR: artifacts compiled by shard-opt from the bundled example and small
models.py models (CPU, sharded, bf16 and CUDA targets), arrays written by
numpy and TensorProtos by onnx.numpy_helper, so that the fuzzers start
from what shard-run is really given. tools/runtime-fuzz-smoke.sh calls it
before every run; nothing here is committed as a binary.
"""
from __future__ import annotations

import argparse
import io
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "python"))

# A tiny artifact written by hand: every seed set has one even without a
# compiler (the runtime-only machine of a GPU session).
HAND_WRITTEN_ARTIFACT = """shardflow-artifact 4
target cpu
world-size 2
model-dir .
arena 256
buffer 0 input f32 2x4 name=x
buffer 1 weight f32 4x4 name=w storage=external file=m.data offset=0 size=64 global=8x4 starts=0,0;4,0 crc32c=00000000;ffffffff
buffer 2 arena f32 2x4 offset=0
buffer 3 constant i64 2 data=0100000000000000ff00000000000000
buffer 4 view f32 8 source=2
buffer 5 arena f32 1x4 offset=64
kernel matmul in=0,1 out=2
collective all_reduce in=2 out=2 groups=is:0,1 group_size=i:2 reduction=s:sum
collective local_slice in=2 out=5 starts=is:0,0,1,0
output y 2
end
"""


def artifacts(out: Path, shard_opt: Path | None) -> None:
    (out / "hand-written.shard").write_text(HAND_WRITTEN_ARTIFACT)
    if shard_opt is None or not shard_opt.exists():
        print(f"seeds: no shard-opt ({shard_opt}): the hand-written artifact only",
              file=sys.stderr)
        return
    from shardflow import models

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        small = {
            "mlp": models.mlp(layers=2, hidden=8, in_features=4, classes=3, batch=2),
            "gpt2": models.gpt2(layers=1, hidden=16, heads=2, seq=4, batch=1, vocab=16),
            "llama": models.llama(layers=1, hidden=16, heads=2, kv_heads=1, seq=4, batch=1,
                                  vocab=16),
        }
        # Two layers, two micro-batches: a pipeline of two stages.
        small["gpt2-2l"] = models.gpt2(layers=2, hidden=16, heads=2, seq=4, batch=2, vocab=16)
        for name, model in small.items():
            models.save(model, tmp / f"{name}.onnx", external_data=True)
        example = ROOT / "examples" / "tiny-gpt2" / "model.onnx"
        jobs = {
            "example-cpu": [example, "--input-shape", "input_ids=1,4", "--target", "cpu"],
            "mlp-cpu": [tmp / "mlp.onnx", "--target", "cpu"],
            "mlp-dp2": [tmp / "mlp.onnx", "--target", "cpu", "--mesh", "dp=2"],
            "gpt2-tp2": [tmp / "gpt2.onnx", "--target", "cpu", "--mesh", "tp=2"],
            "gpt2-megatron-sp": [tmp / "gpt2.onnx", "--target", "cpu", "--mesh", "dp=2,tp=2",
                                 "--strategy", "megatron-sp"],
            "llama-bf16": [tmp / "llama.onnx", "--target", "cpu", "--dtype", "bf16"],
            "mlp-cuda": [tmp / "mlp.onnx", "--target", "cuda"],
            "gpt2-cuda-tp2": [tmp / "gpt2.onnx", "--target", "cuda", "--mesh", "tp=2"],
            "gpt2-pp2": [tmp / "gpt2-2l.onnx", "--target", "cpu", "--mesh", "pp=2",
                         "--microbatches", "2", "--pipeline-schedule", "gpipe"],
            "gpt2-pp2-train": [tmp / "gpt2-2l.onnx", "--target", "cpu", "--mesh", "pp=2",
                               "--microbatches", "2", "--pipeline-schedule", "zb-h1",
                               "--train"],
        }
        for name, args in jobs.items():
            cmd = [str(shard_opt), *map(str, args), "-o", str(out / f"{name}.shard")]
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
            if done.returncode != 0:
                print(f"seeds: shard-opt failed for {name}: {done.stderr.strip()[-300:]}",
                      file=sys.stderr)


def arrays() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {
        "f32": rng.standard_normal((2, 3)).astype(np.float32),
        "f16": rng.standard_normal(5).astype(np.float16),
        "f64-scalar": np.array(1.5),
        "i64": np.arange(12, dtype=np.int64).reshape(3, 1, 4),
        "i32": np.array([-1, 2, 3], np.int32),
        "i8": np.array([[-128, 127]], np.int8),
        "u8": np.array([0, 255], np.uint8),
        "u16": np.array([1], np.uint16),
        "u32": np.array([7, 9], np.uint32),
        "u64": np.array([2**63], np.uint64),
        "i16": np.array([-3], np.int16),
        "bool": np.array([True, False, True]),
        "empty": np.zeros((0, 3), np.float32),
    }


def npy(out: Path) -> None:
    for name, a in arrays().items():
        np.save(out / f"{name}.npy", a)
    a = arrays()["f32"]
    for version in [(2, 0), (3, 0)]:
        buf = io.BytesIO()
        np.lib.format.write_array(buf, a, version=version)
        (out / f"v{version[0]}.npy").write_bytes(buf.getvalue())
    np.save(out / "fortran.npy", np.asfortranarray(np.ones((2, 3), np.float32)))
    np.save(out / "big-endian.npy", np.ones(2, ">f4"))


def npz(out: Path) -> None:
    all_arrays = arrays()
    np.savez(out / "all.npz", **all_arrays)
    np.savez(out / "one.npz", x=all_arrays["f32"])
    np.savez(out / "ids.npz", input_ids=np.array([[1, 2, 3, 4]], np.int64))
    np.savez_compressed(out / "compressed.npz", x=all_arrays["i64"])


def tensorproto(out: Path) -> None:
    import onnx
    from onnx import helper, numpy_helper

    for name, a in arrays().items():
        t = numpy_helper.from_array(a, name=name)
        (out / f"raw-{name}.pb").write_bytes(t.SerializeToString())
    typed = {
        "float": helper.make_tensor("f", onnx.TensorProto.FLOAT, [2], [1.0, -2.0]),
        "double": helper.make_tensor("d", onnx.TensorProto.DOUBLE, [1], [3.0]),
        "int64": helper.make_tensor("i", onnx.TensorProto.INT64, [2, 1], [5, -6]),
        "int32": helper.make_tensor("j", onnx.TensorProto.INT32, [3], [1, 2, 3]),
        "uint64": helper.make_tensor("u", onnx.TensorProto.UINT64, [1], [2**63]),
        "bool": helper.make_tensor("b", onnx.TensorProto.BOOL, [2], [True, False]),
        "float16": helper.make_tensor("h", onnx.TensorProto.FLOAT16, [1],
                                      np.array([1.5], np.float16).view(np.uint16)),
        "bfloat16": helper.make_tensor("g", onnx.TensorProto.BFLOAT16, [1], [16256]),
        "string": helper.make_tensor("s", onnx.TensorProto.STRING, [1], [b"x"]),
    }
    for name, t in typed.items():
        (out / f"typed-{name}.pb").write_bytes(t.SerializeToString())


def autotune(out: Path) -> None:
    head = "shardflow-gemm-autotune 1\ngpu NVIDIA H100 80GB HBM3\ncublaslt 130100\n"
    (out / "h100.autotune").write_text(
        head + "gemm f32:1024x768x3072:nt:bias 2 8\ngemm bf16:8x1024x1024:nn 0 5\n")
    (out / "empty.autotune").write_text("shardflow-gemm-autotune 1\n")
    (out / "crlf.autotune").write_text(head.replace("\n", "\r\n") + "gemm k 0 1\r\n")


def data(out: Path) -> None:
    """Batches for DataFuzzer.cpp's step: input_ids and labels [S, 2, 4]
    (labels in [0, 16) or -100), x [S, 2]."""
    rng = np.random.default_rng(0)
    for s in (1, 3):
        ids = rng.integers(0, 16, (s, 2, 4)).astype(np.int64)
        labels = np.roll(ids, -1, axis=-1)
        labels[..., -1] = -100
        np.savez(out / f"batches-{s}.npz", input_ids=ids, labels=labels,
                 x=rng.standard_normal((s, 2)).astype(np.float32))
    np.savez(out / "out-of-range.npz", input_ids=np.zeros((1, 2, 4), np.int64),
             labels=np.full((1, 2, 4), 16, np.int64), x=np.zeros((1, 2), np.float32))
    np.savez(out / "missing.npz", input_ids=np.zeros((1, 2, 4), np.int64))


WRITERS = {"npy": npy, "npz": npz, "tensorproto": tensorproto, "autotune": autotune,
           "data": data}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("kind", choices=["artifact", *WRITERS])
    parser.add_argument("dir", type=Path)
    parser.add_argument("--shard-opt", type=Path, default=None)
    args = parser.parse_args()
    args.dir.mkdir(parents=True, exist_ok=True)
    if args.kind == "artifact":
        artifacts(args.dir, args.shard_opt)
    else:
        WRITERS[args.kind](args.dir)
    print(f"seeds: {len(list(args.dir.iterdir()))} {args.kind} seeds in {args.dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
