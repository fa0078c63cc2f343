"""The CUDA target's generated kernels, checked without a GPU.

Each case is a small ONNX model (written as ONNX text) made only of ops that
`convert-rt-to-gpu` turns into generated code. `shard-opt MODEL --target
cuda` compiles it (shardflow.standin.compile_cuda: the raising passes off
unless a test asks for them, and the same compile prints the rt program and
its gpu.func kernels right after convert-rt-to-gpu, which the tests check),
and shard-run runs the artifact on the CUDA stand-ins (tools/cuda-standin:
the generated kernels interpreted from the PTX NVPTX emitted, with a GPU's
faults reported: misaligned and out-of-range accesses, shared-memory races,
shuffles that part of a warp skips). The outputs are compared with
onnxruntime on the same inputs. This checks the code the compiler generates
(fusion, indexing, broadcasting, reductions, rounding) and its lowering to
PTX; the GPU runs are in tools/gpu-check.sh.

ptxas assembles every case's kernels for sm_80; some tests assemble for
sm_80 and sm_90, and the artifact must carry both cubins and the compute_80
PTX.

Tolerances (|ours - ort| <= atol + rtol |ort|): float32 rtol 1e-5, atol 1e-6
(1e-5 where erf/gelu/tanh are involved: libdevice's and onnxruntime's
approximations differ by a few 1e-7); bf16 results rtol 1e-2 (one unit in
the last place is 2^-8); booleans and integers exact.
"""
import os
import re
import subprocess
import zlib
from pathlib import Path

import ml_dtypes
import numpy as np
import onnxruntime as ort
import pytest
import onnx
from onnx import parser

from shardflow import toolchain, standin
from test_cuda_standin import standin_dir, standin_env

REPO = Path(__file__).resolve().parents[2]
BIN = Path(os.environ.get("SHARDFLOW_BUILD_DIR", REPO / "build")) / "bin"
SHARD_OPT = BIN / "shard-opt"

HEADER = '<ir_version: 8, opset_import: ["" : 20]>\n'

# name -> (graph text, {input: (shape, dtype)}, tolerance, expected launches)
CASES = {
    "residual_gelu_layernorm": (
        "g (float[4,96] x, float[96] b, float[96] s) => (float[4,96] y) {"
        " a = Add(x, b) g = Gelu(a) y = LayerNormalization(g, s, b) }",
        None, 1e-5, 1),
    "gelu_tanh_chain": (
        'g (float[3,700] x, float[700] b) => (float[3,700] y) {'
        ' a = Add(x, b) y = Gelu <approximate = "tanh"> (a) }',
        None, 1e-5, 1),
    "broadcast_both_ways": (
        "g (float[2,3,4] x, float[3,1] y, float[1,4] z) => (float[2,3,4] w) {"
        " a = Sub(x, y) b = Mul(a, z) c = Div(b, y) w = Max(c, z) }",
        None, 1e-6, 1),
    "broadcast_output_larger": (
        "g (float[3,1] x, float[1,5] y) => (float[3,5] w) { a = Add(x, y) b = Abs(a) w = Sqrt(b) }",
        None, 1e-6, 1),
    "softmax_last": (
        "g (float[5,300] x) => (float[5,300] y) { y = Softmax(x) }", None, 1e-6, 1),
    "softmax_axis0": (
        "g (float[3,5,7] x) => (float[3,5,7] y) { y = Softmax <axis = 0> (x) }", None, 1e-6, 1),
    "softmax_axis1_fused_scale": (
        "g (float[3,5,7] x, float[7] m) => (float[3,5,7] y) {"
        " a = Mul(x, m) y = Softmax <axis = 1> (a) }",
        None, 1e-6, 1),
    "softmax_row_too_long_for_shared_memory": (
        "g (float[2,9000] x, float[9000] m) => (float[2,9000] y) {"
        " a = Mul(x, m) y = Softmax(a) }", None, 1e-6, 1),
    "log_softmax": (
        "g (float[2,37] x) => (float[2,37] y) { y = LogSoftmax(x) }", None, 1e-6, 1),
    "layernorm_two_axes": (
        "g (float[2,3,4] x, float[3,4] s, float[4] b) => (float[2,3,4] y) {"
        " y = LayerNormalization <axis = -2> (x, s, b) }",
        None, 1e-5, 1),
    "layernorm_no_bias_long_row": (
        "g (float[3,1000] x, float[1000] s) => (float[3,1000] y) {"
        " y = LayerNormalization(x, s) }",
        None, 1e-5, 1),
    "multi_output_fusion": (
        "g (float[8,33] x) => (float[8,33] y, float[8,33] z) {"
        " a = Exp(x) y = Add(a, a) z = Tanh(a) }",
        None, 1e-5, 1),
    "residual_stream_and_norm": (
        "g (float[4,96] x, float[4,96] r, float[96] s, float[96] b) => (float[4,96] h, float[4,96] y) {"
        " h = Add(x, r) n = LayerNormalization(h, s, b) y = Add(n, h) }",
        None, 1e-5, 2),
    "broadcast_read_of_fused_value": (
        "g (float[3,1] x, float[3,4] y) => (float[3,4] z) { e = Exp(x) z = Add(e, y) }",
        None, 1e-6, 2),
    "compare_select": (
        "g (float[4,6] x, float[4,6] y) => (float[4,6] w, bool[4,6] n, bool[4,6] o) {"
        " l = Less(x, y) w = Where(l, x, y) g = Greater(x, y) e = Equal(x, x)"
        " o = And(g, e) n = Not(l) }",
        None, 0.0, None),
    "unary_zoo": (
        "g (float[64] x) => (float[64] y) {"
        " a = Sigmoid(x) b = Erf(a) s = Add(b, a) c = Reciprocal(s) n = Neg(c) d = Relu(n)"
        " t = Sub(x, d) e = LeakyRelu <alpha = 0.2> (t) f = Clip(e, lo, hi) y = Pow(f, two) }",
        {"lo": -0.5, "hi": 0.75, "two": 2.0}, 1e-5, 1),  # a is read twice, in registers
    "rounding": (
        "g (float[64] x) => (float[64] y) {"
        " f = Floor(x) c = Ceil(x) r = Round(x) a = Add(f, c) y = Add(a, r) }",
        None, 0.0, 1),
    "trigonometry": (
        "g (float[64] x) => (float[64] y) {"
        " c = Cos(x) s = Sin(x) p = Mul(c, s) y = Add(p, x) }",
        None, 1e-5, 1),
    "casts": (
        "g (float[10] x, int64[10] i) => (float[10] y, int64[10] j, bool[10] k) {"
        " h = Cast <to = 16> (x) y = Cast <to = 1> (h) f = Cast <to = 1> (i)"
        " j = Add(i, i) d = Sub(f, x) k = Cast <to = 9> (d) }",
        None, 1e-2, None),
    # Over the constant evaluator's 1 MiB: the ranges stay ops, generated.
    "range_not_folded": (
        "g (int64[300000] x) => (int64[300000] y, float[300000] f) {"
        " r = Range(s, l, d) y = Add(x, r) fr = Range(fs, fl, fd) f = Mul(fr, fr) }",
        {"s": ("int64", 3), "l": ("int64", 600003), "d": ("int64", 2),
         "fs": ("float", 0.5), "fl": ("float", 75000.5), "fd": ("float", 0.25)}, 1e-6, 1),
    "trilu_upper_lower": (
        "g (float[2,5,7] x) => (float[2,5,7] u, float[2,5,7] w) {"
        " u = Trilu(x, k) w = Trilu <upper = 0> (x, k) }",
        {"k": ("int64", -1)}, 0.0, 1),
    "rotary_4d_positions": (
        "g (float[2,3,5,8] x, float[16,4] c, float[16,4] s, int64[2,5] p) => (float[2,3,5,8] y) {"
        " y = RotaryEmbedding(x, c, s, p) }",
        None, 1e-6, 1),
    "rotary_3d_interleaved_partial": (
        "g (float[2,5,24] x, float[2,5,2] c, float[2,5,2] s) => (float[2,5,24] y) {"
        " y = RotaryEmbedding <interleaved = 1, num_heads = 3, rotary_embedding_dim = 4> (x, c, s) }",
        None, 1e-6, 1),
    "rotary_then_scale_fused": (
        "g (float[1,2,4,6] x, float[4,3] c, float[4,3] s, int64[1,4] p, float[6] m) => (float[1,2,4,6] y) {"
        " r = RotaryEmbedding(x, c, s, p) y = Mul(r, m) }",
        None, 1e-6, 1),
    "reduce_trailing_axes_with_prologue": (
        "g (float[3,4,50] x, float[50] b) => (float[3,1,1] y) {"
        " a = Add(x, b) e = Exp(a) y = ReduceSum <keepdims = 1> (e, axes) }",
        {"axes": ("int64[2]", "1, 2")}, 1e-5, 1),
    "reduce_middle_axis_mean_max": (
        "g (float[4,300,6] x) => (float[4,6] m, float[4,1,6] n) {"
        " m = ReduceMean <keepdims = 0> (x, axes) n = ReduceMax <keepdims = 1> (x, axes) }",
        {"axes": ("int64[1]", "1")}, 1e-5, 2),
    # Rows up to 1024 elements run one warp per row, 8 rows per block:
    # 13 rows leave 3 spare warps in the second block; a row of 1 leaves
    # 31 idle lanes; 1024 is the longest warp row, 1025 a block row.
    "warp_rows_partial_last_block": (
        "g (float[13,33] x, float[13,33] r, float[33] s, float[33] b) => (float[13,33] h, float[13,33] y) {"
        " h = Add(x, r) y = LayerNormalization(h, s, b) }",
        None, 1e-5, 1),
    "warp_rows_of_one_element": (
        "g (float[9,1] x) => (float[9,1] y, float[9,1] z) { y = Softmax(x) z = LogSoftmax(x) }",
        None, 1e-6, 2),
    "warp_rows_longest_and_block_rows": (
        "g (float[10,1024] x, float[1024] s, float[3,1025] u) => (float[10,1024] y, float[3,1025] v) {"
        " y = LayerNormalization(x, s) v = Softmax(u) }",
        None, 1e-5, 2),
    # Strided rows of 96 and 160 elements (and 33) run blocks of 128, 256
    # (64) threads, a power of two: gpu.all_reduce raced in shared memory on
    # blocks of 96 or 160.
    "block_rows_not_a_power_of_two": (
        "g (float[96,5] x, float[160,3] u, float[33,2] w) => (float[5] m, float[1,3] n, float[2] k) {"
        " m = ReduceSum <keepdims = 0> (x, axes) n = ReduceMax <keepdims = 1> (u, axes)"
        " k = ReduceMean <keepdims = 0> (w, axes) }",
        {"axes": ("int64[1]", "0")}, 1e-5, 3),
    "warp_rows_reductions": (
        "g (float[11,100] x) => (float[11,1] m, float[11] n) {"
        " m = ReduceMax <keepdims = 1> (x, axes) e = Exp(x) n = ReduceSum <keepdims = 0> (e, axes) }",
        {"axes": ("int64[1]", "1")}, 1e-5, 2),
    "integer_min_max_abs": (
        "g (int64[12] a, int64[12] b) => (int64[12] c) {"
        " m = Min(a, b) n = Max(a, b) d = Sub(m, n) c = Abs(d) }",
        None, 0.0, 1),
    # Vector accesses (4 f32 lanes a thread): c [4,1] is one element for all
    # of a thread's lanes, r [8], q [2,1,8] and p [4,8] are 4 consecutive
    # elements.
    "vector_lanes_broadcasts": (
        "g (float[2,4,8] x, float[4,1] c, float[8] r, float[2,1,8] q, float[4,8] p)"
        " => (float[2,4,8] y) { a = Mul(x, c) b = Add(a, r) d = Sub(b, q) y = Div(d, p) }",
        None, 1e-6, 1),
    # Rows of 6: [6] and [2,1,6] are not 4 consecutive elements at every
    # multiple of 4 (each lane loads its own); [4,6] is.
    "vector_lanes_split_rows": (
        "g (float[2,4,6] x, float[6] r, float[2,1,6] q, float[4,6] p) => (float[2,4,6] y) {"
        " a = Add(x, r) b = Mul(a, q) y = Sub(b, p) }",
        None, 1e-6, 1),
    # int8 (8 lanes, 8 bytes a thread), and an i64 range beside it (2 lanes).
    "vector_lanes_narrow_and_wide_integers": (
        "g (int8[4,16] x, int8[16] b) => (int8[4,16] y, int64[10] r) {"
        " a = Add(x, b) y = Clip(a, lo, hi) r = Range(s, l, d) }",
        {"lo": ("int8", -20), "hi": ("int8", 30), "s": ("int64", 3), "l": ("int64", 23),
         "d": ("int64", 2)}, 0.0, 1),
}


def _model(name):
    graph, constants, _, _ = CASES[name]
    consts = ""
    if constants:
        # Constants go in as initializers: <float lo = {-0.5}, ...>.
        inits = ", ".join(
            f"{v[0]} {k} = {{{v[1]}}}" if isinstance(v, tuple) else f"float {k} = {{{v}}}"
            for k, v in constants.items())
        head, rest = graph.split(") {", 1)
        graph = f"{head}) <{inits}> {{{rest}"
    header = HEADER.replace('"" : 20', '"" : 23') if name.startswith("rotary") else HEADER
    return parser.parse_model(header + graph)


def _inputs(model, seed):
    rng = np.random.default_rng(seed)
    feeds = {}
    init_names = {i.name for i in model.graph.initializer}
    for inp in model.graph.input:
        if inp.name in init_names:
            continue
        t = inp.type.tensor_type
        shape = [d.dim_value for d in t.shape.dim]
        if t.elem_type == 1:
            feeds[inp.name] = rng.standard_normal(shape).astype(np.float32)
        elif t.elem_type == 7 and inp.name == "p":
            feeds[inp.name] = rng.integers(0, 4 if shape[-1] == 4 else 16, shape).astype(np.int64)
        elif t.elem_type == 7:
            feeds[inp.name] = rng.integers(-50, 50, shape).astype(np.int64)
        elif t.elem_type == 3:
            feeds[inp.name] = rng.integers(-60, 60, shape).astype(np.int8)
        else:
            raise ValueError(t.elem_type)
    return feeds


def _compile(model, tmp_path, *extra):
    path = tmp_path / "m.onnx"
    path.write_bytes(model.SerializeToString())
    return subprocess.run([str(SHARD_OPT), str(path), *extra], capture_output=True, text=True)


def _gpu_program(model, tmp_path, *flags, name="m"):
    """Compiles the model (tmp_path/m.onnx) for CUDA with FLAGS: the
    artifact (tmp_path/NAME.shard) and the rt program with its generated
    gpu.func kernels after convert-rt-to-gpu, in generic form; the compile
    must succeed."""
    path = tmp_path / "m.onnx"
    path.write_bytes(model.SerializeToString())
    artifact = tmp_path / f"{name}.shard"
    return artifact, standin.compile_cuda(path, artifact, *flags)


def _on_standin(artifact, model, feeds, **options):
    """shard-run on the CUDA stand-ins: the outputs in the graph's order."""
    standin_dir()  # skips when the build has no CUDA executor
    got = standin.run(artifact, feeds, **options)
    return [got[out.name] for out in model.graph.output]


def _standin_error(artifact, feeds):
    """What shard-run on the stand-ins says when the run fails, which it
    must."""
    standin_dir()
    with pytest.raises(standin.RunFailed) as failed:
        standin.run(artifact, feeds)
    return failed.value.stderr


@pytest.mark.parametrize("name", sorted(CASES))
def test_generated_kernels_match_onnxruntime(name, tmp_path):
    model = _model(name)
    _, _, tol, launches = CASES[name]
    artifact, ir = _gpu_program(model, tmp_path)
    # Everything became generated code: no runtime kernel is left.
    assert '"rt.kernel"' not in ir
    if launches is not None:
        assert ir.count('"rt.launch"') == launches, ir
    # A stable seed: hash() of a str changes from one interpreter to the next.
    feeds = _inputs(model, zlib.crc32(name.encode()))
    ours = _on_standin(artifact, model, feeds)
    _assert_matches_onnxruntime(model, feeds, ours, tol)


def _assert_matches_onnxruntime(model, feeds, ours, tol):
    """Integers and booleans exactly; floats within rtol `tol` (at least
    1e-6) and an atol of `tol` times the output's largest magnitude (at
    least 1). The atol is scaled because a sum that cancels to near zero
    keeps the rounding error of its operands: exp(x) + y with exp(x) ~ 3
    differs by one float32 ulp of 3 (2.4e-7) between two correct exps, which
    an unscaled atol of 1e-7 refused for about 1 seed in 120."""
    ref = ort.InferenceSession(model.SerializeToString(),
                               providers=["CPUExecutionProvider"]).run(None, feeds)
    for got, want, out in zip(ours, ref, model.graph.output):
        assert got.shape == want.shape, out.name
        if want.dtype.kind in "biu":
            np.testing.assert_array_equal(got, want, err_msg=out.name)
        else:
            rtol = max(tol, 1e-6)
            finite = np.abs(want[np.isfinite(want)])
            scale = max(1.0, float(np.max(finite, initial=0.0)))
            np.testing.assert_allclose(got.astype(np.float64), want, rtol=rtol,
                                       atol=rtol * scale, err_msg=out.name)


def test_vector_accesses_must_be_aligned(tmp_path):
    """Each thread takes 4 consecutive floats: its vector loads and stores
    start at multiples of 4 elements (16 bytes), in PTX ld.global.v4 and
    st.global.v4. The stand-in faults on a vector access at an address its
    size does not divide, as a GPU does ("misaligned address"): shift a
    load by one element and the run must fail so. With `--cuda-disable
    vector-accesses` the same program loads one element a thread and
    computes the same values."""
    model = _graph_model("g (float[4,8] x, float[8] b) => (float[4,8] y) {"
                         " a = Add(x, b) y = Relu(a) }")
    artifact, ir = _gpu_program(model, tmp_path)
    assert ir.count('"vector.load"') == 2 and ir.count('"vector.store"') == 1, ir
    x, b = _f(4, 8), _f(8)
    (y,) = _on_standin(artifact, model, {"x": x, "b": b})
    np.testing.assert_array_equal(y, np.maximum(x + b, 0))
    scalar, scalar_ir = _gpu_program(model, tmp_path, "--cuda-disable=vector-accesses",
                                     name="scalar")
    assert '"vector.' not in scalar_ir
    assert ".v4" not in standin.ptx(scalar)
    np.testing.assert_array_equal(_on_standin(scalar, model, {"x": x, "b": b})[0], y)
    # Load x at base + 4 bytes instead of base.
    ptx = standin.ptx(artifact)
    assert ptx.count("ld.global.v4.b32") == 2 and ptx.count("st.global.v4.b32") == 1, ptx
    moved, n = re.subn(r"(ld\.global\.v4\.b32\s+\{[^}]*\}, \[%rd\d+)\]", r"\1+4]", ptx, count=1)
    assert n == 1, ptx
    err = _standin_error(standin.with_ptx(artifact, tmp_path / "moved.shard", moved),
                         {"x": x, "b": b})
    assert re.search(r"'ld\.global\.v4\.b32 [^']*\+4\]': global load of 16 bytes at 0x[0-9a-f]+ "
                     "is misaligned", err), err
    assert "CUDA_ERROR_MISALIGNED_ADDRESS (misaligned address)" in err, err


def test_bf16_data_computes_in_f32_and_rounds_once(tmp_path):
    # x is cast to bf16, then add+gelu in bf16 (fused: computed in f32,
    # rounded once when stored), then back to f32.
    model = parser.parse_model(HEADER + (
        "g (float[2,40] x, float[40] b) => (float[2,40] y) {"
        " xb = Cast <to = 16> (x) bb = Cast <to = 16> (b) a = Add(xb, bb)"
        " g = Gelu(a) y = Cast <to = 1> (g) }"))
    artifact, ir = _gpu_program(model, tmp_path)
    # b's cast is read with broadcasting, so it stays a kernel of its own.
    assert ir.count('"rt.launch"') == 2
    assert '"arith.truncf"' in ir and "bf16" in ir
    rng = np.random.default_rng(7)
    x = rng.standard_normal((2, 40)).astype(np.float32)
    b = rng.standard_normal(40).astype(np.float32)
    (y,) = _on_standin(artifact, model, {"x": x, "b": b})
    bf = lambda v: v.astype(ml_dtypes.bfloat16).astype(np.float64)
    from math import erf
    a = bf(x) + bf(b)
    want = bf(0.5 * a * (1 + np.vectorize(erf)(a / np.sqrt(2))))
    np.testing.assert_allclose(y, want, rtol=1e-2, atol=1e-2)
    # The input casts round: an f32 pipeline would differ by far more.
    exact = 0.5 * (x + b) * (1 + np.vectorize(erf)((x + b) / np.sqrt(2)))
    assert np.abs(y - exact).max() > 1e-4


@pytest.mark.parametrize("name", ["residual_gelu_layernorm", "softmax_axis0", "casts", "unary_zoo"])
def test_target_cuda_assembles_for_sm80_and_sm90(name, tmp_path):
    model = _model(name)
    art = tmp_path / "m.shard"
    proc = _compile(model, tmp_path, "--target", "cuda", "-o", str(art),
                    "--dump-ptx", str(tmp_path / "m.ptx"))
    assert proc.returncode == 0, proc.stderr
    text = art.read_text()
    assert text.startswith("shardflow-artifact 4\ntarget cuda\n")
    modules = re.findall(r"^module (\S+) arch=(\S+) format=(\S+) data=", text, re.M)
    assert sorted(m[1:] for m in modules) == [("compute_80", "ptx"), ("sm_80", "cubin"),
                                              ("sm_90", "cubin")]
    launches = re.findall(r"^kernel launch .* function=s:(\w+)", text, re.M)
    ptx = (tmp_path / "m.ptx").read_text()
    assert ".target sm_80" in ptx
    for fn in launches:
        assert f".entry {fn}(" in ptx


def test_unsupported_kernels_are_named(tmp_path):
    model = parser.parse_model(HEADER + (
        "g (bool[2,3] x) => (bool[2,3] y) <int64 a = {1}> { y = CumSum(x, a) }"))
    proc = _compile(model, tmp_path, "--target", "cuda", "-o", str(tmp_path / "m.shard"))
    assert proc.returncode != 0
    assert "cannot be generated for CUDA: cumsum needs a numeric input" in proc.stderr
    # A training-dropout mask is drawn at compile time, up to 2^24 elements.
    big = _graph_model("g (float[4097,4096] x) => (float[4097,4096] y) {"
                       " y = Dropout <seed = 1> (x, r, t) }",
                       opset=22, inits="<float r = {0.5}, bool t = {1}>")
    proc = _compile(big, tmp_path, "--target", "cuda", "-o", str(tmp_path / "m.shard"))
    assert proc.returncode != 0
    assert "draws the mask at compile time, for at most 16777216 elements" in proc.stderr
    proc = _compile(model, tmp_path, "--target", "cpu", "--cuda-arch", "sm_90",
                    "-o", str(tmp_path / "m.shard"))
    assert proc.returncode != 0 and "need --target cuda" in proc.stderr
    proc = _compile(_model("softmax_last"), tmp_path, "--target", "cuda", "--cuda-arch", "sm_70",
                    "-o", str(tmp_path / "m.shard"))
    assert proc.returncode != 0 and "sm_80 or newer" in proc.stderr
    proc = _compile(_model("softmax_last"), tmp_path, "--target", "cuda", "--cuda-path",
                    str(tmp_path / "nowhere"), "-o", str(tmp_path / "m.shard"))
    assert proc.returncode != 0 and "needs the CUDA toolkit" in proc.stderr


@pytest.mark.parametrize("model_name,dtype", [("mlp", "f32"), ("gpt2", "f32"), ("bert", "f32"),
                                              ("llama", "f32"), ("resnet", "f32"),
                                              ("neox", "f32"), ("gpt2", "bf16"),
                                              ("llama", "bf16"), ("neox", "bf16"),
                                              ("resnet", "bf16")])
def test_zoo_cuda_programs_match_onnxruntime(model_name, dtype, tmp_path):
    """The whole CUDA program of each zoo model: attention raised, the rest
    fused into generated kernels around the runtime's matmul (cuBLASLt),
    attention and data-movement calls, run by shard-run on the stand-ins,
    against onnxruntime's float32 run. Relative L2 error under 1e-5 (f32)
    and 2e-2 (--dtype bf16)."""
    path, artifact, ir = _zoo_cuda_program(model_name, dtype, tmp_path)
    launches = ir.count('"rt.launch"')
    assert launches > 0
    if dtype == "bf16":
        assert "xbf16>" in ir and '"arith.truncf"' in ir
        if model_name in ("gpt2", "llama"):
            # The f32 logits come straight out of the last GEMM (f32
            # output from bf16 operands): no cast kernel after it.
            assert not re.search(r"@k\d+_cast\b", ir)
            assert re.search(r'kernel = "matmul".*: \(memref<[0-9x]+xbf16>, '
                             r'memref<[0-9x]+xbf16>, memref<[0-9x]+xf32>\) -> \(\)', ir)
    if model_name not in ("mlp", "resnet"):
        assert 'kernel = "attention"' in ir  # raised: no seq x seq softmax kernel
    if model_name in ("gpt2", "bert", "llama"):
        # Heads are read in place (through the rotary embedding in Llama):
        # no transposes around attention.
        assert 'kernel = "transpose"' not in ir
    if model_name == "gpt2":
        # Bias adds ride on cuBLASLt: gelu(tanh) of the MLP's first linear too;
        # the fused QKV projection is one GEMM whose result the attention
        # reads in place (packed_qkv), no split.
        assert 'epilogue = "gelu_bias"' in ir and 'epilogue = "bias"' in ir
        assert 'kernel = "split"' not in ir and "packed_qkv" in ir
        assert "softmax" not in re.sub(r"k\d+_[\w]*", "", ir.split('"gpu.module"')[0])
    _run_against_onnxruntime(path, artifact, dtype)


def _zoo_cuda_program(model_name, dtype, tmp_path, *model_flags, cuda_flags=()):
    """A zoo model's file, its --target cuda artifact (attention, rotate_half
    and norms raised) and its program after convert-rt-to-gpu (generic
    form, before memory planning)."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / f"{model_name}.onnx"
    subprocess.run([str(Path(os.sys.executable)), "-m", "shardflow.models", model_name,
                    "--out", str(path), *model_flags], check=True, capture_output=True,
                   env={**os.environ, "PYTHONPATH": str(REPO / "python")})
    artifact = tmp_path / f"{model_name}.shard"
    ir = standin.compile_cuda(path, artifact, "--raise-attention", "--raise-rotate-half",
                              "--raise-normalization", "--dtype", dtype, *cuda_flags)
    return path, artifact, ir


@pytest.mark.parametrize("written", [["--rotary", "written"], ["--export", "hf"]])
@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_written_out_llama_runs_like_the_opset_23_ops(written, dtype, tmp_path):
    """The zoo's Llama written out as Hugging Face's exports write it:
    its rotation (`python -m shardflow.models llama --rotary written`:
    slices, neg, concat; cos and sin gathered from full-width caches), or
    everything (`--export hf`: RMSNorm as Pow, ReduceMean, Sqrt,
    Reciprocal; the attention materialized with K and V repeated per group
    and an additive causal mask). Raised (norms, rotate_half, attention)
    and the rotation rebuilt on the head split, so the attention reads its
    heads in place, it is the program of the opset-23 ops: the same
    generated launches and attention kernels, no transpose, slice or
    concat; the two extra device operations are the gathers of cos and
    sin. The program matches onnxruntime on the stand-ins."""
    (tmp_path / "op").mkdir()
    _, _, op_ir = _zoo_cuda_program("llama", dtype, tmp_path / "op")
    path, artifact, ir = _zoo_cuda_program("llama", dtype, tmp_path, *written)
    assert ir.count('kernel = "attention"') == op_ir.count('kernel = "attention"') == 2
    assert ir.count('kernel = "matmul"') == op_ir.count('kernel = "matmul"')
    for kernel in ("transpose", "slice", "concat", "split"):
        assert f'kernel = "{kernel}"' not in ir, kernel
    assert ir.count('"rt.launch"') == op_ir.count('"rt.launch"')
    assert ir.count('kernel = "gather"') == op_ir.count('kernel = "gather"') + 2
    # One launch a layer rotates q and k (siblings).
    assert len(re.findall(r"@k\d+_\w*rotate_half", ir)) == 2
    _run_against_onnxruntime(path, artifact, dtype)


def _run_against_onnxruntime(path, artifact, dtype):
    """Runs the artifact on the stand-ins with random inputs (the weights
    from the model beside it); relative L2 error against onnxruntime under
    1e-5 (f32) or 2e-2 (bf16)."""
    import onnx

    model = onnx.load(str(path))
    init_names = {t.name for t in model.graph.initializer}
    rng = np.random.default_rng(3)
    feeds = {}
    for inp in model.graph.input:
        if inp.name in init_names:
            continue
        t = inp.type.tensor_type
        shape = [d.dim_value for d in t.shape.dim]
        if t.elem_type == 7:
            hi = 2 if "type" in inp.name or "mask" in inp.name else 100
            feeds[inp.name] = rng.integers(0, hi, shape).astype(np.int64)
            if "mask" in inp.name:
                feeds[inp.name][:, 0] = 1
        else:
            feeds[inp.name] = rng.standard_normal(shape).astype(np.float32)
    ours = _on_standin(artifact, model, feeds)
    ref = ort.InferenceSession(model.SerializeToString(),
                               providers=["CPUExecutionProvider"]).run(None, feeds)
    for got, want in zip(ours, ref):
        err = np.linalg.norm(got.astype(np.float64) - want) / np.linalg.norm(want)
        assert err < (1e-5 if dtype == "f32" else 2e-2), err


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_misaligned_vocabulary_projection_is_stored_transposed(dtype, tmp_path):
    """A vocabulary of 101 (GPT-2's 50257 is odd too): the [hidden, vocab]
    projection's rows are not 16-byte aligned, so its weight is loaded
    transposed and the GEMM reads it with trans_b; the logits' rows are not
    aligned either, so the GEMM writes 104 columns (the weight zero-padded
    at load), and the program returns that buffer with rt.columns = 101
    (no copy). The program still matches onnxruntime. The aligned weights of the same model keep their
    layout. With --cuda-disable gemm-padding the GEMM writes the logits
    itself."""
    path, artifact, ir = _zoo_cuda_program("gpt2", dtype, tmp_path, "--vocab", "101")
    elem = "f32" if dtype == "f32" else "bf16"
    head = re.search(r'"rt.weight"\(\) <\{[^\n]*name = "lm_head.weight"[^\n]*', ir)
    assert head, ir
    assert "permutation = array<i64: 1, 0>" in head.group(0)
    assert "zero_padded" in head.group(0)
    assert re.search(rf": \(\) -> memref<104x64x{elem}>", head.group(0)), head.group(0)
    assert ir.count("permutation = array<i64") == 1
    transposed = r'kernel = "matmul"[^{]*params = \{trans_b = true\}'
    assert len(re.findall(transposed, ir)) == 1, ir
    assert 'kernel = "slice"' not in ir
    assert re.search(rf"res_attrs = \[\{{[^}}]*rt\.columns = 101 : i64", ir), ir
    assert re.search(r"function_type = \([^)]*\) -> memref<2x8x104xf32>", ir), ir
    _run_against_onnxruntime(path, artifact, dtype)

    path, artifact, ir = _zoo_cuda_program("gpt2", dtype, tmp_path / "unpadded", "--vocab",
                                           "101", cuda_flags=["--cuda-disable=gemm-padding"])
    head = re.search(r'"rt.weight"\(\) <\{[^\n]*name = "lm_head.weight"[^\n]*', ir)
    assert "zero_padded" not in head.group(0)
    assert re.search(rf": \(\) -> memref<101x64x{elem}>", head.group(0)), head.group(0)
    assert 'kernel = "slice"' not in ir
    _run_against_onnxruntime(path, artifact, dtype)


def test_fused_projection_einsum_becomes_matmul(tmp_path):
    """The megatron preset's einsum for fused QKV ("...a,abc->...bc") runs
    as a cuBLASLt matmul of views on CUDA (other einsums: test_einsum)."""
    model = parser.parse_model(HEADER + (
        'g (float[2,5,8] x, float[8,3,4] w) => (float[2,5,3,4] y) {'
        ' e = Einsum <equation = "...a,abc->...bc"> (x, w) y = Relu(e) }'))
    artifact, ir = _gpu_program(model, tmp_path)
    assert 'kernel = "einsum"' not in ir and 'kernel = "matmul"' in ir
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 5, 8)).astype(np.float32)
    w = rng.standard_normal((8, 3, 4)).astype(np.float32)
    (y,) = _on_standin(artifact, model, {"x": x, "w": w})
    np.testing.assert_allclose(y, np.maximum(np.einsum("...a,abc->...bc", x, w), 0),
                               rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("model_name", ["gpt2", "llama", "gpt2-weights", "gpt2-padded",
                                        "neox-weights"])
@pytest.mark.parametrize("strategy", ["megatron", "megatron-sp"])
@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_sharded_cuda_programs_on_four_ranks(model_name, strategy, dtype, tmp_path):
    """The partitioned programs the CPU differential tests run under mpirun,
    compiled for CUDA (dp=2, tp=2): generated kernels between NCCL
    collectives, GPT-2's fused QKV projection as one GEMM the attention reads
    in place. shard-run runs the artifact on 4 ranks under mpirun on the
    stand-ins (one stand-in GPU per rank, NCCL between them), and every
    rank's output is compared with onnxruntime: relative L2 under 1e-5
    (f32) and 2e-2 (bf16). "-weights":
    every initializer loaded as a weight (biases too), not embedded.
    "-padded": a vocabulary of 131, zero-padded to 144 for the
    vocabulary-parallel embedding and projection. GPT-NeoX's parallel
    block: the attention and MLP partial sums reduced together, each rank
    adding half of both biases, halved at load (scale=0.5)."""
    import onnx

    model_name, _, variant = model_name.partition("-")
    path = tmp_path / f"{model_name}.onnx"
    subprocess.run([str(Path(os.sys.executable)), "-m", "shardflow.models", model_name,
                    "--out", str(path)] + (["--vocab", "131"] if variant == "padded" else []),
                   check=True, capture_output=True,
                   env={**os.environ, "PYTHONPATH": str(REPO / "python")})
    common = [str(path), "--mesh", "dp=2,tp=2", "--strategy", strategy, "--dtype", dtype]
    if variant == "weights":
        common += ["--embed-limit-bytes", "0"]
    art = tmp_path / "m.shard"
    proc = subprocess.run([str(SHARD_OPT), *common, "--target", "cuda", "-o", str(art)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    text = art.read_text()
    assert "world-size 4" in text
    if variant == "padded":
        assert len(re.findall(r"^buffer .* global=\S*131\S* .*padded=zeros", text, re.M)) == 2
    if model_name == "neox":
        scaled = re.findall(r"^buffer \d+ weight \S+ \S+ name=(\S+) .* scale=0\.5 ", text, re.M)
        assert sorted(scaled) == sorted(f"layers.{i}.{n}.bias" for i in range(2)
                                        for n in ("attention.dense", "mlp.dense_4h_to_h")), scaled
    kinds = set(re.findall(r"^collective (\w+)", text, re.M))
    assert kinds >= ({"all_reduce"} if strategy == "megatron" else
                     {"all_gather", "reduce_scatter"}), kinds
    assert re.search(r"^kernel launch ", text, re.M)
    assert not re.search(r"^kernel einsum ", text, re.M)
    if model_name == "gpt2":
        # The fused QKV projection (the einsum against the rank's [K, 3,
        # N/tp] weight): one GEMM of the weight viewed as [K, 3N/tp] with its
        # bias in the epilogue, read in place by the attention; no split.
        assert not re.search(r"^kernel split ", text, re.M)
        assert len(re.findall(r"^kernel matmul .*epilogue=s:bias node=s:/h\.0/attn/Add",
                              text, re.M)) == 1
        packed = re.findall(r"^kernel attention .*packed_qkv=is:(\S+)", text, re.M)
        assert len(packed) == 2 and set(packed) == {"32,32,32"}, packed
        if variant == "weights":
            # The rank's [3, 32] block of the [3, 64] bias, loaded as such
            # (no per-forward local_slice copy).
            assert re.search(r"^buffer \d+ weight \w+ 3x32 name=h\.0\.attn\.c_attn\.bias .*"
                             r"global=3x64 starts=0,0;0,32;0,0;0,32 ", text, re.M), text
    # The artifact on 4 ranks, the weights read from the model beside it.
    model = onnx.load(str(path))
    weights = {t.name for t in model.graph.initializer}
    feeds = {inp.name: np.random.default_rng(4).integers(
                 0, 100, [d.dim_value for d in inp.type.tensor_type.shape.dim]).astype(np.int64)
             for inp in model.graph.input if inp.name not in weights}
    standin_dir()  # skips when the build has no CUDA executor
    ranks = [[got[out.name] for out in model.graph.output]
             for got in standin.run(art, feeds, world=4, timeout=600)]
    assert len(ranks) == 4
    ref = ort.InferenceSession(model.SerializeToString(),
                               providers=["CPUExecutionProvider"]).run(None, feeds)
    for rank, outs in enumerate(ranks):
        for got, want in zip(outs, ref):
            err = np.linalg.norm(got.astype(np.float64) - want) / np.linalg.norm(want)
            assert err < (1e-5 if dtype == "f32" else 2e-2), (rank, err)


# Convolution (im2col + matmul), pooling and batch normalization on CUDA.
CONV_CASES = {
    "conv_stride_pad_bias": (
        "g (float[2,3,9,9] x, float[4,3,3,3] w, float[4] b) => (float[2,4,5,5] y) {"
        " y = Conv <strides = [2, 2], pads = [1, 1, 1, 1]> (x, w, b) }"),
    "conv_grouped_dilated": (
        "g (float[1,4,8,8] x, float[6,2,3,3] w) => (float[1,6,4,4] y) {"
        " y = Conv <group = 2, dilations = [2, 2]> (x, w) }"),
    "conv_1d_asymmetric_pads": (
        "g (float[2,2,10] x, float[3,2,4] w) => (float[2,3,10] y) {"
        " y = Conv <pads = [2, 1]> (x, w) }"),
    "max_pool_ceil_and_pads": (
        "g (float[1,2,7,7] x) => (float[1,2,4,4] y) {"
        " y = MaxPool <kernel_shape = [3, 3], strides = [2, 2], pads = [1, 1, 0, 0], ceil_mode = 1> (x) }"),
    "max_pool_with_indices_row_major": (
        "g (float[2,2,7,7] x) => (float[2,2,4,4] y, int64[2,2,4,4] i) {"
        " y, i = MaxPool <kernel_shape = [3, 3], strides = [2, 2], pads = [1, 1, 1, 1]> (x) }"),
    "max_pool_with_indices_column_major": (
        "g (float[1,3,6,5] x) => (float[1,3,3,3] y, int64[1,3,3,3] i) {"
        " y, i = MaxPool <kernel_shape = [2, 3], strides = [2, 2], pads = [0, 1, 0, 1],"
        " storage_order = 1> (x) }"),
    "average_pool_with_and_without_pad_count": (
        "g (float[1,2,6,6] x) => (float[1,2,3,3] y, float[1,2,3,3] z) {"
        " y = AveragePool <kernel_shape = [3, 3], strides = [2, 2], pads = [1, 1, 1, 1]> (x)"
        " z = AveragePool <kernel_shape = [3, 3], strides = [2, 2], pads = [1, 1, 1, 1],"
        " count_include_pad = 1> (x) }"),
    "batch_norm_relu_global_pool": (
        "g (float[2,3,5,5] x, float[3] s, float[3] b, float[3] m, float[3] v) => (float[2,3,1,1] y) {"
        " n = BatchNormalization (x, s, b, m, v) r = Relu(n) y = GlobalAveragePool(r) }"),
}


@pytest.mark.parametrize("name", sorted(CONV_CASES))
def test_convolution_and_pooling(name, tmp_path):
    model = parser.parse_model(HEADER + CONV_CASES[name])
    # ptxas assembles the kernels for sm_80 and sm_90.
    artifact, ir = _gpu_program(model, tmp_path, "--cuda-arch=sm_80,sm_90")
    assert 'kernel = "conv"' not in ir and 'kernel = "max_pool' not in ir
    feeds = _inputs(model, 11)
    if "v" in feeds:  # variances are positive
        feeds["v"] = np.abs(feeds["v"]) + 0.1
    ours = _on_standin(artifact, model, feeds)
    ref = ort.InferenceSession(model.SerializeToString(),
                               providers=["CPUExecutionProvider"]).run(None, feeds)
    for got, want in zip(ours, ref):
        np.testing.assert_allclose(got.astype(np.float64), want, rtol=1e-5, atol=1e-5)


def test_pointwise_convolution_reads_its_input_in_place(tmp_path):
    # A 1x1 convolution at stride 1 without padding multiplies the input
    # itself (no im2col copy); a strided or padded one still copies.
    model = parser.parse_model(HEADER + (
        "g (float[2,4,5,5] x, float[6,2,1,1] w, float[6] b, float[3,6,1,1] v)"
        " => (float[2,6,5,5] y, float[2,3,3,3] z, float[2,3,7,7] p) {"
        " y = Conv <group = 2> (x, w, b)"
        " z = Conv <strides = [2, 2]> (y, v)"
        " p = Conv <pads = [1, 1, 1, 1]> (y, v) }"))
    artifact, ir = _gpu_program(model, tmp_path)
    assert ir.count('"rt.launch"') == 3, ir
    launches = re.findall(r"kernel = @shardflow_kernels::@(\w+)", ir)
    assert [k for k in launches if "im2col" in k] == ["k1_im2col", "k2_im2col"], launches
    feeds = _inputs(model, 5)
    ours = _on_standin(artifact, model, feeds)
    _assert_matches_onnxruntime(model, feeds, ours, 1e-5)


def test_batch_norm_takes_its_input_from_a_fused_producer(tmp_path):
    # The convolution's bias add and a residual add feed batch
    # normalization from registers: with its relu, one launch each.
    model = parser.parse_model(HEADER + (
        "g (float[2,3,6,6] x, float[4,3,3,3] w, float[4] b, float[2,4,6,6] r,"
        " float[4] s, float[4] t, float[4] m, float[4] v)"
        " => (float[2,4,6,6] y, float[2,4,6,6] z) {"
        " c = Conv <pads = [1, 1, 1, 1]> (x, w, b)"
        " n = BatchNormalization (c, s, t, m, v) y = Relu(n)"
        " a = Add(y, r) o = BatchNormalization (a, s, t, m, v) z = Relu(o) }"))
    artifact, ir = _gpu_program(model, tmp_path)
    launches = re.findall(r"kernel = @shardflow_kernels::@(\w+)", ir)
    assert launches == ["k0_im2col", "k1_add_batch_normalization_relu_add_batch_normalization"], \
        launches
    feeds = _inputs(model, 6)
    feeds["v"] = np.abs(feeds["v"]) + 0.1
    ours = _on_standin(artifact, model, feeds)
    _assert_matches_onnxruntime(model, feeds, ours, 1e-5)


def test_max_pool_of_integers_ties_and_nan_match_the_cpu_backend(tmp_path):
    """Max pooling of signed and unsigned integers (values across the sign
    bit), and indices with ties (the first maximum wins), NaN (the first NaN
    wins) and windows of padding only (-1), exactly as the CPU backend."""
    model = _graph_model(
        "g (int8[1,2,6,6] a, uint16[1,2,6,6] b, float[1,1,5,5] f) =>"
        " (int8[1,2,3,3] ya, uint16[1,2,3,3] yb, int64[1,2,3,3] ib,"
        "  float[1,1,4,4] yf, int64[1,1,4,4] jf) {"
        " ya = MaxPool <kernel_shape = [3, 3], strides = [2, 2], pads = [1, 1, 1, 1]> (a)"
        " yb, ib = MaxPool <kernel_shape = [2, 2], strides = [2, 2]> (b)"
        " yf, jf = MaxPool <kernel_shape = [2, 2], strides = [2, 2], pads = [2, 2, 1, 1],"
        " ceil_mode = 1> (f) }")
    f = np.round(_f(1, 1, 5, 5))  # rounding makes ties
    f[0, 0, 1, 1] = np.nan
    f[0, 0, 2, 3] = np.nan
    feeds = {"a": _i(-128, 128, 1, 2, 6, 6, dtype=np.int8),
             "b": _i(0, 2**16, 1, 2, 6, 6, dtype=np.uint16), "f": f}
    ir, ours = _run(model, feeds, tmp_path)
    assert '"arith.maxsi"' in ir and '"arith.cmpi"' in ir
    path = tmp_path / "m.onnx"
    cpu = toolchain.run_artifact(toolchain.compile_model(path, tmp_path / "cpu.shard"), feeds)
    for out, got in zip(model.graph.output, ours):
        np.testing.assert_array_equal(got, cpu[out.name], err_msg=out.name)
    assert (cpu["jf"] == -1).any() and np.isnan(cpu["yf"]).any()


@pytest.mark.parametrize("to", [1, 16, 11])  # float, bfloat16, double
def test_training_dropout_draws_the_cpu_backends_mask(to, tmp_path):
    """The CUDA target draws the training-dropout mask at compile time (it
    depends on the seed and shape only); mask and result equal the CPU
    backend's, which draws at run time, exactly (bfloat16 results within
    its rounding). Data in float, bfloat16 and double."""
    model = _graph_model(
        "g (float[3,50] x) => (float[3,50] y, bool[3,50] m, float[3,50] z) {"
        f" xt = Cast <to = {to}> (x) yt, m = Dropout <seed = 7> (xt, r, t) zt = Relu(yt)"
        " y = Cast <to = 1> (yt) z = Cast <to = 1> (zt) }",
        opset=22, inits="<float r = {0.3}, bool t = {1}>")
    feeds = {"x": _f(3, 50)}
    ir, ours = _run(model, feeds, tmp_path)
    assert "masked_scale" in ir and '"rt.constant"' in ir
    path = tmp_path / "m.onnx"
    cpu = toolchain.run_artifact(toolchain.compile_model(path, tmp_path / "cpu.shard"), feeds)
    for out, got in zip(model.graph.output, ours):
        if to == 16 and out.name != "m":
            # The casts back to float fuse with the dropout, which computes
            # in f32 and so skips the bfloat16 rounding of yt: within an ulp.
            np.testing.assert_allclose(got, cpu[out.name], rtol=2**-7, err_msg=out.name)
        else:
            np.testing.assert_array_equal(got, cpu[out.name], err_msg=out.name)
    assert 0.5 < cpu["m"].mean() < 0.9  # about 1 - ratio kept


def test_zoo_cases_for_the_gpu_check(tmp_path, monkeypatch):
    """shardflow.cuda_zoo writes what tools/gpu-check.sh runs on a GPU
    machine: the CUDA artifact, the model (for --weights), the inputs and
    onnxruntime's outputs under the output names."""
    import zipfile

    from shardflow import cuda_zoo

    monkeypatch.setattr(cuda_zoo, "MODELS", ["mlp", "gpt2"])
    monkeypatch.setattr(cuda_zoo, "SHARDED", ["gpt2"])
    written = cuda_zoo.write_cases(tmp_path, SHARD_OPT)
    assert sorted(p.relative_to(tmp_path).as_posix() for p in written) == [
        "bf16/gpt2-tp.shard", "bf16/gpt2.shard", "bf16/mlp.shard",
        "f32/gpt2-tp.shard", "f32/gpt2.shard", "f32/mlp.shard"]
    for art in written:
        text = art.read_text()
        assert text.startswith("shardflow-artifact 4\ntarget cuda\n")
        assert ("world-size 4" in text) == art.stem.endswith("-tp")
        base = art.with_suffix("")
        for suffix in (".onnx", ".inputs.npz", ".expected.npz"):
            assert Path(str(base) + suffix).exists()
        outputs = re.findall(r"^output (\S+) ", text, re.M)
        with zipfile.ZipFile(str(base) + ".expected.npz") as z:
            assert sorted(n[:-4] for n in z.namelist()) == sorted(outputs)


def test_check_cases_for_the_gpu_check(tmp_path):
    """shardflow.cuda_zoo's expected-error cases: the CUDA artifacts carry the
    ONNX node for the runtime's message; the inputs do trip the kernels'
    checks (shard-run on the stand-ins) and the CPU backend's; and
    gpu-check.sh passes a case only when the run fails with every expected
    phrase."""
    from shardflow import cuda_zoo

    written = cuda_zoo.write_check_cases(tmp_path, SHARD_OPT)
    assert sorted(p.stem for p in written) == sorted(cuda_zoo.CHECK_CASES)
    nodes = {"div_by_zero": "divide_counts", "gather_elements_out_of_range": "pick_rows",
             "gather_out_of_range": "embed", "fused_div_by_zero": "per_member",
             "mod_by_zero": "wrap_slots"}
    cpu_dir = tmp_path / "cpu"
    cpu_dir.mkdir()
    for art in written:
        base = art.with_suffix("")
        text = art.read_text()
        assert text.startswith("shardflow-artifact 4\ntarget cuda\n")
        if art.stem == "fused_div_by_zero":
            # One launch, two checking divisions: the runtime takes the
            # reporting one's node from this list (one name a line).
            assert text.count("kernel launch ") == 1 and "checks=i:1" in text
            assert "checking_nodes=s:per_group%0Aper_member" in text
        else:
            assert f"node=s:{nodes[art.stem]}" in text
        phrases = Path(str(base) + ".expected-error").read_text().splitlines()
        assert f"ONNX node '{nodes[art.stem]}'" in phrases
        with np.load(str(base) + ".inputs.npz") as z:
            feeds = {k: z[k] for k in z.files}
        err = _standin_error(art, feeds)
        assert ("integer division by zero" if "div_by_zero" in art.stem
                else "integer modulo by zero" if art.stem == "mod_by_zero"
                else "read from the data is out of range") in err, err
        assert f"ONNX node '{nodes[art.stem]}'" in err, err
        # The same inputs on the CPU backend, as gpu-check.sh cases.
        cpu_art = cpu_dir / art.name
        proc = subprocess.run([str(SHARD_OPT), str(base) + ".onnx", "--target", "cpu",
                               "-o", str(cpu_art)], capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
        np.savez(cpu_dir / f"{art.stem}.inputs.npz", **feeds)
        cpu_phrase = ("division by zero" if "div_by_zero" in art.stem
                      else "modulo by zero" if art.stem == "mod_by_zero" else "out of range")
        (cpu_dir / f"{art.stem}.expected-error").write_text(
            f"ONNX node '{nodes[art.stem]}'\n{cpu_phrase}\n")
    build = tmp_path / "build"
    (build / "bin").mkdir(parents=True)
    (build / "bin" / "shard-run").symlink_to(BIN / "shard-run")
    check = [str(REPO / "tools" / "gpu-check.sh"), "--no-build", "--build-dir", str(build)]
    proc = subprocess.run(["bash", *check, str(cpu_dir)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "== 5 passed, 0 failed" in proc.stdout
    # A phrase the error does not contain fails the case.
    (cpu_dir / "div_by_zero.expected-error").write_text("element 6 of the result\n")
    proc = subprocess.run(["bash", *check, str(cpu_dir)], capture_output=True, text=True)
    assert proc.returncode != 0
    assert "FAIL: the error does not say: element 6 of the result" in proc.stdout
    assert "== 4 passed, 1 failed" in proc.stdout


def test_training_cases_for_the_gpu_check(tmp_path, monkeypatch):
    """shardflow.cuda_zoo's training steps for tools/gpu-check.sh: the CUDA
    artifact, the model (under another name than the one compiled), the
    data and the CPU backend's log and weights. gpu-check.sh runs them (on
    the stand-ins here, one rank and dp=2 under mpirun) and passes them;
    a reference one loss or the weights away from the run fails the case,
    saying which."""
    import json
    import shutil

    from shardflow import cuda_zoo

    env = {**os.environ, **standin_env(2), "OMPI_ALLOW_RUN_AS_ROOT": "1",
           "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
    monkeypatch.setattr(cuda_zoo, "TRAINING", [("llama-dynamo", "sgd")])
    monkeypatch.setattr(cuda_zoo, "SHARDED_TRAINING", [("llama-dynamo", "sgd", "dp=2", "dp")])
    # The stand-ins interpret PTX, which sm_80 artifacts carry for newer GPUs.
    written = cuda_zoo.write_training_cases(tmp_path, SHARD_OPT, cuda_arch="sm_80")
    assert [p.name for p in written] == ["llama-dynamo-sgd.shard", "llama-dynamo-sgd-dp2.shard"]
    for art in written:
        text = art.read_text()
        assert text.startswith("shardflow-artifact 4\ntarget cuda\n")
        assert ("world-size 2" in text) == art.stem.endswith("-dp2")
        assert "storage=embedded file=model.onnx" in text
        base = str(art.with_suffix(""))
        log = [json.loads(line) for line in open(base + ".expected.jsonl")]
        assert [e["step"] for e in log] == [1, 2, 3, 4, 5]
        assert log[-1]["loss"] < log[0]["loss"]
        with np.load(base + ".data.npz") as d:
            assert sorted(d.files) == ["attention_mask", "input_ids", "labels"]
    build = tmp_path / "build"
    (build / "bin").mkdir(parents=True)
    (build / "bin" / "shard-run").symlink_to(BIN / "shard-run")
    check = ["bash", str(REPO / "tools" / "gpu-check.sh"), "--no-build", "--build-dir",
             str(build)]
    proc = subprocess.run([*check, str(tmp_path / "train")], capture_output=True, text=True,
                          env=env, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "== 2 passed, 0 failed" in proc.stdout
    assert proc.stdout.count("weights: relative L2") == 2
    # A reference that differs: one step's loss, then the weights.
    bad = tmp_path / "bad"
    bad.mkdir()
    for f in (tmp_path / "train").glob("llama-dynamo-sgd.*"):
        shutil.copy(f, bad / f.name)
    lines = (bad / "llama-dynamo-sgd.expected.jsonl").read_text().splitlines()
    entry = json.loads(lines[2])
    entry["loss"] *= 1.001
    lines[2] = json.dumps(entry)
    (bad / "llama-dynamo-sgd.expected.jsonl").write_text("\n".join(lines) + "\n")
    proc = subprocess.run([*check, str(bad)], capture_output=True, text=True, env=env,
                          timeout=600)
    assert proc.returncode != 0
    assert re.search(r"step 3: loss \S+, expected \S+ \(relative error 9\.99e-04 > 1e-4\)",
                     proc.stdout), proc.stdout
    assert "== 0 passed, 1 failed" in proc.stdout
    shutil.copy(tmp_path / "train" / "llama-dynamo-sgd.expected.jsonl", bad)
    with np.load(bad / "llama-dynamo-sgd.expected.npz") as w:
        weights = {k: w[k] * (1.01 if i == 0 else 1.0) for i, k in enumerate(sorted(w.files))}
    np.savez(bad / "llama-dynamo-sgd.expected.npz", **weights)
    proc = subprocess.run([*check, str(bad)], capture_output=True, text=True, env=env,
                          timeout=600)
    assert proc.returncode != 0
    assert "FAIL: the training run differs" in proc.stdout, proc.stdout


def test_gpu_check_skips_artifacts_for_more_gpus_than_there_are(tmp_path):
    """NCCL takes one GPU per rank: gpu-check.sh skips a CUDA artifact for
    more ranks than the machine has GPUs (the zoo's dp=2,tp=2 cases on a
    one-GPU machine) and says so, instead of failing it; gpu-session.sh
    refuses to run checks without the folder its prepare step writes."""
    path = tmp_path / "gpt2-tp.onnx"
    subprocess.run([str(Path(os.sys.executable)), "-m", "shardflow.models", "gpt2",
                    "--out", str(path)], check=True, capture_output=True,
                   env={**os.environ, "PYTHONPATH": str(REPO / "python")})
    cases = tmp_path / "cases"
    cases.mkdir()
    proc = subprocess.run([str(SHARD_OPT), str(path), "--mesh", "dp=2,tp=2", "--strategy",
                           "megatron", "--target", "cuda", "-o", str(cases / "gpt2-tp.shard")],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    build = tmp_path / "build"
    (build / "bin").mkdir(parents=True)
    (build / "bin" / "shard-run").symlink_to(BIN / "shard-run")
    proc = subprocess.run(["bash", str(REPO / "tools" / "gpu-check.sh"), "--no-build",
                           "--build-dir", str(build), str(cases)],
                          capture_output=True, text=True)
    gpus = int(re.search(r"this machine has (\d+)\)", proc.stdout).group(1))
    if gpus >= 4:
        pytest.skip("this machine has 4 GPUs or more")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "-- gpt2-tp: SKIPPED (needs 4 GPUs" in proc.stdout
    assert "== 0 passed, 0 failed, 1 skipped" in proc.stdout
    proc = subprocess.run(["bash", str(REPO / "tools" / "gpu-session.sh"), "check",
                           str(tmp_path / "nothing")], capture_output=True, text=True,
                          env={**os.environ, "OUT": str(tmp_path / "out")})
    assert proc.returncode != 0
    assert "run 'bash tools/gpu-session.sh prepare" in proc.stderr


def test_gpu_session_all_keeps_to_its_budget(tmp_path):
    """gpu-session.sh all runs every GPU check in one command within
    $SHARDFLOW_GPU_BUDGET seconds: with the build already there and a
    budget of one second, it starts nothing else, and the summary names
    every step it skipped, in the order they would have run."""
    build = tmp_path / "builds" / "rt" / "bin"
    build.mkdir(parents=True)
    for tool in ("shard-run", "cuda-kernel-check"):
        (build / tool).symlink_to(BIN / tool)
    session = tmp_path / "session"
    for part in ("smoke", "zoo", "bench", "llama"):
        (session / part).mkdir(parents=True)
    (session / "bench" / "config.json").write_text(
        '{"layers": 1, "hidden": 32, "heads": 2, "seq": 8, "batch": 1, "vocab": 16, '
        '"max_pos": 8, "small": [1, 4]}')
    (session / "llama" / "config.json").write_text(
        '{"layers": 1, "hidden": 32, "heads": 2, "kv_heads": 2, "intermediate": 64, '
        '"vocab": 16, "max_pos": 8, "shapes": {}}')
    out = tmp_path / "out"
    env = {**os.environ, "OUT": str(out), "SHARDFLOW_GPU_SESSION_BUILD": str(tmp_path / "builds"),
           "SHARDFLOW_GPU_BUDGET": "1", "PYTHON": os.sys.executable}
    proc = subprocess.run(["bash", str(REPO / "tools" / "gpu-session.sh"), "all", str(session)],
                          capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    summary = (out / "summary.txt").read_text()
    skipped = re.findall(r"^(.+): skipped \(-?\d+ s of the budget left", summary, re.M)
    assert skipped == ["gpu-check smoke", "gpu-check zoo/f32", "gpu-check zoo/checks",
                       "gpu-check zoo/bf16", "gpu-check zoo/train", "bench", "cuda-kernel-check",
                       "cuda-kernel-check --time", "bench", "gpu-check zoo/bf16 --cuda-graph",
                       "gpu-check zoo/bf16 --pinned-memory always",
                       "gpu-check zoo/bf16 --repeat 3", "gpu-check zoo/bf16 --no-group-gemms",
                       "bench-llama",
                       "sanitize memcheck smoke", "sanitize memcheck zoo/f32"], summary
    assert summary.startswith("all: a budget of 1 s")
    assert re.search(r"^all: done in \d+ s \(budget 1 s\)$", summary, re.M), summary
    assert "FAILED" not in summary
    # The device tool brings back at most 8 files (a build adds build.log).
    assert sorted(p.name for p in out.iterdir()) == [
        "bench-llama.log", "bench.log", "gpu-check.log", "kernel-check.log", "sanitize.log",
        "summary.txt"]
    # The benches' weights were generated from their seeds meanwhile.
    assert (tmp_path / "builds" / "bench" / "gpt2s.data").stat().st_size > 0
    assert (tmp_path / "builds" / "llama" / "llama.data").stat().st_size > 0


def test_gpu_check_under_compute_sanitizer(tmp_path):
    """gpu-check.sh --sanitize TOOL runs shard-run under compute-sanitizer
    and fails a case the sanitizer reports errors for (its exit status
    97), whether the run was to succeed or to fail; a clean sanitizer run
    compares outputs as usual. A stand-in for compute-sanitizer (there is
    no GPU here) checks the plumbing: the options it gets, and both
    outcomes."""
    model = parser.parse_model(HEADER + "g (float[2,3] x) => (float[2,3] y) { y = Relu(x) }")
    cases = tmp_path / "cases"
    cases.mkdir()
    (cases / "relu.onnx").write_bytes(model.SerializeToString())
    proc = subprocess.run([str(SHARD_OPT), str(cases / "relu.onnx"), "--target", "cpu",
                           "-o", str(cases / "relu.shard")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    x = np.array([[-1, 2, -3], [4, -5, 6]], np.float32)
    np.savez(cases / "relu.inputs.npz", x=x)
    np.savez(cases / "relu.expected.npz", y=np.maximum(x, 0))
    build = tmp_path / "build"
    (build / "bin").mkdir(parents=True)
    (build / "bin" / "shard-run").symlink_to(BIN / "shard-run")
    seen = tmp_path / "seen.txt"
    clean = tmp_path / "clean-sanitizer"
    clean.write_text(f'#!/bin/bash\necho "$@" >> {seen}\nshift 10\nexec "$@"\n')
    dirty = tmp_path / "dirty-sanitizer"
    dirty.write_text('#!/bin/bash\nshift 10\n"$@" >/dev/null\n'
                     'echo "========= Invalid __global__ read of size 4 bytes"\nexit 97\n')
    for f in (clean, dirty):
        f.chmod(0o755)
    check = ["bash", str(REPO / "tools" / "gpu-check.sh"), "--no-build", "--build-dir",
             str(build), "--sanitize", "memcheck", str(cases)]

    def run(sanitizer, args=check):
        return subprocess.run(args, capture_output=True, text=True,
                              env={**os.environ, "COMPUTE_SANITIZER": str(sanitizer)})
    proc = run(clean)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "== 1 passed, 0 failed" in proc.stdout
    assert seen.read_text().startswith(
        f"--tool memcheck --error-exitcode 97 --print-limit 20 --report-api-errors no "
        f"--target-processes all "
        f"{build}/bin/shard-run {cases}/relu.shard")
    proc = run(dirty)
    assert proc.returncode != 0
    assert "FAIL: compute-sanitizer (memcheck) reported errors" in proc.stdout
    assert "== 0 passed, 1 failed" in proc.stdout
    # An expected-error case the sanitizer objects to fails too.
    (cases / "relu.expected.npz").unlink()
    np.savez(cases / "relu.inputs.npz", x=x.astype(np.float64))
    (cases / "relu.expected-error").write_text("x\n")
    proc = run(dirty)
    assert "Invalid __global__ read" in proc.stdout
    assert "FAIL: compute-sanitizer (memcheck) reported errors" in proc.stdout
    proc = run(clean, check[:-2] + ["leakcheck", str(cases)])
    assert proc.returncode == 2
    assert "--sanitize: unknown tool 'leakcheck'" in proc.stdout


def _cuda_env(tmp_path, prefixes, pip):
    """Sources tools/cuda-env.sh with the given search roots; its output,
    the cmake options and LD_LIBRARY_PATH it leaves."""
    script = (f'source "{REPO}/tools/cuda-env.sh" python3; '
              'printf "ARGS=%s\\n" "${SHARDFLOW_CUDA_CMAKE_ARGS[*]}"; '
              'printf "LD=%s\\n" "${LD_LIBRARY_PATH:-}"')
    env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    env.update(SHARDFLOW_CUDA_PREFIXES=" ".join(map(str, prefixes)),
               SHARDFLOW_PIP_NVIDIA=" ".join(map(str, pip)))
    proc = subprocess.run(["bash", "-uc", script], capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr
    values = dict(line.split("=", 1) for line in proc.stdout.splitlines()
                  if line.startswith(("ARGS=", "LD=")))
    return proc.stdout, values["ARGS"].split(), [p for p in values["LD"].split(":") if p]


def test_cuda_env_finds_nccl_and_cublaslt_in_pip_packages(tmp_path):
    """A GPU machine whose toolkit lacks NCCL and cuBLASLt may have them in
    PyTorch's pip packages: cuda-env.sh (sourced by gpu-check.sh and
    gpu-session.sh) names their include folders to cmake and puts their
    libraries on LD_LIBRARY_PATH; the toolkit's copies win when present."""
    def touch(*parts):
        path = tmp_path.joinpath(*parts)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("")
    touch("pip", "nvidia", "nccl", "include", "nccl.h")
    touch("pip", "nvidia", "nccl", "lib", "libnccl.so.2")
    touch("pip", "nvidia", "cu13", "include", "cublasLt.h")
    touch("pip", "nvidia", "cu13", "lib", "libcublasLt.so.13")
    (tmp_path / "empty").mkdir()
    pip = tmp_path / "pip" / "nvidia"
    out, args, ld = _cuda_env(tmp_path, [tmp_path / "empty"], [pip])
    assert args == [f"-DSHARDFLOW_CUBLASLT_INCLUDE_DIR={pip}/cu13/include",
                    f"-DSHARDFLOW_NCCL_INCLUDE_DIR={pip}/nccl/include"], out
    assert ld == [f"{pip}/nccl/lib", f"{pip}/cu13/lib"], out
    assert f"cuda-env: NCCL: {pip}/nccl/include/nccl.h, {pip}/nccl/lib/libnccl.so.2 " \
           "(added to LD_LIBRARY_PATH)" in out
    # The toolkit has both headers: no cmake option; its lib64 serves the
    # runs unless the loader finds the libraries anyway.
    touch("tk", "include", "nccl.h")
    touch("tk", "include", "cublasLt.h")
    touch("tk", "lib64", "libnccl.so.2")
    touch("tk", "lib64", "libcublasLt.so.13")
    out, args, ld = _cuda_env(tmp_path, [tmp_path / "tk"], [pip])
    assert args == [], out
    assert ld in ([], [str(tmp_path / "tk" / "lib64")]), out
    assert f"cuda-env: NCCL: {tmp_path}/tk/include/nccl.h" in out
    # Neither: said, and cmake's own error follows in the build.
    out, args, ld = _cuda_env(tmp_path, [tmp_path / "empty"], [tmp_path / "empty"])
    assert args == [] and ld == [], out
    assert f"cuda-env: NCCL: no nccl.h in {tmp_path}/empty or {tmp_path}/empty" in out


def test_report_on_cuda_programs(tmp_path):
    """--report on CUDA programs: generated kernels are not collectives, and
    a weight loaded as several slices (the megatron preset's fused QKV
    projection, one GEMM per piece) is one weight. On one rank the fused
    projection is one GEMM whose result the attention reads in place: no
    slices."""
    path = tmp_path / "gpt2.onnx"
    subprocess.run([str(Path(os.sys.executable)), "-m", "shardflow.models", "gpt2",
                    "--out", str(path)], check=True, capture_output=True,
                   env={**os.environ, "PYTHONPATH": str(REPO / "python")})
    single = subprocess.run([str(SHARD_OPT), str(path), "--target", "cuda", "--report",
                             "-o", str(tmp_path / "a.shard")], capture_output=True, text=True)
    assert single.returncode == 0, single.stderr
    assert "global=" not in (tmp_path / "a.shard").read_text()  # QKV one GEMM
    assert re.search(r"parameters per rank: (\d+) bytes in 11 weights \(0 sliced\) and \d+ "
                     r"embedded constants \(\d+ bytes\); the whole model has \1 bytes of float "
                     r"initializers: 1.000 per rank", single.stderr), single.stderr
    assert "collectives: 0," in single.stderr
    sharded = subprocess.run([str(SHARD_OPT), str(path), "--mesh", "dp=2,tp=2", "--strategy",
                              "megatron", "--target", "cuda", "--report",
                              "-o", str(tmp_path / "b.shard")], capture_output=True, text=True)
    assert sharded.returncode == 0, sharded.stderr
    assert "rt.launch" not in sharded.stderr
    # 4 all_reduces after the row-parallel layers, 1 after the vocabulary-
    # parallel embedding, the logits gathered over tp and over dp.
    assert re.search(r"collectives: 7, ", sharded.stderr), sharded.stderr
    assert "global=" in (tmp_path / "b.shard").read_text()  # QKV loaded as slices
    assert "10 of 11 weights" in sharded.stderr
    assert "zero padding" not in single.stderr + sharded.stderr


def test_report_counts_zero_padding(tmp_path):
    """A vocabulary of 101: gemm-padding loads the [101, 64] projection as
    104 rows (f32), 3 x 64 x 4 bytes past the tensor, which --report names
    apart from the parameters; with gemm-padding off nothing is padded."""
    path = tmp_path / "gpt2.onnx"
    subprocess.run([str(Path(os.sys.executable)), "-m", "shardflow.models", "gpt2",
                    "--vocab", "101", "--out", str(path)], check=True, capture_output=True,
                   env={**os.environ, "PYTHONPATH": str(REPO / "python")})
    padded = subprocess.run([str(SHARD_OPT), str(path), "--target", "cuda", "--report",
                             "-o", str(tmp_path / "a.shard")], capture_output=True, text=True)
    assert padded.returncode == 0, padded.stderr
    m = re.search(r"parameters per rank: (\d+) bytes in 11 weights \(0 sliced\) and \d+ "
                  r"embedded constants \(\d+ bytes\); the whole model has (\d+) bytes",
                  padded.stderr)
    assert m and int(m.group(1)) - int(m.group(2)) == 768, padded.stderr
    assert "zero padding: 768 of those bytes per rank in 1 weight slice that reach" \
        in padded.stderr, padded.stderr
    plain = subprocess.run([str(SHARD_OPT), str(path), "--target", "cuda", "--report",
                            "--cuda-disable", "gemm-padding", "-o", str(tmp_path / "b.shard")],
                           capture_output=True, text=True)
    assert plain.returncode == 0, plain.stderr
    assert "zero padding" not in plain.stderr
    assert re.search(r"the whole model has (\d+) bytes of float initializers: 1.000 per rank",
                     plain.stderr)


#
# Kernels generated as launches of their own: reductions over axes that are
# not one contiguous block (and of integers), cumsum, gather_elements,
# scatter_nd and topk. The kernels that read indices from data report an
# index out of range through their status word, which shard-run's CUDA
# executor turns into an error naming the kernel.
#

def _graph_model(graph, opset=20, inits=""):
    head, rest = graph.split(") {", 1)
    text = f'<ir_version: 8, opset_import: ["" : {opset}]>\n{head}) {inits} {{{rest}'
    return parser.parse_model(text)


def _run(model, feeds, tmp_path, generated_only=True):
    artifact, ir = _gpu_program(model, tmp_path)
    if generated_only:
        assert '"rt.kernel"' not in ir
    return ir, _on_standin(artifact, model, feeds)


def _check(model, feeds, tmp_path, launches=None):
    ir, ours = _run(model, feeds, tmp_path)
    if launches is not None:
        assert ir.count('"rt.launch"') == launches
    _assert_matches_onnxruntime(model, feeds, ours, 1e-5)
    return ir


RNG = np.random.default_rng(11)


def _f(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def _i(lo, hi, *shape, dtype=np.int64):
    return RNG.integers(lo, hi, shape).astype(dtype)


def test_reductions_over_separated_axes_and_integers(tmp_path):
    model = _graph_model(
        "g (float[3,4,5] x, int64[3,4,5] n, int32[6,7] m) =>"
        " (float[1,4,1] s, float[4] a, int64[4] ns, int64[3,1,5] nm, int32[7] mx, int32[6,1] mm) {"
        " s = ReduceSum <keepdims = 1> (x, ax02) a = ReduceMean <keepdims = 0> (x, ax02)"
        " ns = ReduceSum <keepdims = 0> (n, ax02) nm = ReduceMean <keepdims = 1> (n, ax1)"
        " mx = ReduceMax <keepdims = 0> (m, ax0) mm = ReduceMax <keepdims = 1> (m, ax1) }",
        inits="<int64[2] ax02 = {0, 2}, int64[1] ax1 = {1}, int64[1] ax0 = {0}>")
    feeds = {"x": _f(3, 4, 5), "n": _i(-1000, 1000, 3, 4, 5),
             "m": _i(-2**31, 2**31 - 1, 6, 7, dtype=np.int32)}
    ir = _check(model, feeds, tmp_path, launches=6)
    # The integer mean truncates toward zero (negative sums included).
    assert '"arith.divsi"' in ir


@pytest.mark.parametrize("axis,exclusive,reverse", [(0, 0, 0), (1, 1, 0), (-1, 0, 1), (2, 1, 1)])
def test_cumsum(axis, exclusive, reverse, tmp_path):
    model = _graph_model(
        f"g (float[4,3,37] x, int64[4,3,37] n) => (float[4,3,37] y, int64[4,3,37] m) {{"
        f" y = CumSum <exclusive = {exclusive}, reverse = {reverse}> (x, a)"
        f" m = CumSum <exclusive = {exclusive}, reverse = {reverse}> (n, a) }}",
        inits=f"<int64 a = {{{axis}}}>")
    _check(model, {"x": _f(4, 3, 37), "n": _i(-100, 100, 4, 3, 37)}, tmp_path, launches=2)


def _cumsum_reference(x, axis, exclusive, reverse):
    """float64 (or exact integer) scan, and for floats the sum of |x| over
    the same prefix, which bounds the rounding of any summation order."""
    def scan(v):
        v = np.flip(v, axis) if reverse else v
        c = np.cumsum(v, axis)
        c = c - v if exclusive else c
        return np.flip(c, axis) if reverse else c
    if x.dtype.kind in "iu":
        exact = scan(np.asarray(x, object))
        bits = np.iinfo(x.dtype).bits
        wrapped = [((int(v) + 2**(bits - 1)) % 2**bits) - 2**(bits - 1) for v in exact.ravel()]
        return np.array(wrapped, np.int64).astype(x.dtype).reshape(x.shape), None
    x64 = x.astype(np.float64)
    return scan(x64), scan(np.abs(x64))


@pytest.mark.parametrize("shape,axis,exclusive,reverse", [
    ((3, 1000), 1, 0, 0),     # 4 tiles of 256, the last one partial
    ((3, 1000), -1, 1, 1),
    ((2, 2, 300), 2, 1, 0),   # a block of 256 ... and one of 64 below
    ((5, 40), 1, 0, 1),       # one tile of 64 threads, 24 idle
    ((600, 3), 0, 0, 0),      # 3 long lines along a leading axis
    ((600, 2, 2), 0, 1, 1),
])
def test_cumsum_one_block_per_line(shape, axis, exclusive, reverse, tmp_path):
    """Lines along the last axis, and a few long lines along another axis,
    are scanned by one block each in tiles (a scan per tile in shared
    memory, with barriers, plus the running total). Integers must match
    exactly (int32 sums wrap); floats within the rounding bound of their
    summation depth, 1e-6 * the prefix's sum of |x| (at most 12 additions
    of float32 rounding each, about 7e-7), against float64."""
    dims = ",".join(map(str, shape))
    model = _graph_model(
        f"g (float[{dims}] x, int32[{dims}] n, float16[{dims}] h) =>"
        f" (float[{dims}] y, int32[{dims}] m, float16[{dims}] k) {{"
        f" y = CumSum <exclusive = {exclusive}, reverse = {reverse}> (x, a)"
        f" m = CumSum <exclusive = {exclusive}, reverse = {reverse}> (n, a)"
        f" k = CumSum <exclusive = {exclusive}, reverse = {reverse}> (h, a) }}",
        inits=f"<int64 a = {{{axis}}}>")
    feeds = {"x": _f(*shape), "n": _i(-2**31, 2**31 - 1, *shape, dtype=np.int32),
             "h": _f(*shape).astype(np.float16)}
    ir, (y, m, k) = _run(model, feeds, tmp_path)
    n = shape[axis]
    lines = int(np.prod(shape)) // n
    block = min(256, (n + 31) // 32 * 32)
    launches = re.findall(r'"rt.launch".*?block = array<i64: (\d+), 1, 1>, '
                          r'grid = array<i64: (\d+), 1, 1>', ir)
    assert launches == [(str(block), str(lines))] * 3, launches
    assert '"gpu.barrier"' in ir
    want, bound = _cumsum_reference(feeds["x"], axis, exclusive, reverse)
    assert np.all(np.abs(y - want) <= 1e-6 * bound + 1e-30), np.max(np.abs(y - want))
    np.testing.assert_array_equal(m, _cumsum_reference(feeds["n"], axis, exclusive, reverse)[0])
    # f16 data accumulates in f32 and rounds once when stored.
    want16, bound16 = _cumsum_reference(feeds["h"], axis, exclusive, reverse)
    np.testing.assert_allclose(k.astype(np.float64), want16.astype(np.float16),
                               rtol=2**-10, atol=1e-6 * bound16.max())
    ort_out = ort.InferenceSession(model.SerializeToString(),
                                   providers=["CPUExecutionProvider"]).run(
        None, {"x": feeds["x"], "n": feeds["n"], "h": feeds["h"]})
    np.testing.assert_array_equal(m, ort_out[1])


def test_cumsum_block_scan_needs_its_barriers(tmp_path):
    """The stand-in runs a block's threads one at a time between barriers,
    which would hide a missing barrier; it tracks who touched each
    shared-memory byte since the last bar.sync instead. Without the
    barriers the block scan reads words other threads are writing, which
    must be refused."""
    model = _graph_model("g (float[2,300] x) => (float[2,300] y) { y = CumSum(x, a) }",
                         inits="<int64 a = {1}>")
    artifact, ir = _gpu_program(model, tmp_path)
    x = _f(2, 300)
    (y,) = _on_standin(artifact, model, {"x": x})
    np.testing.assert_allclose(y, np.cumsum(x.astype(np.float64), 1), rtol=1e-5, atol=1e-5)
    per_tile = 2 + 2 * 8  # after the load, two per doubling step, end of tile
    assert ir.count('"gpu.barrier"') == per_tile
    # NVPTX unrolls the loop over the line's two tiles of 256: drop the
    # first tile's barriers after the load, in the first doubling step and
    # at the tile's end.
    lines = standin.ptx(artifact).splitlines(keepends=True)
    barriers = [i for i, l in enumerate(lines) if l.split() == ["bar.sync", "0;"]]
    assert len(barriers) == 2 * per_tile, barriers
    for drop in (barriers[0], barriers[1], barriers[2], barriers[per_tile - 1]):
        broken = "".join(l for i, l in enumerate(lines) if i != drop)
        err = _standin_error(standin.with_ptx(artifact, tmp_path / "broken.shard", broken),
                             {"x": x})
        assert re.search(r"shared memory race: this thread (reads|writes) shared byte \d+, "
                         r"which .* (wrote|read) since the last bar\.sync", err), err


def test_warp_rows_guard_whole_warps(tmp_path):
    """One warp per row: the spare warps of the last block skip the body as
    a whole, so every shuffle has its 32 lanes. The stand-in refuses a
    shuffle that only part of a warp reaches (its other lanes' values are
    undefined on a GPU): guard on the thread id instead of the row, and the
    same kernel must be refused."""
    model = _graph_model("g (float[12,96] x, float[96] s) => (float[12,96] y) {"
                         " y = LayerNormalization(x, s) }")
    artifact, ir = _gpu_program(model, tmp_path)
    assert ir.count('"gpu.shuffle"') == 10 and '"gpu.all_reduce"' not in ir
    x, sc = _f(12, 96), _f(96)
    (y,) = _on_standin(artifact, model, {"x": x, "s": sc})
    xd = x.astype(np.float64)
    mean = xd.mean(-1, keepdims=True)
    want = (xd - mean) / np.sqrt(((xd - mean) ** 2).mean(-1, keepdims=True) + 1e-5) * sc
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5)
    # The guard: row < 12 (in PTX: skip when row > 11). Compare the thread
    # id (lanes 0..11 of warp 0) instead.
    assert re.search(r'(%\d+) = "arith.cmpi"\((%\d+), (%\d+)\) <\{predicate = 6', ir), ir
    ptx = standin.ptx(artifact)
    thread = re.search(r"mov\.u32\s+(%r\d+), %tid\.x;", ptx).group(1)
    guard = re.search(r"setp\.gt\.u32\s+%p\d+, (%r\d+), 11;", ptx)
    assert guard and guard.group(1) != thread, ptx
    broken = ptx.replace(guard.group(0), guard.group(0).replace(guard.group(1), thread), 1)
    err = _standin_error(standin.with_ptx(artifact, tmp_path / "broken.shard", broken),
                         {"x": x, "s": sc})
    assert re.search(r"shfl\.sync's mask names lane \d+, which has exited", err), err


def _launch_names(ir):
    return re.findall(r"kernel = @shardflow_kernels::@(\w+)", ir)


def test_row_epilogue_of_a_half_precision_rms_norm(tmp_path):
    """Llama's RMSNorm as exported in float16: the row in f32 between two
    casts, then the weight. The cast into f32 is the row's prologue, the
    cast back and the weight its epilogue: one launch, and the explicit
    cast still rounds to float16 before the weight multiplies."""
    model = _graph_model(
        "g (float16[6,40,64] x, float16[64] w) => (float16[6,40,64] y) {"
        " xf = Cast <to = 1> (x) sq = Pow(xf, two) m = ReduceMean <keepdims = 1> (sq, ax)"
        " e = Add(m, eps) s = Sqrt(e) r = Reciprocal(s) n = Mul(xf, r)"
        " h = Cast <to = 10> (n) y = Mul(w, h) }",
        inits="<float two = {2.0}, float eps = {1e-6}, int64[1] ax = {-1}>")
    feeds = {"x": _f(6, 40, 64).astype(np.float16), "w": _f(64).astype(np.float16)}
    artifact, ir = _gpu_program(model, tmp_path, "--raise-normalization")
    ours = _on_standin(artifact, model, feeds)
    assert _launch_names(ir) == ["k0_cast_rms_normalization_cast_mul"], _launch_names(ir)
    # The reference: the same roundings in float64 (f16 weight times the
    # f16-rounded normalized row, rounded again).
    xf = feeds["x"].astype(np.float64)
    n = xf / np.sqrt((xf ** 2).mean(-1, keepdims=True) + 1e-6)
    want = (feeds["w"].astype(np.float64) * n.astype(np.float16)).astype(np.float16)
    got = ours[0]
    assert got.dtype == np.float16
    # Two float16 ulps apart at most: the f32 row (against float64) can
    # round the normalized value to its other neighbour, and the product
    # rounds again.
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64),
                               rtol=2 ** -9, atol=1e-6)


def test_row_epilogues_of_softmax_and_layer_norm(tmp_path):
    """Elementwise consumers of a softmax or a norm run in its last pass:
    a cast of the probabilities; a residual add and relu after a layer norm
    whose result is also returned (so it is stored as well)."""
    model = _graph_model(
        "g (float[4,3,50] a, float[24,80] x, float[80] s, float[80] b, float[24,80] r)"
        " => (float16[4,3,50] p, float[24,80] n, float[24,80] z) {"
        " q = Softmax <axis = -1> (a) p = Cast <to = 10> (q)"
        " n = LayerNormalization(x, s, b) t = Add(n, r) z = Relu(t) }")
    feeds = {"a": _f(4, 3, 50), "x": _f(24, 80), "s": _f(80), "b": _f(80), "r": _f(24, 80)}
    ir, ours = _run(model, feeds, tmp_path)
    assert _launch_names(ir) == ["k0_softmax_cast", "k1_layer_normalization_add_relu"], \
        _launch_names(ir)
    _assert_matches_onnxruntime(model, feeds, ours, 1e-3)  # p is float16


def test_unrolled_row_steps_match_onnxruntime(tmp_path):
    """Rows that all their threads (a warp, or a block for rows over 1024)
    cross in the same few steps (a multiple of the threads x the vector
    width, at most 8 steps) have their passes unrolled, with no loop: a
    residual add, layer norm and relu over rows of 512 (a warp, 4 steps of
    4 floats), a softmax over 256 with a cast after it (2 steps), a
    reduce-mean over 128 (1 step), a layer norm over 2048 (a block of 256
    threads: 2 steps), and an RMS norm over 160 (not a multiple of 128: its
    loop stays). Each against onnxruntime."""
    model = _graph_model(
        "g (float[16,512] x, float[16,512] r, float[512] s, float[512] b, float[3,5,256] a,"
        " float[6,128] m, float[6,160] v, float[160] w, float[3,2048] h, float[2048] hs)"
        " => (float[16,512] z, float16[3,5,256] p, float[6,1] u, float[6,160] n,"
        " float[3,2048] hn) {"
        " t = Add(x, r) l = LayerNormalization(t, s, b) z = Relu(l)"
        " q = Softmax <axis = -1> (a) p = Cast <to = 10> (q)"
        " u = ReduceMean <keepdims = 1> (m, ax) n = RMSNormalization(v, w)"
        " hn = LayerNormalization(h, hs) }",
        opset=23, inits="<int64[1] ax = {1}>")
    feeds = {"x": _f(16, 512), "r": _f(16, 512), "s": _f(512), "b": _f(512),
             "a": _f(3, 5, 256), "m": _f(6, 128), "v": _f(6, 160), "w": _f(160),
             "h": _f(3, 2048), "hs": _f(2048)}
    ir, ours = _run(model, feeds, tmp_path)
    names = _launch_names(ir)
    assert names == ["k0_add_layer_normalization_relu", "k1_softmax_cast", "k2_reduce_mean",
                     "k3_rms_normalization", "k4_layer_normalization"], names
    # The 2048-wide norm runs a block of 256 threads per row (3 rows).
    assert "known_block_size = array<i32: 256, 1, 1>, known_grid_size = array<i32: 3, 1, 1>" \
        in ir, ir
    # Only the RMS norm's two passes (sum of squares, then the scaled row)
    # loop; with every loop kept there would be 3 + 3 + 1 + 2 + 3.
    assert ir.count('"scf.for"') == 2, ir.count('"scf.for"')
    _assert_matches_onnxruntime(model, feeds, ours, 1e-5)


def test_row_epilogue_never_reads_the_prologue_or_a_reduction(tmp_path):
    """An epilogue runs where only the row's result is in registers: a
    consumer that also reads the prologue's value (the residual stream
    itself), or that reads a reduction (one value a row, written by one
    thread), is a launch of its own."""
    model = _graph_model(
        "g (float[24,80] x, float[24,80] y, float[80] s) => (float[24,80] z, float[24,1] u) {"
        " a = Add(x, y) n = RMSNormalization(a, s) z = Add(n, a)"
        " m = ReduceSum <keepdims = 1> (x, ax) u = Relu(m) }",
        opset=23, inits="<int64[1] ax = {1}>")
    feeds = {"x": _f(24, 80), "y": _f(24, 80), "s": _f(80)}
    ir, ours = _run(model, feeds, tmp_path)
    assert _launch_names(ir) == ["k0_add_rms_normalization", "k1_add", "k2_reduce_sum",
                                 "k3_relu"], _launch_names(ir)
    _assert_matches_onnxruntime(model, feeds, ours, 1e-5)


def test_gather_elements_with_negative_indices(tmp_path):
    model = _graph_model(
        "g (float[4,6] x, int64[4,3] i, int64[5,2,3] n, int32[2,2,3] j) =>"
        " (float[4,3] y, int64[2,2,3] z) {"
        " y = GatherElements <axis = 1> (x, i) z = GatherElements <axis = 0> (n, j) }")
    feeds = {"x": _f(4, 6), "i": _i(-6, 6, 4, 3), "n": _i(-9, 9, 5, 2, 3),
             "j": _i(-5, 5, 2, 2, 3, dtype=np.int32)}
    _check(model, feeds, tmp_path, launches=2)


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
def test_scatter_nd(reduction, tmp_path):
    # Slices of rows (q = 1) and single elements (q = 2). Duplicate indices
    # only with a reduction: then every update applies, in order.
    dup = reduction != "none"
    model = _graph_model(
        f'g (float[5,4] x, int64[3,1] i, float[3,4] u, int64[6,5] n, int64[4,2] j, int64[4] v)'
        f' => (float[5,4] y, int64[6,5] z) {{ y = ScatterND <reduction = "{reduction}"> (x, i, u)'
        f' z = ScatterND <reduction = "{reduction}"> (n, j, v) }}', opset=18)
    i = np.array([[1], [-1], [1 if dup else 3]], np.int64)
    j = np.array([[0, 0], [5, -1], [0, 0] if dup else [2, 3], [-6, 1]], np.int64)
    feeds = {"x": _f(5, 4), "i": i, "u": _f(3, 4), "n": _i(-20, 20, 6, 5), "j": j,
             "v": _i(-20, 20, 4)}
    ir = _check(model, feeds, tmp_path)
    assert ir.count("scatter_nd_updates") >= 2 and "checks" in ir


@pytest.mark.parametrize("largest", [1, 0])
@pytest.mark.parametrize("axis", [-1, 0, 1])
def test_topk(largest, axis, tmp_path):
    # Small integers as floats: many ties, broken by the lower index.
    shape = [6, 40, 3]
    kdim = {-1: 2, 0: 0, 1: 1}[axis]
    out = list(shape)
    out[kdim] = 3
    o = ",".join(map(str, out))
    text = (f"float[{o}] v, int64[{o}] vi, int64[{o}] w, int64[{o}] wi, int32[{o}] q,"
            f" int64[{o}] qi")
    graph = (f"g (float[6,40,3] x, int64[6,40,3] n, int32[6,40,3] m) => ({text}) {{"
             f" v, vi = TopK <axis = {axis}, largest = {largest}> (x, k)"
             f" w, wi = TopK <axis = {axis}, largest = {largest}> (n, k)"
             f" q, qi = TopK <axis = {axis}, largest = {largest}> (m, k) }}")
    model = _graph_model(graph, inits="<int64[1] k = {3}>")
    feeds = {"x": _i(-4, 4, *shape).astype(np.float32), "n": _i(-2**40, 2**40, *shape),
             "m": _i(-3, 3, *shape, dtype=np.int32)}
    feeds["x"][0, :5, 0] = [-0.0, 0.0, np.inf, -np.inf, 3.5]
    _check(model, feeds, tmp_path, launches=3)


def test_topk_orders_nan_above_every_number(tmp_path):
    model = _graph_model(
        "g (float[2,9] x) => (float[2,4] v, int64[2,4] vi, float[2,4] s, int64[2,4] si) {"
        " v, vi = TopK (x, k) s, si = TopK <largest = 0> (x, k) }",
        inits="<int64[1] k = {4}>")
    x = np.array([[1, np.nan, 3, np.nan, -np.inf, 0, 2, 2, 5],
                  [-1, -0.0, 0.0, np.inf, 7, np.nan, -3, -3, 1]], np.float32)
    _, (v, vi, s, si) = _run(model, {"x": x}, tmp_path)
    np.testing.assert_array_equal(vi, [[1, 3, 8, 2], [5, 3, 4, 8]])
    np.testing.assert_array_equal(si, [[4, 5, 0, 6], [6, 7, 0, 1]])
    np.testing.assert_array_equal(v, np.take_along_axis(x, vi, 1))
    np.testing.assert_array_equal(s, np.take_along_axis(x, si, 1))


EINSUMS = {
    # equation: (operand shapes, float32 unless it says int64; what it becomes:
    # cuBLASLt's batched matmul with transposes where needed, or loops)
    "bhqd,bhkd->bhqk": ([(2, 3, 5, 8), (2, 3, 7, 8)], "matmul"),
    "bqhd,bkhd->bhqk": ([(2, 5, 3, 8), (2, 7, 3, 8)], "matmul"),
    "ij,kj->ik": ([(6, 9), (4, 9)], "matmul"),
    "i,j->ji": ([(5,), (3,)], "matmul"),
    "ij,jk": ([(6, 9), (9, 4)], "loops"),  # implicit output
    "...ij,...jk->...ik": ([(2, 1, 3, 4), (2, 5, 4, 2)], "loops"),
    "ii->i": ([(7, 7)], "loops"),
    "ij->": ([(4, 33)], "loops"),
    "ij,j->i": ([(4, 6), (6,)], "matmul"),
    "ij,jk->i": ([(4, 6), (6, 5)], "loops"),  # k summed in one operand
    "bij,bjk,bkl->bil": ([(2, 3, 4), (2, 4, 5), (2, 5, 6)], "loops"),
    "int64 ij,jk->ik": ([(4, 6), (6, 3)], "loops"),
}


@pytest.mark.parametrize("equation", sorted(EINSUMS))
def test_einsum(equation, tmp_path):
    shapes, form = EINSUMS[equation]
    integer = equation.startswith("int64 ")
    eq = equation.removeprefix("int64 ")
    ty = "int64" if integer else "float"
    feeds = {f"x{i}": (_i(-9, 9, *s) if integer else _f(*s)) for i, s in enumerate(shapes)}
    out_shape = np.einsum(eq, *feeds.values()).shape
    ins = ", ".join(f"{ty}[{','.join(map(str, s))}] x{i}" for i, s in enumerate(shapes))
    out = f"{ty}[{','.join(map(str, out_shape))}] y" if out_shape else f"{ty} y"
    args = ", ".join(feeds)
    model = _graph_model(f'g ({ins}) => ({out}) {{ y = Einsum <equation = "{eq}"> ({args}) }}')
    ir, ours = _run(model, feeds, tmp_path, generated_only=form == "loops")
    if form == "matmul":
        assert 'kernel = "matmul"' in ir and "einsum" not in ir
    else:
        assert "k0_einsum" in ir
    _assert_matches_onnxruntime(model, feeds, ours, 1e-5)


def test_matmuls_cublaslt_cannot_run_become_loops(tmp_path):
    # Integers and f64: numpy matmul semantics (batch broadcast, 1-D
    # operands) as generated einsum loops.
    model = _graph_model(
        "g (int64[2,1,3,4] a, int64[5,4,2] b, int64[4] v, double[3,4] d, double[4,6] e) =>"
        " (int64[2,5,3,2] y, int64[5,2] z, int64[2,1,3] w, double[3,6] f) {"
        " y = MatMul(a, b) z = MatMul(v, b) w = MatMul(a, v) f = MatMul(d, e) }")
    feeds = {"a": _i(-9, 9, 2, 1, 3, 4), "b": _i(-9, 9, 5, 4, 2), "v": _i(-9, 9, 4),
             "d": RNG.standard_normal((3, 4)), "e": RNG.standard_normal((4, 6))}
    ir, ours = _run(model, feeds, tmp_path)
    assert ir.count("_einsum") >= 4
    _assert_matches_onnxruntime(model, feeds, ours, 1e-12)


@pytest.mark.parametrize("case", ["gather_elements", "scatter_nd", "rotary"])
def test_out_of_range_indices_are_reported(case, tmp_path):
    if case == "gather_elements":
        model = _graph_model("g (float[3,4] x, int64[3,2] i) => (float[3,2] y) {"
                       " y = GatherElements <axis = 1> (x, i) }")
        feeds = {"x": _f(3, 4), "i": np.array([[0, 1], [2, 4], [-4, 3]], np.int64)}
        bad = 4
    elif case == "scatter_nd":
        model = _graph_model("g (float[3,4] x, int64[2,1] i, float[2,4] u) => (float[3,4] y) {"
                       " y = ScatterND (x, i, u) }")
        feeds = {"x": _f(3, 4), "i": np.array([[0], [-5]], np.int64), "u": _f(2, 4)}
        bad = -5
    else:
        model = _graph_model("g (float[1,2,3,4] x, float[8,2] c, float[8,2] s, int64[1,3] p) =>"
                       " (float[1,2,3,4] y) { y = RotaryEmbedding(x, c, s, p) }", opset=23)
        feeds = {"x": _f(1, 2, 3, 4), "c": _f(8, 2), "s": _f(8, 2),
                 "p": np.array([[0, 8, 2]], np.int64)}
        bad = 8
    artifact, _ = _gpu_program(model, tmp_path)
    err = _standin_error(artifact, feeds)
    assert f"index {bad} read from the data is out of range" in err, err
    # In range, the same program runs.
    if case == "gather_elements":
        feeds["i"][1, 1] = 3
    elif case == "scatter_nd":
        feeds["i"][1, 0] = -3
    else:
        feeds["p"][0, 1] = 7
    _on_standin(artifact, model, feeds)


def _cuda_artifact(model, tmp_path):
    """Compiles for CUDA (ptxas for sm_80 and sm_90 runs in the compile):
    the artifact's text, its launches that check data, and the PTX."""
    art = tmp_path / "m.shard"
    proc = _compile(model, tmp_path, "--target", "cuda", "-o", str(art),
                    "--dump-ptx", str(tmp_path / "m.ptx"))
    assert proc.returncode == 0, proc.stderr
    artifact = art.read_text()
    launches = re.findall(r"^kernel launch .*$", artifact, re.M)
    return (artifact, [l for l in launches if "checks=i:1" in l],
            (tmp_path / "m.ptx").read_text())


def test_target_cuda_assembles_and_names_the_checked_node(tmp_path):
    """ptxas assembles every standalone kernel (einsum loops too) for sm_80
    and sm_90, 64-bit keys (f64 and int64 topk: 64-bit block reductions)
    included, and a launch that checks indices carries its ONNX node for
    the runtime."""
    text = ('<ir_version: 8, opset_import: ["" : 20]>\n'
            "g (double[4,50] x, int64[4,50] n, float[4,50] f, int64[4,2] i, int64[2,1] si,"
            " float[2,50] u) => (double[4,3] v, int64[4,3] vi, int64[4,3] w, int64[4,3] wi,"
            " float[4,50] c, float[4,2] g, float[4,50] s, int64[50] r, float[50] t) {"
            ' t = Einsum <equation = "ij->j"> (f)'
            " v, vi = TopK (x, k) w, wi = TopK <largest = 0> (n, k) c = CumSum(f, a)"
            " picked = GatherElements <axis = 1> (f, i) g = Identity(picked)"
            " s = ScatterND(f, si, u) r = ReduceSum <keepdims = 0> (n, a0) }")
    text = text.replace(") {", ") <int64[1] k = {3}, int64 a = {1}, int64[1] a0 = {0}> {", 1)
    model = parser.parse_model(text)
    for node in model.graph.node:
        node.name = f"{node.op_type.lower()}_node"
    artifact, checked, ptx = _cuda_artifact(model, tmp_path)
    assert len(checked) == 2
    assert any("node=s:gatherelements_node" in l for l in checked)
    assert any("node=s:scatternd_node" in l for l in checked)
    for fn in re.findall(r"function=s:(\w+)", artifact):
        assert f".entry {fn}(" in ptx
    assert "shfl.sync" in ptx
    # The cumsum's lines of 50 are block scans: barriers, shared memory.
    assert re.search(r"\.shared \.align 4 \.b8 __wg_k\d+_cumsum_0\[256\]", ptx)
    assert "bar.sync" in ptx


#
# Integer semantics the CPU kernels define: unsigned types, division (a
# zero divisor is reported through the status word), powers, and casts from
# floats to integers (out-of-range values as the CPU converts them).
#

def test_unsigned_integers(tmp_path):
    """ui8..ui64 are signless in generated code; each operation picks its
    unsigned form. Values at and above 2^(w-1) tell signed and unsigned
    apart. numpy's unsigned arithmetic (wrapping) is the reference, exactly
    (onnxruntime has no Min or Max for the narrow unsigned types)."""
    model = _graph_model(
        "g (uint8[64] a, uint8[64] b, uint16[64] c, uint16[64] d, uint32[64] e, uint32[64] f,"
        " uint64[64] h, uint64[64] k, int8[64] s) =>"
        " (uint8[64] add8, uint8[64] sub8, uint8[64] div8, uint8[64] max8, bool[64] lt8,"
        "  uint16[64] mul16, uint16[64] min16, bool[64] gt16, uint32[64] div32,"
        "  uint32[64] clip32, float[64] f32, uint64[64] div64, bool[64] lt64, uint64[64] max64,"
        "  int64[64] wide8, double[64] d64, uint16[64] s16, uint8[64] clip8) {"
        " add8 = Add(a, b) sub8 = Sub(a, b) div8 = Div(a, bnz) max8 = Max(a, b)"
        " lt8 = Less(a, b) mul16 = Mul(c, d) min16 = Min(c, d) gt16 = Greater(c, d)"
        " div32 = Div(e, fnz) clip32 = Clip(e, lo32, hi32) f32 = Cast <to = 1> (e)"
        " div64 = Div(h, knz) lt64 = Less(h, k) max64 = Max(h, k)"
        " wide8 = Cast <to = 7> (a) d64 = Cast <to = 11> (h) s16 = Cast <to = 4> (s)"
        " clip8 = Clip(a, lo8, hi8)"
        " bnz = Max(b, one8) fnz = Max(f, one32) knz = Max(k, one64) }",
        inits="<uint8 one8 = {1}, uint32 one32 = {1}, uint64 one64 = {1},"
              " uint32 lo32 = {100}, uint32 hi32 = {3000000000}, uint8 lo8 = {20},"
              " uint8 hi8 = {200}>")

    def u(bits, n=64):
        t = np.dtype(f"u{bits // 8}")
        v = RNG.integers(0, np.iinfo(t).max, n, dtype=t, endpoint=True)
        v[:4] = [0, 1, 2**(bits - 1), np.iinfo(t).max]  # the edges, the sign bit among them
        return v

    a, b, c, d, e, f, h, k = (u(w) for w in (8, 8, 16, 16, 32, 32, 64, 64))
    s = _i(-128, 128, 64, dtype=np.int8)
    feeds = {"a": a, "b": b, "c": c, "d": d, "e": e, "f": f, "h": h, "k": k, "s": s}
    ir, ours = _run(model, feeds, tmp_path)
    with np.errstate(over="ignore"):
        want = [a + b, a - b, a // np.maximum(b, 1), np.maximum(a, b), a < b, c * d,
                np.minimum(c, d), c > d, e // np.maximum(f, 1),
                np.clip(e, 100, 3000000000).astype(np.uint32), e.astype(np.float32),
                h // np.maximum(k, 1), h < k, np.maximum(h, k), a.astype(np.int64),
                h.astype(np.float64), s.astype(np.uint16), np.clip(a, 20, 200)]
    for out, got, w in zip(model.graph.output, ours, want):
        assert got.dtype == w.dtype, out.name
        np.testing.assert_array_equal(got, w, err_msg=out.name)
    for op in ("divui", "maxui", "minui", "uitofp", "extui"):
        assert f'"arith.{op}"' in ir, op
    # Kernel arguments are signless; the launches pass the unsigned buffers.
    signatures = re.findall(r"function_type = \(([^)]*)\) -> \(\)", ir)
    assert signatures and not any("ui" in sig for sig in signatures)
    assert "memref<64xui8>" in ir


def test_standalone_kernels_of_unsigned_integers(tmp_path):
    """Reductions, cumsum, topk, einsum, scatter with max/min, and
    gather_elements of ui8..ui64: values at and above 2^(w-1), where signed
    and unsigned order, division and widening differ. Exact Python integer
    math (sums wrap to the type, as the CPU kernels accumulate in 64 bits)
    is the reference, and so is the CPU backend."""
    model = _graph_model(
        "g (uint32[3,4,5] a, uint64[3,4] b, uint8[6,7] c, uint16[4,3,5] d, uint64[5,6] h,"
        "   uint8[2,9] t8, uint32[2,9] t32, uint64[2,9] t64, uint32[3,4] e, uint32[4,2] f,"
        "   uint32[6] s, int64[4,1] si, uint32[4] su, uint64[4,6] gd, int64[4,3] gi) =>"
        " (uint32[4] sum_a, uint64[3] mean_b, uint8[1,7] max_c, uint16[3] max_d,"
        "  uint16[4,3,5] cum_d, uint64[5,6] cum_h, uint8[2,3] top8, int64[2,3] top8i,"
        "  uint32[2,3] low32, int64[2,3] low32i, uint64[2,3] top64, int64[2,3] top64i,"
        "  uint32[3,2] ein, uint32[6] smax, uint32[6] smin, uint64[4,3] gat) {"
        " sum_a = ReduceSum <keepdims = 0> (a, ax02) mean_b = ReduceMean <keepdims = 0> (b, ax1)"
        " max_c = ReduceMax <keepdims = 1> (c, ax0) max_d = ReduceMax <keepdims = 0> (d, ax02)"
        " cum_d = CumSum <exclusive = 1> (d, one) cum_h = CumSum <reverse = 1> (h, one)"
        " top8, top8i = TopK (t8, k) low32, low32i = TopK <largest = 0> (t32, k)"
        " top64, top64i = TopK (t64, k)"
        ' ein = Einsum <equation = "ij,jk->ik"> (e, f)'
        ' smax = ScatterND <reduction = "max"> (s, si, su)'
        ' smin = ScatterND <reduction = "min"> (s, si, su)'
        " gat = GatherElements <axis = 1> (gd, gi) }",
        opset=18,
        inits="<int64[2] ax02 = {0, 2}, int64[1] ax1 = {1}, int64[1] ax0 = {0}, int64 one = {1},"
              " int64[1] k = {3}>")

    def u(dtype, *shape):
        info = np.iinfo(dtype)
        v = RNG.integers(0, info.max, shape, dtype=dtype, endpoint=True)
        flat = v.reshape(-1)
        flat[:3] = [0, info.max, 2**(info.bits - 1)]  # the edges and the sign bit
        return v

    feeds = {"a": u(np.uint32, 3, 4, 5), "b": u(np.uint64, 3, 4), "c": u(np.uint8, 6, 7),
             "d": u(np.uint16, 4, 3, 5), "h": u(np.uint64, 5, 6),
             "t8": _i(120, 136, 2, 9, dtype=np.uint8), "t32": u(np.uint32, 2, 9),
             "t64": u(np.uint64, 2, 9), "e": u(np.uint32, 3, 4), "f": u(np.uint32, 4, 2),
             "s": u(np.uint32, 6), "si": np.array([[1], [4], [1], [-1]], np.int64),
             "su": u(np.uint32, 4), "gd": u(np.uint64, 4, 6), "gi": _i(-6, 6, 4, 3)}
    feeds["t32"][0, :4] = [5, 2**31, 2**31 + 1, 7]  # below/above the sign bit, and ties
    feeds["t8"][1, :3] = [127, 128, 128]
    ir, ours = _run(model, feeds, tmp_path)

    def exact(x):
        return np.asarray(x, object)  # Python integers: no overflow

    def wrap(x, dtype):
        return np.array([int(v) % 2**np.iinfo(dtype).bits for v in np.ravel(x)],
                        dtype).reshape(np.shape(x))

    def cumsum(x, axis, exclusive=False, reverse=False):
        y = exact(x)
        if reverse:
            y = np.flip(y, axis)
        c = np.cumsum(y, axis)
        if exclusive:
            c = c - y
        return wrap(np.flip(c, axis) if reverse else c, x.dtype)

    def topk(x, largest):
        # Stable sort: equal values keep the lower index first.
        order = np.argsort(-exact(x) if largest else exact(x), axis=1, kind="stable")[:, :3]
        return np.take_along_axis(x, order, 1), order.astype(np.int64)

    a, b, c, d, h = (feeds[n] for n in "abcdh")
    s_max, s_min = feeds["s"].copy(), feeds["s"].copy()
    for (i,), v in zip(feeds["si"], feeds["su"]):
        s_max[i] = max(s_max[i], v)
        s_min[i] = min(s_min[i], v)
    want = [wrap(exact(a).sum((0, 2)), np.uint32),
            np.array([(int(v) % 2**64) // 4 for v in exact(b).sum(1)], np.uint64),
            c.max(0, keepdims=True), d.max((0, 2)),
            cumsum(d, 1, exclusive=True), cumsum(h, 1, reverse=True),
            *topk(feeds["t8"], True), *topk(feeds["t32"], False), *topk(feeds["t64"], True),
            wrap(exact(feeds["e"]) @ exact(feeds["f"]), np.uint32), s_max, s_min,
            np.take_along_axis(feeds["gd"], feeds["gi"] % 6, 1)]
    path = tmp_path / "m.onnx"
    cpu = toolchain.run_artifact(toolchain.compile_model(path, tmp_path / "cpu.shard"), feeds)
    for out, got, w in zip(model.graph.output, ours, want):
        assert got.dtype == w.dtype, out.name
        np.testing.assert_array_equal(got, w, err_msg=out.name)
        np.testing.assert_array_equal(got, cpu[out.name], err_msg=out.name)
    for op in ("divui", "maxui", "minui", "extui"):
        assert f'"arith.{op}"' in ir, op
    # ptxas assembles them for sm_80 and sm_90; the unsigned forms reach PTX
    # (LLVM narrows a max of zero-extended bytes to 16 bits).
    _, _, ptx = _cuda_artifact(model, tmp_path)
    for instruction in ("max.u16", "max.u32", "min.u32"):
        assert instruction in ptx, instruction


def test_integer_division(tmp_path):
    """Truncating division of signed integers (negative operands, INT_MIN /
    -1 wraps) against float64 math; the quotient feeds a fused add."""
    model = _graph_model(
        "g (int32[40] x, int32[40] y, int8[40] p, int8[40] q, int64[40] m, int64[40] n) =>"
        " (int32[40] r, int8[40] s, int64[40] t) {"
        " d = Div(x, y) r = Add(d, x) s = Div(p, q) t = Div(m, n) }")
    x, y = _i(-1000, 1000, 40, dtype=np.int32), _i(1, 30, 40, dtype=np.int32)
    y[::2] *= -1
    x[0], y[0] = np.iinfo(np.int32).min, -1  # wraps to INT_MIN
    p, q = _i(-128, 128, 40, dtype=np.int8), _i(1, 12, 40, dtype=np.int8)
    q[1::3] *= -1
    p[1], q[1] = -128, -1
    m, n = _i(-2**62, 2**62, 40), _i(1, 2**20, 40)
    n[::2] *= -1
    ir, (r, s, t) = _run(model, {"x": x, "y": y, "p": p, "q": q, "m": m, "n": n}, tmp_path)
    # Three groups (the add fused with its division), independent of each
    # other: one launch (sibling fusion), which checks.
    assert ir.count('"rt.launch"') == 1
    assert len(re.findall(r"\bchecks\b", ir)) == 1

    def trunc_div(a, b, dtype):
        # Exact in Python integers, truncated toward zero, wrapped to dtype.
        out = [int(abs(int(u)) // abs(int(v))) * (1 if (u < 0) == (v < 0) else -1)
               for u, v in zip(a, b)]
        bits = np.iinfo(dtype).bits
        return np.array([((o + 2**(bits - 1)) % 2**bits) - 2**(bits - 1) for o in out], dtype)

    np.testing.assert_array_equal(r, (trunc_div(x, y, np.int32).astype(np.int64) + x)
                                  .astype(np.int32))
    np.testing.assert_array_equal(s, trunc_div(p, q, np.int8))
    np.testing.assert_array_equal(t, trunc_div(m, n, np.int64))


@pytest.mark.parametrize("dtype", ["int32", "uint16"])
def test_division_by_zero_is_reported(dtype, tmp_path):
    model = _graph_model(f"g ({dtype}[3,4] x, {dtype}[3,4] y) => ({dtype}[3,4] z) {{"
                         " z = Div(x, y) }")
    np_type = np.dtype(dtype)
    x = _i(0, 100, 3, 4, dtype=np_type)
    y = _i(1, 9, 3, 4, dtype=np_type)
    y[2, 1] = 0  # element 9
    artifact, _ = _gpu_program(model, tmp_path)
    err = _standin_error(artifact, {"x": x, "y": y})
    assert "integer division by zero (element 9 of the result)" in err, err
    y[2, 1] = 3
    (z,) = _on_standin(artifact, model, {"x": x, "y": y})
    np.testing.assert_array_equal(z, x // y)


def test_integer_powers(tmp_path):
    """Integer bases: integer exponents by squaring (negative ones give the
    truncated real result: 0 unless the base is 1 or -1), float exponents
    through f64 pow; against float64 math, exactly (every result is an
    integer a double holds). The float exponents' results are checked by
    test_integer_powers_of_float_exponents_truncate_exact_results."""
    model = _graph_model(
        "g (int64[24] x, int32[24] e, int32[24] b, int8[24] e8, int32[24] fb, float[24] fe) =>"
        " (int64[24] p, int32[24] q, int32[24] r) {"
        " p = Pow(x, e) q = Pow(b, e8) r = Pow(fb, fe) }")
    x = np.array([1, -1, 2, -2, 3, -3, 0, 7, 1, -1, 2, 0, 5, -5, 10, -10, 1, -1, 3, 2, 4, 6, -7,
                  9], np.int64)
    e = np.array([5, 5, 10, 11, 3, 4, 0, 2, -3, -3, -1, 3, 0, 3, 15, 15, -2, -2, -4, 62, 31, 1,
                  3, 2], np.int32)
    b = _i(-6, 7, 24, dtype=np.int32)
    e8 = _i(-3, 9, 24, dtype=np.int8)
    fb = _i(0, 12, 24, dtype=np.int32)
    fe = RNG.choice(np.array([0.0, 0.5, 1.0, 2.0, 3.0, 1.5], np.float32), 24)
    _, (p, q, _) = _run(model, {"x": x, "e": e, "b": b, "e8": e8, "fb": fb, "fe": fe}, tmp_path)

    def int_pow(base, exp, dtype):
        bits = np.iinfo(dtype).bits
        out = []
        for u, v in zip(base.tolist(), exp.tolist()):
            if v < 0:
                out.append(1 if u == 1 else (-1) ** (-v % 2) if u == -1 else 0)
            else:
                w = u ** v
                out.append(((w + 2**(bits - 1)) % 2**bits) - 2**(bits - 1))
        return np.array(out, dtype)

    np.testing.assert_array_equal(p, int_pow(x, e, np.int64))
    np.testing.assert_array_equal(q, int_pow(b, e8, np.int32))


def test_integer_powers_of_float_exponents_truncate_exact_results(tmp_path):
    """An integer base with a float exponent: the f64 pow truncated to the
    base's type equals float64 math's, exactly, as onnxruntime's does. The
    bases and exponents of test_integer_powers, and 3^1 and 9^0.5, which
    libdevice's pow gives as 3 - 2^-51 (the kernel takes a result within a
    few ulps of an integer as that integer before truncating)."""
    model = _graph_model("g (int32[26] fb, float[26] fe) => (int32[26] r) { r = Pow(fb, fe) }")
    fb = RNG.integers(0, 12, 24).astype(np.int32)
    fe = RNG.choice(np.array([0.0, 0.5, 1.0, 2.0, 3.0, 1.5], np.float32), 24)
    fb, fe = np.append(fb, [3, 9]).astype(np.int32), np.append(fe, [1, 0.5]).astype(np.float32)
    _, (r,) = _run(model, {"fb": fb, "fe": fe}, tmp_path)
    np.testing.assert_array_equal(r, np.trunc(fb.astype(np.float64) **
                                              fe.astype(np.float64)).astype(np.int32))


def test_float_to_integer_casts_match_the_cpu_backend(tmp_path):
    """Casts from floats to every integer type convert as the CPU kernels do:
    toward zero in range, and NaN, infinities and out-of-range values to
    what the CPU backend gives (ONNX leaves them undefined), exactly."""
    targets = {"int8": 3, "int16": 5, "int32": 6, "int64": 7, "uint8": 2, "uint16": 4,
               "uint32": 12, "uint64": 13}
    outs = ", ".join(f"{t}[24] {t}_f, {t}[24] {t}_d" for t in targets)
    body = " ".join(f"{t}_f = Cast <to = {c}> (x) {t}_d = Cast <to = {c}> (y)"
                    for t, c in targets.items())
    model = _graph_model(f"g (float[24] x, double[24] y) => ({outs}) {{ {body} }}")
    values = [0.0, 1.9, -1.9, -0.5, 127.5, 128.0, -129.0, 255.9, 256.0, 65535.0, 65536.5,
              -65537.0, 2147483647.0, 2147483648.0, -2147483649.0, 4294967296.0, 3e9,
              9.3e18, 1.8e19, 2e19, -1e19, np.nan, np.inf, -np.inf]
    feeds = {"x": np.array(values, np.float32), "y": np.array(values, np.float64)}
    _, ours = _run(model, feeds, tmp_path)
    path = tmp_path / "m.onnx"
    art = toolchain.compile_model(path, tmp_path / "cpu.shard")
    cpu = toolchain.run_artifact(art, feeds)
    for out, got in zip(model.graph.output, ours):
        np.testing.assert_array_equal(got, cpu[out.name], err_msg=out.name)
    # In range the conversion is onnxruntime's too.
    ref = ort.InferenceSession(model.SerializeToString(),
                               providers=["CPUExecutionProvider"]).run(None, feeds)
    for out, got, want in zip(model.graph.output, ours, ref):
        info = np.iinfo(want.dtype)
        ok = np.isfinite(feeds["x"]) & (feeds["x"] > info.min - 1) & (feeds["x"] < info.max + 1)
        np.testing.assert_array_equal(got[ok], want[ok], err_msg=out.name)


def test_integer_kernels_assemble_and_name_the_dividing_node(tmp_path):
    """ptxas assembles the integer code (64-bit division and conversions,
    the power loop, unsigned forms) for sm_80 and sm_90, and the launch of
    an integer division carries the status word and its ONNX node."""
    model = _graph_model(
        "g (int64[64] x, int64[64] y, uint32[64] u, uint32[64] v, float[64] f, int32[64] e)"
        " => (int64[64] q, uint32[64] w, uint64[64] c, int32[64] p) {"
        " q = Div(x, y) w = Div(u, v) c = Cast <to = 13> (f) p = Pow(e, e) }")
    for node in model.graph.node:
        node.name = f"{node.op_type.lower()}_{node.output[0]}"
    _, checked, ptx = _cuda_artifact(model, tmp_path)
    assert checked and all(re.search(r"node=s:div_[qw]\b", l) for l in checked)
    assert "div.s64" in ptx and "div.u32" in ptx
    assert re.search(r"cvt\.rzi\.s64\.f(32|64)", ptx) and re.search(r"cvt\.rzi\.u64\.f", ptx)


def test_trigonometry_of_huge_arguments(tmp_path):
    """libdevice's cosf/sinf reduce arguments beyond about 1e5 by Payne-Hanek:
    a table of 2/pi's bits (an initialized .global array), a per-thread
    .local buffer and 32-bit multiply-adds with carries. On the stand-in they
    give cos and sin within 2 ulp of float64's, up to the float range."""
    from onnx import TensorProto, helper
    graph = helper.make_graph(
        [helper.make_node("Cos", ["x"], ["c"]), helper.make_node("Sin", ["x"], ["s"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [64])],
        [helper.make_tensor_value_info("c", TensorProto.FLOAT, [64]),
         helper.make_tensor_value_info("s", TensorProto.FLOAT, [64])])
    model = tmp_path / "trig.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), model)
    artifact = tmp_path / "trig.shard"
    standin.compile_cuda(model, artifact)
    x = np.concatenate([np.array([0.0, 1e5, 2e5, 1e6, 3.4e38, -1e30, 123456.7, -987654.3,
                                  1e10, np.pi * 1e7], np.float32),
                        np.random.default_rng(0).uniform(-1e8, 1e8, 54).astype(np.float32)])
    ours = standin.run(artifact, {"x": x})
    x64 = x.astype(np.float64)
    np.testing.assert_allclose(ours["c"], np.cos(x64), rtol=0, atol=2.5e-7)
    np.testing.assert_allclose(ours["s"], np.sin(x64), rtol=0, atol=2.5e-7)
