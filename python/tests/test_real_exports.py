"""Real exports (test/real-exports, written by python/testbed/export_models.py:
TorchScript and dynamo exports of tiny Hugging Face models, onnxruntime's
optimizer and onnxruntime-genai's builder output, a real-weight MiniLM
layer) through every step a user takes: import, a CPU run, megatron and
megatron-sp at dp=2,tp=2 under mpirun with every attention and MLP weight
split and at most 0.6 of the parameters per rank, and CUDA bf16 on the
stand-in -- each against onnxruntime's outputs (shardflow/real_exports.py
states the tolerances). A step in KNOWN_FAILURES is an xfail with its
reason; one that passes while listed fails, so the list only shrinks.
"""
from __future__ import annotations

import shutil

import pytest

from shardflow import real_exports

# (export, step) -> why it fails today (none now).
KNOWN_FAILURES: dict[tuple[str, str], str] = {}

NAMES = real_exports.export_names()
CASES = [(name, step) for name in NAMES for step in real_exports.STEPS]


def test_the_test_bed_is_there():
    """The manifest lists the exports the issue's test bed names."""
    families = {real_exports.load(n).entry["family"] for n in NAMES}
    for family in ("gpt2", "llama", "mistral", "qwen2", "phi3", "gemma2", "bert", "roberta",
                   "distilbert", "vit", "t5", "mixtral"):
        assert family in families, f"no export of {family}"
    exporters = {real_exports.load(n).entry["exporter"] for n in NAMES}
    assert {"torchscript", "dynamo", "ort-opt", "genai"} <= exporters


def test_known_failures_name_real_cases():
    stale = sorted(set(KNOWN_FAILURES) - set(CASES))
    assert not stale, f"KNOWN_FAILURES names no case: {stale}"


@pytest.mark.parametrize("name,step", CASES, ids=[f"{n}:{s}" for n, s in CASES])
def test_step(tmp_path, name, step):
    if step in ("megatron", "megatron-sp") and not shutil.which("mpirun"):
        pytest.skip("mpirun is missing (tools/setup.sh installs openmpi-bin)")
    export = real_exports.load(name)
    try:
        real_exports.run_step(export, step, tmp_path)
    except real_exports.StepFailed as e:
        if (name, step) in KNOWN_FAILURES:
            pytest.xfail(f"{KNOWN_FAILURES[(name, step)]} [{e}]")
        raise AssertionError(f"{name} {step}: {e}") from None
    if (name, step) in KNOWN_FAILURES:
        pytest.fail(f"{name} {step} passes now: remove it from KNOWN_FAILURES")
