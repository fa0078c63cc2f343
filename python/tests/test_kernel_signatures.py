"""The kernel signature table the runtime reads
(include/shardflow/Runtime/Format/KernelSignatures.inc) is checked in, so
that the runtime-only build needs no tblgen; it must be what the nn ODS and
RTKernels.td generate now (tools/update-kernel-signatures.sh copies it from
the build)."""
from __future__ import annotations

from pathlib import Path

from shardflow import toolchain

ROOT = Path(__file__).resolve().parents[2]


def test_checked_in_table_is_current():
    built = toolchain.build_dir() / "generated" / "KernelSignatures.inc"
    assert built.exists(), f"{built} was not generated; the build's ShardflowKernelTable makes it"
    copy = ROOT / "include" / "shardflow" / "Runtime" / "Format" / "KernelSignatures.inc"
    assert copy.read_text() == built.read_text(), (
        "include/shardflow/Runtime/Format/KernelSignatures.inc is stale: "
        "run bash tools/update-kernel-signatures.sh")
