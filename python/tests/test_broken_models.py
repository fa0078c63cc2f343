"""The importer against the corpus of broken models (shardflow.broken_models).

Every case must be rejected the way a user can act on: exit status exactly 1
(a negative status is a signal, i.e. a crash), `error:` and the case's
expected phrase on stderr, and no sign of an assertion, an LLVM stack dump or
an uncaught C++ exception. Each case runs with a 20 s limit (a hang fails).

The binary is $SHARDFLOW_BUILD_DIR/bin/shard-opt (default <repo>/build); a
missing binary fails every case rather than skipping them.

Run: .venv/bin/python -m pytest python/tests/test_broken_models.py
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "python"))

from shardflow import broken_models  # noqa: E402

BUILD_DIR = Path(os.environ.get("SHARDFLOW_BUILD_DIR", REPO / "build"))
SHARD_OPT = BUILD_DIR / "bin" / "shard-opt"
TIMEOUT_S = 20
CRASH_SIGNS = ("Assertion", "Stack dump", "terminate called", "LLVM ERROR",
               "AddressSanitizer", "Segmentation fault")

CASES = broken_models.cases()


@pytest.fixture(scope="session")
def corpus(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("broken_models")
    manifest = broken_models.write_corpus(out)
    assert json.loads((out / "manifest.json").read_text()) == manifest
    return out


def test_corpus_is_large_and_well_formed(corpus: Path) -> None:
    manifest = json.loads((corpus / "manifest.json").read_text())
    files = [entry["file"] for entry in manifest]
    assert len(files) >= 40
    assert len(set(files)) == len(files), "case file names must be unique"
    for entry in manifest:
        assert entry["expect"], f"{entry['file']}: empty expected phrase"
        assert (corpus / entry["file"]).is_file()


@pytest.mark.parametrize("case", CASES, ids=[c.file for c in CASES])
def test_broken_model_is_rejected_cleanly(corpus: Path, case: broken_models.Case) -> None:
    if not SHARD_OPT.is_file():
        pytest.fail(f"{SHARD_OPT} does not exist: build Shardflow first "
                    f"(bash tools/build.sh) or set SHARDFLOW_BUILD_DIR")
    path = corpus / case.file
    try:
        proc = subprocess.run([str(SHARD_OPT), str(path), "-o", os.devnull],
                              capture_output=True, text=True, errors="replace",
                              timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"shard-opt hung on {case.file} (no exit within {TIMEOUT_S} s)")
    stderr = proc.stderr
    context = f"\n--- stderr of shard-opt {case.file}:\n{stderr}"
    if proc.returncode < 0:
        pytest.fail(f"shard-opt crashed on {case.file}: killed by signal "
                    f"{-proc.returncode}{context}")
    for sign in CRASH_SIGNS:
        assert sign not in stderr, f"'{sign}' on stderr{context}"
    assert proc.returncode == 1, f"exit status {proc.returncode}, expected 1{context}"
    assert f"{path}: error: " in stderr, f"no '<path>: error: ' line{context}"
    assert case.expect in stderr, f"expected phrase {case.expect!r} missing{context}"
