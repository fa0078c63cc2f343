#!/usr/bin/env python3
"""An independent reference for Shardflow's training step: train real ONNX
exports (test/real-exports) for 5 steps with JAX -- jax.grad through the
ONNX graph as jaxonnxruntime converts it -- and optax, and write what a
test compares `shard-opt --train` and `shard-run --data --steps` against.

    python3 python/testbed/train_reference.py                  # the default set
    python3 python/testbed/train_reference.py --only gpt2-dynamo bert-torchscript
    python3 python/testbed/train_reference.py --check-handlers # jax_handlers.py
                                                               # against onnxruntime
    python3 python/testbed/train_reference.py --validate       # references
                                                               # against Shardflow

Run by hand, never in CI. The first run creates python/testbed/.jax-venv
(ignored by git), installs the pinned versions below into it and runs
itself again with that venv's Python (like export_models.py).

Writes test/real-exports/<name>/train-reference-<config>.npz with
  flags          the extra shard-opt flags (1-d str), after the input shapes
  data.<input>   [2, ...] per graph input and `labels`: entry 0 the export's
                 inputs.npz, entry 1 another batch (step t takes entry
                 (t-1) mod 2)
  loss           [5]: each step's loss before its update
  grad_norm      [5]: each step's global 2-norm of the trained gradients
  weight.<name>  the final float32 weights of every trained initializer
Which initializers train is read from the artifact `shard-opt` compiles
with those flags: every `buffer ... weight ... writable=1` line whose
storage is not `zeros` (the optimizer state). The rest stay constant.
Trained initializers holding another's bytes, or its transpose (a tied LM
head), train as one parameter with it, as in PyTorch (find_ties).

The JAX reference computes in float64 (--precision float64, the default):
the model is rewritten to float64 (initializers, Cast targets, constants,
LayerNormalization's stash type) and the weights move in float64; the
final weights are stored rounded to float32.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.parse
import venv
import zlib
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
VENV = HERE / ".jax-venv"
CACHE = HERE / ".cache"
EXPORTS = ROOT / "test" / "real-exports"

# Every package of the venv, pinned (jax 0.10.2 is the newest jax with a
# wheel for Python 3.11; jaxonnxruntime 0.3.0, its only release, works with
# it given the handlers of jax_handlers.py). absl-py is imported by
# jaxonnxruntime without being declared.
REQUIREMENTS = [
    "jax==0.10.2",
    "jaxlib==0.10.2",
    "optax==0.2.8",
    "jaxonnxruntime==0.3.0",
    "absl-py==2.5.1",
    "numpy==2.4.6",
    "onnx==1.23.2",
    "onnxruntime==1.32.0",
    "ml_dtypes==0.6.0",
    "opt_einsum==3.4.0",
    "scipy==1.17.1",
    "protobuf==7.36.2",
    "flatbuffers==25.12.19",
    "packaging==26.4",
    "typing_extensions==4.16.0",
]

DEFAULT_SET = [
    "gpt2-torchscript", "gpt2-dynamo", "llama-torchscript", "llama-dynamo",
    "bert-torchscript", "distilbert-dynamo", "t5-encoder-torchscript", "phi3-dynamo",
    # one export of each other family
    "qwen2-dynamo", "mistral-torchscript", "gemma2-torchscript", "mixtral-dynamo",
    "roberta-torchscript", "t5-torchscript", "vit-dynamo",
]
# Not handled: the com.microsoft contrib ops of the onnxruntime-optimized
# and genai exports (no jaxonnxruntime handlers, no ONNX node tests to
# check added ones against); MiniLM (1.8 M trained parameters, 7.2 MB); the
# 8-layer copies (over ~400 KB a file, and
# the 2-layer exports have the same ops).
SKIPPED = {
    "bert-ort-opt": "com.microsoft ops (SkipLayerNormalization, BiasGelu)",
    "gpt2-ort-opt": "com.microsoft ops (SkipLayerNormalization, FastGelu)",
    "llama-genai": "com.microsoft ops (GroupQueryAttention, SkipSimplifiedLayerNormalization), "
                   "SimplifiedLayerNormalization",
    "minilm-l6-1of6-torchscript": "1.8 M trained parameters: 7.2 MB a file",
    "gpt2-8l-dynamo": "over 400 KB a file", "gpt2-8l-torchscript": "over 400 KB a file",
    "llama-8l-dynamo": "over 400 KB a file", "llama-8l-torchscript": "over 400 KB a file",
}
STEPS = 5
ENTRIES = 2
# The same split as python/tests/test_gradients.py: encoders' first output
# is a hidden state (mean squared error to random targets), the others'
# are logits (cross-entropy).
ENCODER_FAMILIES = {"bert", "roberta", "distilbert", "minilm", "vit", "t5-encoder"}
ENCODER_CLASSES = ("BertModel", "T5EncoderModel", "RobertaModel", "DistilBertModel")
IGNORE = -100
MIN_MOVEMENT = 0.1         # relative L2 of the final weights from the initial
MOVEMENT_MARGIN = 1.25     # pick an lr that moves at least this much more
ADAMW_LRS = [1e-2, 2e-2, 5e-2]
SGD_LRS = [0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0]
# Agreement asked of Shardflow (validate)
LOSS_TOL, GRAD_NORM_TOL, WEIGHT_TOL = 1e-4, 1e-4, 1e-3


# --------------------------------------------------------------------------
# The venv

def in_venv() -> bool:
    return Path(sys.prefix).resolve() == VENV.resolve()


def bootstrap() -> None:
    python = VENV / "bin" / "python"
    stamp = VENV / "installed.txt"
    wanted = "\n".join(REQUIREMENTS)
    if not python.exists():
        print(f"creating {VENV}", flush=True)
        venv.EnvBuilder(with_pip=True).create(VENV)
    if not stamp.exists() or stamp.read_text() != wanted:
        pip = [str(python), "-m", "pip", "install", "--disable-pip-version-check"]
        subprocess.run(pip + REQUIREMENTS, check=True)
        stamp.write_text(wanted)
    os.execv(str(python), [str(python), __file__, *sys.argv[1:]])


# --------------------------------------------------------------------------
# Everything below runs inside the venv.

def setup_jax():
    import jax
    jax.config.update("jax_enable_x64", True)
    jax.config.update("jax_platforms", "cpu")
    from jaxonnxruntime import config as jort_config
    # Shapes computed in the graph (Reshape's, Expand's, Slice's bounds) are
    # taken as static from the one trace jaxonnxruntime makes with the
    # sample inputs; both data entries have the same shapes.
    jort_config.update("jaxort_only_allow_initializers_as_static_args", False)
    sys.path.insert(0, str(HERE))
    import jax_handlers  # noqa: F401  (registers the added handlers)
    return jax_handlers


def versions() -> dict:
    from importlib.metadata import version
    return {r.split("==")[0]: version(r.split("==")[0]) for r in REQUIREMENTS} | {
        "python": sys.version.split()[0]}


# --------------------------------------------------------------------------
# Models

def manifest() -> dict:
    return json.loads((EXPORTS / "manifest.json").read_text())


def entry_of(name: str) -> dict:
    for e in manifest()["exports"]:
        if e["name"] == name:
            return e
    raise KeyError(name)


def is_encoder(entry: dict) -> bool:
    return entry["family"] in ENCODER_FAMILIES or \
        entry.get("config", {}).get("model_class") in ENCODER_CLASSES


def load_npz(path: Path) -> dict:
    import numpy as np
    with np.load(path) as d:
        return {k: d[k] for k in d.files}


def unique_node_names(model) -> None:
    """jaxonnxruntime keys its per-node functions by node name."""
    seen = set()
    for i, node in enumerate(model.graph.node):
        if not node.name or node.name in seen:
            node.name = f"_node_{i}_{node.op_type}"
        seen.add(node.name)


def to_float64(model):
    """The same model computing in float64: float initializers, constants,
    Cast targets, value types and LayerNormalization's stash type."""
    import numpy as np
    import onnx
    from onnx import TensorProto, numpy_helper

    F, D = TensorProto.FLOAT, TensorProto.DOUBLE
    m = onnx.ModelProto()
    m.CopyFrom(model)
    g = m.graph

    def tensor64(t):
        if t.data_type == F:
            arr = numpy_helper.to_array(t).astype(np.float64)
            t.CopyFrom(numpy_helper.from_array(arr, t.name))

    for t in g.initializer:
        tensor64(t)
    for vi in list(g.input) + list(g.output):
        if vi.type.tensor_type.elem_type == F:
            vi.type.tensor_type.elem_type = D
    del g.value_info[:]   # jaxonnxruntime's Cast reads its input type from it
    for node in g.node:
        if any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
               for a in node.attribute):
            raise NotImplementedError(f"subgraphs ({node.op_type}) are not converted")
        for a in list(node.attribute):
            if a.type == onnx.AttributeProto.TENSOR:
                tensor64(a.t)
            elif node.op_type == "Cast" and a.name == "to" and a.i == F:
                a.i = D
            elif node.op_type == "LayerNormalization" and a.name == "stash_type" and a.i == F:
                a.i = D
            elif node.op_type == "Constant" and a.name in ("value_float", "value_floats"):
                vals = np.asarray(a.f if a.name == "value_float" else list(a.floats), np.float64)
                node.attribute.remove(a)
                node.attribute.append(onnx.helper.make_attribute(
                    "value", numpy_helper.from_array(vals)))
            elif a.name in ("dtype",) and a.i == F:
                a.i = D
        if node.op_type == "LayerNormalization" and not any(
                a.name == "stash_type" for a in node.attribute):
            node.attribute.append(onnx.helper.make_attribute("stash_type", D))
    return m


class JaxModel:
    """The export as a JAX function of its initializers and inputs."""

    def __init__(self, path: Path, sample: dict, precision: str):
        import numpy as np
        import onnx
        from jaxonnxruntime import call_onnx

        model = onnx.load(str(path))
        unique_node_names(model)
        if precision == "float64":
            model = to_float64(model)
        self.output_names = [o.name for o in model.graph.output]
        self.input_names = [i.name for i in model.graph.input]
        self.dtype = np.float64 if precision == "float64" else np.float32
        self.fn, params = call_onnx.call_onnx_model(model, self.cast(sample))
        self.params = {k: np.asarray(v) for k, v in params.items()}

    def cast(self, inputs: dict) -> dict:
        """Float inputs in the model's precision."""
        import numpy as np
        return {k: (v.astype(self.dtype) if np.issubdtype(v.dtype, np.floating) else v)
                for k, v in inputs.items()}

    def first_output(self, params: dict, inputs: dict):
        return self.fn(params, inputs)[0]


def numpy_loss(output, labels, mse: bool) -> float:
    import numpy as np
    output = output.astype(np.float64)
    if mse:
        return float(np.mean((output - labels) ** 2))
    shifted = output - output.max(axis=-1, keepdims=True)
    logp = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
    valid = labels != IGNORE
    picked = np.take_along_axis(logp, np.where(valid, labels, 0)[..., None], axis=-1)[..., 0]
    return float(-(picked * valid).sum() / max(valid.sum(), 1))


def jax_loss(output, labels, mse: bool):
    import jax
    from jax import numpy as jnp
    if mse:
        return jnp.mean((output - labels.astype(output.dtype)) ** 2)
    logp = jax.nn.log_softmax(output, axis=-1)
    valid = labels != IGNORE
    picked = jnp.take_along_axis(logp, jnp.where(valid, labels, 0)[..., None], axis=-1)[..., 0]
    count = jnp.maximum(valid.sum(), 1)
    return -jnp.sum(jnp.where(valid, picked, 0.0)) / count


# --------------------------------------------------------------------------
# Data

def make_data(name: str, entry: dict, inputs: dict, expected: dict, mse: bool) -> dict:
    """[2, ...] per input and `labels`: entry 0 from inputs.npz, entry 1
    another batch of the same shapes; labels random (seeded by the name),
    cross-entropy's IGNORE at padding and every 5th position."""
    import numpy as np
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    first = next(iter(expected))
    out_shape = expected[first].shape
    vocab = entry.get("config", {}).get("vocab_size") or out_shape[-1]
    second = {}
    mask0 = inputs.get("attention_mask")
    mask1 = None
    if mask0 is not None:
        # The same side as entry 0's padding, another amount per row.
        left = bool((mask0[:, 0] == 0).any())
        mask1 = np.ones_like(mask0)
        pads = [2] + [0] * (mask0.shape[0] - 1)
        for r, p in enumerate(pads):
            if p:
                if left:
                    mask1[r, :p] = 0
                else:
                    mask1[r, -p:] = 0
    for k, v in inputs.items():
        if k == "attention_mask":
            second[k] = mask1
        elif k in ("input_ids", "decoder_input_ids"):
            ids = rng.integers(3, vocab, v.shape).astype(v.dtype)
            if k == "decoder_input_ids":
                ids[:, 0] = v[:, 0]   # the decoder start token
            elif mask0 is not None and mask0.shape == v.shape:
                pad_id = int(v[mask0 == 0][0]) if (mask0 == 0).any() else 0
                ids[mask1 == 0] = pad_id
            second[k] = ids
        elif k == "token_type_ids":
            tt = np.zeros_like(v)
            for r in range(v.shape[0]):
                tt[r, rng.integers(1, v.shape[1]):] = 1
            second[k] = tt
        elif np.issubdtype(v.dtype, np.floating):
            second[k] = rng.standard_normal(v.shape).astype(v.dtype)
        else:
            raise NotImplementedError(f"{name}: no second batch for input {k} {v.dtype}")
    labels = []
    for batch in (inputs, second):
        if mse:
            lab = rng.standard_normal(out_shape).astype(np.float32)
        else:
            lab = rng.integers(0, out_shape[-1], out_shape[:-1]).astype(np.int64)
            lab.reshape(-1)[::5] = IGNORE
            mask = batch.get("attention_mask")
            if mask is not None and mask.shape == lab.shape:
                lab[mask == 0] = IGNORE
        labels.append(lab)
    data = {k: np.stack([inputs[k], second[k]]) for k in inputs}
    data["labels"] = np.stack(labels)
    return data


def entry_at(data: dict, i: int) -> tuple[dict, object]:
    batch = {k: v[i] for k, v in data.items() if k != "labels"}
    return batch, data["labels"][i]


# --------------------------------------------------------------------------
# Shardflow

def tool(build: Path, name: str) -> Path:
    path = build / "bin" / name
    for _ in range(10):   # the binaries may be rebuilt under us
        if path.exists():
            return path
        time.sleep(30)
    raise FileNotFoundError(path)


def run_tool(cmd: list, retries: int = 4) -> subprocess.CompletedProcess:
    """Run a Shardflow tool; while the binaries are being rebuilt (missing,
    not executable, killed at start) wait 30 s and try again."""
    for attempt in range(retries):
        try:
            out = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=900)
        except OSError as e:
            if attempt + 1 < retries:
                time.sleep(30)
                continue
            raise RuntimeError(f"{Path(cmd[0]).name}: {e}") from e
        if out.returncode == 0:
            return out
        if attempt + 1 < retries and (out.returncode < 0 or out.returncode in (126, 127)
                                      or not out.stderr.strip()):
            time.sleep(30)
            continue
        raise RuntimeError(f"{Path(cmd[0]).name} failed ({out.returncode}):\n{out.stderr[-3000:]}")
    raise AssertionError


def shape_flags(inputs: dict, tmp: Path) -> list[str]:
    """The flags the tests compile the export with (shardflow.real_exports)."""
    sys.path.insert(0, str(ROOT / "python"))
    from shardflow import real_exports
    return real_exports.shape_flags(inputs, tmp)


def compile_step(build: Path, name: str, inputs: dict, flags: list[str], tmp: Path) -> Path:
    artifact = tmp / "step.shard"
    run_tool([tool(build, "shard-opt"), EXPORTS / name / "model.onnx",
              *shape_flags(inputs, tmp), *flags, "--target", "cpu", "-o", artifact])
    return artifact


WEIGHT_LINE = re.compile(r"^buffer \d+ weight \S+ \S+ name=(\S+) storage=(\S+)")


def trained_names(artifact: Path) -> list[str]:
    names = []
    for line in artifact.read_text(errors="replace").splitlines():
        m = WEIGHT_LINE.match(line)
        if m and " writable=1" in line and m.group(2) != "zeros":
            name = urllib.parse.unquote(m.group(1))
            if name not in names:
                names.append(name)
    return names


def run_shardflow(build: Path, artifact: Path, data: dict, tmp: Path) -> dict:
    import numpy as np
    npz, log, weights = tmp / "data.npz", tmp / "log.jsonl", tmp / "weights.npz"
    np.savez(npz, **data)
    run_tool([tool(build, "shard-run"), artifact, "--data", npz, "--steps", STEPS,
              "--log", log, "--save-weights", weights])
    rows = [json.loads(l) for l in log.read_text().splitlines() if l.strip()]
    return {"loss": np.array([r["loss"] for r in rows]),
            "grad_norm": np.array([r["grad_norm"] for r in rows]),
            "weights": load_npz(weights)}


# --------------------------------------------------------------------------
# Training with JAX and optax

def config_flags(config: str, lr: float, mse: bool) -> list[str]:
    loss = ["--train", "--loss", "mse" if mse else "cross-entropy"]
    if config == "adamw":
        return loss + ["--optimizer", "adamw", "--lr", f"{lr:g}", "--weight-decay", "0.01"]
    if config == "sgd":
        return loss + ["--optimizer", "sgd", "--lr", f"{lr:g}", "--momentum", "0.9",
                       "--weight-decay", "0"]
    raise ValueError(config)


def optimizer(config: str, lr: float):
    import optax
    if config == "adamw":
        return optax.adamw(lr, b1=0.9, b2=0.999, eps=1e-8, weight_decay=0.01)
    return optax.chain(optax.add_decayed_weights(0.0), optax.sgd(lr, momentum=0.9))


def find_ties(params: dict, names: list[str]) -> dict[str, tuple[str, bool]]:
    """Tied initializers among the trained ones: an initializer holding the
    bytes of an earlier one, or of its transpose (2-D), is a copy of it
    (TorchScript writes GPT-2's tied LM head as a transposed copy of the
    token embedding). Returns copy -> (source, transposed). PyTorch trains
    such a pair as one parameter: one gradient (the sum), one update, and
    the global gradient norm counts it once; Shardflow does the same
    (README, "What trains")."""
    import numpy as np
    ties: dict[str, tuple[str, bool]] = {}
    sources: list[str] = []
    for name in names:
        a = params[name]
        found = None
        if a.size > 1 and np.issubdtype(a.dtype, np.floating):
            for src in sources:
                b = params[src]
                if a.shape == b.shape and np.array_equal(a, b):
                    found = (src, False)
                elif a.ndim == 2 and a.shape == b.shape[::-1] and np.array_equal(a, b.T):
                    found = (src, True)
                if found:
                    break
        if found:
            ties[name] = found
        else:
            sources.append(name)
    return ties


class Trainer:
    def __init__(self, model: JaxModel, trained: list[str], data: dict, mse: bool,
                 ties: bool = True):
        import jax
        import numpy as np
        missing = [n for n in trained if n not in model.params]
        if missing:
            raise KeyError(f"trained initializers missing from the JAX params: {missing}")
        self.model, self.trained, self.data, self.mse = model, trained, data, mse
        self.ties = find_ties(model.params, trained) if ties else {}
        self.independent = [n for n in trained if n not in self.ties]
        self.const = {k: v for k, v in model.params.items() if k not in trained}
        self.initial = {k: model.params[k] for k in trained}
        self.batches = [entry_at(data, i) for i in range(ENTRIES)]
        self.batches = [(model.cast(b), lab) for b, lab in self.batches]
        ties_ = self.ties

        def expand(params):
            full = dict(params)
            for copy, (src, transposed) in ties_.items():
                full[copy] = params[src].T if transposed else params[src]
            return full

        def loss_fn(params, inputs, labels):
            out = model.first_output({**self.const, **expand(params)}, inputs)
            return jax_loss(out, labels, mse)

        self.expand = expand
        self.value_and_grad = jax.jit(jax.value_and_grad(loss_fn))

    def train(self, config: str, lr: float):
        import jax
        import numpy as np
        import optax
        params = {k: jax.numpy.asarray(self.initial[k]) for k in self.independent}
        opt = optimizer(config, lr)
        state = opt.init(params)
        losses, norms = [], []
        for t in range(STEPS):
            inputs, labels = self.batches[t % ENTRIES]
            loss, grads = self.value_and_grad(params, inputs, labels)
            losses.append(float(loss))
            norms.append(float(optax.global_norm(grads)))
            updates, state = opt.update(grads, state, params)
            params = optax.apply_updates(params, updates)
        final = {k: np.asarray(v) for k, v in self.expand(params).items()}
        return np.array(losses), np.array(norms), final

    def movement(self, final: dict) -> float:
        return weights_rel(final, self.initial, self.trained)


def rel(a, b) -> float:
    import numpy as np
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-300))


def weights_rel(ours: dict, ref: dict, names: list[str]) -> float:
    """Relative L2 of ours against ref over all the names together."""
    import numpy as np
    num = sum(float(((ours[k].astype(np.float64) - ref[k].astype(np.float64)) ** 2).sum())
              for k in names)
    den = sum(float((ref[k].astype(np.float64) ** 2).sum()) for k in names)
    return (num / den) ** 0.5


def forward_check(name: str, model: JaxModel, data: dict, mse: bool) -> dict:
    """JAX at the initial weights against onnxruntime (float32, graph
    optimizations off) on both entries: the first output's relative L2
    (over the unpadded positions where the output has the mask's leading
    shape: padding queries that see only masked keys differ in float64),
    and the loss against numpy's on onnxruntime's output."""
    import numpy as np
    import onnxruntime as ort
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(str(EXPORTS / name / "model.onnx"), opts,
                                providers=["CPUExecutionProvider"])
    first = sess.get_outputs()[0].name
    out_rel, loss_rel = 0.0, 0.0
    for i in range(ENTRIES):
        inputs, labels = entry_at(data, i)
        want = sess.run([first], inputs)[0]
        got = np.asarray(model.first_output(model.params, model.cast(inputs)))
        mask = inputs.get("attention_mask")
        if mask is not None and mask.shape == want.shape[:mask.ndim]:
            sel = mask.astype(bool)
            out_rel = max(out_rel, rel(got[sel], want[sel]))
        else:
            out_rel = max(out_rel, rel(got, want))
        ours = float(jax_loss(got, labels, mse))
        loss_rel = max(loss_rel, abs(ours - numpy_loss(want, labels, mse)) / abs(ours))
    return {"output_rel": out_rel, "loss_rel": loss_rel}


def reference_path(name: str, config: str) -> Path:
    return EXPORTS / name / f"train-reference-{config}.npz"


def manifest_ties(entry: dict, names: list[str]) -> set[frozenset]:
    """Pairs of the names that the manifest says hold one PyTorch parameter."""
    params = {}
    for init, info in entry["initializer_map"]["initializers"].items():
        if init in names and isinstance(info, dict) and info.get("parameter"):
            params[init] = {info["parameter"], *info.get("tied_to", [])}
    return {frozenset((a, b)) for a in params for b in params if a < b and params[a] & params[b]}


def build_reference(name: str, configs: list[str], build: Path, precision: str,
                    ties: bool = True) -> list[dict]:
    import numpy as np
    entry = entry_of(name)
    mse = is_encoder(entry)
    inputs = load_npz(EXPORTS / name / "inputs.npz")
    expected = load_npz(EXPORTS / name / "expected.npz")
    data = make_data(name, entry, inputs, expected, mse)
    t0 = time.time()
    model = JaxModel(EXPORTS / name / "model.onnx", inputs, precision)
    fwd = forward_check(name, model, data, mse)
    print(f"{name}: converted in {time.time() - t0:.1f} s; forward against onnxruntime: "
          f"output {fwd['output_rel']:.2e}, loss {fwd['loss_rel']:.2e}", flush=True)
    results = []
    trainer = None
    for config in configs:
        lrs = ADAMW_LRS if config == "adamw" else SGD_LRS
        with tempfile.TemporaryDirectory() as tmp:
            artifact = compile_step(build, name, inputs, config_flags(config, lrs[0], mse), Path(tmp))
            trained = trained_names(artifact)
        if trainer is None or trainer.trained != trained:
            trainer = Trainer(model, trained, data, mse, ties)
            found = {frozenset((c, s)) for c, (s, _) in trainer.ties.items()}
            print(f"  {len(trained)} trained initializers; tied: "
                  f"{', '.join(f'{c} = {s}' + ('^T' if t else '') for c, (s, t) in trainer.ties.items()) or 'none'}",
                  flush=True)
            if ties and found != manifest_ties(entry, trained):
                print(f"  warning: the ties by bytes differ from the manifest's: "
                      f"{sorted(map(sorted, found ^ manifest_ties(entry, trained)))}", flush=True)
        chosen = None
        for lr in lrs:
            t1 = time.time()
            losses, norms, final = trainer.train(config, lr)
            moved = trainer.movement(final)
            finite = np.all(np.isfinite(losses)) and np.all(np.isfinite(norms)) and all(
                np.all(np.isfinite(v)) for v in final.values())
            print(f"  {config} lr {lr:g}: loss {' '.join(f'{l:.5g}' for l in losses)}; "
                  f"moved {moved:.3f} ({time.time() - t1:.1f} s)", flush=True)
            if not finite:
                break
            chosen = (lr, losses, norms, final, moved)
            if moved >= MIN_MOVEMENT * MOVEMENT_MARGIN:
                break
        if chosen is None or chosen[4] < MIN_MOVEMENT:
            raise RuntimeError(f"{name} {config}: no lr moved the weights {MIN_MOVEMENT} "
                               "with a finite loss")
        lr, losses, norms, final, moved = chosen
        flags = config_flags(config, lr, mse)
        out = {"flags": np.array(flags, dtype=str), "loss": losses, "grad_norm": norms}
        out |= {f"data.{k}": v for k, v in data.items()}
        out |= {f"weight.{k}": v.astype(np.float32) for k, v in final.items()}
        path = reference_path(name, config)
        np.savez_compressed(path, **out)
        print(f"  wrote {path.relative_to(ROOT)} ({path.stat().st_size // 1024} KB, "
              f"{len(trained)} trained initializers, lr {lr:g}, moved {moved:.3f})", flush=True)
        results.append({"name": name, "config": config, "lr": lr, "moved": moved,
                        "trained": len(trained), "ties": {c: s for c, (s, _) in trainer.ties.items()},
                        **fwd})
    return results


# --------------------------------------------------------------------------
# Validation against Shardflow

def validate(name: str, config: str, build: Path) -> dict:
    import numpy as np
    ref = load_npz(reference_path(name, config))
    flags = [str(f) for f in ref["flags"]]
    data = {k[len("data."):]: v for k, v in ref.items() if k.startswith("data.")}
    inputs = {k: v[0] for k, v in data.items() if k != "labels"}
    weights = {k[len("weight."):]: v for k, v in ref.items() if k.startswith("weight.")}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        artifact = compile_step(build, name, inputs, flags, tmp)
        trained = trained_names(artifact)
        ours = run_shardflow(build, artifact, data, tmp)
    if sorted(trained) != sorted(weights):
        raise RuntimeError(f"{name} {config}: the artifact trains {sorted(set(trained) ^ set(weights))} "
                           "differently from the reference")
    loss_err = np.abs(ours["loss"] - ref["loss"]) / np.abs(ref["loss"])
    norm_err = np.abs(ours["grad_norm"] - ref["grad_norm"]) / np.abs(ref["grad_norm"])
    w_err = weights_rel(ours["weights"], weights, list(weights))
    row = {"name": name, "config": config, "flags": " ".join(flags),
           "loss": float(loss_err.max()), "loss_step": int(loss_err.argmax()) + 1,
           "grad_norm": float(norm_err.max()), "grad_norm_step": int(norm_err.argmax()) + 1,
           "weights": w_err, "ours_loss": ours["loss"].tolist(), "ref_loss": ref["loss"].tolist(),
           "ours_grad_norm": ours["grad_norm"].tolist(), "ref_grad_norm": ref["grad_norm"].tolist()}
    row["ok"] = bool(row["loss"] < LOSS_TOL and row["grad_norm"] < GRAD_NORM_TOL
                     and w_err < WEIGHT_TOL)
    return row


# --------------------------------------------------------------------------
# The added handlers against onnxruntime on ONNX's backend node tests

def node_test_dir() -> Path:
    """The installed onnx's node tests: shipped, or written once into
    .cache/onnx-node-tests/<version> (onnx 1.23 wheels ship only the
    generators) by python/shardflow/backend_tests.py's generator."""
    import onnx
    shipped = Path(onnx.__file__).parent / "backend" / "test" / "data" / "node"
    if shipped.is_dir() and any(shipped.iterdir()):
        return shipped
    cache = CACHE / "onnx-node-tests" / onnx.__version__
    if (cache / ".complete").exists():
        return cache
    sys.path.insert(0, str(ROOT / "python"))
    from shardflow.backend_tests import generate_node_tests
    import shutil
    shutil.rmtree(cache, ignore_errors=True)
    cache.mkdir(parents=True)
    print(f"writing onnx's node tests into {cache}", flush=True)
    generate_node_tests(cache)
    (cache / ".complete").write_text(onnx.__version__ + "\n")
    return cache


def check_handlers(ops: list[str], verbose: bool) -> dict:
    """Every node test whose graph has one of `ops`, run by jaxonnxruntime
    (with jax_handlers.py) and by onnxruntime on each data set, compared
    with onnx's check (rtol 1e-3, atol 1e-7 unless the test says).
    Where onnxruntime refuses the model, against the test's own expected
    outputs instead. Returns per op {passed, failed, ...}."""
    import numpy as np
    import onnx
    import onnxruntime as ort
    from onnx import numpy_helper
    from jaxonnxruntime import call_onnx

    root = node_test_dir()
    summary = {op: {"tests": 0, "passed": 0, "failed": 0, "against_expected": 0,
                    "failures": []} for op in ops}
    for folder in sorted(root.iterdir()):
        if not (folder / "model.onnx").exists():
            continue
        if re.search(r"_expanded(_ver\d+)?$", folder.name):
            continue   # a function's expansion tests other ops
        model = onnx.load(str(folder / "model.onnx"))
        # The op under test: the last node that is not a Constant (as
        # python/shardflow/backend_tests.py classifies them).
        main = [n.op_type for n in model.graph.node
                if n.op_type != "Constant" and n.domain in ("", "ai.onnx")]
        if not main or main[-1] not in ops:
            continue
        op = main[-1]
        s = summary[op]
        s["tests"] += 1
        rtol, atol = 1e-3, 1e-7
        if (folder / "data.json").exists():
            j = json.loads((folder / "data.json").read_text())
            rtol, atol = j.get("rtol", rtol), j.get("atol", atol)
        unique_node_names(model)
        in_names = [i.name for i in model.graph.input
                    if i.name not in {t.name for t in model.graph.initializer}]
        try:
            sess = ort.InferenceSession(model.SerializeToString(),
                                        providers=["CPUExecutionProvider"])
        except Exception as e:  # noqa: BLE001
            sess, ort_error = None, str(e).splitlines()[0][:200]
        problems = []
        for ds in sorted(folder.glob("test_data_set_*")):
            ins = []
            for j in range(len(in_names)):
                t = onnx.TensorProto()
                t.ParseFromString((ds / f"input_{j}.pb").read_bytes())
                ins.append(numpy_helper.to_array(t))
            n_out = len(model.graph.output)
            expected = []
            for j in range(n_out):
                t = onnx.TensorProto()
                t.ParseFromString((ds / f"output_{j}.pb").read_bytes())
                expected.append(numpy_helper.to_array(t))
            feed = dict(zip(in_names, ins))
            try:
                fn, params = call_onnx.call_onnx_model(model, feed)
                got = fn(params, feed)
                got = [np.asarray(g) for g in (got if isinstance(got, (list, tuple)) else [got])]
            except Exception as e:  # noqa: BLE001
                problems.append(f"{ds.name}: jax: {type(e).__name__}: {str(e).splitlines()[0][:200]}")
                continue
            if sess is not None:
                try:
                    want = sess.run(None, feed)
                except Exception as e:  # noqa: BLE001
                    problems.append(f"{ds.name}: onnxruntime: {str(e).splitlines()[0][:200]}")
                    continue
            else:
                want = expected
            for j, (g, w) in enumerate(zip(got, want)):
                w = np.asarray(w)
                if g.shape != w.shape or g.dtype != w.dtype:
                    problems.append(f"{ds.name} output {j}: {g.dtype}{list(g.shape)} against "
                                    f"{w.dtype}{list(w.shape)}")
                    continue
                try:
                    if w.dtype.kind in "fc" or str(w.dtype) == "bfloat16":
                        r = max(rtol, 2 ** -6) if str(w.dtype) == "bfloat16" else rtol
                        np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64),
                                                   rtol=r, atol=atol)
                    else:
                        np.testing.assert_array_equal(g, w)
                except AssertionError as e:
                    msg = [l for l in str(e).splitlines() if "Max" in l]
                    problems.append(f"{ds.name} output {j}: {'; '.join(msg)[:200]}")
        if sess is None:
            s["against_expected"] += 1
        if problems:
            s["failed"] += 1
            s["failures"].append(f"{folder.name}: {problems[0]}")
        else:
            s["passed"] += 1
        if verbose or problems:
            print(f"  {folder.name}: {'FAIL ' + problems[0] if problems else 'ok'}"
                  + ("" if sess is not None else f" (onnxruntime refused: {ort_error}; "
                     "against the expected outputs)"), flush=True)
    return summary


def check_handler_gradients() -> list[tuple[str, bool, str]]:
    """The added handlers' reverse-mode gradients against central
    differences (jax.test_util.check_grads, float64), and the Softmax
    handler's gradient: jax.nn.softmax's on rows with finite entries and
    -inf entries, zero (not NaN) on a row of -inf."""
    import jax
    import numpy as np
    import onnx
    from jax import numpy as jnp
    from jax.test_util import check_grads
    from jaxonnxruntime import call_onnx
    from onnx import helper, TensorProto

    rng = np.random.default_rng(0)
    results = []

    def node_fn(op, inputs, attrs, static=(), opset=20):
        """A one-node model as a function of its float inputs (the others
        fixed)."""
        names = [f"x{i}" for i in range(len(inputs))]
        node = helper.make_node(op, names, ["y"], **attrs)
        graph = helper.make_graph([node], "g", [
            helper.make_tensor_value_info(n, TensorProto.DOUBLE if v.dtype == np.float64
                                          else TensorProto.INT64, list(v.shape))
            for n, v in zip(names, inputs)], [helper.make_tensor_value_info("y", 0, None)])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
        feed = dict(zip(names, inputs))
        fn, params = call_onnx.call_onnx_model(model, feed)
        diff = [i for i, v in enumerate(inputs) if v.dtype == np.float64 and i not in static]

        def f(*xs):
            d = dict(feed)
            for i, x in zip(diff, xs):
                d[names[i]] = x
            return fn(params, d)[0]
        return f, [inputs[i] for i in diff]

    x = rng.standard_normal((2, 3, 5))
    cases = [
        ("LayerNormalization", [x, rng.standard_normal(5), rng.standard_normal(5)],
         {"axis": -1, "stash_type": TensorProto.DOUBLE}),
        ("LayerNormalization", [x, rng.standard_normal((3, 5))],
         {"axis": 1, "epsilon": 1e-3, "stash_type": TensorProto.DOUBLE}),
        ("Gelu", [x], {}),
        ("Gelu", [x], {"approximate": "tanh"}),
        ("GatherND", [x, np.array([[1, -2], [0, 0]], np.int64)], {}),
        ("GatherND", [x, np.array([[[2]], [[0]]], np.int64)], {"batch_dims": 1}),
        ("CumSum", [x, np.array(1, np.int64)], {"exclusive": 1, "reverse": 1}),
        ("Tile", [x, np.array([1, 2, 1], np.int64)], {}),
        ("Softmax", [x], {"axis": 1}),
    ]
    for op, inputs, attrs in cases:
        f, args = node_fn(op, inputs, attrs)
        try:
            check_grads(f, args, order=1, modes=["rev"], atol=1e-6, rtol=1e-6)
            results.append((f"{op} {attrs or ''}".strip(), True, ""))
        except AssertionError as e:
            msg = next((l for l in str(e).splitlines() if l.strip()), "")
            results.append((f"{op} {attrs or ''}".strip(), False, msg[:200]))

    # Softmax with -inf: a partly masked row and a fully masked one.
    s = rng.standard_normal((3, 4))
    s[1, :2] = -np.inf
    s[2, :] = -np.inf
    f, _ = node_fn("Softmax", [s], {"axis": -1})
    ct = rng.standard_normal((3, 4))

    def loss(z):   # as exporters use it: Where(IsNaN(p), 0, p)
        p = f(z)
        return jnp.sum(jnp.where(jnp.isnan(p), 0.0, p) * ct)

    g = np.asarray(jax.grad(loss)(jnp.asarray(s)))
    want = np.asarray(jax.grad(lambda z: jnp.sum(jax.nn.softmax(z, axis=-1) * ct[:2]))(
        jnp.asarray(s[:2])))
    ok = bool(np.all(np.isfinite(g)) and np.allclose(g[:2], want, rtol=1e-12, atol=1e-15)
              and np.all(g[2] == 0) and np.all(g[1, :2] == 0))
    results.append(("Softmax, a row of -inf: zero gradient, others as jax.nn.softmax", ok,
                    "" if ok else f"gradient {g.tolist()}"))
    return results


# --------------------------------------------------------------------------

def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", nargs="+", metavar="NAME", help=f"exports (default: {' '.join(DEFAULT_SET)})")
    ap.add_argument("--configs", nargs="+", default=["adamw", "sgd"], choices=["adamw", "sgd"])
    ap.add_argument("--precision", default="float64", choices=["float64", "float32"],
                    help="the JAX reference's arithmetic (default float64)")
    ap.add_argument("--build-dir", type=Path,
                    default=Path(os.environ.get("SHARDFLOW_BUILD_DIR", ROOT / "build")),
                    help="where bin/shard-opt and bin/shard-run are (default $SHARDFLOW_BUILD_DIR or build)")
    ap.add_argument("--no-ties", action="store_true",
                    help="train tied initializers (same bytes, or transposed) as separate parameters")
    ap.add_argument("--check-handlers", action="store_true",
                    help="check jax_handlers.py against onnxruntime on ONNX's node tests, and stop")
    ap.add_argument("--validate", action="store_true",
                    help="after writing, run Shardflow on every reference and compare")
    ap.add_argument("--validate-only", action="store_true",
                    help="only compare the existing references with Shardflow")
    ap.add_argument("--json", type=Path, help="write the results here")
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args()

    if not in_venv():
        bootstrap()
    handlers = setup_jax()
    report: dict = {"versions": versions(), "precision": args.precision}

    if args.check_handlers:
        summary = check_handlers(handlers.ADDED_OPS, args.verbose)
        print("\n| op | node tests | passed | failed | of them against the expected outputs |")
        print("| --- | ---: | ---: | ---: | ---: |")
        for op, s in summary.items():
            print(f"| {op} | {s['tests']} | {s['passed']} | {s['failed']} | {s['against_expected']} |")
        for op, s in summary.items():
            for f in s["failures"]:
                print(f"  failed: {f}")
        grads = check_handler_gradients()
        print(f"\ngradients against central differences: "
              f"{sum(ok for _, ok, _ in grads)} of {len(grads)} pass")
        for what, ok, why in grads:
            print(f"  {'ok  ' if ok else 'FAIL'} {what} {why}")
        report["handlers"] = summary
        report["handler_gradients"] = grads
        if args.json:
            args.json.write_text(json.dumps(report, indent=1))
        bad = any(s["failed"] for s in summary.values()) or not all(ok for _, ok, _ in grads)
        sys.exit(1 if bad else 0)

    names = args.only or DEFAULT_SET
    for name in names:
        if name in SKIPPED:
            print(f"{name}: skipped: {SKIPPED[name]}")
    names = [n for n in names if n not in SKIPPED]
    built, failed = [], []
    if not args.validate_only:
        for name in names:
            try:
                built += build_reference(name, args.configs, args.build_dir, args.precision,
                                         not args.no_ties)
            except Exception as e:  # noqa: BLE001
                print(f"{name}: FAILED {type(e).__name__}: {e}", flush=True)
                failed.append({"name": name, "error": f"{type(e).__name__}: {e}"})
    report["built"], report["failed"] = built, failed
    rows = []
    if args.validate or args.validate_only:
        print("\n| export | config | lr | loss | grad_norm | weights | ok |")
        print("| --- | --- | ---: | ---: | ---: | ---: | --- |")
        for name in names:
            for config in args.configs:
                if not reference_path(name, config).exists():
                    continue
                try:
                    r = validate(name, config, args.build_dir)
                except Exception as e:  # noqa: BLE001
                    print(f"| {name} | {config} | error: {str(e).splitlines()[0]} |", flush=True)
                    rows.append({"name": name, "config": config, "error": str(e)})
                    continue
                lr = r["flags"].split("--lr ")[1].split()[0]
                print(f"| {name} | {config} | {lr} | {r['loss']:.1e} (step {r['loss_step']}) | "
                      f"{r['grad_norm']:.1e} (step {r['grad_norm_step']}) | {r['weights']:.1e} | "
                      f"{'yes' if r['ok'] else 'NO'} |", flush=True)
                rows.append(r)
    report["validation"] = rows
    if built and rows:
        fwd = {(b["name"], b["config"]): b for b in built}
        print("\n| export | config | lr | moved | JAX output vs onnxruntime | JAX loss vs numpy on "
              "onnxruntime | loss | grad_norm | weights |")
        print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
        for r in rows:
            b = fwd.get((r["name"], r["config"]))
            if not b or "error" in r:
                continue
            print(f"| {r['name']} | {r['config']} | {b['lr']:g} | {b['moved']:.3f} | "
                  f"{b['output_rel']:.1e} | {b['loss_rel']:.1e} | {r['loss']:.1e} | "
                  f"{r['grad_norm']:.1e} | {r['weights']:.1e} |")
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))
    bad = failed or [r for r in rows if not r.get("ok")]
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
