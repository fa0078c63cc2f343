"""Pipelined training (`shard-opt --mesh pp=N --train`) against the
unpipelined step.

On the real-export test bed's 8-layer GPT-2 (TorchScript: its LM head is a
transposed copy of the token embedding, tied, on the last stage while the
embedding is on the first) and Llama (dynamo), under mpirun:

- every schedule (GPipe, 1F1B, interleaved 1F1B, and the zero-bubble
  ZB-H1 and ZBV, whose backward is split into I and W) at pp=2, and at
  pp=2 x dp=2 x tp=2 (8 ranks, oversubscribed, megatron), plus a seeded
  sample at pp=4: five steps whose loss and gradient norm are within 1e-5 relative,
  and whose saved weights are within 1e-5 relative L2 (SGD; 1e-3 AdamW,
  the training tests' tolerance for an update near zero gradients), of
  the same steps unpipelined on one rank;
- the two-layer exports of the other families (Mixtral, Qwen2, Phi-3,
  Gemma 2, BERT, Mistral) at pp=2 and pp=2 x dp=2 x tp=2, the same way;
- the micro-batches a stage keeps in flight (the activations its backward
  reads) follow each schedule's theory: GPipe holds all M on every stage,
  1F1B and ZB-H1 hold p - s on stage s;
- the timeline of a traced training step shows the backwards (B, or I
  and W).

The loss of a pipelined step is the mean of its micro-batches' losses (as
Megatron-LM's and torch.distributed.pipelining's): the data here has no
ignored labels, where that is the mean over the whole batch too.

About 30 s on 2 cores. The full matrix (every schedule, pp=2 and 4, the
meshes, both models): SHARDFLOW_FULL_TESTS=1.
"""
from __future__ import annotations

import json
import os
import random
import shutil
import subprocess

import numpy as np
import pytest

from shardflow import real_exports, toolchain

STEPS = 5


def _mpirun(ranks):
    env = {**os.environ, "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
    return [shutil.which("mpirun") or "mpirun", "--oversubscribe", "-np", str(ranks)], env


ENCODERS = ("bert", "roberta", "distilbert")


def _data(export, batch, count=2, seed=0):
    """`count` batches of `batch` rows: the export's inputs repeated, new
    token ids and labels (none ignored; an encoder's: regression targets
    for its first output)."""
    inputs = export.inputs()
    first = next(iter(export.expected().values()))
    rng = np.random.default_rng(seed)
    data = {k: np.stack([np.concatenate([v] * (batch // v.shape[0]))] * count)
            for k, v in inputs.items()}
    if export.name.startswith(ENCODERS):
        data["labels"] = rng.standard_normal((count, batch, *first.shape[1:])).astype(np.float32)
        return data
    vocab = first.shape[-1]
    data["input_ids"] = rng.integers(0, vocab, data["input_ids"].shape).astype(np.int64)
    data["labels"] = rng.integers(0, vocab, data["input_ids"].shape).astype(np.int64)
    return data


def _ranks(mesh):
    n = 1
    for axis in mesh.split(","):
        n *= int(axis.split("=")[1])
    return n


def _train(tmp, export, data, flags, mesh=None, extra=(), tag="base", verbose=False):
    """Compiles and runs STEPS steps; returns the log, the saved weights and
    shard-run's stderr."""
    shapes = real_exports.shape_flags({k: v[0] for k, v in data.items() if k != "labels"}, tmp)
    artifact = tmp / f"{tag}.shard"
    mesh_flags = ["--mesh", mesh] if mesh else []
    out = subprocess.run([str(toolchain.tool("shard-opt")), str(export.model), *shapes,
                          "--train", *flags, *mesh_flags, *extra, "--target", "cpu", "-o",
                          str(artifact)], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    _train.report = out.stderr
    ranks = _ranks(mesh) if mesh else 1
    launcher, env = _mpirun(ranks) if ranks > 1 else ([], None)
    run = subprocess.run([*launcher, str(toolchain.tool("shard-run")), str(artifact), "--data",
                          str(tmp / "data.npz"), "--steps", str(STEPS), "--log",
                          f"{artifact}.jsonl", "--save-weights", f"{artifact}.npz",
                          *(["--verbose"] if verbose else [])],
                         capture_output=True, text=True, timeout=600, env=env)
    assert run.returncode == 0, run.stderr
    log = [json.loads(line) for line in open(f"{artifact}.jsonl")]
    with np.load(f"{artifact}.npz") as w:
        weights = {k: w[k].astype(np.float64) for k in w.files}
    return log, weights, run.stderr


def _compare(base, other, what, tolerance):
    base_log, base_weights, _ = base
    log, weights, _ = other
    assert len(log) == STEPS, what
    for a, b in zip(base_log, log, strict=True):
        assert abs(a["loss"] - b["loss"]) <= 1e-5 * abs(a["loss"]), (what, a, b)
        assert abs(a["grad_norm"] - b["grad_norm"]) <= 1e-5 * a["grad_norm"], (what, a, b)
    assert set(weights) == set(base_weights), (what, set(weights) ^ set(base_weights))
    num = sum(float(((weights[k] - base_weights[k]) ** 2).sum()) for k in base_weights)
    den = sum(float((base_weights[k] ** 2).sum()) for k in base_weights)
    assert (num / den) ** 0.5 < tolerance, (what, (num / den) ** 0.5)


SCHEDULES = ["gpipe", "1f1b", "interleaved-1f1b", "zb-h1", "zbv"]
FLAGS = {"sgd": ["--optimizer", "sgd", "--lr", "0.1", "--clip-grad-norm", "1.0"],
         # eps 1e-6: see test_training's sharded runs (GPT-2's key bias).
         "adamw": ["--optimizer", "adamw", "--lr", "0.001", "--eps", "1e-6",
                   "--clip-grad-norm", "1.0"]}
MESHES = ["pp=2", "pp=2,dp=2,tp=2"]
PP4 = random.Random(35).sample([(s, m) for s in SCHEDULES for m in (4, 8)], 1)
RUNS = [
    # export, optimizer, batch, [(mesh, schedule, micro-batches), ...]:
    # every schedule at pp=2 and at pp=2 x dp=2 x tp=2, and a seeded
    # sample at pp=4.
    (name, optimizer, 8,
     [*[(mesh, s, 2) for mesh in MESHES for s in SCHEDULES],
      *[("pp=4", s, m) for s, m in PP4]])
    for name, optimizer in (("gpt2-8l-torchscript", "sgd"), ("llama-8l-dynamo", "adamw"))]
FULL_RUNS = [(name, optimizer, 8,
              [(mesh, s, m) for mesh in ("pp=2", "pp=4", "pp=2,dp=2", "pp=2,tp=2",
                                         "pp=2,dp=2,tp=2")
               for s in SCHEDULES for m in (2, 4)
               if not (mesh.startswith("pp=4") and s == "interleaved-1f1b" and m == 2)])
             for name, optimizer in (("gpt2-8l-torchscript", "sgd"),
                                     ("llama-8l-dynamo", "adamw"))]


@pytest.mark.parametrize("name, optimizer, batch, configs",
                         FULL_RUNS if os.environ.get("SHARDFLOW_FULL_TESTS") else RUNS,
                         ids=lambda v: v if isinstance(v, str) else None)
def test_pipelined_training_equals_unpipelined(tmp_path, name, optimizer, batch, configs):
    export = real_exports.load(name)
    data = _data(export, batch)
    np.savez(tmp_path / "data.npz", **data)
    flags = FLAGS[optimizer]
    base = _train(tmp_path, export, data, flags)
    for mesh, schedule, m in configs:
        strategy = ["--strategy", "megatron"] if "tp=" in mesh else \
            ["--strategy", "dp"] if "dp=" in mesh else []
        what = f"{name} {mesh} {schedule} M={m}"
        other = _train(tmp_path, export, data, flags, mesh,
                       ["--microbatches", str(m), "--pipeline-schedule", schedule, *strategy],
                       tag=f"{mesh}-{schedule}-{m}".replace(",", "_").replace("=", ""))
        _compare(base, other, what, 1e-5 if optimizer == "sgd" else 1e-3)


ZOO = ["mixtral-dynamo", "qwen2-torchscript", "phi3-dynamo", "gemma2-dynamo", "bert-dynamo",
       "mistral-torchscript"]


@pytest.mark.parametrize("name", ZOO)
def test_the_zoo_trains_pipelined(tmp_path, name):
    """Two-layer exports of the other families (Mixtral's experts, Gemma
    2's soft-capping, BERT with an MSE loss on its hidden states) at pp=2
    under 1F1B and at pp=2 x dp=2 x tp=2 under GPipe: SGD steps as the
    unpipelined ones."""
    export = real_exports.load(name)
    data = _data(export, 8)
    np.savez(tmp_path / "data.npz", **data)
    flags = FLAGS["sgd"] + (["--loss", "mse"] if name.startswith(ENCODERS) else [])
    base = _train(tmp_path, export, data, flags)
    for mesh, schedule in (("pp=2", "1f1b"), ("pp=2,dp=2,tp=2", "gpipe")):
        strategy = ["--strategy", "megatron"] if "tp=" in mesh else []
        other = _train(tmp_path, export, data, flags, mesh,
                       ["--microbatches", "2", "--pipeline-schedule", schedule, *strategy],
                       tag=f"{schedule}-{mesh.count(',')}")
        _compare(base, other, f"{name} {mesh} {schedule}", 1e-5)


def test_micro_batches_in_flight_follow_the_schedule(tmp_path):
    """The activations a stage keeps for its backward, at most: GPipe all M
    micro-batches on every stage; 1F1B p - s on stage s (pp=4, M=8: 4, 3,
    2, 1), and ZB-H1 as 1F1B (a micro-batch held until its W); the kept
    bytes count them."""
    import re
    export = real_exports.load("gpt2-8l-torchscript")
    data = _data(export, 8)
    np.savez(tmp_path / "data.npz", **data)
    pattern = re.compile(r"stage (\d+) \(pp rank \d+\): at most (\d+) micro-batch\(es\) in "
                         r"flight, ([0-9.]+) kB kept for the backward")
    predicted = re.compile(r"stage (\d+) memory per rank: .*activations ([0-9.e+-]+) MB a "
                           r"micro-batch x (\d+) in flight")
    expected = {"gpipe": [8, 8, 8, 8], "1f1b": [4, 3, 2, 1], "zb-h1": [4, 3, 2, 1]}
    for schedule, want in expected.items():
        _, _, stderr = _train(tmp_path, export, data, FLAGS["sgd"], "pp=4",
                              ["--microbatches", "8", "--pipeline-schedule", schedule,
                               "--report"],
                              tag=schedule, verbose=True)
        found = {int(s): (int(n), float(mb)) for s, n, mb in pattern.findall(stderr)}
        assert [found[s][0] for s in range(4)] == want, (schedule, stderr)
        # shard-opt --report predicted both (activations in MB).
        report = {int(s): (float(mb), int(n))
                  for s, mb, n in predicted.findall(_train.report)}
        for s in range(4):
            assert report[s][1] == found[s][0], (schedule, s, report, found)
            assert abs(report[s][0] * 1e3 * report[s][1] - found[s][1]) <= 0.1 + 1e-3 * found[s][1], \
                (schedule, s, report, found)
        # Stages 1 and 2 (two layers each) keep as much per micro-batch.
        per = found[1][1] / found[1][0]
        assert per > 0 and abs(found[2][1] / found[2][0] - per) < 0.1, found  # printed to 0.1 kB


def test_training_timeline(tmp_path):
    """--trace of a training pipeline has every stage's backwards (B, or I
    and W under zb-h1), and python -m shardflow.timeline draws them;
    without --data and --steps, shard-run says what to pass."""
    import sys
    from pathlib import Path
    export = real_exports.load("gpt2-8l-torchscript")
    data = _data(export, 4)
    np.savez(tmp_path / "data.npz", **data)
    shapes = real_exports.shape_flags({k: v[0] for k, v in data.items() if k != "labels"},
                                      tmp_path)
    shard_opt, shard_run = str(toolchain.tool("shard-opt")), str(toolchain.tool("shard-run"))
    launcher, env = _mpirun(2)
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[1])
    for schedule, kinds in (("1f1b", "FB"), ("zb-h1", "FIW")):
        artifact = tmp_path / f"{schedule}.shard"
        out = subprocess.run([shard_opt, str(export.model), *shapes, "--train", "--mesh", "pp=2",
                              "--microbatches", "4", "--pipeline-schedule", schedule, "--target",
                              "cpu", "-o", str(artifact)], capture_output=True, text=True,
                             timeout=600)
        assert out.returncode == 0, out.stderr
        trace = tmp_path / f"{schedule}.json"
        run = subprocess.run([*launcher, shard_run, str(artifact), "--data",
                              str(tmp_path / "data.npz"), "--steps", "2", "--trace", str(trace)],
                             capture_output=True, text=True, timeout=600, env=env)
        assert run.returncode == 0, run.stderr
        names = {e["name"] for e in json.loads(trace.read_text())["traceEvents"]
                 if e.get("ph") == "X"}
        assert {f"{s}{k}{m}" for s in (0, 1) for k in kinds for m in range(4)} <= names
        assert "update" in names
        plot = subprocess.run([sys.executable, "-m", "shardflow.timeline", str(trace), "-o",
                               str(tmp_path / f"{schedule}.png")],
                              capture_output=True, text=True, timeout=300, env=env)
        assert plot.returncode == 0, plot.stderr
        assert (tmp_path / f"{schedule}.png").stat().st_size > 0 and "bubble" in plot.stdout
    # Without --data and --steps: what to pass.
    run = subprocess.run([*launcher, shard_run, str(tmp_path / "1f1b.shard")],
                         capture_output=True, text=True, timeout=300, env=env)
    assert run.returncode != 0 and "is a training pipeline: run it with --data" in run.stderr
