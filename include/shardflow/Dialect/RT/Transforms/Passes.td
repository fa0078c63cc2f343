//===- Passes.td - rt dialect passes -----------------------*- tablegen -*-===//

#ifndef SHARDFLOW_DIALECT_RT_TRANSFORMS_PASSES_TD
#define SHARDFLOW_DIALECT_RT_TRANSFORMS_PASSES_TD

include "mlir/Pass/PassBase.td"

def RTPlanMemory : Pass<"rt-plan-memory", "::mlir::func::FuncOp"> {
  let summary = "Place every rt.alloc at an offset in one arena, reusing memory";
  let description = [{
    Computes each buffer's live range (from the kernel that first writes it
    to the last op that reads it or a view of it; returned buffers live to
    the end) and places buffers greedily in program order at the lowest
    64-byte-aligned offset that overlaps no buffer live at the same time.
    Sets `offset` on each rt.alloc and `rt.peak_bytes` (the arena size) on
    the function, then checks the plan: two buffers live at the same time
    never share a byte.
  }];
  let options = [
    Option<"alignment", "alignment", "int64_t", /*default=*/"64",
           "Byte alignment of every buffer offset">,
  ];
}

def RTFoldTransposesIntoMatmuls : Pass<"rt-fold-transposes-into-matmuls", "::mlir::func::FuncOp"> {
  let summary = "Read transposed matmul and gemm operands in place (CPU)";
  let description = [{
    A `transpose` kernel that swaps the last two dimensions and nothing
    else, whose result a `matmul` or `gemm` kernel reads as a matrix
    operand, is folded into that kernel: the matmul reads the transpose's
    input with `trans_a` or `trans_b`, a gemm with its flag flipped. The
    backward of every linear layer multiplies by transposed weights and
    activations (dX = dY W^T, dW = X^T dY), which were copies before. The
    transpose goes when nothing else reads its result. A fold is skipped
    when a kernel between the transpose and the reader writes the
    transpose's input (an optimizer's update of the weight). The CPU
    pipeline runs this pass before rt-plan-memory; the CPU GEMM reads any
    row and column strides.
  }];
}

def RTEinsumToMatmul : Pass<"rt-einsum-to-matmul", "::mlir::func::FuncOp"> {
  let summary = "Turn two-operand float einsums that are matmuls into matmuls";
  let description = [{
    An f32, f16 or bf16 `einsum` kernel of two operands whose equation is a
    matrix product becomes a `matmul` kernel, so that it runs on the
    target's GEMM instead of a loop nest. Two forms:

    - `P a, a R -> P R` (the megatron presets' fused projection,
      `...a,abc->...bc`): a matmul of the first operand with the second
      viewed as [a, R...], whose result is viewed back as the output. No
      copy.
    - Any equation with an explicit output, no ellipsis and no label twice
      in a term, where every label is in the output or in both operands:
      batch labels (in all three terms), M (first operand and output), K
      (both operands only) and N (second operand and output). Operands are
      transposed to [batch, M, K] and [batch, K, N] where their order
      differs, and the [batch, M, N] product to the output's order.

    Other einsums (a label summed within one operand, integers, f64, three
    or more operands) stay. Both targets run this pass after
    convert-nn-to-rt: the CPU pipeline alone, cuda-codegen-pipeline as the
    first of its rewrites.
  }];
}

def RTBucketAllReduces : Pass<"rt-bucket-all-reduces", "::mlir::func::FuncOp"> {
  let summary = "Reduce several buffers in one all-reduce (gradient buckets)";
  let description = [{
    A data-parallel training step all-reduces every weight's gradient over
    dp, each as soon as the backward has it: many small collectives, each
    paying the network's latency. As PyTorch's DDP does, this pass gathers
    all-reduces of the same rank groups, reduction and element type, in
    program order, into buckets of at most `bucket-bytes`: each bucket's
    inputs are concatenated (viewed as 1-D) into one buffer, reduced by one
    `rt.all_reduce`, and split back into the original outputs. A bucket is
    concatenated and reduced where its last member was, and split back
    just before the first op that touches a member's buffer: the rest of
    the backward runs between the two (on CUDA the all-reduce is on the
    communication stream, and only the split waits for it). An op that
    touches a member's buffer closes the bucket. Buckets of one all-reduce
    stay as they were.
  }];
  let options = [
    Option<"bucketBytes", "bucket-bytes", "int64_t", /*default=*/"26214400",
           "The largest bucket, in bytes (default 25 MiB, as DDP's bucket_cap_mb)">,
  ];
}

#endif // SHARDFLOW_DIALECT_RT_TRANSFORMS_PASSES_TD
