#!/usr/bin/env bash
# The main job on the bundled example (examples/tiny-gpt2: a 2-layer
# GPT-2-style decoder with external weights and symbolic batch/sequence):
# set up and build; import it and print its nn IR summary; compile it for
# the CPU and run it with shard-run; then shard it over a mesh (MESH,
# default dp=2,tp=2) with the megatron and megatron-sp presets and run the
# ranks under mpirun; compare every run with onnxruntime; run it as a
# pipeline of two stages (pp=2, 4 micro-batches, 1F1B), compare it with
# onnxruntime and the unpipelined run and draw its timeline (written next to
# the artifact in build/example); then train it a few steps on one
# rank and over the mesh (megatron) and compare the two.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
bash tools/setup.sh
bash tools/build.sh
model="${1:-examples/tiny-gpt2/model.onnx}"
shape="${SHAPE:-input_ids=2,16}"
out="build/example"
mkdir -p "$out"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

echo "== import: shard-opt $model --input-shape $shape"
build/bin/shard-opt "$model" --input-shape "$shape" --summary -o "$out/model.mlir"
echo "   nn IR written to $out/model.mlir"
echo "== compile: shard-opt $model --input-shape $shape --target cpu -o $out/model.shard"
build/bin/shard-opt "$model" --input-shape "$shape" --target cpu -o "$out/model.shard"
echo "   $(grep -c '^kernel ' "$out/model.shard") kernels, arena $(sed -n 's/^arena //p' "$out/model.shard") bytes"
echo "== run under mpirun and compare with onnxruntime"
PYTHONPATH=python .venv/bin/python -m shardflow.compare "$model" "$out/model.shard" \
  --input-shape "$shape"

mesh="${MESH:-dp=2,tp=2}"
ranks=1
IFS=, read -ra axes <<< "$mesh"
for axis in "${axes[@]}"; do ranks=$(( ranks * ${axis#*=} )); done
for strategy in megatron megatron-sp; do
  echo "== shard over $mesh ($ranks ranks), --strategy $strategy, with a report"
  build/bin/shard-opt "$model" --input-shape "$shape" --mesh "$mesh" --strategy "$strategy" \
    --target cpu --report -o "$out/model.$strategy.shard"
  echo "== run the $ranks ranks under mpirun and compare with onnxruntime"
  PYTHONPATH=python .venv/bin/python -m shardflow.compare "$model" "$out/model.$strategy.shard" \
    --input-shape "$shape" --ranks "$ranks"
done

echo "== pipeline: pp=2 (the stages cut along the layers), 4 micro-batches, 1F1B"
pshape="input_ids=4,16"
build/bin/shard-opt "$model" --input-shape "$pshape" --target cpu -o "$out/model.b4.shard"
build/bin/shard-opt "$model" --input-shape "$pshape" --mesh pp=2 --microbatches 4 \
  --pipeline-schedule 1f1b --target cpu -o "$out/model.pp2.shard"
sed -n 's/^actions /   rank /p' "$out/model.pp2.shard"
echo "== run the 2 stages under mpirun; compare with onnxruntime and the unpipelined run"
PYTHONPATH=python .venv/bin/python -m shardflow.compare "$model" "$out/model.pp2.shard" \
  --input-shape "$pshape" --ranks 2 --baseline "$out/model.b4.shard"
echo "== the pipeline's timeline: shard-run --trace, then python -m shardflow.timeline"
.venv/bin/python -c "import numpy as np; np.savez('$out/pp2.inputs.npz', \
  input_ids=np.random.default_rng(0).integers(0, 128, (4, 16)).astype(np.int64))"
mpirun -np 2 build/bin/shard-run "$out/model.pp2.shard" --inputs "$out/pp2.inputs.npz" \
  --repeat 3 --trace "$out/model.pp2.trace.json" >/dev/null
PYTHONPATH=python .venv/bin/python -m shardflow.timeline "$out/model.pp2.trace.json" \
  -o "$out/model.pp2.timeline.png"

echo "== train: AdamW steps on one rank and over $mesh (--strategy megatron), compared"
PYTHONPATH=python .venv/bin/python -m shardflow.compare_training "$model" --input-shape "$shape" \
  --mesh "$mesh" --strategy megatron --steps 8 --work-dir "$out/train"
