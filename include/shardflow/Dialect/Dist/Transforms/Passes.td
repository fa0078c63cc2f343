//===- Passes.td - dist dialect passes ---------------------*- tablegen -*-===//

#ifndef SHARDFLOW_DIALECT_DIST_TRANSFORMS_PASSES_TD
#define SHARDFLOW_DIALECT_DIST_TRANSFORMS_PASSES_TD

include "mlir/Pass/PassBase.td"

def DistAnnotate : Pass<"dist-annotate", "::mlir::ModuleOp"> {
  let summary = "Add a mesh and seed shardings from options and strategy presets";
  let description = [{
    Creates `dist.mesh @mesh` from `mesh` ("dp=2,tp=4") unless the module
    already has one, then seeds shardings:
    - `shard`: entries `NAME=SPEC` naming a graph input (function argument
      `onnx.name`) or a weight (`nn.weight` name). SPEC lists one entry
      per dimension separated by commas: `_` (not split), an axis name, or
      several axes joined by `+` (major first), e.g. `ids=dp,_`,
      `h.0.mlp.fc.weight=_,tp`, `x=dp+tp,_`.
    - `strategy`: `dp` splits dimension 0 of every graph input over the
      `dp-axis`; `megatron` finds column-parallel / row-parallel pairs of
      linear layers (the MLP's two matmuls, attention's Q/K/V and output
      projections) and splits them over the `tp-axis`, plus what `dp` does
      when the mesh has the `dp-axis`; `megatron-sp` also splits the
      sequence dimension of the norm and dropout regions between them.
    Seeds from `shard` and from annotations already in the IR outrank the
    strategy's.

    With `microbatches` M > 1 the mesh gets a last axis `microbatch` of
    size M, and dimension 0 of every graph input is split over it too,
    innermost (after `dp`): mesh coordinate k along it holds micro-batch k
    of its data-parallel rank's batch. dist-unroll-microbatches later turns
    that axis into M copies of the per-rank program run one after another.
  }];
  let options = [
    Option<"mesh_", "mesh", "std::string", /*default=*/"\"\"",
           "Mesh axes and sizes, e.g. dp=2,tp=4">,
    ListOption<"shard", "shard", "std::string",
               "NAME=SPEC sharding seeds for graph inputs and weights">,
    Option<"strategy", "strategy", "std::string", /*default=*/"\"\"",
           "Preset: dp, megatron or megatron-sp">,
    Option<"dpAxis", "dp-axis", "std::string", /*default=*/"\"dp\"",
           "Mesh axis for data parallelism">,
    Option<"tpAxis", "tp-axis", "std::string", /*default=*/"\"tp\"",
           "Mesh axis for tensor (and sequence) parallelism">,
    Option<"wholeInitializers", "whole-initializers", "bool", /*default=*/"false",
           "Never read an initializer as blocks (a training step's weights are "
           "state, one buffer each): a projection packed with uneven parts "
           "stays one product">,
    Option<"training", "training", "bool", /*default=*/"false",
           "The program becomes a training step, whose loss reads the logits "
           "split over the vocabulary (never gathered): megatron splits the "
           "output projection whatever the token count">,
    Option<"microbatches", "microbatches", "int64_t", /*default=*/"1",
           "Split every graph input's dimension 0 into this many micro-batches "
           "(a mesh axis `microbatch`)">,
  ];
  let dependentDialects = ["::shardflow::dist::DistDialect"];
}

def DistPropagate : Pass<"dist-propagate", "::mlir::ModuleOp"> {
  let summary = "Give every value a sharding, propagating seeds through sharding rules";
  let description = [{
    Seeds are `dist.sharding` on function arguments and results,
    `dist.shardings` on ops and `dist.constraint` ops. Propagation carries
    them through each op's sharding rule (see docs/sharding.md) until
    nothing changes, then closes every value's sharding (unset dimensions
    are replicated) and writes `dist.shardings` on every op.

    Determinism and conflicts: seeds are applied in priority order (user
    annotations, then strategy seeds); ops are visited in program order,
    forward then backward, repeatedly; a value's dimension, once set, is
    never changed by propagation; when two operands disagree about a factor
    the first operand (in operand order) with the higher priority wins; an
    axis already used by another factor of the op is not used again.
    With `explain`, every value gets a remark saying where its sharding came
    from.
  }];
  let options = [
    Option<"explain", "explain", "bool", /*default=*/"false",
           "Emit a remark per value: its sharding and where it came from">,
  ];
}

def DistInsertReshards : Pass<"dist-insert-reshards", "::mlir::ModuleOp"> {
  let summary = "Make each op's operands match the sharding its rule needs";
  let description = [{
    For every op, decides one sharding per factor (from its result
    shardings, then its operands'), and inserts `dist.reshard` where an
    operand is laid out differently from what the factors require, or where
    the op's result (including partial sums from sharded reduction factors)
    differs from the result's assigned sharding.

    Partial sums that meet in an add or sub (a parallel residual block's
    attention and MLP outputs) stay partial up to it, through ops linear in
    them, when one reduction after the meeting moves fewer bytes than
    reducing each where it is made; whole operands added on the way are
    scaled by 1/n. With `explain`, each meeting gets a remark with both
    byte counts and the choice.
  }];
  let options = [
    Option<"explain", "explain", "bool", /*default=*/"false",
           "Emit a remark per meeting of partial sums: reduced together or apart, and why">,
  ];
}

def DistPartition : Pass<"dist-partition", "::mlir::ModuleOp"> {
  let summary = "Turn the global program into the per-rank program";
  let description = [{
    Gives every tensor its local shape, slices weights (each rank loads only
    its part), turns function arguments into this rank's shards (the
    program takes the global inputs and keeps its slice) and gathers
    results back to whole tensors, and lowers each `dist.reshard` to
    collectives: partial sums to all_reduce or reduce_scatter, a split moved
    between dimensions to all_to_all, splits removed to all_gather, splits
    added to all_slice.
  }];
  let dependentDialects = ["::shardflow::dist::DistDialect"];
}

def DistUnrollMicrobatches : Pass<"dist-unroll-microbatches", "::mlir::ModuleOp"> {
  let summary = "Run a mesh axis's ranks one after another on one rank";
  let description = [{
    Runs after dist-partition on the per-rank program of a mesh with the
    axis `axis` (dist-annotate's `microbatch`): the ranks along that axis
    become copies of the program on one rank, and the axis leaves the mesh.

    A value is uniform when it is the same on every rank along the axis
    (weights, optimizer state, what is computed from them alone, what a
    collective over the axis returns) and varying otherwise; each op with a
    varying operand is cloned once per coordinate. Collectives over the
    axis become arithmetic on the copies: `all_reduce` sums them (or takes
    their max, min, product) and reduces over the other axes once;
    `all_gather` concatenates; `reduce_scatter` sums, then each copy keeps
    its block; `all_slice` gives copy k static block k. The ops are then
    ordered copy by copy, each with what it needs first, so that one
    micro-batch's activations are dead before the next one's forward
    starts; the sums over copies accumulate as they come.

    Per-rank attributes (weight slice starts, gather row starts) keep the
    values of coordinate 0 along the axis and must not differ along it.
    `all_to_all`, `collective_permute`, `send` and `recv` over the axis are
    errors.
  }];
  let options = [
    Option<"axis", "axis", "std::string", /*default=*/"\"microbatch\"",
           "The mesh axis to unroll">,
  ];
  let dependentDialects = ["::shardflow::nn::NNDialect"];
}

def DistSplitStages : Pass<"dist-split-stages", "::mlir::ModuleOp"> {
  let summary = "Cut the program into pipeline stages, a function each";
  let description = [{
    The `stages` phase of a pipeline-parallel compile (`--mesh pp=N`): cuts
    `@main`, the per-rank program of one micro-batch (the other mesh axes
    already partitioned), into one function per stage, `@stage_0` ..
    `@stage_{S-1}`, and records the schedule on the module.

    The cuts follow the model's layers as nn-find-layers finds them: the
    prologue (embeddings) goes with the first stage, the epilogue (final
    norm, head) with the last, the ops between two stacks (an
    encoder-decoder's) with the block after them. `split` (`layers:I,J`)
    names the layer each stage after the first starts at (`nodes:A,B`: the
    layer that holds each ONNX node); otherwise the
    cuts make the slowest stage as fast as they can (a linear partition by
    dynamic programming), each op's time estimated from the registry's
    cost (FLOPs / 80 GFLOP/s + bytes / 50 GB/s, the rates
    bench/pipeline_balance_bench.py fits on one CPU core), the first
    stage also holding the embeddings and the last the final norm and
    head: a heavy LM head leaves the last stage fewer layers.

    A value a stage reads from an earlier one is either computed again in
    the stage, when what computes it is small (at most 64 ops), holds no
    collective and reads no float graph input (weights, constants, an
    attention mask from the token mask, rotary tables), or passed: the
    earlier stage returns it and the later one takes it as an argument,
    both marked `dist.transfer = K` (the later stage also `dist.from`, the
    earlier `dist.to`, the stages). Every stage takes the graph inputs it
    reads itself (`nn.name`); each graph output is returned by the stage
    that computes it. A stage is `dist.stage = s` and `dist.pp_rank = r`.

    The module gets `dist.pipeline`: the pp ranks, the micro-batches, the
    schedule's name, each stage's pp rank and each rank's actions (the
    schedule, built or read and simulated as shard-opt's
    `--pipeline-schedule` does).
  }];
  let options = [
    Option<"ranks", "ranks", "int64_t", /*default=*/"2", "The pp axis's size">,
    Option<"microbatches", "microbatches", "int64_t", /*default=*/"2",
           "Micro-batches per step">,
    Option<"schedule", "schedule", "std::string", /*default=*/"\"1f1b\"",
           "The schedule's name (gpipe, 1f1b, interleaved-1f1b, zb-h1, zbv)">,
    Option<"scheduleFile", "schedule-file", "std::string", /*default=*/"\"\"",
           "A schedule file instead of a name">,
    Option<"virtualStages", "virtual-stages", "int64_t", /*default=*/"0",
           "Stages per pp rank (0: the schedule's)">,
    Option<"split", "split", "std::string", /*default=*/"\"\"",
           "layers:I,J,... (the layer each stage after the first starts at) or "
           "nodes:A,B,... (the layer holding each ONNX node)">,
    Option<"training", "training", "bool", /*default=*/"false",
           "The stages train: the schedule keeps its backward actions (the "
           "program is still the forward one, cut before differentiation), and "
           "zb-h1 and zbv are list-scheduled with the stages' estimated times">,
  ];
  let dependentDialects = ["::shardflow::nn::NNDialect"];
}

#endif // SHARDFLOW_DIALECT_DIST_TRANSFORMS_PASSES_TD
