"""CPU kernels for the elementwise, reduction and normalization nn ops,
compiled by shard-opt and run by shard-run, against onnxruntime.

Each case is a one-node ONNX model (opset 18; 20 for Gelu, 23 for
RMSNormalization; IR version 8) with inputs from a numpy RNG seeded by the
case name. The model goes through `shard-opt MODEL --target cpu -o ART` and
`shard-run ART --input NAME=FILE.npy ... --output OUT.npz`; the outputs are
compared with onnxruntime's on the same inputs.

Tolerances (numpy.testing.assert_allclose, |ours - ort| <= atol + rtol |ort|):
- float32: rtol 1e-5, atol 1e-6. Erf and Gelu use atol 1e-5: onnxruntime
  evaluates erf with its own polynomial approximation, which differs from
  the C library's by a few 1e-7 absolute.
- float64: rtol 1e-12, atol 1e-12.
- float16: rtol 1e-3, atol 1e-3, about one unit in the last place (2^-10):
  both sides compute in float32 and round, but onnxruntime sometimes takes
  other float32 paths (e.g. casts inserted around float32 kernels).
  float16 reductions: rtol 2e-3, atol 2e-3 (sums of up to 20 terms, where
  the two sides may round intermediate sums differently).
- bfloat16 (onnxruntime lacks most bf16 CPU kernels, so the reference is
  numpy in float32 rounded to bf16 by ml_dtypes): rtol 8e-3, atol 8e-3,
  about one unit in the last place (2^-8 relative); LayerNormalization
  against onnxruntime, which has it.
- integers and booleans: exact.

The binaries come from $SHARDFLOW_BUILD_DIR/bin (default <repo>/build/bin);
a missing binary fails the tests.
"""
import os
import subprocess
import zlib
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper, numpy_helper

REPO = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("SHARDFLOW_BUILD_DIR", REPO / "build"))
SHARD_OPT = BUILD / "bin" / "shard-opt"
SHARD_RUN = BUILD / "bin" / "shard-run"

TOLERANCES = {
    np.dtype(np.float32): (1e-5, 1e-6),
    np.dtype(np.float64): (1e-12, 1e-12),
    np.dtype(np.float16): (1e-3, 1e-3),
}
F32, F64, F16 = np.float32, np.float64, np.float16
I8, I32, I64, U8, BOOL = np.int8, np.int32, np.int64, np.uint8, np.bool_


# ----------------------------------------------------------------------------
# Helpers
# ----------------------------------------------------------------------------

def make_model(op, inputs, attrs=None, initializers=None, opset=18, outputs=("y",)):
    """A one-node model: `inputs` are graph inputs (name -> array, used for
    their type and shape), `initializers` (name -> array) constant operands;
    the node takes the graph inputs, then the initializers, in that order."""
    initializers = initializers or {}
    order = list(inputs) + list(initializers)
    node = helper.make_node(op, order, list(outputs), **(attrs or {}))
    graph = helper.make_graph(
        [node], "case",
        [helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
         for name, a in inputs.items()],
        [helper.make_value_info(name, onnx.TypeProto()) for name in outputs],
        initializer=[numpy_helper.from_array(np.asarray(a), name) for name, a in initializers.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)
    return onnx.shape_inference.infer_shapes(model, strict_mode=True)


def run_shardflow(model, inputs, tmp_path):
    for binary in (SHARD_OPT, SHARD_RUN):
        assert binary.is_file(), f"{binary} is missing: build with `bash tools/build.sh`"
    path = tmp_path / "model.onnx"
    onnx.save(model, path)
    artifact = tmp_path / "model.shard"
    res = subprocess.run([str(SHARD_OPT), str(path), "--target", "cpu", "-o", str(artifact)],
                         capture_output=True, text=True)
    assert res.returncode == 0, f"shard-opt failed:\n{res.stderr}"
    args = [str(SHARD_RUN), str(artifact)]
    for name, value in inputs.items():
        file = tmp_path / f"in_{name}.npy"
        np.save(file, value)
        args += ["--input", f"{name}={file}"]
    out = tmp_path / "out.npz"
    res = subprocess.run(args + ["--output", str(out)], capture_output=True, text=True)
    assert res.returncode == 0, f"shard-run failed:\n{res.stderr}"
    with np.load(out) as npz:
        return {k: npz[k] for k in npz.files}


def run_onnxruntime(model, inputs):
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(model.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(names, inputs)))


def check(tmp_path, op, inputs, attrs=None, initializers=None, opset=18, outputs=("y",),
          tol=None):
    inputs = {k: np.asarray(v) for k, v in inputs.items()}
    model = make_model(op, inputs, attrs, initializers, opset, outputs)
    expected = run_onnxruntime(model, inputs)
    ours = run_shardflow(model, inputs, tmp_path)
    assert set(ours) == set(outputs), f"outputs {sorted(ours)}, expected {sorted(outputs)}"
    for name in outputs:
        got, want = ours[name], expected[name]
        assert got.shape == want.shape, f"{name}: shape {got.shape} vs {want.shape}"
        assert got.dtype == want.dtype, f"{name}: dtype {got.dtype} vs {want.dtype}"
        if want.dtype.kind == "f":
            rtol, atol = tol or TOLERANCES[want.dtype]
            np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64),
                                       rtol=rtol, atol=atol, equal_nan=True, err_msg=name)
        else:
            np.testing.assert_array_equal(got, want, err_msg=name)


def rng_for(request):
    return np.random.default_rng(zlib.crc32(request.node.name.encode()))


def rand(rng, shape, dtype, low=-3.0, high=3.0):
    """Uniform values in [low, high), integers for integer dtypes."""
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return rng.integers(0, 2, size=shape).astype(np.bool_)
    if dtype.kind in "iu":
        return rng.integers(int(low), int(high) + 1, size=shape).astype(dtype)
    return rng.uniform(low, high, size=shape).astype(dtype)


def dtype_id(dtype):
    return np.dtype(dtype).name


# ----------------------------------------------------------------------------
# Binary arithmetic with broadcasting
# ----------------------------------------------------------------------------

SHAPES = {
    "same": ([2, 3, 4], [2, 3, 4]),
    "row": ([2, 3, 4], [4]),
    "col": ([2, 3, 4], [3, 1]),
    "scalar": ([2, 3, 4], []),
    "lscalar": ([1], [2, 3, 4]),
    "both": ([3, 1], [1, 4]),
    "mid": ([2, 1, 4], [2, 3, 1]),
}

BINARY_CASES = (
    [(op, F32, s) for op in ["Add", "Sub", "Mul", "Div", "Min", "Max"] for s in SHAPES]
    + [(op, dt, s) for op in ["Add", "Sub", "Mul", "Div", "Min", "Max"]
       for dt, shapes in [(I64, ["same", "row", "col", "scalar"]), (F64, ["same", "col"]),
                          (I32, ["row"])] for s in shapes]
    + [(op, dt, "row") for op in ["Add", "Mul", "Div", "Max"] for dt in [F16, I8, U8]]
    + [("Pow", dt, s) for dt in [F32, F64, I64, I32] for s in ["same", "row", "scalar"]]
    + [("Pow", F16, "col")]
)


@pytest.mark.parametrize("op,dtype,shapes", BINARY_CASES,
                         ids=[f"{o}-{dtype_id(d)}-{s}" for o, d, s in BINARY_CASES])
def test_binary(request, tmp_path, op, dtype, shapes):
    rng = rng_for(request)
    sa, sb = SHAPES[shapes]
    unsigned = np.dtype(dtype).kind == "u"
    a = rand(rng, sa, dtype, 0 if unsigned else -9, 9)
    b = rand(rng, sb, dtype, 0 if unsigned else -9, 9)
    if op == "Div":
        if np.dtype(dtype).kind in "iu":  # no zero divisors; negatives check truncation
            b[b == 0] = 3
        else:
            b = np.where(np.abs(b) < 0.5, 1.5, b).astype(dtype)
    if op == "Pow":
        if np.dtype(dtype).kind == "f":
            a = rand(rng, sa, dtype, 0.2, 2.5)
            b = rand(rng, sb, dtype, -2.5, 2.5)
        else:
            a = rand(rng, sa, dtype, -4, 4)
            b = rand(rng, sb, dtype, 0, 5)
    if op in ("Mul", "Add", "Sub") and np.dtype(dtype).itemsize == 1:
        a, b = a // 2, b // 2
    check(tmp_path, op, {"a": a, "b": b})


def test_pow_mixed_exponent(request, tmp_path):
    rng = rng_for(request)
    a = rand(rng, [2, 3, 4], F32, 0.2, 2.5)
    b = rand(rng, [4], I64, -2, 3)
    check(tmp_path, "Pow", {"a": a, "b": b})


def test_pow_square(request, tmp_path):
    rng = rng_for(request)
    a = rand(rng, [2, 3, 4], F32, -3, 3)
    check(tmp_path, "Pow", {"a": a}, initializers={"b": np.array(2.0, F32)})


def test_div_integer_by_zero_fails(tmp_path):
    a = np.array([1, 2, 3], np.int64)
    b = np.array([1, 0, 1], np.int64)
    model = make_model("Div", {"a": a, "b": b})
    with pytest.raises(AssertionError, match=r"shard-run failed:[\s\S]*div"):
        run_shardflow(model, {"a": a, "b": b}, tmp_path)


# Mod: fmod=1 (the dividend's sign: C's fmod) for floats and integers,
# fmod=0 (the divisor's sign: Python's %) for integers; mixed signs and
# broadcasting.
MOD_CASES = (
    [(dt, 0, s) for dt in [I64, I32, I8] for s in ["same", "row", "col"]]
    + [(dt, 1, s) for dt in [I64, I32, F32, F64] for s in ["same", "row"]]
    + [(U8, 0, "row"), (F16, 1, "col")]
)


@pytest.mark.parametrize("dtype,fmod,shapes", MOD_CASES,
                         ids=[f"{dtype_id(d)}-fmod{f}-{s}" for d, f, s in MOD_CASES])
def test_mod(request, tmp_path, dtype, fmod, shapes):
    rng = rng_for(request)
    sa, sb = SHAPES[shapes]
    unsigned = np.dtype(dtype).kind == "u"
    a = rand(rng, sa, dtype, 0 if unsigned else -50, 50)
    b = rand(rng, sb, dtype, 1 if unsigned else -7, 7)
    if np.dtype(dtype).kind in "iu":
        b[b == 0] = 3
    else:
        b = np.where(np.abs(b) < 0.5, 1.5, b).astype(dtype)
    check(tmp_path, "Mod", {"a": a, "b": b}, {"fmod": fmod})


def test_mod_integer_by_zero_fails(tmp_path):
    a = np.array([1, 2, 3], np.int32)
    b = np.array([1, 0, 1], np.int32)
    model = make_model("Mod", {"a": a, "b": b})
    with pytest.raises(AssertionError, match=r"shard-run failed:[\s\S]*modulo by zero"):
        run_shardflow(model, {"a": a, "b": b}, tmp_path)


def test_min_max_nan(tmp_path):
    a = np.array([1.0, np.nan, 3.0, -np.inf], F32)
    b = np.array([np.nan, 2.0, -1.0, 0.0], F32)
    check(tmp_path, "Min", {"a": a, "b": b})
    check(tmp_path, "Max", {"a": a, "b": b})


# ----------------------------------------------------------------------------
# Comparisons, And, Where
# ----------------------------------------------------------------------------

COMPARE_CASES = [(op, dt, s) for op in ["Equal", "Less", "Greater"]
                 for dt, shapes in [(F32, ["same", "row", "col", "scalar", "both"]),
                                    (I64, ["same", "col", "scalar"])] for s in shapes] + \
                [(op, dt, "row") for op in ["Equal", "Less", "Greater"] for dt in [F64, F16, I32]]


@pytest.mark.parametrize("op,dtype,shapes", COMPARE_CASES,
                         ids=[f"{o}-{dtype_id(d)}-{s}" for o, d, s in COMPARE_CASES])
def test_compare(request, tmp_path, op, dtype, shapes):
    rng = rng_for(request)
    sa, sb = SHAPES[shapes]
    # Few distinct values, so that Equal is sometimes true.
    a = rng.integers(-2, 3, size=sa).astype(dtype)
    b = rng.integers(-2, 3, size=sb).astype(dtype)
    if np.dtype(dtype).kind == "f":
        a = (a / 2).astype(dtype)
        b = (b / 2).astype(dtype)
    check(tmp_path, op, {"a": a, "b": b})


# LessOrEqual and GreaterOrEqual (written as not(strict) and ordered):
# NaN on either side gives false, as in onnxruntime.
OR_EQUAL_CASES = [(op, dt, s) for op in ["LessOrEqual", "GreaterOrEqual"]
                  for dt, shapes in [(F32, ["same", "row", "scalar", "both"]),
                                     (I64, ["same", "col"]), (F16, ["row"]), (I32, ["row"])]
                  for s in shapes]


@pytest.mark.parametrize("op,dtype,shapes", OR_EQUAL_CASES,
                         ids=[f"{o}-{dtype_id(d)}-{s}" for o, d, s in OR_EQUAL_CASES])
def test_compare_or_equal(request, tmp_path, op, dtype, shapes):
    rng = rng_for(request)
    sa, sb = SHAPES[shapes]
    a = rng.integers(-2, 3, size=sa).astype(dtype)
    b = rng.integers(-2, 3, size=sb).astype(dtype)
    if np.dtype(dtype).kind == "f":
        a = (a / 2).astype(dtype)
        b = (b / 2).astype(dtype)
    check(tmp_path, op, {"a": a, "b": b}, opset=16)


@pytest.mark.parametrize("op", ["LessOrEqual", "GreaterOrEqual"])
def test_compare_or_equal_nan(tmp_path, op):
    a = np.array([np.nan, 1.0, np.nan, np.inf, -np.inf, 0.0, -0.0], F32)
    b = np.array([1.0, np.nan, np.nan, np.inf, np.inf, -0.0, 0.0], F32)
    check(tmp_path, op, {"a": a, "b": b}, opset=16)


@pytest.mark.parametrize("positive,negative", [(1, 1), (1, 0), (0, 1), (0, 0)])
def test_is_inf(tmp_path, positive, negative):
    check(tmp_path, "IsInf", {"x": SPECIAL},
          {"detect_positive": positive, "detect_negative": negative})


@pytest.mark.parametrize("dtype", [F32, F16, F64], ids=dtype_id)
def test_is_nan(request, tmp_path, dtype):
    x = rand(rng_for(request), [3, 4], dtype)
    x[0, 1] = np.nan
    x[2, 3] = np.inf
    check(tmp_path, "IsNaN", {"x": x})


@pytest.mark.parametrize("op", ["Or", "Xor"])
@pytest.mark.parametrize("shapes", ["same", "row", "scalar", "both"])
def test_or_xor(request, tmp_path, op, shapes):
    rng = rng_for(request)
    sa, sb = SHAPES[shapes]
    check(tmp_path, op, {"a": rand(rng, sa, BOOL), "b": rand(rng, sb, BOOL)})


@pytest.mark.parametrize("src,like", [(F32, F16), (I64, F32), (F32, I32), (F16, F64)],
                         ids=lambda d: dtype_id(d))
def test_cast_like(request, tmp_path, src, like):
    rng = rng_for(request)
    check(tmp_path, "CastLike", {"x": rand(rng, [2, 3], src, -50, 50),
                                 "like": rand(rng, [1], like)})


def test_round_halves_to_even(tmp_path):
    x = np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 3.5, 1e30, -0.0], F32)
    check(tmp_path, "Round", {"x": x})


@pytest.mark.parametrize("op,attrs", [("Elu", {"alpha": 0.5}), ("Selu", {"alpha": 1.5, "gamma": 2.0}),
                                      ("HardSigmoid", {"alpha": 0.3, "beta": 0.4})],
                         ids=["Elu", "Selu", "HardSigmoid"])
def test_activation_attributes(request, tmp_path, op, attrs):
    check(tmp_path, op, {"x": rand(rng_for(request), [3, 5], F32, -4, 4)}, attrs)


@pytest.mark.parametrize("slope_shape", [[1], [4], [3, 1], [2, 3, 4]])
def test_prelu(request, tmp_path, slope_shape):
    rng = rng_for(request)
    check(tmp_path, "PRelu", {"x": rand(rng, [2, 3, 4], F32), "slope": rand(rng, slope_shape, F32)})


@pytest.mark.parametrize("shape", [[2, 3, 4], [], [5]])
def test_size(tmp_path, shape):
    check(tmp_path, "Size", {"x": np.ones(shape, F32)})


@pytest.mark.parametrize("shapes", ["same", "row", "col", "scalar", "both"])
def test_and(request, tmp_path, shapes):
    rng = rng_for(request)
    sa, sb = SHAPES[shapes]
    check(tmp_path, "And", {"a": rand(rng, sa, BOOL), "b": rand(rng, sb, BOOL)})


WHERE_CASES = [
    ("same", [2, 3, 4], [2, 3, 4], [2, 3, 4]),
    ("cond-bcast", [3, 1], [2, 3, 4], [2, 3, 4]),
    ("three-way", [2, 1, 4], [3, 1], []),
    ("scalar-cond", [], [2, 3, 4], [4]),
]


@pytest.mark.parametrize("dtype", [F32, I64, F16, I8], ids=dtype_id)
@pytest.mark.parametrize("name,sc,sx,sy", WHERE_CASES, ids=[c[0] for c in WHERE_CASES])
def test_where(request, tmp_path, name, sc, sx, sy, dtype):
    rng = rng_for(request)
    check(tmp_path, "Where", {"c": rand(rng, sc, BOOL), "a": rand(rng, sx, dtype),
                              "b": rand(rng, sy, dtype)})


# ----------------------------------------------------------------------------
# Unary
# ----------------------------------------------------------------------------

# op -> (low, high) of the inputs
UNARY_FLOAT = {
    "Sqrt": (0.0, 9.0),
    "Exp": (-10.0, 10.0),
    "Log": (0.01, 100.0),
    "Tanh": (-5.0, 5.0),
    "Sigmoid": (-20.0, 20.0),
    "Erf": (-3.0, 3.0),
    "Reciprocal": (0.1, 10.0),
    "Relu": (-3.0, 3.0),
    "Neg": (-3.0, 3.0),
    "Abs": (-3.0, 3.0),
    "Cos": (-30.0, 30.0),
    "Sin": (-30.0, 30.0),
    "Floor": (-30.0, 30.0),
    "Ceil": (-30.0, 30.0),
    "Round": (-30.0, 30.0),
    "Sign": (-3.0, 3.0),
    "Softplus": (-30.0, 30.0),
    "Elu": (-5.0, 5.0),
    "Selu": (-5.0, 5.0),
    "HardSigmoid": (-5.0, 5.0),
    "HardSwish": (-5.0, 5.0),
    "Mish": (-10.0, 10.0),
}
UNARY_CASES = (
    [(op, F32) for op in UNARY_FLOAT]
    + [(op, F64) for op in UNARY_FLOAT if op != "Erf"]  # no f64 Erf in onnxruntime
    + [(op, F16) for op in ["Sqrt", "Exp", "Tanh", "Sigmoid", "Relu", "Abs", "Cos", "Sin",
                            "Floor", "Ceil", "Round", "Sign", "Softplus", "HardSigmoid"]]
    + [(op, dt) for op in ["Sign"] for dt in [I64, I32, I8]]
    + [(op, dt) for op in ["Relu", "Neg", "Abs"] for dt in [I64, I32, I8]]
)


@pytest.mark.parametrize("op,dtype", UNARY_CASES,
                         ids=[f"{o}-{dtype_id(d)}" for o, d in UNARY_CASES])
def test_unary(request, tmp_path, op, dtype):
    rng = rng_for(request)
    low, high = UNARY_FLOAT[op]
    if np.dtype(dtype).kind in "iu":
        low, high = -100, 100
    x = rand(rng, [2, 3, 4], dtype, low, high)
    if op == "Reciprocal":
        x = x * np.where(rng.integers(0, 2, size=x.shape) == 1, 1, -1).astype(dtype)
    tol = (1e-5, 1e-5) if op == "Erf" and dtype == F32 else None
    check(tmp_path, op, {"x": x}, tol=tol)


SPECIAL = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 88.0, 89.0, -88.0, -104.0, -110.0,
                    1e-30, -1e-30, 0.625, -0.625, 0.921875, 4.0, 9.5, -20.0], F32)
SPECIAL_CASES = [("Exp", 18), ("Tanh", 18), ("Sigmoid", 18), ("Erf", 18), ("Relu", 18),
                 ("Abs", 18), ("Neg", 18), ("Gelu", 20), ("Cos", 18), ("Sin", 18),
                 ("IsNaN", 18), ("IsInf", 18), ("Floor", 18), ("Ceil", 18), ("Round", 18),
                 ("Sign", 18), ("Softplus", 18), ("Elu", 18), ("Selu", 18),
                 ("HardSigmoid", 18), ("HardSwish", 18), ("Mish", 18)]


@pytest.mark.parametrize("op,opset", SPECIAL_CASES, ids=[c[0] for c in SPECIAL_CASES])
def test_special_values(tmp_path, op, opset):
    # NaN, infinities, signed zeros and the range limits of exp/tanh/erf.
    check(tmp_path, op, {"x": SPECIAL}, opset=opset, tol=(1e-5, 1e-6))


def test_cast_special_to_f16(tmp_path):
    check(tmp_path, "Cast", {"x": SPECIAL}, {"to": onnx.TensorProto.FLOAT16})


def test_not(request, tmp_path):
    check(tmp_path, "Not", {"x": rand(rng_for(request), [2, 3, 4], BOOL)})


@pytest.mark.parametrize("dtype", [F32, I64, BOOL], ids=dtype_id)
def test_identity(request, tmp_path, dtype):
    check(tmp_path, "Identity", {"x": rand(rng_for(request), [2, 3, 4], dtype)})


def test_dropout_inference(request, tmp_path):
    check(tmp_path, "Dropout", {"x": rand(rng_for(request), [2, 3, 4], F32)})


def test_dropout_inference_mask(request, tmp_path):
    check(tmp_path, "Dropout", {"x": rand(rng_for(request), [2, 3, 4], F32)},
          outputs=("y", "mask"))


@pytest.mark.parametrize("seed", [0, 12345, 2**32 - 1])
@pytest.mark.parametrize("ratio", [0.25, 0.9])
@pytest.mark.parametrize("dtype", [F32, F64], ids=dtype_id)
def test_dropout_training_matches_numpy_generator(request, tmp_path, seed, ratio, dtype):
    # onnxruntime draws its own mask; the reference here is numpy's legacy
    # generator, which nn.training_dropout reproduces draw for draw (and
    # which ONNX's reference implementation uses).
    x = rand(rng_for(request), [3, 50, 7], dtype)
    model = make_model("Dropout", {"x": x}, {"seed": seed},
                       {"r": np.array(ratio, dtype), "t": np.array(True)}, 18, ("y", "mask"))
    ours = run_shardflow(model, {"x": x}, tmp_path)
    np.random.seed(seed)
    mask = np.random.uniform(0, 1.0, x.shape) >= ratio
    scale = dtype(1) / (dtype(1) - dtype(ratio))
    np.testing.assert_array_equal(ours["mask"], mask)
    assert ours["y"].dtype == x.dtype
    np.testing.assert_allclose(ours["y"], np.where(mask, x * scale, 0), rtol=1e-6, atol=0)
    # Roughly `ratio` of the elements are dropped.
    assert abs((1 - mask.mean()) - ratio) < 0.05


@pytest.mark.parametrize("alpha", [None, 0.2], ids=["default", "alpha0.2"])
@pytest.mark.parametrize("dtype", [F32, F64, F16], ids=dtype_id)
def test_leaky_relu(request, tmp_path, alpha, dtype):
    attrs = {} if alpha is None else {"alpha": alpha}
    check(tmp_path, "LeakyRelu", {"x": rand(rng_for(request), [2, 3, 4], dtype)}, attrs)


@pytest.mark.parametrize("approximate", ["none", "tanh"])
@pytest.mark.parametrize("dtype", [F32, F16], ids=dtype_id)
def test_gelu(request, tmp_path, approximate, dtype):
    x = rand(rng_for(request), [2, 3, 4], dtype, -5, 5)
    tol = (1e-5, 1e-5) if dtype == F32 else None
    check(tmp_path, "Gelu", {"x": x}, {"approximate": approximate}, opset=20, tol=tol)


CLIP_BOUNDS = {"both": (-1.5, 2.0), "min": (-1.5, None), "max": (None, 2.0), "none": (None, None),
               "inverted": (2.0, -1.5)}  # min > max: everything becomes max


@pytest.mark.parametrize("bounds", list(CLIP_BOUNDS))
@pytest.mark.parametrize("dtype", [F32, F64, I64], ids=dtype_id)
def test_clip(request, tmp_path, bounds, dtype):
    low, high = CLIP_BOUNDS[bounds]
    if np.dtype(dtype).kind == "i":
        low = None if low is None else int(low)
        high = None if high is None else int(high)
    x = rand(rng_for(request), [2, 3, 4], dtype, -4, 4)
    # Clip takes its bounds as inputs; an empty name is an absent bound.
    inits = {}
    names = ["x", "", ""]
    if low is not None:
        inits["lo"] = np.array(low, dtype)
        names[1] = "lo"
    if high is not None:
        inits["hi"] = np.array(high, dtype)
        names[2] = "hi"
    while names and names[-1] == "":
        names.pop()
    model = make_model("Clip", {"x": x}, initializers=inits)
    del model.graph.node[0].input[:]
    model.graph.node[0].input.extend(names)
    expected = run_onnxruntime(model, {"x": x})["y"]
    ours = run_shardflow(model, {"x": x}, tmp_path)["y"]
    assert ours.dtype == expected.dtype
    np.testing.assert_array_equal(ours, expected)


CAST_CASES = [
    (F32, I64), (F32, I32), (F32, I8), (F32, BOOL), (F32, F64), (F32, F16),
    (F64, F32), (F64, I64), (F16, F32), (F16, I64),
    (I64, F32), (I64, I32), (I32, I64), (I64, BOOL), (I64, F16), (I32, U8),
    (BOOL, F32), (BOOL, I64), (BOOL, I32), (U8, I64),
]


@pytest.mark.parametrize("src", [F32, I64, F16], ids=dtype_id)
def test_cast_through_bfloat16(request, tmp_path, src):
    # src -> bf16 -> f32 (npy has no bf16), including round-to-even ties.
    x = rand(rng_for(request), [2, 3, 4], src, -100, 100)
    if src == F32:
        x.flat[:4] = [1.00390625, 1.01171875, -1.00390625, 3.0e38]
    nodes = [helper.make_node("Cast", ["x"], ["t"], to=onnx.TensorProto.BFLOAT16),
             helper.make_node("Cast", ["t"], ["y"], to=onnx.TensorProto.FLOAT)]
    graph = helper.make_graph(
        nodes, "case",
        [helper.make_tensor_value_info("x", helper.np_dtype_to_tensor_dtype(x.dtype), x.shape)],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, x.shape)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=8)
    ours = run_shardflow(model, {"x": x}, tmp_path)["y"]
    np.testing.assert_array_equal(ours, run_onnxruntime(model, {"x": x})["y"])


@pytest.mark.parametrize("src,dst", CAST_CASES,
                         ids=[f"{dtype_id(s)}-to-{dtype_id(d)}" for s, d in CAST_CASES])
def test_cast(request, tmp_path, src, dst):
    rng = rng_for(request)
    if np.dtype(src).kind == "f":
        # Fractions of both signs check truncation toward zero; zeros check
        # the conversion to bool.
        x = rand(rng, [2, 3, 4], src, -100, 100)
        x.flat[::5] = 0
        if np.dtype(dst).kind == "u":
            x = np.abs(x)
    elif np.dtype(src) == np.bool_:
        x = rand(rng, [2, 3, 4], src)
    else:
        x = rand(rng, [2, 3, 4], src, 0 if np.dtype(src).kind == "u" else -300, 300)
        x.flat[::5] = 0
    to = helper.np_dtype_to_tensor_dtype(np.dtype(dst))
    check(tmp_path, "Cast", {"x": x}, {"to": to})


def test_cast_f32_to_f16_rounding(tmp_path):
    # Ties, subnormals, overflow and the largest finite f16, then random bit
    # patterns over the whole float32 range; numpy rounds to nearest even.
    special = np.array([1.0 + 2.0**-11, 1.0 + 3 * 2.0**-11, 2.0**-24, 3 * 2.0**-25, 2.0**-26,
                        65504.0, 65519.0, 65520.0, 1e6, -1e-8, np.inf, -np.inf,
                        -0.0, 0.1, -2.0**-15], F32)
    bits = np.random.default_rng(7).integers(0, 2**32, size=20000, dtype=np.uint64)
    x = np.concatenate([special, bits.astype(np.uint32).view(np.float32)])
    x = x[~np.isnan(x)]  # NaN payloads may differ: see test_special_values
    model = make_model("Cast", {"x": x}, {"to": onnx.TensorProto.FLOAT16})
    ours = run_shardflow(model, {"x": x}, tmp_path)["y"]
    with np.errstate(over="ignore"):
        want = x.astype(np.float16)
    np.testing.assert_array_equal(ours.view(np.uint16), want.view(np.uint16))


def test_cast_f16_to_f32_all_values(tmp_path):
    x = np.arange(2**16, dtype=np.uint32).astype(np.uint16).view(np.float16)
    model = make_model("Cast", {"x": x}, {"to": onnx.TensorProto.FLOAT})
    ours = run_shardflow(model, {"x": x}, tmp_path)["y"]
    np.testing.assert_array_equal(ours, x.astype(np.float32))


# ----------------------------------------------------------------------------
# bfloat16: float32 graph inputs cast to bf16 inside the model, the op, and a
# cast back to float32 (npy has no bf16).
# ----------------------------------------------------------------------------

def bf16(x):
    import ml_dtypes
    return np.asarray(x, np.float32).astype(ml_dtypes.bfloat16).astype(np.float32)


def softmax_ref(x, axis=-1):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


BF16_CASES = {
    "Add": (2, lambda a, b: a + b),
    "Sub": (2, lambda a, b: a - b),
    "Mul": (2, lambda a, b: a * b),
    "Div": (2, lambda a, b: a / b),
    "Max": (2, np.maximum),
    "Exp": (1, np.exp),
    "Tanh": (1, np.tanh),
    "Neg": (1, np.negative),
    "Softmax": (1, softmax_ref),
    "ReduceSum": (1, lambda x: x.sum(axis=-1, keepdims=True)),
    "LayerNormalization": (3, None),
}


@pytest.mark.parametrize("op", list(BF16_CASES))
def test_bfloat16(request, tmp_path, op):
    rng = rng_for(request)
    arity, ref = BF16_CASES[op]
    shapes = [[2, 3, 8], [8], [8]][:arity]
    inputs = {f"x{i}": rand(rng, s, F32, 0.5 if op == "Div" else -3, 3)
              for i, s in enumerate(shapes)}
    bf = onnx.TensorProto.BFLOAT16
    nodes = [helper.make_node("Cast", [n], [f"{n}_bf"], to=bf) for n in inputs]
    op_inputs = [f"{n}_bf" for n in inputs]
    inits = []
    if op == "ReduceSum":
        inits = [numpy_helper.from_array(np.array([-1], np.int64), "axes")]
        op_inputs.append("axes")
    nodes.append(helper.make_node(op, op_inputs, ["y_bf"]))
    nodes.append(helper.make_node("Cast", ["y_bf"], ["y"], to=onnx.TensorProto.FLOAT))
    graph = helper.make_graph(
        nodes, "case",
        [helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, a.shape) for n, a in inputs.items()],
        [helper.make_value_info("y", onnx.TypeProto())], initializer=inits)
    model = onnx.shape_inference.infer_shapes(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=8),
        strict_mode=True)
    ours = run_shardflow(model, inputs, tmp_path)["y"]
    if ref is None:
        want = run_onnxruntime(model, inputs)["y"]
    else:
        want = bf16(ref(*[bf16(a) for a in inputs.values()]))
    assert ours.dtype == np.float32 and ours.shape == want.shape
    np.testing.assert_allclose(ours, want, rtol=8e-3, atol=8e-3)


# ----------------------------------------------------------------------------
# Softmax and LogSoftmax
# ----------------------------------------------------------------------------

SOFTMAX_CASES = [(op, dt, axis) for op in ["Softmax", "LogSoftmax"]
                 for dt in [F32, F64] for axis in [-1, 0, 1]] + \
                [(op, F16, -1) for op in ["Softmax", "LogSoftmax"]]


@pytest.mark.parametrize("op,dtype,axis", SOFTMAX_CASES,
                         ids=[f"{o}-{dtype_id(d)}-axis{a}" for o, d, a in SOFTMAX_CASES])
def test_softmax(request, tmp_path, op, dtype, axis):
    # Large logits: a naive exp would overflow.
    x = rand(rng_for(request), [2, 3, 5], dtype, -30, 30)
    if dtype != F16:
        x[0, 0, 0] = 500
    check(tmp_path, op, {"x": x}, {"axis": axis})


# ----------------------------------------------------------------------------
# Reductions
# ----------------------------------------------------------------------------

REDUCE_AXES = {"a1": [1], "a02": [0, 2], "last": [-1], "all": [0, 1, 2], "empty": None}
REDUCE_CASES = (
    [(op, F32, ax, kd) for op in ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin"]
     for ax in REDUCE_AXES for kd in [1, 0]]
    + [(op, dt, ax, 1) for op in ["ReduceSum", "ReduceMax", "ReduceMin"] for dt in [I64, I32]
       for ax in ["a1", "a02", "last"]]
    + [(op, dt, "a02", 0) for op in ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin"]
       for dt in [F64, F16]]
    + [("ReduceProd", dt, ax, kd) for dt in [F32, I64, I32] for ax in ["a1", "last", "all"]
       for kd in [1, 0]]
    + [("ReduceProd", dt, "a02", 0) for dt in [F64, F16]]
)


@pytest.mark.parametrize("op,dtype,axes,keepdims", REDUCE_CASES,
                         ids=[f"{o}-{dtype_id(d)}-{a}-keep{k}" for o, d, a, k in REDUCE_CASES])
def test_reduce(request, tmp_path, op, dtype, axes, keepdims):
    # Products of up to 60 factors: small ones (integers wrap alike).
    scale = (2 if np.dtype(dtype).kind == "f" else 3) if op == "ReduceProd" else 50
    x = rand(rng_for(request), [3, 4, 5], dtype, -scale, scale)
    inits = {}
    if REDUCE_AXES[axes] is not None:
        inits["axes"] = np.array(REDUCE_AXES[axes], np.int64)
    tol = (2e-3, 2e-3) if dtype == F16 else None  # f16 sums of up to 20 terms
    check(tmp_path, op, {"x": x}, {"keepdims": keepdims}, initializers=inits, tol=tol)


# ReduceL2, ReduceLogSumExp and ReduceSumSquare are compositions at import
# (reduce_sum/reduce_max and elementwise ops); these compare the compositions.
COMPOSED_REDUCE_CASES = (
    [(op, F32, ax, kd) for op in ["ReduceL2", "ReduceLogSumExp", "ReduceSumSquare"]
     for ax in REDUCE_AXES for kd in [1, 0]]
    + [("ReduceSumSquare", dt, ax, 1) for dt in [I64, I32] for ax in ["a1", "all"]]
    + [("ReduceL2", dt, ax, 1) for dt in [I64, I32] for ax in ["a1", "all"]]
    + [(op, dt, "a02", 0) for op in ["ReduceL2", "ReduceLogSumExp", "ReduceSumSquare"]
       for dt in [F64, F16]]
)


@pytest.mark.parametrize("op,dtype,axes,keepdims", COMPOSED_REDUCE_CASES,
                         ids=[f"{o}-{dtype_id(d)}-{a}-keep{k}"
                              for o, d, a, k in COMPOSED_REDUCE_CASES])
def test_composed_reduce(request, tmp_path, op, dtype, axes, keepdims):
    # LogSumExp over [-50, 50]: exp without the shift would overflow float32
    # far less often than at 500, so one element is large as well.
    scale = 3 if dtype == F16 else 50
    x = rand(rng_for(request), [3, 4, 5], dtype, -scale, scale)
    if op == "ReduceLogSumExp" and dtype != F16:
        x[1, 2, 3] = 500
    inits = {}
    if REDUCE_AXES[axes] is not None:
        inits["axes"] = np.array(REDUCE_AXES[axes], np.int64)
    tol = (4e-3, 4e-3) if dtype == F16 else None
    check(tmp_path, op, {"x": x}, {"keepdims": keepdims}, initializers=inits, tol=tol)


@pytest.mark.parametrize("op", ["ReduceL2", "ReduceLogSumExp", "ReduceSumSquare", "ReduceMin",
                                "ReduceProd"])
def test_composed_reduce_noop_with_empty_axes(request, tmp_path, op):
    x = rand(rng_for(request), [3, 4], F32)
    check(tmp_path, op, {"x": x}, {"noop_with_empty_axes": 1})


@pytest.mark.parametrize("op", ["ReduceL2", "ReduceLogSumExp", "ReduceSumSquare"])
def test_composed_reduce_opset13_axes_attribute(request, tmp_path, op):
    x = rand(rng_for(request), [3, 4, 5], F32)
    check(tmp_path, op, {"x": x}, {"axes": [0, -1], "keepdims": 0}, opset=13)


def test_reduce_min_nan_inf_and_bool(request, tmp_path):
    inf = np.inf
    x = np.array([[1, 0.5, -2], [inf, 3, -inf], [-0.5, 2, 7]], F32)
    check(tmp_path, "ReduceMin", {"x": x}, {"keepdims": 0},
          initializers={"axes": np.array([1], np.int64)})
    # NaN propagates, as in onnx's reference and nn.reduce_max (onnxruntime
    # 's CPU ReduceMin skips a NaN after the first element: -2 here).
    x = np.array([[1, np.nan, -2], [np.nan, 3, 4]], F32)
    model = make_model("ReduceMin", {"x": x}, {"keepdims": 0},
                       {"axes": np.array([1], np.int64)}, 18, ("y",))
    (tmp_path / "nan").mkdir()
    got = run_shardflow(model, {"x": x}, tmp_path / "nan")["y"]
    np.testing.assert_array_equal(got, np.array([np.nan, np.nan], F32))
    b = rand(rng_for(request), [4, 5], np.bool_)
    b[0] = True
    check(tmp_path, "ReduceMin", {"x": b}, {"keepdims": 1},
          initializers={"axes": np.array([-1], np.int64)}, opset=20)


# ArgMax / ArgMin: ties (small integers) with the first or the last index,
# every axis, keepdims.
ARG_CASES = [(op, dt, axis, kd, last) for op in ["ArgMax", "ArgMin"]
             for dt, axis, kd, last in [(F32, 0, 1, 0), (F32, -1, 0, 0), (F32, 1, 1, 1),
                                        (I32, 2, 0, 1), (I64, 1, 1, 0), (F16, -1, 1, 0),
                                        (F64, 0, 0, 1)]]


@pytest.mark.parametrize("op,dtype,axis,keepdims,last", ARG_CASES,
                         ids=[f"{o}-{dtype_id(d)}-ax{a}-keep{k}-last{l}"
                              for o, d, a, k, l in ARG_CASES])
def test_arg_reduce(request, tmp_path, op, dtype, axis, keepdims, last):
    x = rand(rng_for(request), [3, 4, 5], dtype, -3, 3)
    if np.dtype(dtype).kind == "f":
        x = np.round(x).astype(dtype)  # ties
    check(tmp_path, op, {"x": x}, {"axis": axis, "keepdims": keepdims,
                                   "select_last_index": last})


def test_arg_max_nan_is_the_largest(tmp_path):
    # The first NaN wins (numpy's argmax and argmin); onnxruntime's
    # answer with NaNs is not specified, so numpy is the reference.
    x = np.array([[1, np.nan, 3, np.nan], [2, 5, -1, 0]], F32)
    for op, ref in [("ArgMax", np.argmax), ("ArgMin", np.argmin)]:
        model = make_model(op, {"x": x}, {"axis": 1, "keepdims": 0})
        (tmp_path / op).mkdir()
        got = run_shardflow(model, {"x": x}, tmp_path / op)["y"]
        np.testing.assert_array_equal(got, ref(x, axis=1))


def test_reduce_log_sum_exp_infinities_and_nan(tmp_path):
    # Rows: a +inf (result +inf), all -inf (-inf), a -inf among finite
    # values (ignored), a NaN (NaN), +inf and -inf together (+inf), and a
    # large finite row (no overflow).
    inf = np.inf
    x = np.array([[1, inf, 2, 3],
                  [-inf, -inf, -inf, -inf],
                  [-inf, 1, 2, 3],
                  [1, np.nan, 2, 3],
                  [inf, -inf, 0, 1],
                  [1000, 999, 998, -1000]], F32)
    check(tmp_path, "ReduceLogSumExp", {"x": x}, {"keepdims": 0},
          initializers={"axes": np.array([1], np.int64)})


# ----------------------------------------------------------------------------
# CumSum and TopK
# ----------------------------------------------------------------------------

CUMSUM_CASES = [(dt, axis, ex, rev) for dt, axes in [(F32, [0, 1, 2, -1]), (I64, [0, 2])]
                for axis in axes for ex in [0, 1] for rev in [0, 1]] + \
               [(F64, 1, 1, 1), (I32, 2, 0, 1)]


@pytest.mark.parametrize("dtype,axis,exclusive,reverse", CUMSUM_CASES,
                         ids=[f"{dtype_id(d)}-axis{a}-ex{e}-rev{r}" for d, a, e, r in CUMSUM_CASES])
def test_cumsum(request, tmp_path, dtype, axis, exclusive, reverse):
    x = rand(rng_for(request), [3, 4, 5], dtype, -10, 10)
    check(tmp_path, "CumSum", {"x": x}, {"exclusive": exclusive, "reverse": reverse},
          initializers={"axis": np.array(axis, np.int64)})


TOPK_CASES = [(dt, axis, k, largest) for dt in [F32, I64] for axis in [-1, 1, 0]
              for k, largest in [(2, 1), (2, 0), (3, 1)]] + [(F64, -1, 5, 1), (I32, 1, 4, 0)]


@pytest.mark.parametrize("dtype,axis,k,largest", TOPK_CASES,
                         ids=[f"{dtype_id(d)}-axis{a}-k{k}-{'largest' if l else 'smallest'}"
                              for d, a, k, l in TOPK_CASES])
def test_topk(request, tmp_path, dtype, axis, k, largest):
    # Integers from a small range: ties, which go to the lower index.
    x = rand(rng_for(request), [3, 4, 5], dtype, -3, 3)
    check(tmp_path, "TopK", {"x": x}, {"axis": axis, "largest": largest, "sorted": 1},
          initializers={"k": np.array([k], np.int64)}, outputs=("values", "indices"))


@pytest.mark.parametrize("largest", [1, 0], ids=["largest", "smallest"])
@pytest.mark.parametrize("dtype", [F32, I64], ids=dtype_id)
def test_topk_long_rows(request, tmp_path, dtype, largest):
    # k much smaller than the axis (the kernel keeps a running best-k list),
    # with ties among the integers; also along a non-innermost axis.
    x = rand(rng_for(request), [4, 64, 3], dtype, -20, 20)
    check(tmp_path, "TopK", {"x": x}, {"axis": 1, "largest": largest},
          initializers={"k": np.array([5], np.int64)}, outputs=("values", "indices"))


def test_topk_unsorted(request, tmp_path):
    # sorted = 0 leaves the order open: compare as sets per row.
    x = rand(rng_for(request), [4, 6], F32)
    model = make_model("TopK", {"x": x}, {"sorted": 0}, {"k": np.array([3], np.int64)},
                       outputs=("values", "indices"))
    ours = run_shardflow(model, {"x": x}, tmp_path)
    ref = run_onnxruntime(model, {"x": x})
    np.testing.assert_array_equal(np.sort(ours["indices"], 1), np.sort(ref["indices"], 1))
    np.testing.assert_array_equal(np.sort(ours["values"], 1), np.sort(ref["values"], 1))


# ----------------------------------------------------------------------------
# Normalizations
# ----------------------------------------------------------------------------

LAYERNORM_CASES = [(dt, axis, bias) for dt in [F32, F64] for axis in [-1, -2, 1]
                   for bias in [True, False]] + [(F16, -1, True)]


@pytest.mark.parametrize("dtype,axis,bias", LAYERNORM_CASES,
                         ids=[f"{dtype_id(d)}-axis{a}-{'bias' if b else 'nobias'}"
                              for d, a, b in LAYERNORM_CASES])
def test_layer_normalization(request, tmp_path, dtype, axis, bias):
    rng = rng_for(request)
    x = rand(rng, [2, 3, 8], dtype, -2, 5)
    norm_shape = x.shape[axis:]
    inputs = {"x": x, "scale": rand(rng, norm_shape, dtype, 0.5, 2)}
    if bias:
        inputs["bias"] = rand(rng, norm_shape, dtype)
    check(tmp_path, "LayerNormalization", inputs, {"axis": axis, "epsilon": 1e-5})


def test_layer_normalization_weights_as_initializers(request, tmp_path):
    rng = rng_for(request)
    x = rand(rng, [4, 16], F32)
    check(tmp_path, "LayerNormalization", {"x": x},
          initializers={"scale": rand(rng, [16], F32), "bias": rand(rng, [16], F32)})


RMS_CASES = [(dt, axis) for dt in [F32, F64] for axis in [-1, -2]]


@pytest.mark.parametrize("dtype,axis", RMS_CASES,
                         ids=[f"{dtype_id(d)}-axis{a}" for d, a in RMS_CASES])
def test_rms_normalization(request, tmp_path, dtype, axis):
    rng = rng_for(request)
    x = rand(rng, [2, 3, 8], dtype)
    check(tmp_path, "RMSNormalization",
          {"x": x, "scale": rand(rng, x.shape[axis:], dtype, 0.5, 2)},
          {"axis": axis, "epsilon": 1e-6}, opset=23)


@pytest.mark.parametrize("shape", [[2, 3, 4, 5], [2, 3], [2, 3, 7]], ids=str)
@pytest.mark.parametrize("dtype", [F32, F64], ids=dtype_id)
def test_batch_normalization(request, tmp_path, dtype, shape):
    rng = rng_for(request)
    c = shape[1]
    check(tmp_path, "BatchNormalization", {"x": rand(rng, shape, dtype)},
          {"epsilon": 1e-3},
          initializers={"scale": rand(rng, [c], dtype, 0.5, 2), "bias": rand(rng, [c], dtype),
                        "mean": rand(rng, [c], dtype), "var": rand(rng, [c], dtype, 0.1, 3)})


# GroupNormalization and InstanceNormalization are compositions at import
# (reshape to groups, mean and variance, scale and bias broadcast).
GROUPNORM_CASES = [(opset, dt, shape, groups) for opset in [18, 21] for dt in [F32, F64]
                   for shape, groups in [([2, 6, 4, 5], 3), ([2, 4, 7], 4), ([3, 8], 2),
                                         ([1, 6, 2, 3, 2], 1)]] + \
                  [(21, F16, [2, 6, 4, 5], 2)]


@pytest.mark.parametrize("opset,dtype,shape,groups", GROUPNORM_CASES,
                         ids=[f"opset{o}-{dtype_id(d)}-{'x'.join(map(str, s))}-g{g}"
                              for o, d, s, g in GROUPNORM_CASES])
def test_group_normalization(request, tmp_path, opset, dtype, shape, groups):
    rng = rng_for(request)
    params = groups if opset < 21 else shape[1]
    inputs = {"x": rand(rng, shape, dtype, -2, 5), "scale": rand(rng, [params], dtype, 0.5, 2),
              "bias": rand(rng, [params], dtype)}
    attrs = {"num_groups": groups, "epsilon": 1e-3}
    if opset >= 21 and dtype == F64:
        # The default stash_type (float) computes the statistics in float32;
        # onnxruntime computes float64 input in float64 whatever it says.
        attrs["stash_type"] = 11
    check(tmp_path, "GroupNormalization", inputs, attrs, opset=opset)


def test_group_normalization_stash_type_double(request, tmp_path):
    rng = rng_for(request)
    inputs = {"x": rand(rng, [2, 4, 6], F32, -2, 5), "scale": rand(rng, [4], F32, 0.5, 2),
              "bias": rand(rng, [4], F32)}
    check(tmp_path, "GroupNormalization", inputs, {"num_groups": 2, "stash_type": 11},
          opset=21)


# onnxruntime has no float64 InstanceNormalization: float64 is compared with
# numpy in the test below.
INSTANCENORM_CASES = [(dt, shape) for dt in [F32]
                      for shape in [[2, 3, 4, 5], [2, 3, 7], [1, 2, 3, 2, 4]]] + \
                     [(F16, [2, 3, 4, 5])]


@pytest.mark.parametrize("dtype,shape", INSTANCENORM_CASES,
                         ids=[f"{dtype_id(d)}-{'x'.join(map(str, s))}"
                              for d, s in INSTANCENORM_CASES])
def test_instance_normalization(request, tmp_path, dtype, shape):
    rng = rng_for(request)
    c = shape[1]
    check(tmp_path, "InstanceNormalization", {"x": rand(rng, shape, dtype, -2, 5)},
          {"epsilon": 1e-3},
          initializers={"scale": rand(rng, [c], dtype, 0.5, 2), "bias": rand(rng, [c], dtype)})


def test_instance_normalization_float64(request, tmp_path):
    rng = rng_for(request)
    x = rand(rng, [2, 3, 4, 5], F64, -2, 5)
    scale, bias = rand(rng, [3], F64, 0.5, 2), rand(rng, [3], F64)
    model = make_model("InstanceNormalization", {"x": x}, {"epsilon": 1e-3},
                       {"scale": scale, "bias": bias}, 18, ("y",))
    got = run_shardflow(model, {"x": x}, tmp_path)["y"]
    mean = x.mean(axis=(2, 3), keepdims=True)
    var = x.var(axis=(2, 3), keepdims=True)
    eps = float(np.float32(1e-3))  # the attribute is a float32
    want = (x - mean) / np.sqrt(var + eps) * scale[:, None, None] + bias[:, None, None]
    assert got.dtype == F64
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
