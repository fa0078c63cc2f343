"""The rt memory plan is safe, checked independently of rt-plan-memory.

Each zoo model is imported, bufferized (convert-nn-to-rt) and planned
(rt-plan-memory). This test re-derives every buffer's live range from the
printed program -- through views, up to the return -- and checks that no two
buffers live at the same time share a byte, that every buffer fits in the
reported peak, and that planning actually reuses memory.
"""
import os
import re
import subprocess
from pathlib import Path

import pytest

from shardflow import models

ROOT = Path(__file__).resolve().parents[2]
SHARD_OPT = Path(os.environ.get("SHARDFLOW_BUILD_DIR", ROOT / "build")) / "bin" / "shard-opt"
BYTES = {"f32": 4, "f16": 2, "bf16": 2, "f64": 8, "i64": 8, "i32": 4, "i1": 1, "i8": 1}


def buffer_bytes(memref: str) -> int:
    *dims, elem = memref.split("x")
    n = 1
    for d in dims:
        n *= int(d)
    return n * BYTES[elem]


def plan(path: Path) -> str:
    assert SHARD_OPT.exists(), f"{SHARD_OPT} is missing: build the project first"
    out = subprocess.run([str(SHARD_OPT), str(path), "--convert-nn-to-rt", "--rt-plan-memory"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout


@pytest.mark.parametrize("name", ["mlp", "gpt2", "bert", "resnet", "llama"])
def test_plan_has_no_conflicts(tmp_path, name):
    path = tmp_path / f"{name}.onnx"
    models.save(getattr(models, name)(), path)
    text = plan(path)
    peak = int(re.search(r"rt.peak_bytes = (\d+)", text).group(1))
    body = text[text.index("{", text.index("func.func")):].splitlines()

    root, buffers, first, last = {}, {}, {}, {}
    for i, line in enumerate(body):
        if m := re.search(r"(%\w+) = rt.alloc \{offset = (\d+) : i64\} : memref<([^>]+)>", line):
            buffers[m.group(1)] = (int(m.group(2)), buffer_bytes(m.group(3)))
            root[m.group(1)] = m.group(1)
            continue
        if m := re.search(r"(%\w+) = rt.view (%\w+)", line):
            if m.group(2) in root:
                root[m.group(1)] = root[m.group(2)]
            continue
        uses = re.findall(r"%\w+", line.split("=", 1)[-1] if "rt.kernel" not in line else line)
        at = len(body) if line.strip().startswith("return") else i
        for u in uses:
            if u in root:
                r = root[u]
                first[r] = min(first.get(r, i), i)
                last[r] = max(last.get(r, at), at)

    assert buffers, "no buffers planned"
    names = sorted(buffers)
    for a in names:
        off, size = buffers[a]
        assert off % 64 == 0 and off + size <= peak, (a, off, size, peak)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            together = first[a] <= last[b] and first[b] <= last[a]
            (oa, sa), (ob, sb) = buffers[a], buffers[b]
            assert not (together and oa < ob + sb and ob < oa + sa), (a, b)
    total = sum(size for _, size in buffers.values())
    assert peak < total, f"no reuse: peak {peak} of {total} bytes"
