//===- Passes.td - nn dialect passes -----------------------*- tablegen -*-===//
//
// Passes on the nn program before it is lowered: raising exporters' op
// chains to first-class ops, and changing the precision it computes in.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDFLOW_DIALECT_NN_TRANSFORMS_PASSES_TD
#define SHARDFLOW_DIALECT_NN_TRANSFORMS_PASSES_TD

include "mlir/Pass/PassBase.td"

def NNRaiseAttention : Pass<"nn-raise-attention", "::mlir::func::FuncOp"> {
  let summary = "Raise materialized scaled dot-product attention to nn.attention";
  let description = [{
    Exporters write attention as a chain of ops:

    ```
    scores = matmul(Q, K^T)              Q [B, H, Sq, D], K^T [B, Hkv, D, Skv]
    scores = scores * c  |  scores / c   optional, c a scalar constant
    scores = tanh(scores / t) * t        optional soft-capping
    scores = where(keep, scores, fill) | scores + bias    optional mask
    probs  = softmax(scores, axis = -1)  (an inference nn.dropout may follow)
    out    = matmul(probs, V)            V [B, Hkv, Skv, Dv]
    ```

    and this pass replaces each such chain by one 4-D `nn.attention`, when
    the match is exact:

    - K^T is a transpose whose last two dimensions swap those of K (the
      transpose is folded away), or any other value (K is its transpose);
    - the scale is a splat constant (`scale` = c, or 1/c for a division);
      no scale gives `scale` = 1;
    - a constant mask (nn.constant, possibly through nn.trilu, nn.cast,
      nn.expand, nn.reshape, nn.unsqueeze) that keeps exactly key j <= query
      i, with only unit leading dimensions, becomes `is_causal`, the
      convention of nn.attention (upper-left aligned). This covers a boolean
      `where(keep, s, fill)`, its `masked_fill` form `where(drop, fill, s)`
      and an additive mask of 0 and `fill`; `fill` must be -inf or at most
      -1e30, so that masked scores contribute exactly 0;
    - any other additive mask becomes the float `mask` operand; any other
      boolean mask becomes the boolean `mask` operand when `fill` is -inf,
      and the float mask `where(keep, 0, fill)` otherwise (for finite `fill`
      a fully masked row then averages every key, as the original chain
      does, where a boolean mask would give zeros);
    - K and V repeated per query-head group (`unsqueeze` at dim 2 or an
      equivalent reshape, `expand`, `reshape` to [B, Hkv * g, S, D]: the
      repeat_kv of grouped-query models) are used unrepeated, giving
      grouped-query attention, when both are repeated by the same factor.

    Every intermediate value of the chain (scores, scaled, capped, masked,
    probabilities) must have no other user; otherwise the chain stays.
    With `explain`, every softmax that is not raised gets a remark saying
    why.
  }];
  let options = [
    Option<"explain", "explain", "bool", /*default=*/"false",
           "Emit a remark at every softmax whose chain is not raised, with the reason">,
  ];
  let dependentDialects = ["::shardflow::nn::NNDialect"];
}

def NNRaiseNormalization : Pass<"nn-raise-normalization", "::mlir::func::FuncOp"> {
  let summary = "Raise written-out layer and RMS norms to nn.layer_normalization and nn.rms_normalization";
  let description = [{
    Models exported before LayerNormalization (opset 17) or RMSNormalization
    (opset 23) existed, and Llama's RMSNorm in every exporter, write their
    norms as chains:

    ```
    m = reduce_mean(x, axes)  d = x - m              layer norm only
    v = reduce_mean(d * d | pow(d, 2), axes)         (x for RMS norm)
    n = d / sqrt(v + eps)  |  d * reciprocal(sqrt(v + eps))  |  d * (1 / sqrt(v + eps))
    y = n * gamma + beta                             both optional; beta for layer norm
    ```

    and this pass replaces each by one `nn.layer_normalization` or
    `nn.rms_normalization` when the match is exact: `axes` (with
    keepdims) are a trailing block of dimensions, the same for both means,
    from `axis` on; `eps` is a scalar constant; gamma and beta (either
    operand order) broadcast within the normalized dimensions only; all of
    one float type; and no intermediate value (m, d, the square, v, the
    sum, the root and its reciprocal, n) has a reader outside the chain.
    Without gamma the scale is a constant of ones. A product or sum after
    n that does not qualify as gamma or beta stays after the raised op.
    With `explain`, each raised chain gets a remark, and so does each mean
    of a square followed by `+ eps` and a square root that is not raised,
    with the reason.
  }];
  let options = [
    Option<"explain", "explain", "bool", /*default=*/"false",
           "Emit a remark at each raised norm, and at each near miss with the reason">,
  ];
  let dependentDialects = ["::shardflow::nn::NNDialect"];
}

def NNRaiseGelu : Pass<"nn-raise-gelu", "::mlir::func::FuncOp"> {
  let summary = "Raise written-out GELU (tanh or erf form) to nn.gelu";
  let description = [{
    Models exported before Gelu (opset 20) write it out: GPT-2's tanh form
    and BERT's erf form,

    ```
    0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3)))   -> nn.gelu {approximate = "tanh"}
    0.5 * x * (1 + erf(x / sqrt(2)))                          -> nn.gelu
    ```

    with products and sums in any association and operand order (x^3 as
    pow(x, 3) or x * x * x, x / sqrt(2) also as x * (1 / sqrt(2)), the 0.5
    applied to x first or to the product last). The constants must be the
    definition's to a relative 1e-6 (their f32 spellings), no intermediate
    value may have a reader outside the chain, and nothing may broadcast
    beyond x's shape. One nn.gelu is one pass over the tensor, and on the
    CUDA target the tanh form rides on the GEMM before it as cuBLASLt's
    `gelu_bias` epilogue. With `explain`, each raised chain gets a remark.
  }];
  let options = [
    Option<"explain", "explain", "bool", /*default=*/"false",
           "Emit a remark at each raised GELU">,
  ];
  let dependentDialects = ["::shardflow::nn::NNDialect"];
}

def NNRaiseRotateHalf : Pass<"nn-raise-rotate-half", "::mlir::func::FuncOp"> {
  let summary = "Raise written-out rotate_half (slices, neg, concat) to nn.rotate_half";
  let description = [{
    Rotary embeddings written out by exporters (Hugging Face's Llama,
    Mistral, Qwen, GPT-NeoX: `x * cos + rotate_half(x) * sin`) build the
    rotation partner from the halves of the last dimension,

    ```
    x1 = x[..., :h]   x2 = x[..., h:]    (two Slices, or one even Split)
    Concat(-x2, x1, axis = -1)           -> nn.rotate_half x
    ```

    Two copies, a negation and a third copy become one pass, and on the
    CUDA target a generated kernel that reads each element's partner in
    place, with the products by cos and sin and their sum fused into it.
    The rewrite is exact; slices and negations that something else reads
    stay. With `explain`, each raised concat gets a remark.
  }];
  let options = [
    Option<"explain", "explain", "bool", /*default=*/"false",
           "Emit a remark at each raised rotate_half">,
  ];
  let dependentDialects = ["::shardflow::nn::NNDialect"];
}

def NNFindLayers : Pass<"nn-find-layers", "::mlir::ModuleOp"> {
  let summary = "Find the repeated blocks (layers) of @main and record them as nn.layers";
  let description = [{
    Finds the layer structure of the model, which recomputation, ZeRO-3
    prefetching and pipeline stages cut along: the longest run of K >= 2
    consecutive blocks of structurally identical ops (the same op names,
    attributes other than names, and types, wired the same way), where
    each block reads weights no other block reads (`nn.weight`s and
    initializers embedded as `nn.constant`) and reads what the block before
    it computed; the prologue before the run (embeddings) and the epilogue
    after it (final norm, head, pooler). More runs are looked for in the
    prologue and epilogue: an encoder-decoder has two stacks.

    Neither initializer names nor the exporter's program order are relied
    on. The ops that compute from weights and float inputs are put in a
    dataflow order of their own (depth first from each value read twice,
    such as the residual stream), in which every layer's ops come out
    alike and one layer after another, even when the exporter interleaves
    them; a period P and a run of ops alike to the ops P later give the
    blocks. Side computations from integer inputs and constants (masks,
    positions) and weights go with the one block that reads them, and
    before the stack when several blocks do.

    The module gets `nn.layers`: `blocks` (in all stacks), `stacks` (per
    stack: `blocks`, `ops_per_block`, `weights` (per block, the
    initializer names it alone reads), `carried` (the values crossing a
    boundary between consecutive blocks: the residual stream) and `shared`
    (values computed before the stack that every block reads: an attention
    mask, rotary tables, an encoder's output)), `prologue_ops`,
    `epilogue_ops`, and `between_ops` when there are several stacks. A
    program without repeated blocks records `blocks = 0`. The program is
    not changed; `shard-opt --report` prints the record.
  }];
}

def NNConvertFloatType : Pass<"nn-convert-float-type", "::mlir::ModuleOp"> {
  let summary = "Compute an f32 program in bf16 or f16 (mixed precision)";
  let description = [{
    Every f32 value of each function becomes a value of the low type `type`
    (bf16 or f16), with the program's interface unchanged:

    - each f32 `nn.weight` keeps its type (its bytes in the file are f32)
      and is followed by an `nn.cast` to the low type; convert-nn-to-rt
      folds that cast into the `rt.weight`, which then records the f32
      source type for the runtime to convert once at load;
    - f32 function arguments are cast to the low type at entry, and f32
      results are cast back to f32 before they are returned (with
      `keep-output-types=false`, a function that nothing calls returns
      them in the low type instead, and its result types change: half the
      output memory and traffic);
    - f32 `nn.constant`s are converted (round to nearest even);
    - `nn.cast` to f32 casts to the low type; every other op gets its
      result types again from type inference (or, for ops whose result type
      is given, such as reshape, expand, constant_of_shape and the dist
      collectives, the low type in place of f32).

    Kernels accumulate in f32 whatever the storage type; that is the
    runtime's job. Run it after sharding: presets look for linear layers
    whose weight is an `nn.weight` operand, and slicing a weight before
    the cast keeps the weight table in file types.
  }];
  let options = [
    Option<"type", "type", "std::string", /*default=*/"\"bf16\"",
           "The element type to compute in: bf16 or f16">,
    Option<"keepOutputTypes", "keep-output-types", "bool", /*default=*/"true",
           "Cast f32 results back to f32 before they are returned; false: "
           "return them in the low type (functions that nothing calls)">,
  ];
  let dependentDialects = ["::shardflow::nn::NNDialect"];
}

def NNFoldAttentionLayout : Pass<"nn-fold-attention-layout", "::mlir::func::FuncOp"> {
  let summary = "Run attention on [B, S, H*D] tensors instead of transposed heads";
  let description = [{
    Exporters split heads with a reshape [B, S, H*D] -> [B, S, H, D] and a
    transpose to [B, H, S, D] before attention, and transpose back after
    it; each transpose copies an activation. When Q, K and V of a 4-D
    `nn.attention` all come from such a split and transpose (possibly
    followed by a 4-D `nn.rotary_embedding` that only the attention reads,
    which is rebuilt in its 3-D form with `num_heads`, or by a rotation
    written out as `x * cos + nn.rotate_half(x) * sin` with cos and sin
    the same for every head ([B, 1, S, D]), which is rebuilt on the
    [B, S, H, D] split with cos and sin viewed as [B, S, 1, D]), and every user
    of its result is the inverse transpose (0, 2, 1, 3), the attention
    takes the 3-D tensors (`q_num_heads`, `kv_num_heads` set) and its
    result, reshaped to [B, S, H, Dv] (a view), replaces those transposes.
    A training step's `nn.attention_grad` folds the same way when its
    query, key, value and result cotangent come from head splits and
    transposes (a cotangent split straight from [B*S, H*D], as the dynamo
    exporter's, reads its [B, S, H*D] view) and every user of its
    cotangents is the inverse transpose. Transposes and reshapes left
    without users are erased.

    The CUDA target runs it on the per-rank program, after sharding, so
    sharding sees the exporter's form.
  }];
  let dependentDialects = ["::shardflow::nn::NNDialect"];
}

def NNSplitFusedProjections : Pass<"nn-split-fused-projections", "::mlir::func::FuncOp"> {
  let summary = "One matmul per piece of a fused projection instead of a split of its result";
  let description = [{
    A `split` along the last dimension of `matmul(x, W)` (optionally plus a
    1-D bias), where W and the bias are loaded data read only there (model
    weights or constants, through `nn.cast`, `nn.reshape` and
    `dist.all_slice`), becomes one matmul (and bias add)
    per piece, each against its column block of W: a weight slice
    (`global_shape`, `starts`) that the runtime loads at start. The split,
    a copy of the whole activation on a GPU, disappears, and each bias add
    can ride on its GEMM's epilogue. A split into exactly the query, key
    and value of one 3-D attention (GPT-2's and BERT's fused QKV) is left
    alone: `convert-rt-to-gpu` lets the CUDA attention read the pieces
    where the fused product holds them, so one GEMM of the full width
    computes all three and no copy is made.

    Partitioned programs too: there the weight slices carry one start per
    rank, composed with the rank's own slice (a weight already sliced by
    sharding, or a bias reshaped and `dist.all_slice`d). The megatron
    presets' form, an einsum "...a,abc->...bc" against the fused weight
    sharded by heads as [K, 3, N/tp], split into pieces of 1 along the "3"
    axis and squeezed, becomes one matmul per piece against a [K, N/tp]
    slice the same way. A constant bias, which cannot differ per rank,
    keeps a `dist.all_slice` of its piece. When the squeezed pieces are
    exactly one 3-D attention's query, key and value, the einsum instead
    becomes one matmul against the rank's weight block viewed as
    [K, 3N/tp] (the same bytes; the bias [3, N/tp] viewed as [3N/tp]),
    split along its last axis: the unpartitioned form, which the CUDA
    attention reads in place. Programs with more than one mesh are left
    alone. The CUDA target runs it on the per-rank program
    before lowering.
  }];
  let options = [
    Option<"attentionInPlace", "attention-in-place", "bool", /*default=*/"true",
           "Leave a split into exactly one 3-D attention's query, key and value "
           "(the CUDA attention reads the pieces in the fused result); the "
           "heads form becomes one matmul and such a split">,
  ];
  let dependentDialects = ["::shardflow::nn::NNDialect"];
}

def NNKeyedDropout : Pass<"nn-keyed-dropout", "::mlir::ModuleOp"> {
  let summary = "Turn the model's Dropout nodes on for training (--dropout on)";
  let description = [{
    Every `nn.dropout` (an ONNX Dropout exported in inference mode) and
    every `nn.training_dropout` whose mask nothing reads (one exported in
    training mode, whose numpy-seeded mask would be the same every step)
    becomes an `nn.keyed_dropout` of the node's ratio: its mask keyed by
    (`seed`, the step, the node's number in program order, the element), so
    that every step draws a new mask and every mesh the same one. The step
    is the training step counter (`optimizer.step`, the state nn-optimizer
    advances) plus one. A dropout of ratio 0 stays the identity. The CPU
    pipeline runs it first in the nn phase under `--train --dropout on`, so
    that nn-raise-attention does not fold a dropout of the attention
    probabilities away.
  }];
  let options = [
    Option<"seed", "seed", "int64_t", /*default=*/"0", "The generator's seed">,
  ];
  let dependentDialects = ["::shardflow::nn::NNDialect"];
}

def NNAppendLoss : Pass<"nn-append-loss", "::mlir::ModuleOp"> {
  let summary = "Append a training loss to @main, as nn ops";
  let description = [{
    Adds a scalar result `loss` to `@main`, computed from its first result
    (the model's output) and a new argument named by `labels`:

    - `kind=cross-entropy`: softmax cross-entropy over the last dimension
      of the output (the logits); `labels` is an i64 tensor shaped like the
      logits without their last dimension, one class index per position,
      not shifted; positions whose label is `ignore-index` do not count.
      The argument carries `nn.valid_range` ([0, classes)) and
      `nn.ignore_value`, which the artifact records and the runtime checks
      the labels it is given against.
      The loss is the sum of -log_softmax(logits)[label] over the counted
      positions divided by their number (over the whole global batch: the
      program is the unsharded one), as PyTorch's cross_entropy with
      reduction "mean". Each position's term is an
      `nn.softmax_cross_entropy` of the logits and their log-sum-exp,
      which is written out (max, exp, sum, log) so that it runs on a
      vocabulary split over ranks, as Megatron's vocabulary-parallel
      cross-entropy: the row max is taken in `max-blocks` blocks of the
      classes, then over the blocks, so a split of the classes over ranks
      whose count divides `max-blocks` stays a split and only the blocks'
      maxima are gathered; the sums of exponentials and the picked logits
      are partial sums, all-reduced per position. The op's gradient is
      (softmax - onehot) from the saved log-sum-exp, one elementwise pass
      over the logits (split or not).
    - `kind=mse`: the mean over all elements of (output - labels)^2;
      `labels` has the output's shape and type.

    The model's results stay, `loss` comes after them.
  }];
  let options = [
    Option<"kind", "kind", "std::string", /*default=*/"\"cross-entropy\"",
           "cross-entropy or mse">,
    Option<"labels", "labels", "std::string", /*default=*/"\"labels\"",
           "The name of the labels argument to add">,
    Option<"ignoreIndex", "ignore-index", "int64_t", /*default=*/"-100",
           "cross-entropy: the label of positions that do not count">,
    Option<"maxBlocks", "max-blocks", "int64_t", /*default=*/"1",
           "cross-entropy: blocks of the classes the row max is taken in "
           "first (the ranks of the mesh; 1 when it does not divide the classes)">,
  ];
  let dependentDialects = ["::shardflow::nn::NNDialect"];
}

def NNDifferentiate : Pass<"nn-differentiate", "::mlir::ModuleOp"> {
  let summary = "Append the gradients of a scalar loss to @main, as nn ops";
  let description = [{
    Reverse-mode differentiation of the function `@main` from a scalar
    float result, the loss (the result named by `loss`, or the first
    result): the cotangent of every op between the loss and the values
    differentiated against is built by the op's gradient rule
    (`Dialect/NN/Autodiff`, one per op, keyed like the sharding rules),
    in nn ops, and the gradients become new results of `@main`, named
    `grad:<name>`:

    - `wrt=weights` (the default): every float initializer, one gradient
      per initializer name (the uses of one initializer summed): the
      `nn.weight`s and the initializers embedded as `nn.constant` (located
      at their name by the importer) of more than one element;
    - `wrt=inputs`: every float argument of `@main` (what the per-op
      gradient tests check against finite differences);
    - `wrt=all`: both;
    - `wrt=transfers`: the weights and the float arguments marked
      `dist.transfer` (a pipeline stage's backward: the gradients of what
      earlier stages passed it).

    A value the loss does not depend on gets a zero gradient, and so does
    one that reaches it only through an operand its op holds constant by
    convention (a rotary embedding's cos/sin tables). An op on the
    way from a differentiated value to the loss without a gradient rule,
    or whose rule refuses it, is an error naming the op.

    Ops that stand whole only for their gradient rules
    (`nn.softmax_cross_entropy`) are expanded to their parts afterwards.
  }];
  let options = [
    Option<"loss", "loss", "std::string", /*default=*/"\"\"",
           "The nn.name of the scalar result to differentiate (default: the first result)">,
    Option<"wrt", "wrt", "std::string", /*default=*/"\"weights\"",
           "What to differentiate against: weights, inputs, all or transfers "
           "(weights and dist.transfer arguments)">,
    ListOption<"fused", "fused", "std::string",
           "Fused backward ops to write, where the target has their kernels "
           "(comma-separated; all: every kind): attention (nn.attention_grad "
           "instead of matmuls and a softmax backward), gelu (nn.gelu_grad "
           "instead of the derivative's elementwise ops), normalization "
           "(nn.normalization_grad and nn.normalization_scale_grad instead of "
           "the layer and RMS norms' reductions and elementwise ops), "
           "cross-entropy (nn.softmax_cross_entropy_grad instead of the "
           "softmax's and the one-hot's elementwise ops)">,
  ];
  let dependentDialects = ["::shardflow::nn::NNDialect"];
}

def NNOptimizer : Pass<"nn-optimizer", "::mlir::ModuleOp"> {
  let summary = "Turn @main with a loss and its gradients into one training step";
  let description = [{
    Takes `@main` as `nn-differentiate` leaves it (a scalar result named by
    `loss`, one `grad:<name>` result per initializer) and makes it one step
    of training, with PyTorch's semantics:

    - `optimizer=sgd`: torch.optim.SGD (`momentum`, `nesterov`, weight
      decay coupled as L2: g + wd·w); `optimizer=adamw`: torch.optim.AdamW
      (decoupled decay w·(1 - lr·wd), bias-corrected moments, `eps` added
      outside the square root).
    - `clip-grad-norm` > 0: every gradient times min(1, c / (norm + 1e-6)),
      norm the 2-norm of all gradients together, as
      torch.nn.utils.clip_grad_norm_.
    - The learning rate of 1-based step t: lr·t/W while t ≤ W
      (`warmup-steps`), then `schedule` constant (lr), linear
      (lr·max(0, T-t)/(T-W)) or cosine (min-lr + ½(lr - min-lr)(1 +
      cos(π·min(1, (t-W)/(T-W))))), T = `total-steps`.
    - `no-decay`: initializer name globs that get no weight decay.
    - `freeze`, `trainable`: globs of initializers that do not train, or
      the only ones that do; a glob that matches no initializer with a
      gradient is an error (a typo would otherwise train everything).

    - `tie`: `COPY=SOURCE` (or `COPY=SOURCE^T`, the copy holding the
      source transposed; inferred when the 2-D shapes are swapped): one
      parameter written twice. The copy's gradient is added to the
      source's, the source trains, and the copy's new value is the
      source's (transposed): PyTorch's tied parameter.

    The module gets `nn.training`: the trained, frozen and held (no
    gradient by construction) initializers with their element counts, and
    the tied copies, for `shard-opt --report`.

    What trains: every initializer with a gradient that depends on the loss
    (a gradient that is zero by construction, one held constant such as a
    rotary table, gets no update, as a PyTorch parameter whose grad is
    None). An initializer embedded as an `nn.constant` becomes an
    `nn.weight` (storage `protobuf`): state, not a constant.

    A result marked `nn.running_statistic = "NAME"` (training-mode
    BatchNormalization's running mean or variance, which the importer
    returns under --train) becomes initializer NAME's new state. It is a
    buffer, as PyTorch's: held (never trained), even where another node
    reads it on the way to the loss. An initializer two such results
    update stays as it is, with a warning.

    A step whose loss or gradient norm is not finite (NaN, infinite)
    leaves the weights and the moments as they were: every new value is
    `where(finite, new, old)`; only the step counter advances (the
    runtime stops there, or skips the step with --skip-nonfinite).

    The state is persistent: weights are read by `nn.weight`, the
    optimizer's moments (`<name>.exp_avg`, `<name>.exp_avg_sq`,
    `<name>.momentum_buffer`) and the step counter (`optimizer.step`, f32
    as PyTorch keeps it) by `nn.weight`s of storage `zeros`. The new value
    of each is a result of `@main` carrying `nn.state = "<name>"`. The
    step's other results are `loss`, `grad_norm` (before clipping) and
    `lr`; the model's outputs and gradients are dropped.

    With `grad-norm-squared`, the norm is the square root of that argument
    instead (a pipeline stage updates its own parameters, but clips them by
    the norm over every stage's gradients).

    With `fused-updates`, AdamW's update of each parameter is one
    `nn.adamw_update` (its arithmetic in the same order, and the
    `where(finite, ...)` inside it): one pass over the parameter, its
    gradient and its moments instead of about twenty. The CPU pipeline
    asks for it; the CUDA target's generated code fuses the elementwise
    chain itself.
  }];
  let options = [
    Option<"loss", "loss", "std::string", /*default=*/"\"loss\"",
           "The nn.name of the scalar loss result">,
    Option<"optimizer", "optimizer", "std::string", /*default=*/"\"adamw\"",
           "sgd or adamw">,
    Option<"lr", "lr", "double", /*default=*/"1e-3", "Learning rate">,
    Option<"momentum", "momentum", "double", /*default=*/"0", "sgd: momentum">,
    Option<"nesterov", "nesterov", "bool", /*default=*/"false", "sgd: Nesterov momentum">,
    Option<"weightDecay", "weight-decay", "double", /*default=*/"-1",
           "Weight decay (default: 0 for sgd, 1e-2 for adamw)">,
    Option<"beta1", "beta1", "double", /*default=*/"0.9", "adamw: beta1">,
    Option<"beta2", "beta2", "double", /*default=*/"0.999", "adamw: beta2">,
    Option<"eps", "eps", "double", /*default=*/"1e-8", "adamw: epsilon">,
    Option<"clipGradNorm", "clip-grad-norm", "double", /*default=*/"0",
           "Clip the gradients' global 2-norm to this (0: no clipping)">,
    Option<"warmupSteps", "warmup-steps", "int64_t", /*default=*/"0",
           "Linear warmup steps">,
    Option<"schedule", "schedule", "std::string", /*default=*/"\"constant\"",
           "After warmup: constant, linear or cosine">,
    Option<"totalSteps", "total-steps", "int64_t", /*default=*/"0",
           "linear and cosine: the step the schedule ends at">,
    Option<"minLr", "min-lr", "double", /*default=*/"0", "cosine: the final learning rate">,
    ListOption<"noDecay", "no-decay", "std::string",
               "Initializer name globs without weight decay">,
    ListOption<"freeze", "freeze", "std::string",
               "Initializer name globs that do not train">,
    ListOption<"trainable", "trainable", "std::string",
               "Initializer name globs: only these train (default: all)">,
    ListOption<"tie", "tie", "std::string",
               "COPY=SOURCE or COPY=SOURCE^T: initializers that are one parameter">,
    Option<"fusedUpdates", "fused-updates", "bool", /*default=*/"false",
           "adamw: one nn.adamw_update per parameter instead of elementwise ops "
           "(the CPU target's form)">,
    Option<"gradNormSquared", "grad-norm-squared", "std::string", /*default=*/"\"\"",
           "The nn.name of an f32 scalar argument of @main holding the squared "
           "2-norm of every gradient of the model, for clipping and grad_norm "
           "(a pipeline stage's update: the stages' sums added), instead of the "
           "norm of the gradients @main has">,
  ];
  let dependentDialects = ["::shardflow::nn::NNDialect"];
}

#endif // SHARDFLOW_DIALECT_NN_TRANSFORMS_PASSES_TD
