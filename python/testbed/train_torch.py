#!/usr/bin/env python3
"""Shardflow's training step against PyTorch training the original Hugging
Face module of each real export (test/real-exports).

For every JAX reference (test/real-exports/<name>/train-reference-<config>.npz,
written by train_reference.py: the shard-opt flags, two batches with their
labels, five steps), this

- compiles the export with those flags for the CPU and trains it five steps
  with shard-run (`--data --steps 5 --log --save-weights`), as
  test_training.py's JAX test does;
- rebuilds the module the export was made from (export_models.py's spec:
  the same class, config, seed and random weights; eval mode, so dropout
  is off as in the export; the attention implementation the export used),
  checks that its parameters are the export's initializers (by value,
  export_models.map_initializers), and trains it in float64 (float32
  where float64 gives NaN: Gemma 2's eager attention) on the same
  batches, an embedding's padding_idx cleared (the ONNX graph has a plain
  Gather, whose every row trains): the first output, torch.nn.functional.cross_entropy (labels
  aligned with the positions, -100 ignored) or mse_loss, torch.optim.AdamW
  or SGD with the flags' settings;
- freezes, on both sides, what the export cannot train as PyTorch does:
  a parameter no initializer holds (the exporter folded it into a
  computed constant: T5's relative position bias, ViT's class token) and
  the constants it became (`--freeze`); the pooler that the first output
  does not reach has no gradient in PyTorch and none here;
- compares every step's loss and gradient norm (relative, goal 1e-4) and
  the final weights (relative L2 over every parameter an initializer
  holds, goal 1e-3), and says how far the weights moved.

    python3 python/testbed/train_torch.py                     # every reference
    python3 python/testbed/train_torch.py --only gpt2-dynamo t5-torchscript
    python3 python/testbed/train_torch.py --configs sgd

Run by hand, never in CI. It needs torch and transformers at the versions
export_models.py pins: it runs itself again with the first Python that has
them of python/testbed/.venv (export_models.py creates it) and
bench/out/train-venv (bench/train_bench.py creates it, with the same
pins). Needs the built shard-opt and shard-run (--build-dir, default
build).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
PYTHONS = [HERE / ".venv" / "bin" / "python", ROOT / "bench" / "out" / "train-venv" / "bin" / "python"]
LOSS_TOL, GRAD_NORM_TOL, WEIGHT_TOL = 1e-4, 1e-4, 1e-3


def ensure_torch() -> None:
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
        return
    except ImportError:
        pass
    for python in PYTHONS:
        # A venv's python links to the base one: tell them apart by prefix.
        if python.exists() and Path(sys.prefix).resolve() != python.parents[1].resolve():
            os.execv(str(python), [str(python), __file__, *sys.argv[1:]])
    sys.exit("train_torch.py needs torch and transformers: run python/testbed/export_models.py "
             "once (it creates python/testbed/.venv), or bench/train_bench.py")


def flag(flags: list[str], name: str, default=None):
    return flags[flags.index(name) + 1] if name in flags else default


def build_module(entry: dict):
    """The module export `entry` was made from, with its weights."""
    import export_models
    spec = next(s for s in export_models.specs() if s.name == entry["model"])
    model = spec.build()
    export_models.randomize(model, export_models.SEED)
    model.set_attn_implementation(entry["config"].get("attn_implementation", "sdpa"))
    return spec, model


def parameter_values(mapping: dict, ours: dict, shapes: dict) -> dict:
    """Our value of each parameter some initializer holds (by name, by value,
    transposed, as 1 + the parameter, or concatenated with others)."""
    import numpy as np
    out = {}
    for init, m in mapping.items():
        if m is None or init not in ours:
            continue
        v = ours[init].astype(np.float64)
        if "concat_of" in m:
            if m.get("transposed"):
                v = v.T if v.ndim == 2 else v
                axis = 1 - m["axis"] if v.ndim == 2 else m["axis"]
            else:
                axis = m["axis"]
            offset = 0
            for part in m["concat_of"]:
                n = shapes[part][0] if (v.ndim == 1 or axis == 0) else shapes[part][1]
                piece = v[offset:offset + n] if axis == 0 else v[:, offset:offset + n]
                out.setdefault(part, piece.reshape(shapes[part]))
                offset += n
            continue
        name = m["parameter"]
        if name not in shapes:
            continue  # a buffer
        if m.get("transposed"):
            v = v.T
        if m.get("computed") == "1 + parameter":
            v = v - 1.0
        out.setdefault(name, v.reshape(shapes[name]))
    return out


def train_torch(spec, model, data: dict, flags: list[str], steps: int,
                dtype: str = "float64") -> dict:
    """Five steps of the module in `dtype`; per-step loss and gradient
    norm (before the update, over the parameters with a gradient), and the
    final parameters."""
    import numpy as np
    import torch
    import torch.nn.functional as F
    import export_models
    torch.manual_seed(0)
    model = model.to(getattr(torch, dtype))
    # An embedding's padding_idx keeps its row out of training; the ONNX
    # graph holds a plain Gather, which a trainer of the export (Shardflow,
    # JAX through the graph) cannot know it of: train what was exported.
    for m in model.modules():
        if isinstance(m, torch.nn.Embedding):
            m.padding_idx = None
    module = export_models.wrap(model, spec.inputs, spec.outputs)  # eval mode: no dropout
    params = list(model.parameters())  # a tied parameter once
    lr = float(flag(flags, "--lr"))
    wd = float(flag(flags, "--weight-decay", "0.01"))
    if flag(flags, "--optimizer") == "sgd":
        opt = torch.optim.SGD(params, lr=lr, momentum=float(flag(flags, "--momentum", "0")),
                              weight_decay=wd)
    else:
        opt = torch.optim.AdamW(params, lr=lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=wd)
    mse = flag(flags, "--loss") == "mse"
    losses, norms = [], []
    count = len(data["labels"])
    for t in range(steps):
        args = []
        for n in spec.inputs:
            a = torch.from_numpy(np.ascontiguousarray(data[n][t % count]))
            args.append(a.to(getattr(torch, dtype)) if a.is_floating_point() else a)
        labels = torch.from_numpy(np.ascontiguousarray(data["labels"][t % count]))
        opt.zero_grad(set_to_none=True)
        with torch.enable_grad():
            out = module(*args)[0]
            if mse:
                loss = F.mse_loss(out, labels.to(out.dtype))
            else:
                loss = F.cross_entropy(out.reshape(-1, out.shape[-1]), labels.reshape(-1),
                                       ignore_index=-100)
            loss.backward()
        losses.append(loss.item())
        norms.append(math.sqrt(sum(float(p.grad.pow(2).sum()) for p in params
                                   if p.grad is not None)))
        opt.step()
    return {"loss": np.array(losses), "grad_norm": np.array(norms),
            "weights": {n: p.detach().numpy().copy() for n, p in model.named_parameters()}}


def compare(name: str, config: str, build: Path, steps: int) -> dict:
    import numpy as np
    import onnx
    import export_models
    import train_reference as tr
    ref = tr.load_npz(tr.reference_path(name, config))
    flags = [str(f) for f in ref["flags"]]
    data = {k[len("data."):]: v for k, v in ref.items() if k.startswith("data.")}
    inputs = {k: v[0] for k, v in data.items() if k != "labels"}
    entry = tr.entry_of(name)
    spec, model = build_module(entry)
    initial = {n: p.detach().numpy().astype(np.float64).copy()
               for n, p in model.named_parameters()}
    shapes = {n: v.shape for n, v in initial.items()}
    folder = tr.EXPORTS / name
    mapping = export_models.map_initializers(onnx.load(str(folder / "model.onnx")), model,
                                             prefix="model.", base_dir=str(folder))
    # Parameters the export holds in no initializer (its exporter folded
    # them into a computed constant: T5's relative position bias, gathered;
    # ViT's class token) and the constants they became: a trainer of the
    # export trains the constant, PyTorch the parameter. Both are frozen,
    # so that the rest compares.
    held = {p for m in mapping.values() if m for p in m.get("concat_of", [m.get("parameter")])}
    unheld = sorted(set(shapes) - held)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        artifact = tr.compile_step(build, name, inputs, flags, tmp)
        folded = [n for n in tr.trained_names(artifact) if mapping.get(n) is None]
        if folded:
            flags = flags + [f for n in folded for f in ("--freeze", n)]
            artifact = tr.compile_step(build, name, inputs, flags, tmp)
        ours = tr.run_shardflow(build, artifact, data, tmp)
    for n, p in model.named_parameters():
        if n in unheld:
            p.requires_grad_(False)
    state = {n: p.detach().clone() for n, p in model.state_dict().items()}
    theirs, dtype = train_torch(spec, model, data, flags, steps), "float64"
    if np.isnan(theirs["loss"][0]):
        # Gemma 2's eager attention adds float64's most negative number as
        # the mask and softmaxes in float32, where it is -inf: a query row
        # with no visible key (left padding) is NaN. Its float32 run has
        # none.
        model.load_state_dict({n: v.float() for n, v in state.items()})
        theirs, dtype = train_torch(spec, model.float(), data, flags, steps, "float32"), "float32"
    mine = parameter_values(mapping, ours["weights"], shapes)
    compared = sorted(n for n in mine if n in theirs["weights"])
    diff2 = sum(float(((mine[n] - theirs["weights"][n]) ** 2).sum()) for n in compared)
    norm2 = sum(float((theirs["weights"][n] ** 2).sum()) for n in compared)
    moved2 = sum(float(((theirs["weights"][n] - initial[n]) ** 2).sum()) for n in compared)
    per = {n: float(np.linalg.norm(mine[n] - theirs["weights"][n]) /
                    max(np.linalg.norm(theirs["weights"][n]), 1e-30)) for n in compared}
    loss_err = np.abs(ours["loss"] - theirs["loss"]) / np.abs(theirs["loss"])
    norm_err = np.abs(ours["grad_norm"] - theirs["grad_norm"]) / np.abs(theirs["grad_norm"])
    jax_err = np.abs(ref["loss"] - theirs["loss"]) / np.abs(theirs["loss"])
    row = {"name": name, "config": config, "flags": " ".join(flags[1:]), "torch_dtype": dtype,
           "loss": float(loss_err.max()), "grad_norm": float(norm_err.max()),
           "weights": math.sqrt(diff2 / norm2), "moved": math.sqrt(moved2 / norm2),
           "jax_loss": float(jax_err.max()), "parameters": len(compared),
           "frozen": {"parameters": [n for n in unheld if n in dict(model.named_parameters())],
                      "initializers": folded},
           "worst": sorted(per.items(), key=lambda kv: -kv[1])[:2],
           "ours_loss": ours["loss"].tolist(), "torch_loss": theirs["loss"].tolist()}
    row["ok"] = bool(row["loss"] < LOSS_TOL and row["grad_norm"] < GRAD_NORM_TOL
                     and row["weights"] < WEIGHT_TOL)
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="*", help="export names (default: every reference)")
    ap.add_argument("--configs", nargs="*", default=["adamw", "sgd"])
    ap.add_argument("--build-dir", default=os.environ.get("SHARDFLOW_BUILD_DIR", "build"))
    ap.add_argument("--json", help="also write the rows to this file")
    args = ap.parse_args()
    ensure_torch()
    sys.path.insert(0, str(HERE))
    import torch
    import transformers
    import train_reference as tr
    build = Path(args.build_dir)
    build = build if build.is_absolute() else ROOT / build
    names = args.only or sorted({p.parent.name for p in tr.EXPORTS.glob("*/train-reference-*.npz")})
    print(f"torch {torch.__version__}, transformers {transformers.__version__}; "
          f"shard-opt and shard-run from {build}", flush=True)
    rows = []
    for name in names:
        for config in args.configs:
            if not tr.reference_path(name, config).exists():
                continue
            try:
                row = compare(name, config, build, tr.STEPS)
            except Exception as e:  # noqa: BLE001 - reported in the table
                row = {"name": name, "config": config, "ok": False, "error": str(e)[-600:]}
            rows.append(row)
            if "error" in row:
                print(f"{name:24} {config:6} ERROR {row['error']}", flush=True)
                continue
            print(f"{name:24} {config:6} loss {row['loss']:.1e}  |g| {row['grad_norm']:.1e}  "
                  f"weights {row['weights']:.1e} (moved {row['moved']:.1e}, "
                  f"{row['parameters']} parameters)  PyTorch-JAX loss {row['jax_loss']:.1e}  "
                  f"{'' if row['torch_dtype'] == 'float64' else '(PyTorch in float32)  '}"
                  f"{'ok' if row['ok'] else 'OVER'}"
                  + (f"\n{'':32}frozen on both sides: PyTorch's {row['frozen']['parameters']}, "
                     f"the export's {row['frozen']['initializers']}"
                     if row["frozen"]["initializers"] else ""),
                  flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    bad = [r for r in rows if not r["ok"]]
    print(f"\n{len(rows) - len(bad)} of {len(rows)} within loss {LOSS_TOL:g}, gradient norm "
          f"{GRAD_NORM_TOL:g}, weights {WEIGHT_TOL:g} relative L2 of PyTorch (float64)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
