#!/usr/bin/env python3
"""A GPT-2-style training step on the CPU: shard-run against PyTorch.

Builds Hugging Face's GPT2LMHeadModel (transformers; tied LM head, dropout
off, a config from the flags; or LlamaForCausalLM with --model llama,
BertForMaskedLM with --model bert), exports it with torch.onnx.export (the
TorchScript exporter, opset 17, input_ids in, logits out), compiles one
AdamW training step with `shard-opt --train --loss cross-entropy`, and
trains both from the same weights on the same batches: shard-run
(`--data --steps --threads T --log`) and the original module under
torch.optim.AdamW with torch.set_num_threads(T), each in its own process
so that its peak RSS (wait4) is its own. Both run --warmup steps, then
--steps timed ones.

Prints per thread count: the median step time of each side, the ratio
(PyTorch's time / ours: above 1 means Shardflow is faster), both peak RSS
values; and the agreement: every step's loss and gradient norm (the first
five side by side) and the final weights (relative L2, by tensor and over
all of them, beside how far the weights moved). Goal (training issue): at
least 1.0x PyTorch's speed at the same thread count.

The labels are the next tokens, aligned with the positions as shard-opt's
cross-entropy takes them (not shifted), and PyTorch's loss is
F.cross_entropy on the same labels rather than the module's shifted loss.
The batches follow a random Markov chain over the vocabulary (four
successors per token), so the loss has somewhere to go. BERT's labels are
the tokens at 15% of the positions, which show the last token id instead
(its [MASK]); the other positions are labelled -100 and ignored on both
sides.

Run by hand, never in CI: the first run creates bench/out/train-venv
(ignored by git), installs bench/train_bench_requirements.txt into it
(torch from PyPI, with its CUDA wheels: several GB) and runs itself again
with that venv's Python. Needs the built shard-opt and shard-run.

    python3 bench/train_bench.py [--threads 1,2] [--steps 20] [--build-dir build]
    python3 bench/train_bench.py --model llama   # Llama: GQA, RMSNorm, rotary, SwiGLU
    python3 bench/train_bench.py --model bert    # BERT masked LM: 15% of positions labelled
    python3 bench/train_bench.py --profile   # also where each side's time goes

--profile adds `perf record` over a shard-run training run (shard-run's own
--profile and --trace report nothing for a training step) and
torch.profiler over one PyTorch step.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import venv
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
VENV = HERE / "out" / "train-venv"
REQUIREMENTS = HERE / "train_bench_requirements.txt"


# --------------------------------------------------------------------------
# The venv

def in_venv() -> bool:
    return Path(sys.prefix).resolve() == VENV.resolve()


def bootstrap() -> None:
    """Create the venv if needed, install the pinned requirements into it,
    and run this script again with its Python."""
    python = VENV / "bin" / "python"
    stamp = VENV / "installed.txt"
    wanted = REQUIREMENTS.read_text()
    if not python.exists():
        print(f"creating {VENV}", flush=True)
        venv.EnvBuilder(with_pip=True).create(VENV)
    if not stamp.exists() or stamp.read_text() != wanted:
        subprocess.run([str(python), "-m", "pip", "install", "--disable-pip-version-check",
                        "-r", str(REQUIREMENTS)], check=True)
        stamp.write_text(wanted)
    os.execv(str(python), [str(python), __file__, *sys.argv[1:]])


# --------------------------------------------------------------------------
# Everything below runs inside the venv.

def gpt2_config(cfg: dict):
    import transformers
    return transformers.GPT2Config(
        vocab_size=cfg["vocab"], n_positions=cfg["seq"], n_embd=cfg["hidden"],
        n_layer=cfg["layers"], n_head=cfg["heads"], tie_word_embeddings=True, use_cache=False,
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)


def llama_config(cfg: dict):
    """Llama with grouped-query attention (half as many key/value heads),
    RMSNorm, rotary embeddings and SwiGLU; an untied LM head."""
    import transformers
    return transformers.LlamaConfig(
        vocab_size=cfg["vocab"], hidden_size=cfg["hidden"],
        intermediate_size=(cfg["hidden"] * 8 // 3 + 7) // 8 * 8, num_hidden_layers=cfg["layers"],
        num_attention_heads=cfg["heads"], num_key_value_heads=max(1, cfg["heads"] // 2),
        max_position_embeddings=cfg["seq"], tie_word_embeddings=False, use_cache=False,
        attention_dropout=0.0)


def bert_config(cfg: dict):
    """BERT (post-norm encoder, GELU, learned positions, token types) with
    its masked-language-model head, whose decoder is tied to the word
    embeddings; dropout off."""
    import transformers
    return transformers.BertConfig(
        vocab_size=cfg["vocab"], hidden_size=cfg["hidden"], num_hidden_layers=cfg["layers"],
        num_attention_heads=cfg["heads"], intermediate_size=4 * cfg["hidden"],
        max_position_embeddings=cfg["seq"], hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0, tie_word_embeddings=True)


def build_model(cfg: dict):
    """GPT2LMHeadModel (or LlamaForCausalLM with --model llama,
    BertForMaskedLM with --model bert) with Hugging
    Face's initialization, and the one-dimensional parameters (norms,
    biases) given distinct values: at their initial 1s and 0s the
    TorchScript exporter writes equal tensors as one initializer (it
    deduplicates by value), and shard-opt would train equal initializers
    as one parameter (its tie detection), neither of which a trained
    checkpoint would see."""
    import torch
    import transformers
    torch.manual_seed(cfg["seed"])
    if cfg.get("model", "gpt2") == "llama":
        model = transformers.LlamaForCausalLM(llama_config(cfg))
    elif cfg.get("model") == "bert":
        model = transformers.BertForMaskedLM(bert_config(cfg))
    else:
        model = transformers.GPT2LMHeadModel(gpt2_config(cfg))
    model.set_attn_implementation(cfg["attn"])
    gen = torch.Generator().manual_seed(cfg["seed"] + 1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1:
                owner = name.split(".")[-2]
                norm = owner.startswith("ln_") or owner.lower().endswith("norm")
                base = 1.0 if norm and name.endswith("weight") else 0.0
                p.copy_(base + 0.02 * torch.randn(p.shape, generator=gen))
    return model


def make_batches(cfg: dict, count: int) -> dict:
    """`count` batches of input_ids and their next tokens as labels, from a
    Markov chain in which each token has four possible successors."""
    import numpy as np
    rng = np.random.default_rng(cfg["seed"] + 2)
    vocab, batch, seq = cfg["vocab"], cfg["batch"], cfg["seq"]
    successors = rng.integers(0, vocab, (vocab, 4))
    tokens = np.empty((count * batch, seq + 1), dtype=np.int64)
    tokens[:, 0] = rng.integers(0, vocab, count * batch)
    for i in range(1, seq + 1):
        tokens[:, i] = successors[tokens[:, i - 1], rng.integers(0, 4, count * batch)]
    tokens = tokens.reshape(count, batch, seq + 1)
    if cfg.get("model") == "bert":
        # Masked language modelling: 15% of the positions show the last
        # token id as [MASK] and are labelled with their token; the others
        # are ignored (-100, shard-opt's and PyTorch's default).
        ids = np.ascontiguousarray(tokens[:, :, :-1])
        masked = rng.random(ids.shape) < 0.15
        labels = np.where(masked, ids, -100).astype(np.int64)
        return {"input_ids": np.where(masked, vocab - 1, ids).astype(np.int64), "labels": labels}
    return {"input_ids": np.ascontiguousarray(tokens[:, :, :-1]),
            "labels": np.ascontiguousarray(tokens[:, :, 1:])}


def export(model, cfg: dict, path: Path) -> None:
    import torch

    class Logits(torch.nn.Module):
        def __init__(self, lm):
            super().__init__()
            self.lm = lm

        def forward(self, input_ids):
            # An explicit all-ones mask: without one, transformers infers
            # padding from the ids with ops the TorchScript exporter lacks.
            mask = torch.ones_like(input_ids)
            return self.lm(input_ids=input_ids, attention_mask=mask).logits

    model.eval()
    ids = torch.zeros((cfg["batch"], cfg["seq"]), dtype=torch.int64)
    torch.onnx.export(Logits(model), (ids,), str(path), dynamo=False, opset_version=17,
                      input_names=["input_ids"], output_names=["logits"],
                      do_constant_folding=True)
    model.train()


def initializer_map(onnx_path: Path, model) -> tuple[dict, list[str]]:
    """ONNX initializer name -> (PyTorch parameter name, transposed), found
    by value: the exporter names some initializers after the parameter and
    writes others as folded copies (the tied LM head, transposed). Returns
    it and the parameters no initializer holds."""
    import numpy as np
    import onnx
    from onnx import numpy_helper
    params = {n: p.detach().numpy() for n, p in model.named_parameters()}
    found, mapping = set(), {}
    for init in onnx.load(str(onnx_path)).graph.initializer:
        arr = numpy_helper.to_array(init)
        if arr.dtype != np.float32 or arr.size < 2:
            continue
        for name, p in params.items():
            if p.size != arr.size:
                continue
            if np.array_equal(arr.reshape(p.shape), p):
                mapping[init.name] = (name, False)
            elif p.ndim == 2 and arr.ndim == 2 and np.array_equal(arr, p.T):
                mapping[init.name] = (name, True)
            else:
                continue
            found.add(name)
            break
    return mapping, [n for n in params if n not in found]


def torch_worker(spec_path: str) -> int:
    """One PyTorch training run (its own process): writes the per-step
    losses, gradient norms and times, and the final weights."""
    import numpy as np
    import torch
    import torch.nn.functional as F
    spec = json.loads(Path(spec_path).read_text())
    cfg = spec["config"]
    torch.set_num_threads(spec["threads"])
    torch.set_num_interop_threads(1)
    model = build_model(cfg)
    initial = np.load(spec["initial"])
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(torch.from_numpy(initial[name]))
    model.train()
    params = [p for p in model.parameters()]  # tied: the embedding once
    if spec.get("optimizer", "adamw") == "sgd":
        opt = torch.optim.SGD(params, lr=spec["lr"], weight_decay=spec["weight_decay"])
    else:
        opt = torch.optim.AdamW(params, lr=spec["lr"], betas=(0.9, 0.999), eps=1e-8,
                                weight_decay=spec["weight_decay"])
    data = np.load(spec["data"])
    ids_all, labels_all = data["input_ids"], data["labels"]
    vocab = cfg["vocab"]
    losses, norms, seconds = [], [], []
    profile_step = spec["steps"] - 1 if spec.get("profile") else -1
    for t in range(spec["steps"]):
        prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) \
            if t == profile_step else None
        if prof:
            prof.__enter__()
        t0 = time.perf_counter()
        ids = torch.from_numpy(ids_all[t % len(ids_all)])
        labels = torch.from_numpy(labels_all[t % len(labels_all)])
        opt.zero_grad(set_to_none=True)
        logits = model(input_ids=ids).logits
        loss = F.cross_entropy(logits.view(-1, vocab), labels.view(-1))
        loss.backward()
        opt.step()
        seconds.append(time.perf_counter() - t0)
        if prof:
            prof.__exit__(None, None, None)
            print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=20),
                  flush=True)
        losses.append(loss.item())
        # The gradients are still there after the step: their norm, as
        # shard-run logs it, outside the timed part.
        with torch.no_grad():
            norms.append(math.sqrt(sum(float(p.grad.double().pow(2).sum()) for p in params)))
    np.savez(spec["weights"], **{n: p.detach().numpy() for n, p in model.named_parameters()})
    Path(spec["result"]).write_text(json.dumps(
        {"loss": losses, "grad_norm": norms, "step_seconds": seconds,
         "torch_threads": torch.get_num_threads(), "torch": torch.__version__}))
    return 0


def run_shardflow(shard_run: str, artifact: Path, data: Path, threads: int, total: int,
                  work: Path) -> dict:
    from cpu_bench import run_measured
    log, weights = work / f"shardflow-t{threads}.jsonl", work / f"shardflow-t{threads}.npz"
    _, rss = run_measured([shard_run, str(artifact), "--data", str(data), "--steps", str(total),
                           "--threads", str(threads), "--log", str(log),
                           "--save-weights", str(weights)])
    steps = [json.loads(line) for line in log.read_text().splitlines()]
    return {"loss": [s["loss"] for s in steps], "grad_norm": [s["grad_norm"] for s in steps],
            "step_seconds": [s["step_seconds"] for s in steps], "rss": rss, "weights": weights}


def run_torch(cfg: dict, args, data: Path, threads: int, total: int, work: Path,
              profile: bool = False) -> dict:
    from cpu_bench import run_measured
    spec = {"config": cfg, "threads": threads, "steps": total, "lr": args.lr,
            "optimizer": args.optimizer,
            "weight_decay": args.weight_decay, "data": str(data), "profile": profile,
            "initial": str(work / "initial.npz"),
            "weights": str(work / f"torch-t{threads}.npz"),
            "result": str(work / f"torch-t{threads}.json")}
    spec_path = work / f"torch-t{threads}-spec.json"
    spec_path.write_text(json.dumps(spec))
    # The thread pools read these when torch is imported.
    saved = {k: os.environ.get(k) for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    os.environ.update(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    try:
        out, rss = run_measured([sys.executable, __file__, "--torch-worker", str(spec_path)])
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    result = json.loads(Path(spec["result"]).read_text())
    result.update(rss=rss, weights=Path(spec["weights"]), output=out)
    return result


def relative(a, b) -> float:
    import numpy as np
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))


def compare_weights(ours: Path, theirs: Path, initial: dict, mapping: dict) -> dict:
    """Relative L2 of each trained parameter (ours by ONNX initializer name,
    against PyTorch's by parameter name), over all of them, and how far
    PyTorch's moved from the initial weights."""
    import numpy as np
    ours, theirs = dict(np.load(ours)), dict(np.load(theirs))
    per, diff2, norm2, moved2 = {}, 0.0, 0.0, 0.0
    # One initializer per parameter: the one in the parameter's own layout.
    chosen = {}
    for init, (name, transposed) in mapping.items():
        if init in ours and (name not in chosen or chosen[name][1]):
            chosen[name] = (init, transposed)
    for name, (init, transposed) in sorted(chosen.items()):
        a = ours[init].T if transposed else ours[init]
        b = theirs[name]
        a = a.reshape(b.shape).astype(np.float64)
        b = b.astype(np.float64)
        per[name] = relative(a, b)
        diff2 += float(np.sum((a - b) ** 2))
        norm2 += float(np.sum(b ** 2))
        moved2 += float(np.sum((b - initial[name]) ** 2))
    missing = sorted(set(theirs) - set(chosen) - {"lm_head.weight"})
    return {"per": per, "all": math.sqrt(diff2 / norm2), "moved": math.sqrt(moved2 / norm2),
            "missing": missing}


def perf_profile(shard_run: str, artifact: Path, data: Path, threads: int, total: int,
                 work: Path) -> None:
    """Where shard-run's training steps spend their time, by function
    (shard-run's --profile reports nothing for a training step)."""
    perf = shutil.which("perf")
    if not perf:
        print("  (perf is not installed: no profile of shard-run)")
        return
    rec = subprocess.run([perf, "record", "-F", "2000", "-o", str(work / "perf.data"), "--",
                          shard_run, str(artifact), "--data", str(data), "--steps", str(total),
                          "--threads", str(threads)], capture_output=True, text=True)
    if rec.returncode != 0:
        print(f"  perf record failed:\n{rec.stderr[-2000:]}")
        return
    rep = subprocess.run([perf, "report", "-i", str(work / "perf.data"), "--stdio",
                          "--no-children", "--sort", "dso,symbol", "--percent-limit", "1"],
                         capture_output=True, text=True)
    lines = [l for l in rep.stdout.splitlines() if l.strip() and not l.startswith("#")]
    print("\n".join(lines[:30]))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", default="1,2", help="thread counts, comma-separated")
    parser.add_argument("--steps", type=int, default=20, help="timed steps")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps before them")
    parser.add_argument("--model", choices=["gpt2", "llama", "bert"], default="gpt2",
                        help="the Hugging Face module: GPT2LMHeadModel (tied LM head), "
                             "LlamaForCausalLM (GQA with half the heads for keys and values, "
                             "RMSNorm, rotary, SwiGLU) or BertForMaskedLM (post-norm encoder, "
                             "MLM head tied to the embeddings; 15%% of the positions masked "
                             "and labelled, the others ignored)")
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--vocab", type=int, default=2048)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--optimizer", choices=["adamw", "sgd"], default="adamw",
                        help="sgd: plain SGD on both sides, which does not normalize a "
                             "gradient's rounding noise into steps of lr as AdamW does")
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--weight-decay", type=float, default=0.01)
    parser.add_argument("--attn", choices=["sdpa", "eager"], default="sdpa",
                        help="the module's attn_implementation, trained and exported")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--runs", type=int, default=1,
                        help="runs of each side per thread count (alternating); the table takes "
                             "each side's best median and gives the range of per-run ratios")
    parser.add_argument("--build-dir", default=os.environ.get("SHARDFLOW_BUILD_DIR", "build"),
                        help="where bin/shard-opt and bin/shard-run are (default build)")
    parser.add_argument("--keep", help="keep the model, artifact, data and logs in this folder")
    parser.add_argument("--profile", action="store_true",
                        help="also profile one shard-run training run (perf) and one PyTorch step")
    parser.add_argument("--torch-worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if not in_venv():
        bootstrap()
    if args.torch_worker:
        return torch_worker(args.torch_worker)

    import numpy as np
    import onnx
    import torch
    import transformers

    build = Path(args.build_dir)
    os.environ["SHARDFLOW_BUILD_DIR"] = str(build if build.is_absolute() else ROOT / build)
    sys.path.insert(0, str(ROOT / "python"))
    sys.path.insert(0, str(HERE))
    from shardflow import toolchain
    shard_opt, shard_run = str(toolchain.tool("shard-opt")), str(toolchain.tool("shard-run"))

    cfg = dict(model=args.model, layers=args.layers, hidden=args.hidden, heads=args.heads,
               vocab=args.vocab, seq=args.seq, batch=args.batch, seed=args.seed, attn=args.attn)
    total = args.warmup + args.steps
    threads = [int(t) for t in args.threads.split(",")]
    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="train-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, "
          f"onnx {onnx.__version__}, numpy {np.__version__}; work folder {work}", flush=True)

    model = build_model(cfg)
    initial = {n: p.detach().numpy().astype(np.float64) for n, p in model.named_parameters()}
    # The PyTorch runs start from these weights, as the export does.
    np.savez(work / "initial.npz", **{n: p.detach().numpy() for n, p in model.named_parameters()})
    onnx_path = work / "model.onnx"
    export(model, cfg, onnx_path)
    mapping, unmapped = initializer_map(onnx_path, model)
    if unmapped:
        print(f"warning: no ONNX initializer holds {unmapped}: those cannot be compared")
    data = work / "data.npz"
    np.savez(data, **make_batches(cfg, total))

    artifact = work / "step.shard"
    cmd = [shard_opt, str(onnx_path), "--input-shape", f"input_ids={args.batch},{args.seq}",
           "--train", "--loss", "cross-entropy", "--optimizer", args.optimizer,
           "--lr", str(args.lr),
           "--weight-decay", str(args.weight_decay), "--target", "cpu", "--report",
           "-o", str(artifact)]
    t0 = time.perf_counter()
    res = subprocess.run(cmd, capture_output=True, text=True)
    compile_s = time.perf_counter() - t0
    (work / "compile.log").write_text(res.stdout + res.stderr)
    if res.returncode != 0:
        print(f"shard-opt failed ({res.returncode}):\n{res.stderr[-4000:]}")
        return 1
    ties = [l.strip() for l in (res.stdout + res.stderr).splitlines() if "tie" in l.lower()]
    print(f"compiled in {compile_s:.2f} s: {artifact.stat().st_size / 1e6:.2f} MB "
          f"(shard-opt --report in {work / 'compile.log'})")
    for line in ties[:4]:
        print(f"  {line}")

    rows = []
    for t in threads:
        runs = []
        for _ in range(args.runs):
            ours = run_shardflow(shard_run, artifact, data, t, total, work)
            theirs = run_torch(cfg, args, data, t, total, work)
            runs.append((ours, theirs))
        ours, theirs = runs[0]
        med = lambda r: statistics.median(r["step_seconds"][args.warmup:])
        our_s = min(med(o) for o, _ in runs)
        their_s = min(med(p) for _, p in runs)
        ratios = [med(p) / med(o) for o, p in runs]
        loss_rel = max(abs(a - b) / abs(b) for a, b in zip(ours["loss"], theirs["loss"]))
        norm_rel = max(abs(a - b) / abs(b) for a, b in zip(ours["grad_norm"], theirs["grad_norm"]))
        w = compare_weights(ours["weights"], theirs["weights"], initial, mapping)
        rows.append(dict(threads=t, ours=our_s, theirs=their_s, ratios=ratios,
                         our_rss=max(o["rss"] for o, _ in runs),
                         their_rss=max(p["rss"] for _, p in runs),
                         loss_rel=loss_rel, norm_rel=norm_rel, weights=w,
                         torch_threads=theirs["torch_threads"]))

        print(f"\n--- {t} thread(s): steps 1-5, loss and gradient norm ---")
        print(f"{'step':>4} {'shardflow loss':>15} {'pytorch loss':>13} {'rel':>9} "
              f"{'shardflow |g|':>14} {'pytorch |g|':>12}")
        for i in range(min(5, total)):
            a, b = ours["loss"][i], theirs["loss"][i]
            print(f"{i + 1:4} {a:15.7f} {b:13.7f} {abs(a - b) / abs(b):9.2e} "
                  f"{ours['grad_norm'][i]:14.6f} {theirs['grad_norm'][i]:12.6f}")
        print(f"step {total}: loss {ours['loss'][-1]:.6f} against {theirs['loss'][-1]:.6f}")
        print(f"all {total} steps: loss within {loss_rel:.2e} relative, gradient norm within "
              f"{norm_rel:.2e}")
        worst = sorted(w["per"].items(), key=lambda kv: -kv[1])[:3]
        print(f"final weights: {w['all']:.2e} relative L2 over all {len(w['per'])} parameters "
              f"(they moved {w['moved']:.2e} from the start); worst: "
              + ", ".join(f"{n} {v:.2e}" for n, v in worst))
        if w["missing"]:
            print(f"  not compared (no initializer saved): {w['missing']}")

    family = {"llama": "Llama", "bert": "BERT (masked LM)"}.get(args.model, "GPT-2")
    print(f"\n{family}-style model: {args.layers} layers, hidden {args.hidden}, {args.heads} heads, "
          f"vocabulary {args.vocab}, batch {args.batch} x {args.seq} tokens, "
          f"{'AdamW' if args.optimizer == 'adamw' else 'SGD'} (lr {args.lr}, "
          f"weight decay {args.weight_decay}); median of {args.steps} steps after {args.warmup}; "
          f"attn_implementation {args.attn}; {args.runs} run(s) per side\n")
    print(f"{'threads':>7} {'shardflow ms':>13} {'pytorch ms':>11} {'ratio':>7} {'per-run':>16} "
          f"{'our RSS':>9} {'torch RSS':>10} {'loss rel':>9} {'weights rel L2':>15}")
    for r in rows:
        span = f"{min(r['ratios']):.2f}x to {max(r['ratios']):.2f}x"
        print(f"{r['threads']:7} {r['ours'] * 1e3:13.1f} {r['theirs'] * 1e3:11.1f} "
              f"{r['theirs'] / r['ours']:6.2f}x {span:>16} {r['our_rss']:8.1f}M "
              f"{r['their_rss']:9.1f}M {r['loss_rel']:9.1e} {r['weights']['all']:15.1e}")
        verdict = "met" if r["theirs"] / r["ours"] >= 1.0 else "MISSED"
        print(f"        goal >= 1.0x PyTorch at {r['threads']} thread(s): {verdict}"
              f" (torch.get_num_threads() {r['torch_threads']})")
    print("ratio: PyTorch's step time / Shardflow's (above 1: Shardflow faster); RSS: peak of "
          "each process (PyTorch's includes its interpreter and libraries)")

    if args.profile:
        t = max(threads)
        print(f"\n--- where shard-run's time goes ({total} steps, {t} thread(s), perf) ---")
        perf_profile(shard_run, artifact, data, t, total, work)
        print(f"\n--- where PyTorch's time goes (step {total}, {t} thread(s), torch.profiler) ---")
        print(run_torch(cfg, args, data, t, total, work, profile=True)["output"])
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
