"""The layer structure of every real export (nn-find-layers, at the end of
the nn phase): `shard-opt --compile-to nn` records it on the module as
`nn.layers` and `--report` prints it.

Expected, per export, from the Hugging Face configuration the test bed
made it with (python/testbed/export_models.py, recorded in the manifest):
one stack of `num_hidden_layers` blocks; T5ForConditionalGeneration two,
its encoder's `num_layers` and its decoder's `num_decoder_layers` (which
the configuration defaults to `num_layers`). A model of one layer repeats
nothing, so nothing is found (minilm-l6-1of6: the first of MiniLM's six).

The analysis never reads initializer names; this test does, to check what
it found: each block's weights are its own (no two blocks share one), and
every weight of block k that the exporter's mapping (the manifest's
`initializer_map`) ties to a PyTorch parameter is a parameter of layer k of
that stack (`h.k.`, `layer.k.`, `layers.k.`, `block.k.`; one stack per
prefix such as `encoder.` / `decoder.`). About 5 s on 2 cores.
"""
from __future__ import annotations

import json
import re
import subprocess

import pytest

from shardflow import real_exports, toolchain

LAYER = re.compile(r"^(.*?)\b(?:h|layer|layers|block)\.(\d+)\.")


def expected_stacks(entry: dict) -> list[int]:
    config = entry["config"]
    layers = config["num_hidden_layers"]
    stacks = [layers]
    if config.get("model_class") == "T5ForConditionalGeneration":
        stacks = [config.get("num_layers", layers), config.get("num_decoder_layers", layers)]
    return [n for n in stacks if n >= 2]


def parse_layers(ir: str) -> dict:
    """The `nn.layers` dictionary of the printed module, as Python data."""
    start = ir.index("nn.layers = {") + len("nn.layers = ")
    depth, end = 0, start
    for end, c in enumerate(ir[start:], start):
        depth += {"{": 1, "}": -1}.get(c, 0)
        if depth == 0:
            break
    text = ir[start:end + 1]
    # MLIR attribute syntax to JSON, strings left as they are.
    token = re.compile(r'"(?:[^"\\]|\\.)*"|(\w+) = | : i64')
    text = token.sub(lambda m: m.group(0) if m.group(0).startswith('"')
                     else (f'"{m.group(1)}": ' if m.group(1) else ""), text)
    return json.loads(text)


def layer_of(parameter: str) -> tuple[str, int] | None:
    """(stack prefix, layer index) of a PyTorch parameter name."""
    m = LAYER.match(parameter)
    return (m.group(1), int(m.group(2))) if m else None


def parameters(entry: dict, initializer: str) -> list[str]:
    info = entry["initializer_map"]["initializers"].get(initializer)
    if not isinstance(info, dict):
        return []
    return info.get("concat_of") or ([info["parameter"]] if info.get("parameter") else [])


@pytest.mark.parametrize("name", real_exports.export_names())
def test_layers(tmp_path, name):
    export = real_exports.load(name)
    out = subprocess.run([str(toolchain.tool("shard-opt")), str(export.model),
                          *export.shape_flags(tmp_path), "--target", "cpu", "--compile-to", "nn",
                          "--report", "-mlir-print-debuginfo=false"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    layers = parse_layers(out.stdout)
    want = expected_stacks(export.entry)
    stacks = layers["stacks"]
    assert [s["blocks"] for s in stacks] == want, out.stderr
    assert layers["blocks"] == sum(want)
    report = next(line for line in out.stderr.splitlines() if line.startswith("layers: "))
    if not want:
        assert report == "layers: no repeated blocks"
        return
    assert report.startswith(f"layers: {want[0]} blocks of {stacks[0]['ops_per_block']} ops")

    seen: dict[str, int] = {}
    prefixes = set()
    for s, stack in enumerate(stacks):
        assert stack["carried"] >= 1, f"stack {s}: no value carried from block to block"
        # Alike blocks read alike weights.
        assert len({len(w) for w in stack["weights"]}) == 1, stack["weights"]
        stack_prefixes = set()
        for k, weights in enumerate(stack["weights"]):
            assert weights, f"stack {s} block {k} reads no weight of its own"
            for w in weights:
                assert w not in seen, f"'{w}' in block {k} of stack {s} and in another block"
                seen[w] = k
                for p in parameters(export.entry, w):
                    layer = layer_of(p)
                    assert layer and layer[1] == k, \
                        f"stack {s} block {k}: '{w}' is the parameter '{p}'"
                    stack_prefixes.add(layer[0])
        # One stack, one prefix, not another stack's.
        assert len(stack_prefixes) <= 1 and not stack_prefixes & prefixes, stack_prefixes
        prefixes |= stack_prefixes
