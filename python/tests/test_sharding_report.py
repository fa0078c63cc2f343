"""What each rank holds when the zoo's transformers are sharded with
--strategy megatron, read from shard-opt --report: every attention and MLP
weight is split and each rank holds exactly 1/tp of them. (The presets'
numerics, under mpirun against onnxruntime, are in
test_sharding_differential.py.)"""
from __future__ import annotations

import re
import subprocess

import numpy as np
import pytest

from shardflow import models, pipeline

# Weights a Megatron split must cover, by name pattern.
SPLIT = re.compile(r"(attn|self_attn|attention|mlp|intermediate|output)\.")


def compile_sharded(tmp_path, name, strategy, mesh):
    model_path = tmp_path / f"{name}.onnx"
    model = models.generate_to_file(name, model_path, external_data=True)
    artifact = tmp_path / f"{name}.{strategy}.shard"
    cmd = [str(pipeline.tool("shard-opt")), str(model_path), "--mesh", mesh,
           "--strategy", strategy, "--target", "cpu", "--report", "-o", str(artifact)]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, f"{' '.join(cmd)}\n{out.stderr}"
    return model, model_path, artifact, out.stderr


@pytest.mark.parametrize("name", ["gpt2", "llama", "bert"])
def test_each_rank_holds_one_tp_th_of_attention_and_mlp(tmp_path, name):
    """The report's split-weight line: every attention and MLP weight is split,
    and the split weights' bytes per rank are exactly 1/tp of theirs."""
    model, _, artifact, report = compile_sharded(tmp_path, name, "megatron", "dp=2,tp=2")
    m = re.search(r"split weights: (\d+) of (\d+) weights, (\d+) of their (\d+) bytes", report)
    assert m, report
    split, _, local, whole = map(int, m.groups())
    assert local * 2 == whole, report
    # Which weights the artifact slices: a weight line with starts=.
    sliced = set(re.findall(r"^buffer \d+ weight \S+ \S+ name=(\S+) .*starts=",
                            artifact.read_text(), re.M))
    assert len(sliced) == split
    big = {i.name for i in model.graph.initializer
           if np.prod(i.dims) * 4 > 1024 and len(i.dims) == 2 and SPLIT.search(i.name)}
    assert big and big <= sliced, f"not split: {sorted(big - sliced)}"
