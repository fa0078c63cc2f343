"""shard-run on damaged artifacts: a clean error or a run, never a crash.

The bundled example (examples/tiny-gpt2, one sequence of 4 tokens) is
compiled once; then 300 mutants of its artifact, made by a seeded random
generator (so every run of the test sees the same ones), are each run by
shard-run: byte and bit flips, lines deleted, duplicated or swapped,
fields deleted or moved to another line, numbers replaced by boundary
values, and truncation. Each must exit 0, or exit 1 with
`shard-run: error:` on stderr; a signal (a negative return code), another
exit status, a sanitizer report or a run past the timeout fails the test,
which then lists the mutants and keeps them for reproduction. The damage
that once crashed shard-run (FOUND) is checked by name too, each with the
error that now reports it.

Every other mutant runs with --no-verify-weights, so that damaged offsets
and shapes reach the weight loader and the kernels instead of stopping at
the checksum. SHARDFLOW_SHARD_RUN picks another shard-run, e.g. the one
built with AddressSanitizer and UndefinedBehaviorSanitizer
(`bash tools/runtime-fuzz-smoke.sh build shard-run`, then
SHARDFLOW_SHARD_RUN=build-asan/bin/shard-run).
"""
from __future__ import annotations

import os
import random
import re
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from shardflow import toolchain

ROOT = Path(__file__).resolve().parents[2]
MUTANTS = 300
SEED = 20261128
TIMEOUT_SECONDS = 30
NUMBER = re.compile(rb"-?\d+")
# Values that sit on the edges of the reader's checks and of the types the
# numbers are read into.
BOUNDARY = [0, 1, -1, 2, 3, 7, 64, 255, 4096, 2**31 - 1, 2**31, 2**32, 2**32 + 1, 2**40,
            2**40 + 1, 2**48, 2**62, 2**63 - 1, -(2**63)]


def mutate(rng: random.Random, data: bytes) -> tuple[str, bytes]:
    """One random mutation of the artifact's bytes, and its description."""
    lines = data.split(b"\n")
    kind = rng.choice(["byte", "bit", "delete-line", "duplicate-line", "swap-lines",
                       "delete-field", "move-field", "number", "number", "number",
                       "truncate"])
    if kind in ("byte", "bit"):
        out = bytearray(data)
        at = rng.randrange(len(out))
        out[at] = rng.randrange(256) if kind == "byte" else out[at] ^ (1 << rng.randrange(8))
        return f"{kind} at offset {at}", bytes(out)
    if kind == "truncate":
        at = rng.randrange(len(data))
        return f"truncated at offset {at}", data[:at]
    i = rng.randrange(len(lines))
    if kind == "delete-line":
        del lines[i]
    elif kind == "duplicate-line":
        lines.insert(i, lines[i])
    elif kind == "swap-lines":
        j = rng.randrange(len(lines))
        lines[i], lines[j] = lines[j], lines[i]
        kind += f" with line {j + 1}"
    elif kind in ("delete-field", "move-field"):
        fields = lines[i].split(b" ")
        if len(fields) > 1:
            field = fields.pop(rng.randrange(1, len(fields)))
            if kind == "move-field":
                j = rng.randrange(len(lines))
                lines[j] = lines[j] + b" " + field
                kind += f" to line {j + 1}"
        lines[i] = b" ".join(fields)
    else:
        numbers = list(NUMBER.finditer(data))
        m = rng.choice(numbers)
        value = int(m.group())
        new = rng.choice(BOUNDARY + [value + 1, value - 1, value * 2, -value])
        return (f"number {m.group().decode()} -> {new} at offset {m.start()}",
                data[:m.start()] + str(new).encode() + data[m.end():])
    return f"{kind} at line {i + 1}", b"\n".join(lines)


def shard_run_binary() -> Path:
    chosen = os.environ.get("SHARDFLOW_SHARD_RUN")
    return Path(chosen).resolve() if chosen else toolchain.tool("shard-run")


@pytest.fixture(scope="module")
def example(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("mutations")
    artifact = toolchain.compile_model(ROOT / "examples" / "tiny-gpt2" / "model.onnx",
                                      tmp / "example.shard", {"input_ids": (1, 4)})
    np.save(tmp / "input_ids.npy", np.array([[5, 17, 3, 42]], np.int64))
    return tmp, artifact


def test_the_example_runs(example):
    tmp, artifact = example
    done = subprocess.run([str(shard_run_binary()), str(artifact), "--input",
                           f"input_ids={tmp / 'input_ids.npy'}"],
                          capture_output=True, text=True, timeout=TIMEOUT_SECONDS)
    assert done.returncode == 0, done.stderr


def arena_buffer_of_another_shape(text: bytes, buffer: bytes) -> bytes:
    """The index of the first arena buffer of `buffer`'s element type whose
    shape differs from `buffer`'s."""
    m = re.search(rb"^buffer " + buffer + rb" arena (\S+) (\S+) ", text, re.M)
    assert m, f"buffer {buffer!r} is not an arena buffer"
    for other in re.finditer(rb"^buffer (\d+) arena (\S+) (\S+) ", text, re.M):
        if other.group(2) == m.group(1) and other.group(3) != m.group(2):
            return other.group(1)
    raise AssertionError(f"no arena buffer of another shape than buffer {buffer!r}")


def edit(pattern: bytes, replacement):
    """A damage: the first match of `pattern` replaced (a template, or a
    function of the match and the whole text)."""
    def apply(text: bytes) -> bytes:
        m = re.search(pattern, text, re.M)
        assert m, f"the example's artifact has no line like {pattern!r}"
        new = replacement(m, text) if callable(replacement) else m.expand(replacement)
        return text[:m.start()] + new + text[m.end():]
    return apply


# Damage that once crashed shard-run or tripped a sanitizer, each with the
# error that now names it: (name, damage, phrase).
FOUND = [
    ("constant without data", edit(rb"^(buffer \d+ constant f32 \S+) data=\w+", rb"\1"),
     "has no data="),
    ("arena buffer without offset", edit(rb"^(buffer \d+ arena \S+ \S+) offset=\d+", rb"\1"),
     "has no offset="),
    ("arena offset past 2^62",
     edit(rb"^(buffer \d+ arena \S+ \S+) offset=\d+", rb"\1 offset=4611686018427387904"),
     "buffer lies outside the arena"),
    ("misaligned arena offset", edit(rb"^(buffer \d+ arena f32 \S+) offset=\d+", rb"\1 offset=1"),
     "is not aligned to its 4-byte elements"),
    ("kernel writing a weight", edit(rb"^(kernel gather in=(\d+),\d+) out=\d+", rb"\1 out=\2"),
     "a weight (read-only)"),
    ("output overlapping an input",
     edit(rb"^(kernel transpose in=(\d+)) out=\d+", rb"\1 out=\2"), "overlaps input buffer"),
    ("transpose without perm", edit(rb"^(kernel transpose in=\d+ out=\d+ node=s:\S+) perm=is:\S+",
                                    rb"\1"),
     "the result is not the input permuted by perm"),
    ("split along another axis", edit(rb"^(kernel split .* axis=i:)\d+", rb"\g<1>1"),
     "does not match the whole's outside axis 1"),
    ("gather into a result of another size",
     edit(rb"^(kernel gather in=\d+,\d+ out=)(\d+)",
          lambda m, text: m.group(1) + arena_buffer_of_another_shape(text, m.group(2))),
     "the result does not hold one row of the input per index"),
]


@pytest.mark.parametrize("name,damage,phrase", FOUND, ids=[f[0] for f in FOUND])
def test_damage_found_before_is_refused(example, name, damage, phrase):
    tmp, artifact = example
    path = tmp / (name.replace(" ", "-") + ".shard")
    path.write_bytes(damage(artifact.read_bytes()))
    done = subprocess.run([str(shard_run_binary()), str(path), "--no-verify-weights", "--input",
                           f"input_ids={tmp / 'input_ids.npy'}"],
                          capture_output=True, text=True, timeout=TIMEOUT_SECONDS,
                          env={**os.environ, "ASAN_OPTIONS": "detect_leaks=0"})
    assert done.returncode == 1 and "shard-run: error:" in done.stderr, done.stderr
    assert phrase in done.stderr, done.stderr


def test_mutated_artifacts_fail_cleanly(example):
    tmp, artifact = example
    original = artifact.read_bytes()
    rng = random.Random(SEED)
    mutants = [mutate(rng, original) for _ in range(MUTANTS)]
    folder = tmp / "mutants"
    folder.mkdir()
    binary = shard_run_binary()
    env = {**os.environ, "ASAN_OPTIONS": "detect_leaks=0"}

    def run(n: int) -> str | None:
        what, data = mutants[n]
        path = folder / f"mutant-{n:03d}.shard"
        path.write_bytes(data)
        cmd = [str(binary), str(path), "--input", f"input_ids={tmp / 'input_ids.npy'}"]
        if n % 2:
            cmd.append("--no-verify-weights")
        try:
            done = subprocess.run(cmd, capture_output=True, timeout=TIMEOUT_SECONDS, env=env)
        except subprocess.TimeoutExpired:
            return f"{path.name} ({what}): no exit within {TIMEOUT_SECONDS} s"
        err = done.stderr.decode(errors="replace")
        sanitizer = "runtime error:" in err or "Sanitizer" in err
        if done.returncode == 0 and not sanitizer:
            path.unlink()
            return None
        if done.returncode == 1 and "shard-run: error:" in err and not sanitizer:
            path.unlink()
            return None
        tail = err.strip().splitlines()[-3:] if err.strip() else ["(no stderr)"]
        return (f"{path.name} ({what}): exit status {done.returncode}: " + " | ".join(tail)
                + f"\n    run: {' '.join(cmd)}")

    with ThreadPoolExecutor(max_workers=2) as pool:
        failures = [f for f in pool.map(run, range(MUTANTS)) if f]
    assert not failures, (f"{len(failures)} of {MUTANTS} mutated artifacts did not fail "
                          "cleanly:\n" + "\n".join(failures))
