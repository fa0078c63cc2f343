#!/usr/bin/env python3
"""Which of the real exports shard-opt imports, and which ONNX ops it lacks.

    SHARDFLOW_BUILD_DIR=build python3 python/testbed/survey.py > python/testbed/SURVEY.txt

Runs with the project's venv (onnx and numpy; no torch). For each folder of
test/real-exports it lists the op types the model uses (domain, op_type,
opset), imports it with `shard-opt model.onnx --compile-to=import` (the
inputs' shapes pinned to those of its inputs.npz), and prints a table of the
results: ok, or the first error line. shard-opt stops at the first op it
cannot import, so the ops each model uses are also compared with the
importer's own list of supported ops (the handler table in
GraphImporter::handlers() under lib/Import/ONNX): the union of
those it lacks closes the report.
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx

ROOT = Path(__file__).resolve().parents[2]
EXPORTS = ROOT / "test" / "real-exports"
DEFAULT_DOMAIN = "ai.onnx"
# onnxruntime registers these in the default domain; the ONNX standard has none of them
ORT_OPS_IN_ONNX_DOMAIN = {"SimplifiedLayerNormalization"}


def shard_opt_path() -> Path:
    build = Path(os.environ.get("SHARDFLOW_BUILD_DIR", ROOT / "build"))
    return build / "bin" / "shard-opt"


def handler_table_file(source_root: Path) -> Path:
    """The .cpp file under lib/Import/ONNX that defines GraphImporter::handlers()."""
    for f in sorted((source_root / "lib" / "Import" / "ONNX").rglob("*.cpp")):
        if "GraphImporter::handlers() {" in f.read_text():
            return f
    sys.exit(f"no GraphImporter::handlers() under {source_root}/lib/Import/ONNX")


def supported_ops(source: Path, table_function: str = "handlers") -> dict[str, int]:
    """op_type -> the first opset (or com.microsoft version) its handler
    accepts, from a handler table: handlers() for the default domain,
    contribHandlers() for com.microsoft."""
    text = source.read_text()
    head = f"GraphImporter::{table_function}() {{"
    if head not in text:
        return {}
    body = text[text.index(head):]
    body = body[:body.index("return table;")]
    table = re.findall(r'\{"(\w+)",\s*\{&G::.*?,\s*(\d+)\}\}', body, re.S)
    if not table and table_function == "handlers":
        sys.exit(f"no handler table found in {source}")
    return {op: int(opset) for op, opset in table}


def model_ops(path: Path) -> tuple[dict[str, int], list[tuple[str, str]]]:
    """The model's opset per domain and its (domain, op_type) pairs, in
    subgraphs too."""
    m = onnx.load(str(path), load_external_data=False)
    opsets = {(o.domain or DEFAULT_DOMAIN): o.version for o in m.opset_import}
    seen: set[tuple[str, str]] = set()

    def walk(graph):
        for n in graph.node:
            seen.add((n.domain or DEFAULT_DOMAIN, n.op_type))
            for a in n.attribute:
                if a.type == onnx.AttributeProto.GRAPH:
                    walk(a.g)
                for g in a.graphs:
                    walk(g)

    walk(m.graph)
    for f in m.functions:  # local functions are expanded by consumers
        for n in f.node:
            seen.add((n.domain or DEFAULT_DOMAIN, n.op_type))
    return opsets, sorted(seen)


def import_model(shard_opt: Path, folder: Path, timeout: int) -> str:
    """'ok', or shard-opt's first error line."""
    cmd = [str(shard_opt), str(folder / "model.onnx"), "--compile-to=import", "-o", os.devnull]
    npz = folder / "inputs.npz"
    if npz.exists():
        with np.load(npz) as data:
            for name in data.files:
                cmd += ["--input-shape", f"{name}={','.join(str(d) for d in data[name].shape)}"]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return f"timed out after {timeout} s"
    if out.returncode == 0:
        return "ok"
    lines = [l.strip() for l in out.stderr.splitlines() if l.strip()]
    first = next((l for l in lines if "error" in l), lines[0] if lines else f"exit {out.returncode}")
    return first.replace(str(folder / "model.onnx") + ": ", "")


def split_name(folder: str) -> tuple[str, str]:
    for exporter in ("torchscript", "dynamo", "ort-opt", "genai"):
        if folder.endswith("-" + exporter):
            return folder[: -len(exporter) - 1], exporter
    return folder, "?"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--exports", type=Path, default=EXPORTS)
    ap.add_argument("--source", type=Path, default=ROOT,
                    help="the source tree shard-opt was built from, for its handler table (default: this one)")
    ap.add_argument("--shard-opt", type=Path, default=None, help="default: $SHARDFLOW_BUILD_DIR/bin/shard-opt")
    ap.add_argument("--timeout", type=int, default=300)
    args = ap.parse_args()
    shard_opt = args.shard_opt or shard_opt_path()
    if not shard_opt.exists():
        sys.exit(f"{shard_opt} is missing: build the project or set SHARDFLOW_BUILD_DIR")
    handlers = handler_table_file(args.source)
    supported = supported_ops(handlers)
    contrib = supported_ops(handlers, "contribHandlers")
    folders = sorted((p.parent for p in args.exports.glob("*/model.onnx")), key=lambda f: split_name(f.name))

    rows, per_model, missing = [], {}, {}
    for folder in folders:
        model, exporter = split_name(folder.name)
        opsets, ops = model_ops(folder / "model.onnx")
        per_model[folder.name] = (opsets, ops)
        lacking = []
        for domain, op in ops:
            opset = opsets.get(domain, 0)
            if domain == "com.microsoft" and op in contrib:
                if opset >= contrib[op]:
                    continue
                why = f"handler needs {domain} version {contrib[op]}"
            elif domain != DEFAULT_DOMAIN:
                why = f"domain {domain}"
            elif op not in supported:
                why = "no handler" + (" (onnxruntime's own op, in the ONNX domain)" if op in ORT_OPS_IN_ONNX_DOMAIN else "")
            elif opset < supported[op]:
                why = f"handler needs opset {supported[op]}"
            else:
                continue
            lacking.append(op if domain == DEFAULT_DOMAIN else f"{domain}::{op}")
            entry = missing.setdefault((domain, op), {"why": why, "opsets": set(), "exports": []})
            entry["opsets"].add(opset)
            entry["exports"].append(folder.name)
        result = import_model(shard_opt, folder, args.timeout)
        rows.append((model, exporter, len(ops), opsets.get(DEFAULT_DOMAIN, "-"), lacking, result))

    print(f"Survey of {len(folders)} exports in {args.exports.relative_to(ROOT) if args.exports.is_relative_to(ROOT) else args.exports}")
    print(f"importer: {shard_opt.name} --compile-to=import (input shapes pinned to inputs.npz); "
          f"supported ops from {handlers} "
          f"({len(supported)} ops)")
    print()
    print("== Import results")
    w_model = max(len(r[0]) for r in rows)
    header = f"{'model':{w_model}s}  {'exporter':11s}  {'opset':5s}  {'ops':>3s}  {'lacking':>7s}  import"
    print(header)
    print("-" * len(header))
    for model, exporter, nops, opset, lacking, result in rows:
        print(f"{model:{w_model}s}  {exporter:11s}  {str(opset):5s}  {nops:3d}  {len(lacking):7d}  {result}")
    ok = sum(1 for r in rows if r[5] == "ok")
    print(f"\n{ok} of {len(rows)} import.")

    print("\n== Ops the importer lacks, per export")
    for model, exporter, _, _, lacking, _ in rows:
        print(f"{model + '-' + exporter:{w_model + 12}s}  {' '.join(lacking) if lacking else '-'}")

    print("\n== Union of the ops the importer lacks")
    print(f"{'domain':13s}  {'op_type':34s}  {'opsets':8s}  {'exports':>7s}  why")
    for (domain, op), e in sorted(missing.items(), key=lambda kv: (kv[0][0] != DEFAULT_DOMAIN, kv[0])):
        print(f"{domain:13s}  {op:34s}  {','.join(map(str, sorted(e['opsets']))):8s}  "
              f"{len(e['exports']):7d}  {e['why']}")

    print("\n== Op types per export (domain opset: op types)")
    for name, (opsets, ops) in per_model.items():
        print(name)
        by_domain: dict[str, list[str]] = {}
        for domain, op in ops:
            by_domain.setdefault(domain, []).append(op)
        for domain, names in sorted(by_domain.items()):
            print(f"  {domain} {opsets.get(domain, '?')}: {' '.join(names)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
