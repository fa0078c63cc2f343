"""Pipeline stages of the real exports (`--mesh pp=N`, the `stages` phase).

`shard-opt --mesh pp=2 --microbatches 2` prints one function per stage
(dist-split-stages) and the schedule. On the real-export test bed:

- the stages are compiled for one micro-batch: every graph input's
  dimension 0 is the batch over M;
- every weight of the unpipelined program is read by a stage, and two
  stages read the same weight only when the model ties it (an embedding
  and an LM head) or it computes something every layer reads (T5's
  relative position bias);
- what a stage passes on is the residual stream (and an encoder's output
  and mask, for T5's decoder), a few values, not the masks and rotary
  tables each stage computes again from the graph inputs it reads itself;
- each graph output comes from exactly one stage;
- every schedule lays its stages on the ranks as it should.

About 20 s on 2 cores.
"""
from __future__ import annotations

import os
import re
import subprocess

import pytest

from shardflow import real_exports, toolchain

STAGE = re.compile(r"^  func\.func @stage_(\d+)\((.*?)\) -> \((.*?)\) attributes \{(.*?)\} \{$",
                   re.M)
WEIGHT = re.compile(r'nn\.weight "([^"]+)"')


def compile_stages(tmp_path, name, *flags, check=True, batch=None):
    """shard-opt on export `name` with its inputs' shapes (the batch
    replaced by `batch` when given)."""
    export = real_exports.load(name)
    shapes = export.shape_flags(tmp_path)
    if batch:
        shapes = [f"{n}={','.join(map(str, (batch, *v.shape[1:])))}"
                  for n, v in export.inputs().items()]
        shapes = [a for spec in shapes for a in ("--input-shape", spec)]
    out = subprocess.run([str(toolchain.tool("shard-opt")), str(export.model), *shapes, *flags],
                         capture_output=True, text=True, timeout=300)
    if check:
        assert out.returncode == 0, out.stderr
    return export, out


def stages_of(text):
    """Per stage: its arguments, results and body (the text up to the next
    stage)."""
    found = list(STAGE.finditer(text))
    stages = []
    for i, m in enumerate(found):
        end = found[i + 1].start() if i + 1 < len(found) else len(text)
        stages.append({"index": int(m.group(1)), "args": m.group(2), "results": m.group(3),
                       "attrs": m.group(4), "body": text[m.end():end]})
    return stages


@pytest.mark.parametrize("name", ["gpt2-8l-torchscript", "llama-8l-dynamo", "bert-dynamo",
                                  "t5-torchscript", "mixtral-dynamo"])
def test_stages_of_real_exports(tmp_path, name):
    export, out = compile_stages(tmp_path, name, "--mesh", "pp=2", "--microbatches", "2")
    stages = stages_of(out.stdout)
    assert [s["index"] for s in stages] == [0, 1]
    assert "schedule = \"1f1b\"" in out.stdout
    # One micro-batch's program: the batch over M.
    for input_name, value in export.inputs().items():
        if value.ndim == 0:
            continue
        dims = [str(value.shape[0] // 2), *map(str, value.shape[1:])]
        pattern = rf"tensor<{'x'.join(dims)}x?[a-z0-9]*> \{{nn\.name = \"{input_name}\"\}}"
        assert any(re.search(pattern, s["args"]) for s in stages), (input_name, pattern)
    # The weights: all of them, shared only when tied or read by every layer.
    whole = subprocess.run([str(toolchain.tool("shard-opt")), str(export.model),
                            *export.shape_flags(tmp_path), "--compile-to", "partitioned",
                            "--microbatches", "2", "--mesh", "pp=2"],
                           capture_output=True, text=True, timeout=300)
    assert whole.returncode == 0, whole.stderr
    everything = set(WEIGHT.findall(whole.stdout))
    per_stage = [set(WEIGHT.findall(s["body"])) for s in stages]
    assert set.union(*per_stage) == everything
    both = per_stage[0] & per_stage[1]
    assert all(re.search(r"wte|embed|shared|relative_attention_bias|word_embeddings", w)
               for w in both), both
    # Passed values: the residual stream (T5: the encoder's output and
    # its mask too).
    sent = stages[0]["results"].count("dist.transfer")
    assert 1 <= sent <= (3 if name.startswith("t5") else 1), stages[0]["results"]
    assert stages[1]["args"].count("dist.transfer") == sent
    # Each graph output from one stage.
    outputs = [n for s in stages for n in re.findall(r'nn\.name = "([^"]+)"', s["results"])
               if not n.startswith("transfer:")]
    assert sorted(outputs) == sorted(export.expected().keys())


@pytest.mark.parametrize("schedule, flags, ranks", [
    ("gpipe", [], [0, 1, 2, 3]),
    ("1f1b", [], [0, 1, 2, 3]),
    ("zb-h1", [], [0, 1, 2, 3]),
    ("interleaved-1f1b", [], [0, 1, 2, 3, 0, 1, 2, 3]),
    ("zbv", [], [0, 1, 2, 3, 3, 2, 1, 0])])
def test_every_schedule_lays_out_its_stages(tmp_path, schedule, flags, ranks):
    """gpt2-8l at pp=4 over 4 micro-batches: each stage a function, on its
    rank; the stages chained by one value each; the actions the forwards
    of every stage and micro-batch, in the schedule's order."""
    _, out = compile_stages(tmp_path, "gpt2-8l-torchscript", "--mesh", "pp=4",
                            "--microbatches", "4", "--pipeline-schedule", schedule, *flags,
                            batch=4)
    stages = stages_of(out.stdout)
    assert [int(re.search(r"dist.pp_rank = (\d+)", s["attrs"]).group(1)) for s in stages] == ranks
    for s in stages[1:]:
        assert f"dist.from = {s['index'] - 1} : i64" in s["args"], s["args"]
    actions = re.search(r"actions = \[(.*?)\]", out.stdout).group(1)
    forwards = re.findall(r"(\d+)F(\d+)", actions)
    assert sorted(forwards) == sorted((str(st), str(m)) for st in range(len(ranks))
                                      for m in range(4))


def test_report_shows_each_stage(tmp_path):
    """--report with a pp axis: the layers, then per stage its layers, its
    estimated time per micro-batch and its per-rank report (weights,
    activations, collectives within the stage)."""
    _, out = compile_stages(tmp_path, "llama-8l-dynamo", "--mesh", "pp=2,tp=2", "--strategy",
                            "megatron", "--microbatches", "2", "--target", "cpu", "--report",
                            "-o", str(tmp_path / "m.shard"))
    stages = re.findall(r"^stage (\d) on pp rank (\d): layers (\d) to (\d)(.*), estimated "
                        r"([0-9.]+) ms per micro-batch", out.stderr, re.M)
    assert [s[:4] for s in stages] == [("0", "0", "0", "3"), ("1", "1", "4", "7")], out.stderr
    assert "and the embeddings" in stages[0][4] and "and the head" in stages[1][4]
    assert all(float(s[5]) > 0 for s in stages)
    assert out.stderr.count("report: @main on 2 ranks") == 2
    assert out.stderr.count("peak activation bytes per rank") == 2


def test_split_by_onnx_node(tmp_path):
    """--pipeline-split nodes:NAME starts a stage at the layer that holds
    the ONNX node, as layers:I does; a node of the embeddings, or one the
    program does not hold, is an error naming it."""
    layers = re.compile(r"dist\.layers = array<i64: (\d+), (\d+)>")
    by = {}
    for spec in ("nodes:/model/transformer/h.2/ln_1/LayerNormalization", "layers:2"):
        _, out = compile_stages(tmp_path, "gpt2-8l-torchscript", "--mesh", "pp=2",
                                "--microbatches", "2", "--pipeline-split", spec)
        by[spec] = layers.findall(out.stdout)
    assert by["layers:2"] == [("0", "2"), ("2", "8")]
    assert by["nodes:/model/transformer/h.2/ln_1/LayerNormalization"] == by["layers:2"]
    _, out = compile_stages(tmp_path, "gpt2-8l-torchscript", "--mesh", "pp=2", "--microbatches",
                            "2", "--pipeline-split", "nodes:/model/transformer/wte/Gather",
                            check=False)
    assert out.returncode != 0
    assert ("ONNX node '/model/transformer/wte/Gather' is in the embeddings or the head, which "
            "the first and last stages hold; name a node of a layer") in out.stderr
    _, out = compile_stages(tmp_path, "gpt2-8l-torchscript", "--mesh", "pp=2", "--microbatches",
                            "2", "--pipeline-split", "nodes:/model/nowhere", check=False)
    assert out.returncode != 0
    assert "no op of the program comes from an ONNX node named '/model/nowhere'" in out.stderr


def test_pipeline_errors_name_the_input_and_the_model(tmp_path):
    _, out = compile_stages(tmp_path, "vit-dynamo", "--mesh", "pp=2", "--microbatches", "2",
                            check=False)
    assert out.returncode != 0
    assert ("--microbatches 2 does not divide dimension 0 (the batch) of graph input "
            "'pixel_values' [3,3,16,16]") in out.stderr
    _, out = compile_stages(tmp_path, "minilm-l6-1of6-torchscript", "--mesh", "pp=2",
                            check=False)
    assert out.returncode != 0
    assert "nn-find-layers finds none in this program" in out.stderr
    _, out = compile_stages(tmp_path, "gpt2-torchscript", "--mesh", "pp=4", "--microbatches", "2",
                            check=False)
    assert out.returncode != 0
    assert "the pipeline has 4 stages but the model has 2 layers" in out.stderr


# --------------------------------------------------------------------------
# Running: shard-run under mpirun against onnxruntime
# --------------------------------------------------------------------------

def _batch_of(export, batch):
    """The export's inputs with `batch` rows: its own rows, then them
    again reversed along the sequence (other tokens, the same masks' kind)."""
    import numpy as np
    out = {}
    for name, v in export.inputs().items():
        rows = [v]
        while sum(r.shape[0] for r in rows) < batch:
            rows.append(v[:, ::-1] if v.ndim >= 2 and "mask" not in name else v)
        out[name] = np.ascontiguousarray(np.concatenate(rows)[:batch])
    return out


def _mpirun(ranks):
    import os
    import shutil
    env = {**os.environ, "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
    return [shutil.which("mpirun") or "mpirun", "--oversubscribe", "-np", str(ranks)], env


SCHEDULES = ["gpipe", "1f1b", "interleaved-1f1b", "zb-h1", "zbv"]
PIPELINE_RUNS = [
    # export, mesh, schedule, micro-batches, batch: every schedule at pp=2
    # and at pp=2 x dp=2 x tp=2 (8 ranks, oversubscribed), then other
    # models and pp=4 (the full matrix: docs/pipeline.md).
    *[("gpt2-8l-torchscript", "pp=2", s, 4, 4) for s in SCHEDULES],
    *[("llama-8l-dynamo", "pp=2,dp=2,tp=2", s, 2, 4) for s in SCHEDULES],
    ("gpt2-8l-torchscript", "pp=2,tp=2", "gpipe", 4, 4),
    ("llama-8l-dynamo", "pp=4", "zb-h1", 4, 4),
    ("t5-torchscript", "pp=2", "zbv", 2, 2),
    ("bert-dynamo", "pp=2", "1f1b", 2, 2),
]
# SHARDFLOW_FULL_TESTS=1: every schedule x pp=2,4 x (pp alone, with tp=2,
# with dp=2 x tp=2) x the 8-layer GPT-2 and Llama exports (120 runs).
if os.environ.get("SHARDFLOW_FULL_TESTS") == "1":
    PIPELINE_RUNS = [(name, f"pp={pp}{mesh}", s, 4, 8)
                     for name in ("gpt2-8l-torchscript", "gpt2-8l-dynamo", "llama-8l-torchscript",
                                  "llama-8l-dynamo")
                     for pp in (2, 4) for mesh in ("", ",tp=2", ",dp=2,tp=2")
                     for s in SCHEDULES]


@pytest.mark.parametrize("name, mesh, schedule, microbatches, batch", PIPELINE_RUNS,
                         ids=[f"{r[0]}-{r[1]}-{r[2]}" for r in PIPELINE_RUNS])
def test_pipelines_equal_onnxruntime(tmp_path, name, mesh, schedule, microbatches, batch):
    """The forward program cut into stages and run under mpirun, one
    process per rank (tp within a stage with megatron), every schedule's
    forward order: the outputs within 1e-4 of onnxruntime's on the whole
    batch."""
    import numpy as np
    import onnxruntime as ort
    export = real_exports.load(name)
    feeds = _batch_of(export, batch)
    np.savez(tmp_path / "in.npz", **feeds)
    shapes = [a for n, v in feeds.items()
              for a in ("--input-shape", f"{n}={','.join(map(str, v.shape))}")]
    strategy = ["--strategy", "megatron"] if "tp" in mesh else []
    artifact = tmp_path / "model.shard"
    out = subprocess.run([str(toolchain.tool("shard-opt")), str(export.model), *shapes,
                          "--mesh", mesh, *strategy, "--microbatches", str(microbatches),
                          "--pipeline-schedule", schedule, "--target", "cpu", "-o",
                          str(artifact)], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    assert artifact.read_text().startswith("shardflow-pipeline 1\n")
    ranks = 1
    for axis in mesh.split(","):
        ranks *= int(axis.split("=")[1])
    launcher, env = _mpirun(ranks)
    run = subprocess.run([*launcher, str(toolchain.tool("shard-run")), str(artifact),
                          "--inputs", str(tmp_path / "in.npz"), "--output",
                          str(tmp_path / "out.npz")], capture_output=True, text=True,
                         timeout=600, env=env)
    assert run.returncode == 0, run.stderr
    session = ort.InferenceSession(str(export.model), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    expected = dict(zip(names, session.run(None, feeds)))
    with np.load(tmp_path / "out.npz") as got:
        assert sorted(got.files) == sorted(names)
        for n in names:
            np.testing.assert_allclose(got[n], expected[n], rtol=1e-4, atol=1e-5, err_msg=n)


def test_pipeline_run_errors(tmp_path):
    """A pipeline artifact launched with the wrong number of ranks, given
    training flags, or missing an input: an error naming what is wrong."""
    import numpy as np
    export, out = compile_stages(tmp_path, "gpt2-torchscript", "--mesh", "pp=2",
                                 "--microbatches", "2", "--target", "cpu", "-o",
                                 str(tmp_path / "m.shard"))
    shard_run = str(toolchain.tool("shard-run"))
    launcher, env = _mpirun(4)
    run = subprocess.run([*launcher, shard_run, str(tmp_path / "m.shard")],
                         capture_output=True, text=True, timeout=300, env=env)
    assert run.returncode != 0
    assert "the pipeline artifact was compiled for 2 rank(s) (pp 2 x 1) but was launched " \
           "with 4" in run.stderr
    launcher, env = _mpirun(2)
    run = subprocess.run([*launcher, shard_run, str(tmp_path / "m.shard"), "--steps", "2"],
                         capture_output=True, text=True, timeout=300, env=env)
    assert run.returncode != 0
    assert "is a forward-only pipeline (compile with shard-opt --train)" in run.stderr
    np.savez(tmp_path / "in.npz", input_ids=export.inputs()["input_ids"])
    run = subprocess.run([*launcher, shard_run, str(tmp_path / "m.shard"), "--inputs",
                          str(tmp_path / "in.npz")], capture_output=True, text=True,
                         timeout=300, env=env)
    assert run.returncode != 0
    assert "input 'attention_mask' (i64[2,10]) was not given" in run.stderr


def test_the_bundled_example_runs_as_a_pipeline(tmp_path):
    """tools/example.sh's pipeline step: the bundled example at pp=2 with 4
    micro-batches under 1F1B, under mpirun, against onnxruntime and against
    the unpipelined artifact on the same inputs (python -m
    shardflow.compare --baseline)."""
    import os
    from pathlib import Path
    root = Path(__file__).resolve().parents[2]
    model = root / "examples" / "tiny-gpt2" / "model.onnx"
    shard_opt = str(toolchain.tool("shard-opt"))
    for extra, name in (([], "b4"), (["--mesh", "pp=2", "--microbatches", "4",
                                      "--pipeline-schedule", "1f1b"], "pp2")):
        out = subprocess.run([shard_opt, str(model), "--input-shape", "input_ids=4,16", *extra,
                              "--target", "cpu", "-o", str(tmp_path / f"{name}.shard")],
                             capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr
    _, env = _mpirun(2)
    env["PYTHONPATH"] = str(root / "python")
    out = subprocess.run([os.sys.executable, "-m", "shardflow.compare", str(model),
                          str(tmp_path / "pp2.shard"), "--input-shape", "input_ids=4,16",
                          "--ranks", "2", "--baseline", str(tmp_path / "b4.shard")],
                         capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "shard-run (2 ranks) matches onnxruntime" in out.stdout
    # Micro-batches of one row may take other GEMM kernels than the whole
    # batch: the same up to rounding.
    apart = re.search(r"shard-run matches .*b4\.shard \(1 rank\) on the same inputs: worst "
                      r"relative L2 error (\S+)", out.stdout)
    assert apart and float(apart.group(1)) <= 1e-6, out.stdout


def test_trace_and_timeline(tmp_path):
    """shard-run --trace records every rank's pipeline actions; python -m
    shardflow.timeline draws them and measures the bubble, which on a
    hand-made trace is exactly the ranks' idle share."""
    import json
    import os
    from pathlib import Path

    import numpy as np

    from shardflow import timeline
    root = Path(__file__).resolve().parents[2]
    model = root / "examples" / "tiny-gpt2" / "model.onnx"
    out = subprocess.run([str(toolchain.tool("shard-opt")), str(model), "--input-shape",
                          "input_ids=4,16", "--mesh", "pp=2", "--microbatches", "4",
                          "--target", "cpu", "-o", str(tmp_path / "pp2.shard")],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    np.savez(tmp_path / "in.npz", input_ids=np.arange(64, dtype=np.int64).reshape(4, 16) % 128)
    launcher, env = _mpirun(2)
    run = subprocess.run([*launcher, str(toolchain.tool("shard-run")), str(tmp_path / "pp2.shard"),
                          "--inputs", str(tmp_path / "in.npz"), "--repeat", "2", "--trace",
                          str(tmp_path / "trace.json")], capture_output=True, text=True,
                         timeout=300, env=env)
    assert run.returncode == 0, run.stderr
    runs = timeline.load(tmp_path / "trace.json")
    assert sorted(runs) == [0, 1]
    for actions in runs.values():
        assert sorted((a["rank"], a["stage"], a["kind"], a["microbatch"]) for a in actions) == \
            sorted((r, r, "F", m) for r in (0, 1) for m in range(4))
        # Stage 1's forward of a micro-batch starts after stage 0's ends.
        ends = {a["microbatch"]: a["end"] for a in actions if a["stage"] == 0}
        for a in actions:
            if a["stage"] == 1:
                assert a["start"] >= ends[a["microbatch"]]
    out = subprocess.run([os.sys.executable, "-m", "shardflow.timeline",
                          str(tmp_path / "trace.json"), "-o", str(tmp_path / "timeline.png")],
                         capture_output=True, text=True, timeout=300,
                         env={**os.environ, "PYTHONPATH": str(root / "python")})
    assert out.returncode == 0, out.stderr
    assert "run 1: 2 stages on 2 ranks, 4 micro-batches" in out.stdout
    assert "(equal stages in theory: (p-1)/(M+p-1) = 0.200)" in out.stdout
    assert (tmp_path / "timeline.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # The measure on a trace made by hand: two ranks, two micro-batches of
    # 1 ms forwards, rank 1 a step behind: span 3 ms, 4 ms computed of 6.
    events = [{"name": "thread_name", "ph": "M", "pid": r, "tid": 0,
               "args": {"name": "pipeline"}} for r in (0, 1)]
    for r in (0, 1):
        for m in (0, 1):
            events.append({"name": f"{r}F{m}", "cat": "forward", "ph": "X", "pid": r, "tid": 0,
                           "ts": 1000.0 * (r + m), "dur": 1000.0, "args": {"run": 0}})
    (tmp_path / "hand.json").write_text(json.dumps({"traceEvents": events}))
    stats = timeline.measure(timeline.load(tmp_path / "hand.json")[0])
    assert abs(stats["span"] - 3e-3) < 1e-12
    assert abs(stats["bubble"] - (1 - 4 / 6)) < 1e-12
    assert abs(stats["theory"] - 1 / 3) < 1e-12


def test_a_cuda_pipeline_on_the_standins(tmp_path):
    """The stages compiled for CUDA (sm_80 cubins with PTX the stand-ins
    run), one stand-in GPU per rank under mpirun: the values between
    stages go through host memory and MPI; the logits within 1e-4 of
    onnxruntime's."""
    import numpy as np
    import onnxruntime as ort
    from test_cuda_standin import standin_env
    env = standin_env(2)
    export = real_exports.load("gpt2-8l-torchscript")
    feeds = export.inputs()
    np.savez(tmp_path / "in.npz", **feeds)
    out = subprocess.run([str(toolchain.tool("shard-opt")), str(export.model),
                          *export.shape_flags(tmp_path), "--mesh", "pp=2", "--microbatches", "2",
                          "--target", "cuda", "--cuda-arch=sm_80", "-o",
                          str(tmp_path / "m.shard")], capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stderr
    launcher, mpi_env = _mpirun(2)
    launcher += [a for k in ("LD_LIBRARY_PATH", "SHARDFLOW_STANDIN_GPUS", "SHARDFLOW_STANDIN_SM")
                 for a in ("-x", k)]
    run = subprocess.run([*launcher, str(toolchain.tool("shard-run")), str(tmp_path / "m.shard"),
                          "--inputs", str(tmp_path / "in.npz"), "--output",
                          str(tmp_path / "out.npz")], capture_output=True, text=True,
                         timeout=600, env={**mpi_env, **env})
    assert run.returncode == 0, run.stderr
    expected = ort.InferenceSession(str(export.model)).run(None, feeds)[0]
    with np.load(tmp_path / "out.npz") as got:
        np.testing.assert_allclose(got["logits"], expected, rtol=1e-4, atol=1e-5)
