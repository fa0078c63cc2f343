"""Run a compiled model with shard-run and compare it with onnxruntime.

    python -m shardflow.compare MODEL.onnx ARTIFACT.shard [--ranks N]
        [--input-shape NAME=D0,D1 ...] [--seed S] [--tolerance T]
        [--baseline OTHER.shard [--baseline-ranks N]]

Inputs are random: floats from a standard normal, integer inputs inside
[0, --int-high) (token ids), `attention_mask` mostly ones. Prints, per
output, the relative L2 error ||ours - ort|| / ||ort|| and the largest
absolute difference; exits 1 if any error exceeds the tolerance. With
--baseline, another artifact of the same model (say, not pipelined) runs on
the same inputs and the two runs are compared as well.
"""
from __future__ import annotations

import argparse
import shutil
import sys

import numpy as np
import onnx

from shardflow import toolchain


def make_inputs(model: onnx.ModelProto, shapes: dict, rng, int_high: int) -> dict:
    inits = {i.name for i in model.graph.initializer}
    inputs = {}
    for value in model.graph.input:
        if value.name in inits:
            continue
        tt = value.type.tensor_type
        shape = shapes.get(value.name) or [d.dim_value for d in tt.shape.dim]
        if any(d <= 0 for d in shape):
            raise SystemExit(f"input '{value.name}' has a symbolic shape; pass --input-shape")
        dtype = onnx.helper.tensor_dtype_to_np_dtype(tt.elem_type)
        if np.issubdtype(dtype, np.floating):
            inputs[value.name] = rng.standard_normal(shape).astype(dtype)
        elif value.name == "attention_mask":
            inputs[value.name] = np.ones(shape, dtype)
        elif value.name == "token_type_ids":
            inputs[value.name] = rng.integers(0, 2, size=shape).astype(dtype)
        elif dtype == np.bool_:
            inputs[value.name] = rng.integers(0, 2, size=shape).astype(dtype)
        else:
            inputs[value.name] = rng.integers(0, int_high, size=shape).astype(dtype)
    return inputs


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("artifact")
    parser.add_argument("--ranks", type=int, default=1,
                        help="run under mpirun -np RANKS (default 1)")
    parser.add_argument("--input-shape", action="append", default=[],
                        help="NAME=D0,D1,...: shapes of symbolic inputs")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--int-high", type=int, default=128,
                        help="integer inputs are drawn from [0, INT_HIGH)")
    parser.add_argument("--tolerance", type=float, default=1e-5,
                        help="largest allowed relative L2 error (default 1e-5)")
    parser.add_argument("--baseline", help="another artifact of the model, run on the same "
                        "inputs and compared with ARTIFACT")
    parser.add_argument("--baseline-ranks", type=int, default=1,
                        help="ranks of --baseline (default 1)")
    args = parser.parse_args(argv)

    shapes = {}
    for spec in args.input_shape:
        name, _, dims = spec.partition("=")
        shapes[name] = [int(d) for d in dims.replace("x", ",").split(",") if d]
    model = onnx.load(args.model, load_external_data=False)
    inputs = make_inputs(model, shapes, np.random.default_rng(args.seed), args.int_high)

    launcher = None
    if args.ranks > 1 or shutil.which("mpirun"):
        launcher = [shutil.which("mpirun") or "mpirun", "-np", str(args.ranks),
                    "--oversubscribe"]
    ours = toolchain.run_artifact(args.artifact, inputs, launcher=launcher)
    reference = toolchain.run_onnxruntime(args.model, inputs)
    worst = 0.0
    print(f"{'output':24} {'shape':>16} {'rel. L2 error':>14} {'max |diff|':>12}")
    for name, ref in reference.items():
        got = ours[name]
        if got.shape != ref.shape:
            print(f"{name:24} shape {got.shape} differs from onnxruntime's {ref.shape}")
            return 1
        err = toolchain.relative_error(got, ref)
        diff = float(np.max(np.abs(got.astype(np.float64) - ref))) if ref.size else 0.0
        worst = max(worst, err)
        print(f"{name:24} {str(list(ref.shape)):>16} {err:14.3e} {diff:12.3e}")
    verdict = "matches" if worst <= args.tolerance else "DIFFERS from"
    print(f"shard-run ({args.ranks} rank{'s' if args.ranks > 1 else ''}) {verdict} "
          f"onnxruntime: worst relative L2 error {worst:.3e} (tolerance {args.tolerance:g})")
    ok = worst <= args.tolerance
    if args.baseline:
        base_launcher = None
        if args.baseline_ranks > 1 or shutil.which("mpirun"):
            base_launcher = [shutil.which("mpirun") or "mpirun", "-np",
                             str(args.baseline_ranks), "--oversubscribe"]
        base = toolchain.run_artifact(args.baseline, inputs, launcher=base_launcher)
        apart = max(toolchain.relative_error(ours[n], base[n]) for n in reference)
        same = apart <= args.tolerance
        print(f"shard-run {'matches' if same else 'DIFFERS from'} {args.baseline} "
              f"({args.baseline_ranks} rank{'s' if args.baseline_ranks > 1 else ''}) on the "
              f"same inputs: worst relative L2 error {apart:.3e}")
        ok = ok and same
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
