"""Run ONNX's own backend node tests through shard-opt and shard-run.

    python -m shardflow.backend_tests [--filter REGEX] [--jobs N]
        [--report docs/onnx-backend-tests.md] [--json out.json]

Each node test is a folder with `model.onnx` and `test_data_set_*/` holding
`input_*.pb` and `output_*.pb` TensorProtos. onnx wheels that ship them keep
them in `onnx/backend/test/data/node`; newer wheels (1.23 among them) ship
only the Python that generates them, so they are written once, exactly as
onnx's `backend-test-tools generate-data` writes them, into
`build/onnx-node-tests/<onnx version>/`.

A test is attempted when every node of its graph is in the default domain
and has an op type the importer handles (the handler table in
lib/Import/ONNX/OpHandlers.cpp), when its default-domain opset is 13 to
23, and when its graph inputs and outputs are tensors (the command line
takes tensors only). Every other test is skipped, with the reason.

An attempted test is compiled with `shard-opt model.onnx --target cpu`, run
with `shard-run --input NAME=test_data_set_K/input_J.pb ...` (the .pb files
as they are; a graph input the importer needs as a constant -- axes, k,
split sizes, slice bounds, or an input such a value is computed from, as
the importer's error names it -- is pinned to the data set's value with
`shard-opt --input-value`, one compile per data set) and its outputs are
read back: one output as a TensorProto
(`--output out.pb`), several from an `.npz`. They are compared with
`output_*.pb` by onnx's own check (`onnx.backend.test.runner.Runner.
assert_similar_outputs`): same count, shapes and dtypes, then
`numpy.testing.assert_allclose` with the test case's rtol/atol, onnx's
defaults rtol=1e-3 and atol=1e-7 (rtol at least 2**-6 for bfloat16
outputs).

A failure records its stage, `import`, `compile`, `runtime`, `wrong result`
or `timeout`, and the first line of the message.
"""
from __future__ import annotations

import argparse
import collections
import concurrent.futures
import datetime
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from shardflow import toolchain

ROOT = toolchain.ROOT
IMPORTER_SOURCE = ROOT / "lib" / "Import" / "ONNX" / "OpHandlers.cpp"
OPSET_MIN, OPSET_MAX = 13, 23
# onnx's defaults (onnx/backend/test/loader/__init__.py); a test case may
# carry its own in data.json.
DEFAULT_RTOL, DEFAULT_ATOL = 1e-3, 1e-7
DEFAULT_TIMEOUT = 60  # seconds per shard-opt and per shard-run call
STAGES = ("import", "compile", "runtime", "wrong result", "timeout")


# --------------------------------------------------------------------------
# The test data
# --------------------------------------------------------------------------

def _onnx_version() -> str:
    import onnx

    return onnx.__version__


def shipped_node_dir() -> Path | None:
    import onnx

    path = Path(onnx.__file__).parent / "backend" / "test" / "data" / "node"
    return path if path.is_dir() and any(path.iterdir()) else None


def _write_value(f, value, type_proto, name: str) -> None:
    """Serializes one input or output as onnx's generate-data does."""
    import onnx
    from onnx import numpy_helper

    if type_proto.HasField("map_type"):
        f.write(numpy_helper.from_dict(value, name).SerializeToString())
    elif type_proto.HasField("sequence_type"):
        f.write(numpy_helper.from_list(value, name).SerializeToString())
    elif type_proto.HasField("optional_type"):
        f.write(numpy_helper.from_optional(value, name).SerializeToString())
    elif isinstance(value, onnx.TensorProto):
        f.write(value.SerializeToString())
    else:
        f.write(numpy_helper.from_array(value, name).SerializeToString())


def generate_node_tests(out: Path) -> None:
    """Writes every node test of the installed onnx into `out`."""
    import warnings

    from onnx.backend.test.loader import load_node_model_tests

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the generators divide by zero on purpose
        cases = load_node_model_tests()
    for case in cases:
        folder = out / case.name
        folder.mkdir(parents=True)
        (folder / "model.onnx").write_bytes(case.model.SerializeToString())
        if (case.rtol, case.atol) != (DEFAULT_RTOL, DEFAULT_ATOL):
            (folder / "data.json").write_text(
                json.dumps({"rtol": case.rtol, "atol": case.atol}))
        graph = case.model.graph
        for k, (inputs, outputs) in enumerate(case.data_sets):
            data = folder / f"test_data_set_{k}"
            data.mkdir()
            for j, value in enumerate(inputs):
                with open(data / f"input_{j}.pb", "wb") as f:
                    _write_value(f, value, graph.input[j].type, graph.input[j].name)
            for j, value in enumerate(outputs):
                with open(data / f"output_{j}.pb", "wb") as f:
                    _write_value(f, value, graph.output[j].type, graph.output[j].name)


def node_data_dir() -> Path:
    """The folder of node tests: the shipped one, else a generated cache."""
    shipped = shipped_node_dir()
    if shipped:
        return shipped
    cache = toolchain.build_dir() / "onnx-node-tests" / _onnx_version()
    if (cache / ".complete").exists():
        return cache
    cache.parent.mkdir(parents=True, exist_ok=True)
    # Generate beside it and rename, so that concurrent runs never see half.
    tmp = Path(tempfile.mkdtemp(prefix=".gen-", dir=cache.parent))
    try:
        generate_node_tests(tmp)
        (tmp / ".complete").write_text(_onnx_version() + "\n")
        try:
            tmp.rename(cache)
        except OSError:  # another process got there first
            if not (cache / ".complete").exists():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return cache


# --------------------------------------------------------------------------
# Selection
# --------------------------------------------------------------------------

def supported_ops() -> set[str]:
    """The op types in the importer's default-domain handler table (the
    com.microsoft table that follows it is not the backend tests' concern)."""
    text = IMPORTER_SOURCE.read_text().split("GraphImporter::contribHandlers()")[0]
    ops = set(re.findall(r'\{"(\w+)",\s*\{&G::', text))
    if not ops:
        raise RuntimeError(f"no handler table found in {IMPORTER_SOURCE}")
    return ops


@dataclass
class TestInfo:
    name: str
    op: str                    # the op under test (for the per-op table)
    ops: list[str]             # the op types in the graph
    opset: int | None
    skip: str | None = None    # the reason, when not attempted
    rtol: float = DEFAULT_RTOL
    atol: float = DEFAULT_ATOL


_EXPANDED = re.compile(r"_expanded(_ver\d+)?$")


def _graph_ops(model) -> list[str]:
    return [n.op_type for n in model.graph.node]


def _main_op(ops: list[str]) -> str:
    """The op a single-op test is about: the last node that is not a Constant."""
    rest = [op for op in ops if op != "Constant"]
    return (rest or ops or ["?"])[-1]


def collect(data_dir: Path | None = None, pattern: str | None = None) -> list[TestInfo]:
    """Every node test (matching `pattern`), classified attempted or skipped."""
    import onnx

    data_dir = data_dir or node_data_dir()
    supported = supported_ops()
    regex = re.compile(pattern) if pattern else None
    names = sorted(p.name for p in data_dir.iterdir()
                   if (p / "model.onnx").exists())
    models = {}

    def model_of(name):
        if name not in models:
            models[name] = onnx.load(str(data_dir / name / "model.onnx"),
                                     load_external_data=False)
        return models[name]

    infos = []
    for name in names:
        if regex and not regex.search(name):
            continue
        model = model_of(name)
        ops = _graph_ops(model)
        base = _EXPANDED.sub("", name)
        if base != name and (data_dir / base / "model.onnx").exists():
            op = _main_op(_graph_ops(model_of(base)))  # a function's expansion
        else:
            op = _main_op(ops)
        opsets = [o.version for o in model.opset_import if o.domain in ("", "ai.onnx")]
        opset = opsets[0] if opsets else None
        info = TestInfo(name=name, op=op, ops=sorted(set(ops)), opset=opset)
        meta = data_dir / name / "data.json"
        if meta.exists():
            data = json.loads(meta.read_text())
            info.rtol = data.get("rtol", info.rtol)
            info.atol = data.get("atol", info.atol)
        domains = sorted({n.domain for n in model.graph.node} - {"", "ai.onnx"})
        unsupported = sorted({n.op_type for n in model.graph.node
                              if n.domain in ("", "ai.onnx")} - supported)
        non_tensor = [v.name for v in list(model.graph.input) + list(model.graph.output)
                      if not v.type.HasField("tensor_type")]
        if domains:
            info.skip = "domain " + ", ".join(domains)
        elif unsupported:
            info.skip = "op not supported by the importer: " + ", ".join(unsupported)
        elif opset is None or not OPSET_MIN <= opset <= OPSET_MAX:
            info.skip = f"opset {opset} (supported: {OPSET_MIN} to {OPSET_MAX})"
        elif non_tensor:
            info.skip = "non-tensor graph input/output: " + ", ".join(non_tensor)
        infos.append(info)
    return infos


# --------------------------------------------------------------------------
# Running one test
# --------------------------------------------------------------------------

@dataclass
class Result:
    name: str
    op: str
    status: str                  # passed, failed, skipped
    stage: str | None = None     # for failures, one of STAGES
    message: str = ""            # the first line of the error, or the skip reason
    seconds: float = 0.0
    ops: list[str] = field(default_factory=list)


def _first_line(text: str) -> str:
    for line in text.splitlines():
        line = line.strip()
        if line:
            return line[:300]
    return "(no message)"


def _shard_opt_stage(cmd: list[str], folder: Path, timeout: float) -> str:
    """import when the model does not import alone (shard-opt without
    --target), compile when it imports but the lowering to an artifact fails."""
    i = cmd.index("--target")
    plain = cmd[:i] + cmd[i + 2:]
    plain[plain.index("-o") + 1] = os.devnull
    try:
        out = subprocess.run(plain, cwd=folder, capture_output=True, text=True,
                             timeout=timeout)
    except subprocess.TimeoutExpired:
        return "import"
    return "import" if out.returncode != 0 else "compile"


def inputs_to_pin(stderr: str) -> list[str]:
    """The graph inputs an import error asks to be constants: the input it
    names ("input 'k' is not a compile-time constant"), or those a computed
    value derives from ("...: it derives from graph inputs 'a', 'b'")."""
    names = []
    direct = re.search(r"input '([^']+)' is not a compile-time constant", stderr)
    if direct:
        names.append(direct.group(1))
    derived = re.search(r"derives from graph inputs? ('[^']+'(?:, '[^']+')*)", stderr)
    if derived:
        names += re.findall(r"'([^']+)'", derived.group(1))
    return names


def _comparison_message(err: AssertionError) -> str:
    lines = [ln.strip() for ln in str(err).splitlines() if ln.strip()]
    keep = [ln for ln in lines
            if ln.startswith(("Not equal", "Mismatched", "Max absolute", "Max relative",
                              "Output", "Items are not equal", "ACTUAL", "DESIRED",
                              "(shapes", "x and y nan"))]
    return "; ".join(keep[:4]) if keep else _first_line(str(err))


def run_test(info: TestInfo, data_dir: Path | None = None,
             timeout: float = DEFAULT_TIMEOUT, threads: int = 1, target: str = "cpu",
             env: dict[str, str] | None = None, flags: list[str] | None = None) -> Result:
    """Compiles (`--target TARGET`, and `flags`), runs (shard-run with `env`
    added to the environment) and checks one attempted node test."""
    import onnx
    from onnx import numpy_helper
    from onnx.backend.test.runner import Runner

    if info.skip:
        return Result(info.name, info.op, "skipped", message=info.skip, ops=info.ops)
    data_dir = data_dir or node_data_dir()
    folder = data_dir / info.name
    shard_opt, shard_run = str(toolchain.tool("shard-opt")), str(toolchain.tool("shard-run"))
    start = time.monotonic()

    def failed(stage: str, message: str) -> Result:
        return Result(info.name, info.op, "failed", stage, message,
                      time.monotonic() - start, info.ops)

    model = onnx.load(str(folder / "model.onnx"), load_external_data=False)
    initializers = {t.name for t in model.graph.initializer}
    outputs = [v.name for v in model.graph.output]
    data_sets = sorted(folder.glob("test_data_set_*"))

    input_index = {v.name: j for j, v in enumerate(model.graph.input)
                   if v.name not in initializers}
    pinned: list[str] = []  # graph inputs the model needs as constants

    def compile_for(data: Path | None, artifact: Path):
        cmd = [shard_opt, "model.onnx", "--target", target, "-o", str(artifact), *(flags or [])]
        # Dimensions the model leaves symbolic are pinned to the data's.
        for j, v in enumerate(model.graph.input):
            dims = v.type.tensor_type.shape.dim
            if v.name in initializers or v.name in pinned:
                continue
            if data is not None and any(not d.HasField("dim_value") for d in dims):
                t = onnx.load_tensor(str(data / f"input_{j}.pb"))
                cmd += ["--input-shape", f"{v.name}={','.join(map(str, t.dims))}"]
        # Inputs that decide shapes (axes, k, split sizes, ...) get their
        # value from the data set, as a user would with --input-value.
        for name in pinned:
            rel = data.relative_to(folder)
            cmd += ["--input-value", f"{name}={rel}/input_{input_index[name]}.pb"]
        return cmd, subprocess.run(cmd, cwd=folder, capture_output=True, text=True,
                                   timeout=timeout)

    with tempfile.TemporaryDirectory(prefix="shardflow-node-") as tmp:
        artifact = Path(tmp) / "model.shard"
        first = data_sets[0] if data_sets else None
        while True:
            try:
                cmd, out = compile_for(first, artifact)
            except subprocess.TimeoutExpired:
                return failed("timeout", f"shard-opt ran past {timeout:g} s")
            if out.returncode == 0:
                break
            wanted = [n for n in inputs_to_pin(out.stderr)
                      if n in input_index and n not in pinned]
            if first is None or not wanted:
                return failed(_shard_opt_stage(cmd, folder, timeout), _first_line(out.stderr))
            pinned.extend(wanted)

        for data in data_sets:
            if pinned and data != first:  # pinned values differ per data set
                try:
                    cmd, out = compile_for(data, artifact)
                except subprocess.TimeoutExpired:
                    return failed("timeout", f"shard-opt ran past {timeout:g} s")
                if out.returncode != 0:
                    return failed("compile", _first_line(out.stderr))
            run = [shard_run, str(artifact)]
            if target == "cpu":
                run += ["--threads", str(threads)]
            for j, v in enumerate(model.graph.input):
                if v.name in initializers or v.name in pinned:
                    continue
                run += ["--input", f"{v.name}={data.relative_to(folder)}/input_{j}.pb"]
            single = len(outputs) == 1
            result = Path(tmp) / ("out.pb" if single else "out.npz")
            run += ["--output", str(result)]
            try:
                out = subprocess.run(run, cwd=folder, capture_output=True, text=True,
                                     timeout=timeout,
                                     env={**os.environ, **env} if env else None)
            except subprocess.TimeoutExpired:
                return failed("timeout", f"shard-run ran past {timeout:g} s")
            if out.returncode != 0:
                return failed("runtime", _first_line(out.stderr))
            try:
                if single:
                    got = {outputs[0]: numpy_helper.to_array(onnx.load_tensor(str(result)))}
                else:
                    with np.load(result) as z:
                        got = {k: z[k] for k in z.files}
            except Exception as e:  # an output file we cannot read is a runtime bug
                return failed("runtime", f"cannot read shard-run's output: {_first_line(str(e))}")
            missing = [n for n in outputs if n not in got]
            if missing:
                return failed("runtime", "outputs missing: " + ", ".join(missing))
            expected = [numpy_helper.to_array(onnx.load_tensor(str(data / f"output_{j}.pb")))
                        for j in range(len(outputs))]
            try:
                Runner.assert_similar_outputs(expected, [got[n] for n in outputs],
                                              rtol=info.rtol, atol=info.atol)
            except AssertionError as e:
                return failed("wrong result", _comparison_message(e))
    return Result(info.name, info.op, "passed", seconds=time.monotonic() - start,
                  ops=info.ops)


def run_all(infos: list[TestInfo], jobs: int | None = None,
            data_dir: Path | None = None, timeout: float = DEFAULT_TIMEOUT,
            progress=None, threads: int = 1, target: str = "cpu",
            env: dict[str, str] | None = None, flags: list[str] | None = None) -> list[Result]:
    """Runs the tests on `jobs` threads (each waits on a child process)."""
    data_dir = data_dir or node_data_dir()
    toolchain.tool("shard-opt"), toolchain.tool("shard-run")  # fail early when missing
    jobs = jobs or os.cpu_count() or 1
    results: dict[str, Result] = {}
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        futures = {pool.submit(run_test, info, data_dir, timeout, threads, target, env, flags):
                   info for info in infos}
        for future in concurrent.futures.as_completed(futures):
            info = futures[future]
            try:
                r = future.result()
            except Exception as e:  # noqa: BLE001 - a runner bug must not hide the rest
                r = Result(info.name, info.op, "failed", "runtime",
                           f"runner error: {type(e).__name__}: {_first_line(str(e))}",
                           ops=info.ops)
            results[info.name] = r
            if progress:
                progress(r, len(results), len(infos))
    return [results[i.name] for i in infos]


# --------------------------------------------------------------------------
# The report
# --------------------------------------------------------------------------

def totals(results: list[Result]) -> dict[str, int]:
    c = collections.Counter(r.status for r in results)
    return {"total": len(results), "attempted": c["passed"] + c["failed"],
            "passed": c["passed"], "failed": c["failed"], "skipped": c["skipped"]}


def _machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return (f"{platform.system()} {platform.release()}, {platform.machine()} "
            f"({cpu}), {os.cpu_count()} CPUs, Python {platform.python_version()}")


def _skip_kind(reason: str) -> str:
    if reason.startswith("op not supported"):
        return "op not supported by the importer"
    if reason.startswith("opset"):
        return reason
    if reason.startswith("non-tensor"):
        return "non-tensor graph input/output (sequence, optional, map)"
    return reason


def markdown_report(results: list[Result], date: str | None = None,
                    jobs: int | None = None, seconds: float | None = None) -> str:
    date = date or datetime.date.today().isoformat()
    t = totals(results)
    out = [
        "# ONNX backend node tests",
        "",
        "ONNX's own node tests run through `shard-opt --target cpu` and `shard-run`,",
        "generated by `python -m shardflow.backend_tests --report "
        "docs/onnx-backend-tests.md` (see `python/shardflow/backend_tests.py`).",
        "",
        f"- date: {date}",
        f"- machine: {_machine()}",
        f"- onnx {_onnx_version()}, numpy {np.__version__}"
        + (f"; {jobs} jobs" if jobs else "")
        + (f"; {seconds:.0f} s" if seconds is not None else ""),
        "- attempted: every test whose graph has only ops the importer handles "
        f"(default domain), opset {OPSET_MIN} to {OPSET_MAX}, and tensor inputs "
        "and outputs; the rest are skipped.",
        "- inputs: the test's `input_*.pb` files given to `shard-run --input` as they "
        "are; a graph input the importer needs as a constant (axes, k, split sizes, "
        "slice bounds, ...) is pinned to the data set's value with `shard-opt "
        "--input-value`, as a user would; outputs: `--output out.pb` (one output) "
        "or `.npz`.",
        f"- check: onnx's `Runner.assert_similar_outputs`: shapes, dtypes, then "
        f"`assert_allclose(rtol={DEFAULT_RTOL:g}, atol={DEFAULT_ATOL:g})` "
        "(onnx's defaults; rtol at least 2^-6 for bfloat16).",
        "",
        "## Totals",
        "",
        "| tests | attempted | passed | failed | skipped |",
        "|---:|---:|---:|---:|---:|",
        f"| {t['total']} | {t['attempted']} | {t['passed']} | {t['failed']} | {t['skipped']} |",
        "",
    ]
    failures = [r for r in results if r.status == "failed"]
    out += ["## Failures by stage", "", "| stage | failed |", "|---|---:|"]
    by_stage = collections.Counter(r.stage for r in failures)
    for stage in STAGES:
        out.append(f"| {stage} | {by_stage.get(stage, 0)} |")
    out.append("")

    per_op: dict[str, dict] = collections.defaultdict(
        lambda: {"attempted": 0, "passed": 0, "failed": [], "skipped": 0})
    for r in results:
        row = per_op[r.op]
        if r.status == "skipped":
            row["skipped"] += 1
        else:
            row["attempted"] += 1
            if r.status == "passed":
                row["passed"] += 1
            else:
                row["failed"].append(r)
    out += ["## Per op",
            "",
            "Each test is counted under the op it tests (an `_expanded` test under the",
            "op whose function it expands). Ops with no attempted test are left out",
            "(see Skipped).",
            "",
            "| op | attempted | passed | failed | skipped | failing tests, by stage |",
            "|---|---:|---:|---:|---:|---|"]
    for op in sorted(per_op):
        row = per_op[op]
        if not row["attempted"]:
            continue
        stages = collections.defaultdict(list)
        for r in row["failed"]:
            stages[r.stage].append(f"`{r.name}`")
        failing = "; ".join(f"{stage}: {', '.join(names)}"
                            for stage, names in stages.items())
        out.append(f"| {op} | {row['attempted']} | {row['passed']} | "
                   f"{len(row['failed'])} | {row['skipped']} | {failing} |")
    out.append("")

    if failures:
        out += ["## Failures", "", "| test | stage | first line of the message |",
                "|---|---|---|"]
        for r in failures:
            msg = r.message.replace("|", "\\|")
            out.append(f"| `{r.name}` | {r.stage} | {msg} |")
        out.append("")

    skipped = [r for r in results if r.status == "skipped"]
    out += ["## Skipped", "", "| reason | tests |", "|---|---:|"]
    kinds = collections.Counter(_skip_kind(r.message) for r in skipped)
    for kind, n in sorted(kinds.items(), key=lambda kv: (-kv[1], kv[0])):
        out.append(f"| {kind} | {n} |")
    out.append("")
    missing = collections.Counter()
    for r in skipped:
        if r.message.startswith("op not supported"):
            missing.update(r.message.split(": ", 1)[1].split(", "))
    if missing:
        out += ["Ops outside the importer, by the number of tests that need them:", ""]
        out.append(", ".join(f"{op} ({n})" for op, n in
                             sorted(missing.items(), key=lambda kv: (-kv[1], kv[0]))))
        out.append("")
    return "\n".join(out)


def totals_line(results: list[Result]) -> str:
    t = totals(results)
    stages = collections.Counter(r.stage for r in results if r.status == "failed")
    by_stage = ", ".join(f"{s} {stages[s]}" for s in STAGES if stages[s])
    return (f"{t['total']} tests: {t['attempted']} attempted, {t['passed']} passed, "
            f"{t['failed']} failed" + (f" ({by_stage})" if by_stage else "")
            + f", {t['skipped']} skipped")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m shardflow.backend_tests",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--filter", help="only tests whose name matches this regex")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1,
                        help="tests run at once (default: the CPU count)")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT,
                        help="seconds per shard-opt or shard-run call (default %(default)s)")
    parser.add_argument("--threads", type=int, default=1,
                        help="shard-run --threads for each test (default 1)")
    parser.add_argument("--report", type=Path, help="write the Markdown report here")
    parser.add_argument("--json", type=Path, help="write every result as JSON here")
    parser.add_argument("--date", help="the date printed in the report (default: today)")
    parser.add_argument("--verbose", "-v", action="store_true",
                        help="print every result as it comes")
    args = parser.parse_args(argv)

    data_dir = node_data_dir()
    infos = collect(data_dir, args.filter)
    attempted = [i for i in infos if not i.skip]
    print(f"{len(infos)} node tests in {data_dir}; {len(attempted)} attempted",
          file=sys.stderr)

    def progress(r: Result, done: int, total: int) -> None:
        if args.verbose or r.status == "failed":
            detail = f" [{r.stage}] {r.message}" if r.status == "failed" else ""
            print(f"[{done}/{total}] {r.name}: {r.status}{detail}", file=sys.stderr)

    start = time.monotonic()
    ran = {r.name: r for r in run_all(attempted, args.jobs, data_dir, args.timeout, progress,
                                          args.threads)}
    elapsed = time.monotonic() - start
    results = [ran.get(i.name) or Result(i.name, i.op, "skipped", message=i.skip,
                                         ops=i.ops) for i in infos]
    if args.report:
        args.report.parent.mkdir(parents=True, exist_ok=True)
        args.report.write_text(markdown_report(results, args.date, args.jobs, elapsed))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"totals": totals(results),
                                         "results": [asdict(r) for r in results]},
                                        indent=1))
    print(totals_line(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
