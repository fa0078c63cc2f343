"""What each rank holds when the zoo's transformers are sharded with
--strategy megatron, read from shard-opt --report and the artifact: every
attention and MLP weight is split and each rank holds exactly 1/tp of them;
the token embedding and the vocabulary projection are split by vocabulary
entries, position and rotary tables are not. (The presets' numerics, under
mpirun against onnxruntime, are in test_sharding_differential.py.)"""
from __future__ import annotations

import re
import subprocess

import numpy as np
import pytest

from shardflow import models, toolchain

# Weights a Megatron split must cover, by name pattern.
SPLIT = re.compile(r"(attn|self_attn|attention|mlp|intermediate|output)\.")


def compile_sharded(tmp_path, name, strategy, mesh):
    model_path = tmp_path / f"{name}.onnx"
    model = models.generate_to_file(name, model_path, external_data=True)
    artifact = tmp_path / f"{name}.{strategy}.shard"
    cmd = [str(toolchain.tool("shard-opt")), str(model_path), "--mesh", mesh,
           "--strategy", strategy, "--target", "cpu", "--report", "-o", str(artifact)]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, f"{' '.join(cmd)}\n{out.stderr}"
    return model, model_path, artifact, out.stderr


@pytest.mark.parametrize("name", ["gpt2", "llama", "bert", "neox"])
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


# The vocabulary tables megatron splits (token embedding, output projection)
# and those it keeps whole (positions, token types, rotary caches), per
# model variant; "written" Llama looks its rotary tables up with Gathers at
# a position-ids graph input, as it does the token ids.
VOCABULARY = {
    "gpt2": ({}, {"wte.weight", "lm_head.weight"}, {"wpe.weight"}),
    "llama": ({}, {"embed_tokens.weight", "lm_head.weight"},
              {"rotary_emb.cos_cache", "rotary_emb.sin_cache"}),
    "llama-written": ({"position_ids_input": True, "rotary": "written"},
                      {"embed_tokens.weight", "lm_head.weight"},
                      {"rotary_emb.cos_full", "rotary_emb.sin_full"}),
    "bert": ({}, {"embeddings.word_embeddings.weight"},
             {"embeddings.position_embeddings.weight",
              "embeddings.token_type_embeddings.weight"}),
}


@pytest.mark.parametrize("variant", sorted(VOCABULARY))
def test_vocabulary_tables_are_split(tmp_path, variant):
    """Vocabulary parallelism: each rank maps the block of rows (embedding)
    or columns (projection) at its tp index, 1/tp of the table; position
    embeddings and rotary tables stay whole, also when they are looked up
    at a graph input like the token ids."""
    name = variant.split("-")[0]
    config, split, whole = VOCABULARY[variant]
    model_path = tmp_path / f"{name}.onnx"
    model = models.generate_to_file(name, model_path, external_data=True, **config)
    artifact = tmp_path / f"{name}.shard"
    cmd = [str(toolchain.tool("shard-opt")), str(model_path), "--mesh", "dp=2,tp=2",
           "--strategy", "megatron", "--target", "cpu", "-o", str(artifact)]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    weights = {}
    for line in artifact.read_text().splitlines():
        m = re.match(r"buffer \d+ weight \S+ (\S+) name=(\S+)", line)
        if m:
            weights[m.group(2)] = ([int(d) for d in m.group(1).split("x")], line)
    dims = {i.name: list(i.dims) for i in model.graph.initializer}
    for w in split:
        local, line = weights[w]
        expect = list(dims[w])
        expect[1 if w == "lm_head.weight" else 0] //= 2
        assert local == expect and "starts=" in line, line
    for w in whole:
        assert w in dims, w
        if w in weights:  # small ones are constants in the program
            local, line = weights[w]
            assert local == dims[w] and "starts=" not in line, line


def test_a_vocabulary_tp_does_not_divide_is_zero_padded(tmp_path):
    """GPT-2 with 131 vocabulary entries on tp=2: blocks of 66 rounded up to
    72 (aligned GEMM columns), so the table is padded to 144; each rank maps
    its block of the 131 stored rows (columns of the projection) with the
    rest zero (padded=zeros), and the report counts the padded bytes."""
    model_path = tmp_path / "gpt2.onnx"
    models.generate_to_file("gpt2", model_path, external_data=True, vocab=131)
    artifact = tmp_path / "gpt2.shard"
    cmd = [str(toolchain.tool("shard-opt")), str(model_path), "--mesh", "dp=2,tp=2",
           "--strategy", "megatron", "--target", "cpu", "-o", str(artifact)]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    text = artifact.read_text()
    assert re.search(r"weight f32 72x64 name=wte\.weight .* global=131x64 "
                     r"starts=0,0;72,0;0,0;72,0 padded=zeros", text), text
    assert re.search(r"weight f32 64x72 name=lm_head\.weight .* global=64x131 "
                     r"starts=0,0;0,72;0,0;0,72 padded=zeros", text), text
    # The logits are gathered at the padded width, then cut to 131.
    assert re.search(r"kernel slice .* ends=is:131", text), text


def collective_counts(report: str) -> dict[str, int]:
    counts: dict[str, int] = {}
    for kind in re.findall(r"step \d+: rt\.(\w+) ", report):
        counts[kind] = counts.get(kind, 0) + 1
    return counts


# (strategy, mesh, seq): the collectives of a parallel residual GPT-2 and
# of the sequential one, per kind, for 3 layers.
PARALLEL_RESIDUAL = {
    # One all_reduce per layer instead of two (plus the token embedding's).
    ("megatron", "dp=2,tp=2", 8): ({"all_reduce": 4}, {"all_reduce": 7}),
    # One reduce_scatter per layer instead of two, and one all_gather: the
    # two norms that read the residual stream run on all tokens, which is
    # gathered once for both (3 all_gathers after the layers: the last
    # norm's, the logits' over dp and tp).
    ("megatron-sp", "dp=2,tp=2", 8): ({"reduce_scatter": 4, "all_gather": 6},
                                      {"reduce_scatter": 7, "all_gather": 9}),
    # 64 tokens per rank against a hidden size of 64: alone, the attention
    # projection is cheaper computed where its output is wanted (an
    # all_to_all of its input into the token split and its weight
    # gathered) than reduce-scattered; met with the MLP's partial sums it
    # is reduce-scattered with them, and neither happens.
    ("megatron-sp", "tp=2", 64): ({"reduce_scatter": 3, "all_to_all": 0, "all_gather": 5},
                                  {"reduce_scatter": 3, "all_to_all": 3, "all_gather": 11}),
}


@pytest.mark.parametrize("strategy,mesh,seq", sorted(PARALLEL_RESIDUAL))
def test_parallel_residual_blocks_reduce_once_per_layer(tmp_path, strategy, mesh, seq):
    """GPT-NeoX's parallel block (x + mlp(ln_2(x)) + attn(ln_1(x))): the
    attention and MLP row-parallel partial sums meet in one add and are
    reduced together, one collective per layer where the sequential block
    needs two, of the same size; under megatron-sp the block's two norms
    share one all_gather of their input. (Numerics against onnxruntime:
    test_sharding_differential.py.)"""
    found = []
    for parallel in (True, False):
        path = models.save(models.gpt2(layers=3, seq=seq, parallel_residual=parallel),
                           tmp_path / f"gpt2-{parallel}.onnx", external_data=True)
        cmd = [str(toolchain.tool("shard-opt")), str(path), "--mesh", mesh,
               "--strategy", strategy, "--target", "cpu", "--report",
               "-o", str(tmp_path / f"gpt2-{parallel}.shard")]
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr
        found.append(collective_counts(out.stdout + out.stderr))
    for want, got in zip(PARALLEL_RESIDUAL[(strategy, mesh, seq)], found):
        assert {k: got.get(k, 0) for k in want} == want, found


@pytest.mark.parametrize("mesh,strategy", [("tp=4", "megatron-sp"), ("dp=2,tp=2", "megatron-sp"),
                                           ("tp=4", "megatron")])
def test_report_counts_the_bytes_each_rank_sends(tmp_path, mesh, strategy):
    """Each collective's line gives its buffer's bytes and what a rank sends
    for it with ring algorithms (all_reduce 2(n-1)/n of the buffer,
    reduce_scatter and all_to_all (n-1)/n, all_gather its piece n-1
    times); the total line sums them."""
    _, _, _, report = compile_sharded(tmp_path, "gpt2", strategy, mesh)
    steps = re.findall(r"step \d+: rt\.(\w+) \S+, (\d+) bytes per rank, groups of (\d+), "
                       r"sends (\d+) ", report)
    assert steps, report
    factor = {"all_reduce": lambda n: 2 * (n - 1) / n, "reduce_scatter": lambda n: (n - 1) / n,
              "all_to_all": lambda n: (n - 1) / n, "all_gather": lambda n: n - 1}
    total = 0
    for kind, buffer, n, sent in steps:
        assert int(sent) == int(int(buffer) * factor[kind](int(n))), (kind, buffer, n, sent)
        total += int(sent)
    assert f"each rank sends {total} (ring algorithms)" in report, report
    assert any(int(n) == 4 for _, _, n, _ in steps) == (mesh == "tp=4")


@pytest.mark.parametrize("mesh,strategy", [("tp=4", "megatron-sp"), ("dp=2,tp=2", "megatron")])
def test_report_predicts_each_collectives_time(tmp_path, mesh, strategy):
    """Each collective's predicted time is the collective cost model's
    alpha-beta figure for an H100 cluster's NVLink (10 us + the bytes a rank
    sends at 360 GB/s of bus bandwidth: every group here lies in one node),
    and the total line adds them up."""
    _, _, _, report = compile_sharded(tmp_path, "gpt2", strategy, mesh)
    steps = re.findall(r"sends (\d+) in ([\d.]+) us over (\w+) ", report)
    assert steps, report
    total = 0.0
    for sent, micros, level in steps:
        assert level == "NVLink", report
        want = 10.0 + int(sent) / 360e9 * 1e6
        assert abs(float(micros) - want) <= 0.051, (sent, micros, want)
        total += want
    m = re.search(r"predicted communication time: ([\d.]+) us per run", report)
    assert m and abs(float(m.group(1)) - total) <= 0.05 * len(steps) + 0.051, report
