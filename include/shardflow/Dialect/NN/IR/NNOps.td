//===- NNOps.td - nn dialect operations --------------------*- tablegen -*-===//
//
// One op per supported ONNX operator. Semantics follow the ONNX operator
// specification (opsets 13 to 23); where ONNX takes a constant input that
// decides a shape (axes, sizes, bounds), the op takes an attribute instead.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDFLOW_DIALECT_NN_NNOPS_TD
#define SHARDFLOW_DIALECT_NN_NNOPS_TD

include "shardflow/Dialect/NN/IR/NNBase.td"

//===----------------------------------------------------------------------===//
// Sources: constants and weights
//===----------------------------------------------------------------------===//

def NN_ConstantOp : NN_Op<"constant", [ConstantLike, NN_MadeFromAttributes,
                                        AllTypesMatch<["value", "result"]>]> {
  let summary = "A small constant tensor held in the IR (ONNX Constant)";
  let description = [{
    Shape tensors, scalars and small initializers. Larger initializers are
    `nn.weight` ops and never held in the IR.
  }];
  let arguments = (ins ElementsAttr:$value);
  let results = (outs NN_Tensor:$result);
  let assemblyFormat = "attr-dict $value";
  let hasFolder = 1;
  let builders = [OpBuilder<(ins "::mlir::ElementsAttr":$value), [{
    build($_builder, $_state, value.getType(), value);
  }]>];
}

def NN_WeightOp : NN_Op<"weight"> {
  let summary = "A named model weight whose bytes live outside the IR";
  let description = [{
    Refers to an ONNX initializer by name, type and location. `storage` says
    where the bytes are:
    - `external`: ONNX external data, `file` (relative to the model's folder)
      holds `size` bytes at `offset`, little-endian.
    - `embedded`: raw little-endian bytes inside the model file itself at
      `offset`.
    - `protobuf`: in the model, but not byte-addressable (varint-encoded
      fields, or a model read from ONNX text); the runtime converts it once.
    - `zeros`: no bytes: training state that starts at zero (an
      optimizer's moments, its step counter), written by `nn-optimizer`.

    ```mlir
    %w = nn.weight "h.0.mlp.fc.weight" {storage = "external", file = "gpt.data",
                                         offset = 4096 : i64, size = 65536 : i64}
                                        : tensor<128x128xf32>
    ```

    In a partitioned (per-rank) program a sharded weight's type is this
    rank's slice: `global_shape` is the whole tensor's shape and `starts`
    holds, for each rank in order, the index where its slice begins.

    With `stored_shape` the weight is the tensor of that shape in the file,
    zero-padded at the end of some dimensions to its type (a vocabulary
    padded to a multiple of the tensor-parallel size); `size` counts the
    stored bytes. Partitioned, `global_shape` is then `stored_shape` and a
    slice may extend past it: what lies past reads as zeros.
  }];
  let arguments = (ins StrAttr:$name,
                       StrAttr:$storage,
                       OptionalAttr<StrAttr>:$file,
                       OptionalAttr<I64Attr>:$offset,
                       OptionalAttr<I64Attr>:$size,
                       OptionalAttr<DenseI64ArrayAttr>:$global_shape,
                       OptionalAttr<TypedArrayAttrBase<DenseI64ArrayAttr,
                                                       "list of rank lists">>:$starts,
                       OptionalAttr<DenseI64ArrayAttr>:$stored_shape);
  let results = (outs NN_Tensor:$result);
  let assemblyFormat = "$name attr-dict `:` type($result)";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Elementwise
//===----------------------------------------------------------------------===//

def NN_AddOp : NN_BinaryOp<"add", "Add", [Commutative, NN_Additive]>;
def NN_SubOp : NN_BinaryOp<"sub", "Sub", [NN_Additive]>;
def NN_MulOp : NN_BinaryOp<"mul", "Mul", [Commutative, NN_LinearInEachOperand]>;
def NN_DivOp : NN_BinaryOp<"div", "Div", [NN_LinearInFirstOperand]> {
  let description = [{ Integer division truncates toward zero, as in ONNX. }];
}
def NN_PowOp : NN_BinaryOp<"pow", "Pow"> {
  let description = [{ The result has the element type of `lhs` (the base). }];
}
def NN_MinOp : NN_BinaryOp<"min", "Min", [Commutative]> {
  let description = [{ ONNX's variadic Min is imported as a chain of these. }];
}
def NN_MaxOp : NN_BinaryOp<"max", "Max", [Commutative]> {
  let description = [{ ONNX's variadic Max is imported as a chain of these. }];
}
def NN_ModOp : NN_BinaryOp<"mod", "Mod"> {
  let description = [{
    The remainder of `lhs` divided by `rhs`. With `fmod` it has the sign of
    the dividend (C's fmod; floats must use it, as ONNX requires); without,
    the sign of the divisor (Python's %, integers only). An integer modulo
    by zero is an error.
  }];
  let arguments = (ins NN_NumericTensor:$lhs, NN_NumericTensor:$rhs,
                       DefaultValuedAttr<BoolAttr, "false">:$fmod);
}
def NN_EqualOp : NN_CompareOp<"equal", "Equal">;
def NN_LessOp : NN_CompareOp<"less", "Less">;
def NN_GreaterOp : NN_CompareOp<"greater", "Greater">;

def NN_AndOp : NN_InferredOp<"and", [Commutative, NN_Elementwise]> {
  let summary = "ONNX And: logical and with broadcasting";
  let arguments = (ins NN_BoolTensor:$lhs, NN_BoolTensor:$rhs);
  let results = (outs NN_BoolTensor:$result);
}

def NN_WhereOp : NN_InferredOp<"where", [NN_Elementwise]> {
  let summary = "ONNX Where: select with three-way broadcasting";
  let arguments = (ins NN_BoolTensor:$condition, NN_Tensor:$x, NN_Tensor:$y);
  let results = (outs NN_Tensor:$result);
}

def NN_SqrtOp : NN_UnaryOp<"sqrt", "Sqrt">;
def NN_ExpOp : NN_UnaryOp<"exp", "Exp">;
def NN_LogOp : NN_UnaryOp<"log", "Log">;
def NN_TanhOp : NN_UnaryOp<"tanh", "Tanh">;
def NN_SigmoidOp : NN_UnaryOp<"sigmoid", "Sigmoid">;
def NN_ErfOp : NN_UnaryOp<"erf", "Erf">;
def NN_CosOp : NN_UnaryOp<"cos", "Cos">;
def NN_SinOp : NN_UnaryOp<"sin", "Sin">;
def NN_FloorOp : NN_UnaryOp<"floor", "Floor">;
def NN_CeilOp : NN_UnaryOp<"ceil", "Ceil">;
def NN_RoundOp : NN_UnaryOp<"round", "Round"> {
  let description = [{ Halves round to the nearest even integer, as in ONNX. }];
}
def NN_ReciprocalOp : NN_UnaryOp<"reciprocal", "Reciprocal">;
def NN_ReluOp : NN_UnaryOp<"relu", "Relu", NN_NumericTensor>;
def NN_NegOp : NN_UnaryOp<"neg", "Neg", NN_NumericTensor, [NN_LinearInFirstOperand]>;
def NN_AbsOp : NN_UnaryOp<"abs", "Abs", NN_NumericTensor>;
def NN_NotOp : NN_UnaryOp<"not", "Not", NN_BoolTensor>;
def NN_IdentityOp : NN_UnaryOp<"identity", "Identity", NN_Tensor,
                               [NN_ViewLike, NN_LinearInFirstOperand]> {
  let hasFolder = 1;
}

def NN_LeakyReluOp : NN_UnaryOp<"leaky_relu", "LeakyRelu"> {
  let arguments = (ins NN_FloatTensor:$input,
                       DefaultValuedAttr<F32Attr, "0.01f">:$alpha);
}

def NN_GeluOp : NN_UnaryOp<"gelu", "Gelu (opset 20)"> {
  let description = [{
    `approximate = "none"`: x * Phi(x) with the exact normal CDF;
    `approximate = "tanh"`: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
  }];
  let arguments = (ins NN_FloatTensor:$input,
                       DefaultValuedAttr<StrAttr, "\"none\"">:$approximate);
  let hasVerifier = 1;
}

def NN_GeluGradOp : NN_InferredOp<"gelu_grad", [NN_Elementwise]> {
  let summary = "The cotangent of nn.gelu's input, fused";
  let description = [{
    `result_grad * gelu'(input)`, with `approximate` as the forward had it:
    Phi(x) + x phi(x) for "none"; for "tanh", with t = tanh(u),
    u = sqrt(2/pi) (x + 0.044715 x^3): 0.5 (1 + t) + 0.5 x (1 - t^2)
    sqrt(2/pi) (1 + 3 * 0.044715 x^2). One pass over the input and the
    cotangent (the composed form is about fifteen); nn-differentiate
    writes it for the CPU target.
  }];
  let arguments = (ins NN_FloatTensor:$input, NN_FloatTensor:$result_grad,
                       DefaultValuedAttr<StrAttr, "\"none\"">:$approximate);
  let results = (outs NN_FloatTensor:$result);
}

def NN_ClipOp : NN_UnaryOp<"clip", "Clip", NN_NumericTensor> {
  let description = [{
    min(max(x, `min`), `max`): an absent bound does not clamp, and when
    `min` > `max` every value becomes `max`, as ONNX specifies. ONNX passes
    the bounds as inputs; the importer requires them to be constants.
  }];
  let arguments = (ins NN_NumericTensor:$input, OptionalAttr<F64Attr>:$min,
                       OptionalAttr<F64Attr>:$max);
}

def NN_DropoutOp : NN_UnaryOp<"dropout", "Dropout (inference)", NN_FloatTensor,
                              [NN_ViewLike, NN_LinearInFirstOperand]> {
  let description = [{
    Inference-mode dropout: the identity on values. Kept as an op so that
    sequence-parallel strategies can find the dropout regions; `ratio` is
    recorded for training.
  }];
  let arguments = (ins NN_FloatTensor:$input,
                       DefaultValuedAttr<F32Attr, "0.5f">:$ratio);
}

def NN_TrainingDropoutOp : NN_InferredOp<"training_dropout", [NN_Random]> {
  let summary = "Dropout in training mode: a seeded random mask";
  let description = [{
    `mask` holds `u >= ratio` for uniform draws `u` in [0, 1) and `result` is
    `input * mask / (1 - ratio)`. The draws are those of numpy's legacy
    `np.random.seed(seed); np.random.uniform(0, 1, shape)` (MT19937, 53-bit
    doubles, row-major order), the generator ONNX's reference uses, so a
    program is reproducible and checkable against it. `ratio` is in [0, 1).
  }];
  let arguments = (ins NN_FloatTensor:$input, F32Attr:$ratio, I64Attr:$seed);
  let results = (outs NN_FloatTensor:$result, NN_BoolTensor:$mask);
}

def NN_KeyedDropoutOp : NN_InferredOp<"keyed_dropout", [NN_Random]> {
  let summary = "Training dropout whose mask is keyed by (seed, step, node, element)";
  let description = [{
    `input * keep / (1 - ratio)`, where element e (its index in the
    row-major order of the whole tensor, `global_shape`, whatever part of it
    this rank holds) is kept when the uniform draw u(seed, step, node, e)
    in [0, 1) is at least `ratio`. The draw is word e mod 4 of Philox4x32-10
    (Salmon et al., SC'11) with key (seed's low and high 32 bits) and counter
    (floor(e / 4)'s low and high 32 bits, step, dropout_id), its top 24 bits
    over 2^24. `step` is an f32 scalar (the training step, 1-based);
    `dropout_id` numbers the model's Dropout nodes. Every mesh, micro-batching and
    thread count draws the same mask, a new one each step. `starts` holds,
    rank after rank, where its block of `global_shape` begins (one start
    per dim; dist-partition's localization; absent: the whole tensor). The op is linear in `input`,
    and its backward is the same op on the cotangent.
  }];
  let arguments = (ins NN_FloatTensor:$input, NN_FloatTensor:$step, F32Attr:$ratio,
                       I64Attr:$seed, I64Attr:$dropout_id,
                       OptionalAttr<DenseI64ArrayAttr>:$global_shape,
                       OptionalAttr<DenseI64ArrayAttr>:$starts);
  let results = (outs NN_FloatTensor:$result);
}

def NN_CastOp : NN_InferredOp<"cast", [NN_Elementwise]> {
  let summary = "ONNX Cast: convert the element type";
  let arguments = (ins NN_Tensor:$input, TypeAttr:$to);
  let results = (outs NN_Tensor:$result);
  let hasFolder = 1;
}

//===----------------------------------------------------------------------===//
// Normalizations and softmax
//===----------------------------------------------------------------------===//

def NN_SoftmaxOp : NN_InferredOp<"softmax", [NN_KeepsColumnsApart]> {
  let summary = "ONNX Softmax (opset 13): normalize along one axis";
  let arguments = (ins NN_FloatTensor:$input, DefaultValuedAttr<I64Attr, "-1">:$axis);
  let results = (outs NN_FloatTensor:$result);
}

def NN_LogSoftmaxOp : NN_InferredOp<"log_softmax"> {
  let summary = "ONNX LogSoftmax (opset 13): log of softmax along one axis";
  let arguments = (ins NN_FloatTensor:$input, DefaultValuedAttr<I64Attr, "-1">:$axis);
  let results = (outs NN_FloatTensor:$result);
}

def NN_SoftmaxCrossEntropyOp : NN_InferredOp<"softmax_cross_entropy"> {
  let summary = "Softmax cross-entropy of rows, given their log-sum-exp";
  let description = [{
    Per row of `logits` [..., C]: `lse - logits[label]` where the row's
    label (`labels` [...]) is not `ignore_index`, else 0; the label's
    column is the one whose entry of `classes` [C] equals it (none: the
    term is `lse` alone).

    `lse` [..., 1] must be the row's log-sum-exp of `logits`: it is an
    operand so that the classes can be split over a mesh, its max and sum
    of exponentials reduced across the pieces, and `classes` (the global
    class ids) says which columns a piece holds. The gradient rule treats
    it as the function of `logits` it is: the cotangent of `logits` is
    (softmax - onehot(label)) * result_grad on the counted rows
    (`nn.softmax_cross_entropy_grad`), and none flows to `lse`.

    nn-append-loss writes it; nn-differentiate expands it to its composed
    form once the backward is built. It has no kernel of its own.
  }];
  let arguments = (ins NN_FloatTensor:$logits, NN_FloatTensor:$lse, NN_I64Tensor:$labels,
                       NN_I64Tensor:$classes, DefaultValuedAttr<I64Attr, "-100">:$ignore_index);
  let results = (outs NN_FloatTensor:$result);
}

def NN_SoftmaxCrossEntropyGradOp : NN_InferredOp<"softmax_cross_entropy_grad"> {
  let summary = "The cotangent of nn.softmax_cross_entropy's logits, fused";
  let description = [{
    (exp(logits - lse) - [label == classes[c]]) * result_grad where the
    row's label is not `ignore_index`, else 0: `logits` [..., C], `lse`,
    `labels` and `result_grad` [..., 1], `classes` [C]. One pass over the
    logits, which may be split along the classes (each piece with its
    slice of `classes`); the composed backward is seven elementwise and
    reduction ops over them. nn-differentiate writes it where the target
    has its kernel.
  }];
  let arguments = (ins NN_FloatTensor:$logits, NN_FloatTensor:$lse, NN_I64Tensor:$labels,
                       NN_I64Tensor:$classes, NN_FloatTensor:$result_grad,
                       DefaultValuedAttr<I64Attr, "-100">:$ignore_index);
  let results = (outs NN_FloatTensor:$logits_grad);
}

def NN_BatchNormalizationOp : NN_InferredOp<"batch_normalization"> {
  let summary = "ONNX BatchNormalization in inference mode";
  let description = [{
    y = scale * (x - mean) / sqrt(var + epsilon) + bias, per channel (dim 1).
  }];
  let arguments = (ins NN_FloatTensor:$input, NN_FloatTensor:$scale,
                       NN_FloatTensor:$bias, NN_FloatTensor:$mean,
                       NN_FloatTensor:$variance,
                       DefaultValuedAttr<F32Attr, "1e-5f">:$epsilon);
  let results = (outs NN_FloatTensor:$result);
}

def NN_LayerNormalizationOp : NN_InferredOp<"layer_normalization"> {
  let summary = "ONNX LayerNormalization (opset 17)";
  let description = [{
    Normalizes over dimensions [axis, rank): (x - mean) / sqrt(var + eps),
    then multiplies by `scale` and adds `bias` (optional), both
    unidirectionally broadcast to the normalized shape.
  }];
  let arguments = (ins NN_FloatTensor:$input, NN_FloatTensor:$scale,
                       Optional<NN_FloatTensor>:$bias,
                       DefaultValuedAttr<I64Attr, "-1">:$axis,
                       DefaultValuedAttr<F32Attr, "1e-5f">:$epsilon);
  let results = (outs NN_FloatTensor:$result);
}

def NN_RMSNormalizationOp : NN_InferredOp<"rms_normalization"> {
  let summary = "ONNX RMSNormalization (opset 23)";
  let description = [{
    x / sqrt(mean(x^2 over [axis, rank)) + eps) * scale; `scale` is
    unidirectionally broadcast to the normalized shape.
  }];
  let arguments = (ins NN_FloatTensor:$input, NN_FloatTensor:$scale,
                       DefaultValuedAttr<I64Attr, "-1">:$axis,
                       DefaultValuedAttr<F32Attr, "1e-5f">:$epsilon);
  let results = (outs NN_FloatTensor:$result);
}

def NN_NormalizationGradOp : NN_InferredOp<"normalization_grad"> {
  let summary = "The cotangent of a layer or RMS normalization's input, fused";
  let description = [{
    Given the cotangent `result_grad` of an `nn.layer_normalization` (or,
    with `rms`, an `nn.rms_normalization`) of `input` over [axis, rank)
    with `scale` and `epsilon`, the cotangent of its input: per row, with
    xhat the normalized input, r = 1/sqrt(var + eps) and g = result_grad *
    scale, r (g - mean(g) - xhat mean(g xhat)) (RMS: without mean(g)).
    The statistics are recomputed from the input, one pass per row instead
    of the composed form's dozen ops. The weights' part is
    `nn.normalization_scale_grad` (and a sum for the bias), kept apart so
    that a schedule can run it later. nn-differentiate writes it where the
    target has its kernel.
  }];
  let arguments = (ins NN_FloatTensor:$input, NN_FloatTensor:$scale,
                       NN_FloatTensor:$result_grad,
                       DefaultValuedAttr<I64Attr, "-1">:$axis,
                       DefaultValuedAttr<F32Attr, "1e-5f">:$epsilon,
                       DefaultValuedAttr<BoolAttr, "false">:$rms);
  let results = (outs NN_FloatTensor:$input_grad);
}

def NN_NormalizationScaleGradOp : NN_InferredOp<"normalization_scale_grad"> {
  let summary = "The cotangent of a layer or RMS normalization's scale, fused";
  let description = [{
    sum over the rows of result_grad * xhat, shaped like the normalized
    dimensions [axis, rank) of `input` (a scale broadcast to them sums it
    further), with xhat recomputed from `input` as in
    `nn.normalization_grad`. The rows are partial sums: split over a mesh
    axis, the results add up.
  }];
  let arguments = (ins NN_FloatTensor:$input, NN_FloatTensor:$result_grad,
                       DefaultValuedAttr<I64Attr, "-1">:$axis,
                       DefaultValuedAttr<F32Attr, "1e-5f">:$epsilon,
                       DefaultValuedAttr<BoolAttr, "false">:$rms);
  let results = (outs NN_FloatTensor:$scale_grad);
}

//===----------------------------------------------------------------------===//
// Contractions
//===----------------------------------------------------------------------===//

def NN_MatMulOp : NN_InferredOp<"matmul", [NN_KeepsColumnsApart]> {
  let summary = "ONNX MatMul: numpy matmul with batch broadcasting";
  let description = [{
    1-D operands are promoted (a leading or trailing 1 is added) and the
    added dimension removed from the result; batch dimensions broadcast.
  }];
  let arguments = (ins NN_NumericTensor:$lhs, NN_NumericTensor:$rhs);
  let results = (outs NN_NumericTensor:$result);
}

def NN_GemmOp : NN_InferredOp<"gemm"> {
  let summary = "ONNX Gemm: alpha * op(A) * op(B) + beta * C";
  let description = [{
    A and B are 2-D, transposed first when `trans_a`/`trans_b`; C is
    optional and unidirectionally broadcast to [M, N].
  }];
  let arguments = (ins NN_FloatTensor:$a, NN_FloatTensor:$b,
                       Optional<NN_FloatTensor>:$c,
                       DefaultValuedAttr<F32Attr, "1.0f">:$alpha,
                       DefaultValuedAttr<F32Attr, "1.0f">:$beta,
                       DefaultValuedAttr<BoolAttr, "false">:$trans_a,
                       DefaultValuedAttr<BoolAttr, "false">:$trans_b);
  let results = (outs NN_FloatTensor:$result);
}

def NN_EinsumOp : NN_InferredOp<"einsum"> {
  let summary = "ONNX Einsum";
  let description = [{
    The equation uses lowercase or uppercase letters, an optional `...` for
    broadcast dimensions, and an explicit (`->`) or implicit output.
  }];
  let arguments = (ins Variadic<NN_NumericTensor>:$inputs, StrAttr:$equation);
  let results = (outs NN_NumericTensor:$result);
}

def NN_ConvOp : NN_InferredOp<"conv"> {
  let summary = "ONNX Conv, 1-D to 3-D, with groups";
  let description = [{
    `input` is [N, C, spatial...], `weight` is [M, C/group, kernel...],
    `bias` is [M]. `pads` holds the begin pads then the end pads (ONNX
    order); the importer resolves `auto_pad` into explicit pads.
  }];
  let arguments = (ins NN_FloatTensor:$input, NN_FloatTensor:$weight,
                       Optional<NN_FloatTensor>:$bias,
                       DenseI64ArrayAttr:$strides, DenseI64ArrayAttr:$pads,
                       DenseI64ArrayAttr:$dilations,
                       DefaultValuedAttr<I64Attr, "1">:$group);
  let results = (outs NN_FloatTensor:$result);
}

def NN_AttentionOp : NN_InferredOp<"attention", [NN_KeepsColumnsApart]> {
  let summary = "ONNX Attention (opset 23): scaled dot-product attention";
  let description = [{
    softmax(scale * Q K^T + bias) V per head, where the bias combines the
    optional `mask` (i1: keep where true; float: added) and, with
    `is_causal`, a lower-triangular mask. Q is [B, Hq, Sq, D] and K, V are
    [B, Hkv, Skv, D] / [B, Hkv, Skv, Dv] with Hq a multiple of Hkv
    (grouped-query attention); or all three are 3-D [B, S, H*D] with
    `q_num_heads` and `kv_num_heads` set. `scale` defaults to 1/sqrt(D);
    `softcap` > 0 applies softcap * tanh(scores / softcap) before the mask.
    A fully masked row yields zeros. With `save_lse` (set by
    nn-differentiate for the fused backward) a second result holds each
    query row's log-sum-exp over its visible scores, [B, Hq, Sq] (f64 for
    f64 operands, else f32; -inf for a fully masked row), which
    nn.attention_grad reads instead of recomputing it.
  }];
  let arguments = (ins NN_FloatTensor:$query, NN_FloatTensor:$key,
                       NN_FloatTensor:$value, Optional<NN_Tensor>:$mask,
                       DefaultValuedAttr<BoolAttr, "false">:$is_causal,
                       DefaultValuedAttr<I64Attr, "0">:$q_num_heads,
                       DefaultValuedAttr<I64Attr, "0">:$kv_num_heads,
                       OptionalAttr<F32Attr>:$scale,
                       DefaultValuedAttr<F32Attr, "0.0f">:$softcap,
                       DefaultValuedAttr<BoolAttr, "false">:$save_lse);
  let results = (outs NN_FloatTensor:$result, Optional<NN_FloatTensor>:$lse);
}

def NN_AttentionGradOp : NN_InferredOp<"attention_grad", [NN_KeepsColumnsApart]> {
  let summary = "The cotangents of nn.attention's query, key and value, fused";
  let description = [{
    Given the cotangent `result_grad` of an `nn.attention` with these
    operands and attributes, and that attention's saved log-sum-exp `lse`
    (its second result with `save_lse`), the cotangents of its query, key
    and value (shaped like them; grouped-query heads summed onto their
    key/value head). The probabilities are recomputed from the saved
    log-sum-exp, P = exp(S - lse), a block of query rows at a time (never
    the whole [Sq, Skv] matrix): dP = dY V^T, D = rowsum(P * dP),
    dS = P * (dP - D) (times 1 - tanh^2 under a softcap, and the scale),
    dQ = dS K, dK = dS^T Q, dV = P^T dY. D is taken from the same P, not
    as rowsum(dY * Y): each row's dS then sums to zero up to rounding, which
    keeps exactly-cancelling gradients (a key bias's) at rounding level. A
    mask (boolean or float) is read, not differentiated: a trained float
    mask keeps the composed backward. nn-differentiate writes it.
  }];
  let arguments = (ins NN_FloatTensor:$query, NN_FloatTensor:$key,
                       NN_FloatTensor:$value, NN_FloatTensor:$result_grad,
                       NN_FloatTensor:$lse,
                       Optional<NN_Tensor>:$mask,
                       DefaultValuedAttr<BoolAttr, "false">:$is_causal,
                       DefaultValuedAttr<I64Attr, "0">:$q_num_heads,
                       DefaultValuedAttr<I64Attr, "0">:$kv_num_heads,
                       OptionalAttr<F32Attr>:$scale,
                       DefaultValuedAttr<F32Attr, "0.0f">:$softcap);
  let results = (outs NN_FloatTensor:$query_grad, NN_FloatTensor:$key_grad,
                      NN_FloatTensor:$value_grad);
}

def NN_RotaryEmbeddingOp : NN_InferredOp<"rotary_embedding", [NN_KeepsColumnsApart]> {
  let summary = "ONNX RotaryEmbedding (opset 23)";
  let description = [{
    Rotates the first `rotary_embedding_dim` (0: all) features of each head
    of `input` ([B, H, S, D], or [B, S, H*D] with `num_heads`) by the angles
    in `cos_cache`/`sin_cache`, gathered by `position_ids` [B, S] when
    given (caches [P, R/2]) or used as is (caches [B, S, R/2]). Halves are
    rotated, or pairs when `interleaved`.
  }];
  let arguments = (ins NN_FloatTensor:$input, NN_FloatTensor:$cos_cache,
                       NN_FloatTensor:$sin_cache, Optional<NN_IndexTensor>:$position_ids,
                       DefaultValuedAttr<BoolAttr, "false">:$interleaved,
                       DefaultValuedAttr<I64Attr, "0">:$num_heads,
                       DefaultValuedAttr<I64Attr, "0">:$rotary_embedding_dim);
  let results = (outs NN_FloatTensor:$result);
}

def NN_RotateHalfOp : NN_InferredOp<"rotate_half", [NN_KeepsColumnsApart]> {
  let summary = "The rotation partner of rotary embeddings: [-x2, x1]";
  let description = [{
    Splits the last dimension (of even size 2h) into halves x1 = x[..., :h]
    and x2 = x[..., h:] and returns their concatenation [-x2, x1], the
    `rotate_half` of GPT-NeoX, Llama and most rotary embeddings written
    out by exporters (x * cos + rotate_half(x) * sin), which
    `nn-raise-rotate-half` finds as two slices, a negation and a concat.
    Every element is one element of the input, negated or not: generated
    code reads it where it lies, with no copy of the halves.
  }];
  let arguments = (ins NN_FloatTensor:$input);
  let results = (outs NN_FloatTensor:$result);
}

//===----------------------------------------------------------------------===//
// Pooling
//===----------------------------------------------------------------------===//

def NN_MaxPoolOp : NN_InferredOp<"max_pool"> {
  let summary = "ONNX MaxPool, 1-D to 3-D";
  let arguments = (ins NN_NumericTensor:$input, DenseI64ArrayAttr:$kernel_shape,
                       DenseI64ArrayAttr:$strides, DenseI64ArrayAttr:$pads,
                       DenseI64ArrayAttr:$dilations,
                       DefaultValuedAttr<BoolAttr, "false">:$ceil_mode);
  let results = (outs NN_NumericTensor:$result);
}

def NN_MaxPoolWithIndicesOp : NN_InferredOp<"max_pool_with_indices"> {
  let summary = "ONNX MaxPool with its Indices output, 1-D to 3-D";
  let description = [{
    As `nn.max_pool`, plus `indices`: for each output, the flat index into
    `input` of the first maximum in its window (batch and channel included,
    padding not counted). With `storage_order` 1 the spatial part of the
    index is column-major, as ONNX defines it.
  }];
  let arguments = (ins NN_NumericTensor:$input, DenseI64ArrayAttr:$kernel_shape,
                       DenseI64ArrayAttr:$strides, DenseI64ArrayAttr:$pads,
                       DenseI64ArrayAttr:$dilations,
                       DefaultValuedAttr<BoolAttr, "false">:$ceil_mode,
                       DefaultValuedAttr<I64Attr, "0">:$storage_order);
  let results = (outs NN_NumericTensor:$result, NN_I64Tensor:$indices);
}

def NN_AveragePoolOp : NN_InferredOp<"average_pool"> {
  let summary = "ONNX AveragePool, 1-D to 3-D";
  let arguments = (ins NN_FloatTensor:$input, DenseI64ArrayAttr:$kernel_shape,
                       DenseI64ArrayAttr:$strides, DenseI64ArrayAttr:$pads,
                       DenseI64ArrayAttr:$dilations,
                       DefaultValuedAttr<BoolAttr, "false">:$ceil_mode,
                       DefaultValuedAttr<BoolAttr, "false">:$count_include_pad);
  let results = (outs NN_FloatTensor:$result);
}

def NN_GlobalAveragePoolOp : NN_InferredOp<"global_average_pool"> {
  let summary = "ONNX GlobalAveragePool: mean over all spatial dimensions";
  let arguments = (ins NN_FloatTensor:$input);
  let results = (outs NN_FloatTensor:$result);
}

//===----------------------------------------------------------------------===//
// Reductions and scans
//===----------------------------------------------------------------------===//

def NN_ReduceMeanOp : NN_ReduceOp<"reduce_mean", "ReduceMean">;
def NN_ReduceSumOp : NN_ReduceOp<"reduce_sum", "ReduceSum">;
def NN_ReduceMaxOp : NN_ReduceOp<"reduce_max", "ReduceMax">;
def NN_ReduceMinOp : NN_ReduceOp<"reduce_min", "ReduceMin">;
def NN_ReduceProdOp : NN_ReduceOp<"reduce_prod", "ReduceProd">;

class NN_ArgReduceOp<string mnemonic, string onnxName> : NN_InferredOp<mnemonic> {
  let summary = "ONNX " # onnxName # ": the index of the extreme element along an axis";
  let description = [{
    The i64 index along `axis` (non-negative after import) of the first
    extreme element, or of the last with `select_last_index`; NaN counts as
    more extreme than any number (the first NaN wins, as in numpy). With
    `keepdims` the axis stays as size 1.
  }];
  let arguments = (ins NN_NumericTensor:$input, I64Attr:$axis,
                       DefaultValuedAttr<BoolAttr, "true">:$keepdims,
                       DefaultValuedAttr<BoolAttr, "false">:$select_last_index);
  let results = (outs NN_I64Tensor:$result);
}
def NN_ArgMaxOp : NN_ArgReduceOp<"arg_max", "ArgMax">;
def NN_ArgMinOp : NN_ArgReduceOp<"arg_min", "ArgMin">;

def NN_CumSumOp : NN_InferredOp<"cumsum"> {
  let summary = "ONNX CumSum along a constant axis";
  let arguments = (ins NN_NumericTensor:$input, I64Attr:$axis,
                       DefaultValuedAttr<BoolAttr, "false">:$exclusive,
                       DefaultValuedAttr<BoolAttr, "false">:$reverse);
  let results = (outs NN_NumericTensor:$result);
}

def NN_TopKOp : NN_InferredOp<"topk"> {
  let summary = "ONNX TopK with a constant k";
  let arguments = (ins NN_NumericTensor:$input, I64Attr:$k,
                       DefaultValuedAttr<I64Attr, "-1">:$axis,
                       DefaultValuedAttr<BoolAttr, "true">:$largest,
                       DefaultValuedAttr<BoolAttr, "true">:$sorted);
  let results = (outs NN_NumericTensor:$values, NN_I64Tensor:$indices);
}

//===----------------------------------------------------------------------===//
// Shape and data movement
//===----------------------------------------------------------------------===//

def NN_ReshapeOp : NN_Op<"reshape", [NN_ViewLike, NN_LinearInFirstOperand, NN_KeepsColumnsApart]> {
  let summary = "ONNX Reshape to the static result type";
  let description = [{
    The importer resolves ONNX's 0 and -1 entries; the result type is the
    target shape and must hold the same number of elements.
  }];
  let arguments = (ins NN_Tensor:$input);
  let results = (outs NN_Tensor:$result);
  let hasVerifier = 1;
  let hasFolder = 1;
}

def NN_TransposeOp : NN_InferredOp<"transpose", [NN_LinearInFirstOperand, NN_KeepsColumnsApart]> {
  let summary = "ONNX Transpose: result dim i is input dim perm[i]";
  let arguments = (ins NN_Tensor:$input, DenseI64ArrayAttr:$perm);
  let results = (outs NN_Tensor:$result);
}

def NN_FlattenOp : NN_InferredOp<"flatten", [NN_ViewLike, NN_LinearInFirstOperand]> {
  let summary = "ONNX Flatten: to 2-D at `axis`";
  let arguments = (ins NN_Tensor:$input, DefaultValuedAttr<I64Attr, "1">:$axis);
  let results = (outs NN_Tensor:$result);
}

def NN_SqueezeOp : NN_InferredOp<"squeeze", [NN_ViewLike, NN_LinearInFirstOperand,
                                              NN_KeepsColumnsApart]> {
  let summary = "ONNX Squeeze of explicit size-1 axes";
  let arguments = (ins NN_Tensor:$input, DenseI64ArrayAttr:$axes);
  let results = (outs NN_Tensor:$result);
  let hasFolder = 1;
}

def NN_UnsqueezeOp : NN_InferredOp<"unsqueeze", [NN_ViewLike, NN_LinearInFirstOperand,
                                                  NN_KeepsColumnsApart]> {
  let summary = "ONNX Unsqueeze: insert size-1 axes (positions in the result)";
  let arguments = (ins NN_Tensor:$input, DenseI64ArrayAttr:$axes);
  let results = (outs NN_Tensor:$result);
  let hasFolder = 1;
}

def NN_ConcatOp : NN_InferredOp<"concat", [NN_KeepsColumnsApart]> {
  let summary = "ONNX Concat along `axis`";
  let arguments = (ins Variadic<NN_Tensor>:$inputs, I64Attr:$axis);
  let results = (outs NN_Tensor:$result);
}

def NN_SplitOp : NN_InferredOp<"split", [NN_KeepsColumnsApart]> {
  let summary = "ONNX Split along `axis` into pieces of the given sizes";
  let arguments = (ins NN_Tensor:$input, I64Attr:$axis, DenseI64ArrayAttr:$sizes);
  let results = (outs Variadic<NN_Tensor>:$results);
}

def NN_SliceOp : NN_InferredOp<"slice", [NN_KeepsColumnsApart]> {
  let summary = "ONNX Slice with constant bounds";
  let description = [{
    For each entry of `axes`: elements `starts[i]`, `starts[i] + steps[i]`,
    ... up to (excluding) `ends[i]`, with ONNX's rules for negative and
    out-of-range bounds. Axes not listed are taken whole.
  }];
  let arguments = (ins NN_Tensor:$input, DenseI64ArrayAttr:$starts,
                       DenseI64ArrayAttr:$ends, DenseI64ArrayAttr:$axes,
                       DenseI64ArrayAttr:$steps);
  let results = (outs NN_Tensor:$result);
}

def NN_PadOp : NN_InferredOp<"pad"> {
  let summary = "ONNX Pad with constant pads";
  let description = [{
    `pads` holds the begin pads of every dimension then the end pads;
    `mode` is `constant` (with `value`), `reflect`, `edge` or `wrap`.
  }];
  let arguments = (ins NN_NumericTensor:$input, DenseI64ArrayAttr:$pads,
                       DefaultValuedAttr<StrAttr, "\"constant\"">:$mode,
                       DefaultValuedAttr<F64Attr, "0.0">:$value);
  let results = (outs NN_NumericTensor:$result);
}

def NN_GatherOp : NN_InferredOp<"gather"> {
  let summary = "ONNX Gather: take slices along `axis` at `indices`";
  let description = [{
    Result shape: input.shape[:axis] + indices.shape + input.shape[axis+1:].
    Negative indices count from the end.

    With `axis_size` the indices address that many rows, normalized and
    checked against it rather than the input's axis: the input may have
    more rows (a vocabulary zero-padded to a multiple of the tensor-parallel
    size). In a partitioned program whose input is split along `axis` (a
    vocabulary-parallel embedding table), `axis_starts` lists, per rank,
    where that rank's block of the axis starts. Indices are then global and
    rows outside the rank's block read as zeros, so that the sum of the
    ranks' results (an all_reduce) is the gather of the whole table.
  }];
  let arguments = (ins NN_Tensor:$input, NN_IndexTensor:$indices,
                       DefaultValuedAttr<I64Attr, "0">:$axis,
                       OptionalAttr<I64Attr>:$axis_size,
                       OptionalAttr<DenseI64ArrayAttr>:$axis_starts);
  let results = (outs NN_Tensor:$result);
}

def NN_GatherElementsOp : NN_InferredOp<"gather_elements"> {
  let summary = "ONNX GatherElements: per-element gather along `axis`";
  let arguments = (ins NN_Tensor:$input, NN_IndexTensor:$indices,
                       DefaultValuedAttr<I64Attr, "0">:$axis);
  let results = (outs NN_Tensor:$result);
}

def NN_ScatterNDOp : NN_InferredOp<"scatter_nd"> {
  let summary = "ONNX ScatterND";
  let description = [{
    Copies `input` and writes `updates` at the index tuples in `indices`
    (last dimension), combining with `reduction` (none, add, mul, max, min).
  }];
  let arguments = (ins NN_Tensor:$input, NN_I64Tensor:$indices, NN_Tensor:$updates,
                       DefaultValuedAttr<StrAttr, "\"none\"">:$reduction);
  let results = (outs NN_Tensor:$result);
}

def NN_ExpandOp : NN_Op<"expand"> {
  let summary = "ONNX Expand: broadcast to the static result type";
  let description = [{
    The result shape is the broadcast of the input shape and ONNX's shape
    input; the verifier checks that the input broadcasts to it.
  }];
  let arguments = (ins NN_Tensor:$input);
  let results = (outs NN_Tensor:$result);
  let hasVerifier = 1;
}

def NN_TriluOp : NN_InferredOp<"trilu"> {
  let summary = "ONNX Trilu: keep the upper or lower triangle of the last two dims";
  let arguments = (ins NN_Tensor:$input, DefaultValuedAttr<BoolAttr, "true">:$upper,
                       DefaultValuedAttr<I64Attr, "0">:$k);
  let results = (outs NN_Tensor:$result);
}

def NN_RangeOp : NN_Op<"range", [NN_MadeFromAttributes]> {
  let summary = "ONNX Range with constant start, limit and delta";
  let description = [{
    start, start + delta, ... while below `limit` (above, for a negative
    delta); the result length is max(ceil((limit - start) / delta), 0).
  }];
  let arguments = (ins F64Attr:$start, F64Attr:$limit, F64Attr:$delta);
  let results = (outs NN_NumericTensor:$result);
  let assemblyFormat = "attr-dict `:` type($result)";
  let hasVerifier = 1;
}

def NN_ShapeOp : NN_InferredOp<"shape"> {
  let summary = "ONNX Shape: the input's dimensions [start, end) as i64";
  let description = [{ Always folds to a constant: shapes are static. }];
  let arguments = (ins NN_Tensor:$input, DefaultValuedAttr<I64Attr, "0">:$start,
                       OptionalAttr<I64Attr>:$end);
  let results = (outs NN_I64Tensor:$result);
  let hasFolder = 1;
}

def NN_ConstantOfShapeOp : NN_Op<"constant_of_shape", [NN_MadeFromAttributes]> {
  let summary = "ONNX ConstantOfShape: a tensor of the result type filled with `value`";
  let arguments = (ins TypedAttrInterface:$value);
  let results = (outs NN_Tensor:$result);
  let assemblyFormat = "$value attr-dict `:` type($result)";
  let hasVerifier = 1;
  let hasFolder = 1;
}

//===----------------------------------------------------------------------===//
// Training
//===----------------------------------------------------------------------===//

def NN_AdamWUpdateOp : NN_InferredOp<"adamw_update"> {
  let summary = "One AdamW step of one parameter, fused (torch.optim.AdamW)";
  let description = [{
    With g = grad * grad_scale (the clipping coefficient, 1 without
    clipping), lr and step (1-based) f32 scalars:

        param'      = param * (1 - lr * weight_decay)
        exp_avg'    = exp_avg * beta1 + g * (1 - beta1)
        exp_avg_sq' = exp_avg_sq * beta2 + g * g * (1 - beta2)
        param''     = param' - lr / (1 - beta1^step) * exp_avg' /
                      (sqrt(exp_avg_sq') / sqrt(1 - beta2^step) + eps)

    in f32, in that order (PyTorch's single-tensor implementation; the
    constants beta1, 1 - beta1, ... rounded to f32 from the f64
    attributes, as the elementwise form's constants are). Where
    the i1 scalar `finite` is false, the three results are the inputs
    unchanged (a step skipped for a non-finite loss or gradient). The
    CPU target's nn-optimizer writes this one op per parameter, one pass
    over its four tensors; the CUDA target's writes the chain of
    elementwise ops, which its generated code fuses.
  }];
  let arguments = (ins NN_FloatTensor:$param, NN_FloatTensor:$grad, NN_FloatTensor:$exp_avg,
                       NN_FloatTensor:$exp_avg_sq, NN_FloatTensor:$lr, NN_FloatTensor:$step,
                       NN_FloatTensor:$grad_scale, NN_BoolTensor:$finite, F64Attr:$beta1,
                       F64Attr:$beta2, F64Attr:$eps, F64Attr:$weight_decay);
  let results = (outs NN_FloatTensor:$new_param, NN_FloatTensor:$new_exp_avg,
                      NN_FloatTensor:$new_exp_avg_sq);
}

#endif // SHARDFLOW_DIALECT_NN_NNOPS_TD
