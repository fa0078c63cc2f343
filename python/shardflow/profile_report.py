"""Reading `shard-run --profile`'s report and `shard-run --trace`'s file,
and counting an artifact's instructions by the same kinds and names (for
tests and scripts)."""
from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path


def parse(report: str) -> tuple[float, float, dict[str, tuple[int, float]]]:
    """The program's and the summed operations' ms per run, and per kind
    (count, ms per run)."""
    program = float(re.search(r"^  program +([0-9.]+) ms$", report, re.M).group(1))
    summed = float(re.search(r"^  operations, summed +([0-9.]+) ms$", report, re.M).group(1))
    kinds = {m.group(1).strip(): (int(m.group(2)), float(m.group(3)))
             for m in re.finditer(r"^  (\S.*?) +(\d+) +([0-9.]+) +[0-9.]+%$", report, re.M)}
    return program, summed, kinds


def artifact_kinds(text: str) -> dict[str, int]:
    """How many instructions of each kind (as the report names them) the
    artifact `text` has."""
    kinds: dict[str, int] = {}
    for line in text.splitlines():
        words = line.split()
        if len(words) < 2 or words[0] not in ("kernel", "collective"):
            continue
        # Parameters are NAME=TYPE:VALUE.
        params = {k: v.split(":", 1)[-1] for k, v in (w.split("=", 1) for w in words[2:]
                                                       if "=" in w)}
        if words[0] == "kernel" and words[1] == "launch":
            kind = "generated " + re.sub(r"^k\d+_", "", params["function"])
        else:
            kind = words[1]
            if words[0] == "kernel" and "epilogue" in params:
                kind += " " + params["epilogue"]
            if words[0] == "kernel" and "residual" in params:
                kind += " +C"
        kinds[kind] = kinds.get(kind, 0) + 1
    return kinds


def _instructions(text: str):
    """(kind word, name, parameters) of each instruction line of an artifact."""
    for line in text.splitlines():
        words = line.split()
        if len(words) < 2 or words[0] not in ("kernel", "collective"):
            continue
        params = {k: v.split(":", 1)[-1] for k, v in (w.split("=", 1) for w in words[2:]
                                                       if "=" in w)}
        yield words[0], words[1], params


def read_trace(path: str | Path) -> dict:
    """`shard-run --trace FILE`'s Chrome trace JSON."""
    return json.loads(Path(path).read_text())


def trace_operations(trace: dict) -> dict[int, Counter]:
    """Per rank (the trace's pid), how many spans of each name its
    instructions have (summed over the runs): kernels by name, generated
    kernels by function, collectives by kind."""
    ranks: dict[int, Counter] = {}
    for e in trace["traceEvents"]:
        if e.get("ph") == "X" and "instruction" in e.get("args", {}):
            ranks.setdefault(e["pid"], Counter())[e["name"]] += 1
    return ranks


def artifact_operations(text: str, runs: int = 1) -> Counter:
    """The names trace_operations gives the instructions of the artifact
    `text`, over `runs` runs."""
    names = Counter()
    for word, name, params in _instructions(text):
        if word == "kernel" and name == "launch":
            name = params["function"]
        names[name] += runs
    return names
