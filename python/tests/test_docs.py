"""docs/reference holds the TableGen-generated dialect and pass references
(tools/update-docs.sh copies them from the build); they must match what the
current .td files generate."""
from __future__ import annotations

from pathlib import Path

import pytest

from shardflow import toolchain

ROOT = Path(__file__).resolve().parents[2]
GENERATED = {
    "NNDialect.md": "Dialects/NNDialect.md",
    "DistDialect.md": "Dialects/DistDialect.md",
    "RTDialect.md": "Dialects/RTDialect.md",
    "NNPasses.md": "NNPasses.md",
    "DistPasses.md": "DistPasses.md",
    "RTPasses.md": "RTPasses.md",
    "ConversionPasses.md": "ConversionPasses.md",
    "CUDAPasses.md": "CUDAPasses.md",
}


@pytest.mark.parametrize("name", sorted(GENERATED))
def test_reference_is_current(name):
    built = toolchain.build_dir() / "docs" / GENERATED[name]
    if not built.exists():
        pytest.fail(f"{built} was not generated; the build's mlir-doc target makes it")
    copy = ROOT / "docs" / "reference" / name
    assert copy.exists(), f"docs/reference/{name} is missing: run bash tools/update-docs.sh"
    assert copy.read_text() == built.read_text(), (
        f"docs/reference/{name} is stale: run bash tools/update-docs.sh")
