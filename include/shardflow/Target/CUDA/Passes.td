//===- Passes.td - the CUDA target's rt rewrites -----------*- tablegen -*-===//
//
// Rewrites of a bufferized rt program into the forms the CUDA target runs:
// GEMMs that cuBLASLt takes with epilogues, residuals and aligned operands,
// and kernels that convert-rt-to-gpu generates. cuda-codegen-pipeline runs
// them in the order below, after rt-einsum-to-matmul and before
// convert-rt-to-gpu.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDFLOW_TARGET_CUDA_PASSES_TD
#define SHARDFLOW_TARGET_CUDA_PASSES_TD

include "mlir/Pass/PassBase.td"

def CUDAReadAttentionInputsInPlace
    : Pass<"cuda-read-attention-inputs-in-place", "::mlir::func::FuncOp"> {
  let summary = "Let an attention read its query, key and value from a packed QKV buffer";
  let description = [{
    A `split` along the last dimension of a [B, S, W] buffer whose three
    pieces only one `attention` reads, as its query, key and value, goes
    away: the attention takes the buffer three times with `packed_qkv`
    (the pieces' widths) and reads the pieces in place (the runtime offsets
    the pointers and steps rows by W). nn-split-fused-projections leaves
    GPT-2's fused QKV projection so when its `attention-in-place` is set.
  }];
}

def CUDALowerConvolutions : Pass<"cuda-lower-convolutions", "::mlir::func::FuncOp"> {
  let summary = "Lower convolutions to im2col and a GEMM";
  let description = [{
    A float `conv` becomes a generated `im2col` kernel that writes, per
    image and group, the [(C/G) * window, output positions] patch matrix,
    and a matmul of the [G, M/G, (C/G) * window] weight view with it, whose
    [N, G, M/G, positions] result is already the NCHW output; with a bias, a
    generated add over the channel dimension. A 1x1 window at stride 1
    without padding reads the input itself as the patch matrix (a view, no
    im2col). Convolutions of other element types stay, for the error that
    names them.
  }];
}

def CUDALowerNonGemmMatmuls : Pass<"cuda-lower-non-gemm-matmuls", "::mlir::func::FuncOp"> {
  let summary = "Turn matmuls that cuBLASLt cannot run into einsums";
  let description = [{
    cuBLASLt multiplies f32, f16 and bf16. A `matmul` of another element
    type (integers, f64) becomes the `einsum` it is, which convert-rt-to-gpu
    generates as a launch of its own (one thread per output element, a loop
    over the contracted dimension).
  }];
}

def CUDASplitScatters : Pass<"cuda-split-scatters", "::mlir::func::FuncOp"> {
  let summary = "Split scatter_nd into a copy of its data and in-place updates";
  let description = [{
    A `scatter_nd` becomes a copy of its data (`identity`, which
    convert-rt-to-gpu fuses like any elementwise kernel) followed by
    `scatter_nd_updates`, which writes the updates into the copy in place,
    taking the index tuples in order (duplicate indices resolve as on the
    CPU).
  }];
}

def CUDAAttentionGradWorkspace
    : Pass<"cuda-attention-grad-workspace", "::mlir::func::FuncOp"> {
  let summary = "Give each attention_grad the workspace of its row statistics";
  let description = [{
    The CUDA attention backward is two kernels: a warp per query row
    computes dQ and writes the row's log-sum-exp and rowsum(P * dP); a warp
    per key row then recomputes the probabilities from them for dK and dV.
    This pass allocates the f32 buffer of 2 x B x Hq x Sq values they share
    and adds it as the kernel's fourth output, so that memory planning
    places it like any buffer.
  }];
}

def CUDAKeyedDropoutStarts : Pass<"cuda-keyed-dropout-starts", "::mlir::func::FuncOp"> {
  let summary = "Give each keyed dropout its rank's block start as a buffer";
  let description = [{
    A `keyed_dropout` of a partitioned program draws its rank's block of
    the whole tensor by each element's global index; its `starts` holds
    every rank's block start, and the CPU kernel picks its own by the rank
    it runs on. Generated code does not know the rank: the starts become a
    constant [ranks, dims] table, `rt.local_slice` copies this rank's row
    of it, and the kernel reads its start from that buffer, a third input.
  }];
}

def CUDASplitNormalizationScaleGrads
    : Pass<"cuda-split-normalization-scale-grads", "::mlir::func::FuncOp"> {
  let summary = "A norm's scale cotangent as the forward row kernel, a product and a sum";
  let description = [{
    `normalization_scale_grad` (the sum over rows of dy * xhat) becomes
    the forward `layer_normalization` or `rms_normalization` of the input
    with a unit scale (xhat, as the forward computes it), a `mul` by dy,
    which the row kernel takes as its epilogue so that xhat is never
    stored, and a `reduce_sum` over the row dims: two generated launches.
  }];
}

def CUDAPrecomputeDropoutMasks : Pass<"cuda-precompute-dropout-masks", "::mlir::func::FuncOp"> {
  let summary = "Draw training dropout masks at compile time";
  let description = [{
    A `training_dropout` mask depends on the seed and the shape only (the
    CPU kernel reseeds numpy's generator on every call): it is drawn here,
    once, into an `rt.constant` (at most 2^24 elements, one byte each in the
    artifact). The mask output becomes a copy of the constant (`identity`)
    and the result a `masked_scale` of the input by 1 / (1 - ratio), both
    generated elementwise. A ratio outside [0, 1) and a larger mask are
    errors.
  }];
}

def CUDAFuseGemmEpilogues : Pass<"cuda-fuse-gemm-epilogues", "::mlir::func::FuncOp"> {
  let summary = "Fold bias adds (and a following tanh gelu or relu) into matmuls";
  let description = [{
    A matmul whose result only a bias add reads (a bias over its last
    dimension), and that add's result only a tanh gelu or a relu, becomes
    one matmul with the cuBLASLt epilogue `bias`, `gelu_bias` or
    `relu_bias`: the product is written once, with the bias (and
    activation) applied. The matmul moves to the last op it absorbs, unless
    something in between may write one of its operands (a collective that
    reduces in place).
  }];
}

def CUDAFuseGemmResiduals : Pass<"cuda-fuse-gemm-residuals", "::mlir::func::FuncOp"> {
  let summary = "Let a matmul add the residual that its only reader adds, as cuBLASLt's C";
  let description = [{
    A matmul of a 2-D weight (one GEMM: the first operand's batch folds
    into M), plain or with the `bias` epilogue, whose result only an add of
    another buffer of its shape reads (a transformer's residual stream,
    `x + attn(x)`), takes that buffer as cuBLASLt's C (`residual`: the last
    input, added with beta 1 before the bias) and writes the sum itself:
    the product is neither written nor read again. The matmul moves to the
    add, where the residual is ready, unless something in between may
    write one of its operands.
  }];
}

def CUDAFuseGemmOutputCasts : Pass<"cuda-fuse-gemm-output-casts", "::mlir::func::FuncOp"> {
  let summary = "Let a half-precision matmul write the f32 cast of its result itself";
  let description = [{
    A plain f16 or bf16 matmul whose result only a cast to f32 reads, where
    no kernel reads the cast's result (it is returned, or only collectives
    read it: the logits of a `--dtype bf16` program), writes f32 directly:
    cuBLASLt accumulates in f32 and rounds once to the output type, so the
    half-precision product is neither written nor read again, and the
    result is rounded once instead of twice. A cast that a generated kernel
    reads is left alone: it fuses into that kernel, which then reads the
    narrower product.
  }];
}

def CUDATransposeMisalignedGemmWeights
    : Pass<"cuda-transpose-misaligned-gemm-weights", "::mlir::func::FuncOp"> {
  let summary = "Load GEMM weights with misaligned rows transposed";
  let description = [{
    A 2-D weight [K, N] that only matmuls read, as their second operand,
    whose rows are not 16-byte aligned (N elements of its type are not a
    multiple of 16 bytes: GPT-2's [768, 50257] vocabulary projection) while
    its columns would be, is loaded transposed (`permutation = [1, 0]` on
    rt.weight, applied once at load) and read with the matmul's `trans_b`.
    cuBLASLt's fastest kernels (TMA on sm_90, 16-byte asynchronous copies
    on sm_80) need 16-byte aligned leading dimensions; the transposed
    operand has them, and the GEMM is the same "TN" form as a framework's
    [out, in] linear weight. A weight already loaded transposed (an ONNX
    Transpose of an initializer) is then loaded as stored.
  }];
}

def CUDAPadMisalignedGemmResults
    : Pass<"cuda-pad-misaligned-gemm-results", "::mlir::func::FuncOp"> {
  let summary = "Let GEMMs with misaligned result rows write padded, aligned rows";
  let description = [{
    A plain matmul of a 2-D weight of at least 64 columns whose result rows
    are not 16-byte aligned (GPT-2's f32 or bf16 logits, 50257 wide) writes
    a result padded to a multiple of 64 columns (8 below 1024), whose rows
    are: cuBLASLt's fast kernels need every leading dimension aligned, the
    result's too. The weight is read with the padded width at load
    (`zero_padded`: a slice of the stored tensor that may reach past it,
    what lies past the tensor reading as zeros); its extra columns only
    make result columns that nothing reads. A padded result that only the
    function returns is returned as it is, its result attribute
    `rt.columns` giving the real columns (the artifact's output
    `columns=`: the runtime downloads them with one 2-D copy); any other
    gets a `slice` that copies the real columns into the result.
  }];
}

#endif // SHARDFLOW_TARGET_CUDA_PASSES_TD
