//===- Passes.td - conversions between Shardflow dialects --*- tablegen -*-===//

#ifndef SHARDFLOW_CONVERSION_PASSES_TD
#define SHARDFLOW_CONVERSION_PASSES_TD

include "mlir/Pass/PassBase.td"

def ConvertNNToRT : Pass<"convert-nn-to-rt", "::mlir::ModuleOp"> {
  let summary = "Bufferize an nn program into rt kernel calls";
  let description = [{
    Rewrites each function of nn ops into destination-passing rt: tensors
    become memrefs, each nn op result gets an rt.alloc written by an
    rt.kernel named after the op (its attributes kept as `params`). Ops that
    only change the shape of contiguous data (reshape, flatten, squeeze,
    unsqueeze) and the identities (identity, dropout in inference) become
    rt.view, which copies nothing. nn.weight and nn.constant become
    rt.weight and rt.constant; a float cast of a weight, and a transpose of
    a weight or of such a cast, fold into the weight's rt.weight
    (`source_type`, `permutation`), which the runtime converts or permutes
    once at load. Memory is planned separately (`rt-plan-memory`).

    A partitioned program's `dist` collectives become rt collectives over
    the rank groups of their mesh axes (`dist.all_slice` becomes
    `rt.local_slice`), its functions get `rt.world_size` = the mesh's rank
    count, and meshes nothing refers to any more are removed. `dist.reshard`
    and `dist.constraint` belong to the global program and are refused: run
    `dist-partition` first.
  }];
  let dependentDialects = ["::shardflow::rt::RTDialect",
                           "::mlir::memref::MemRefDialect"];
}

def ConvertRTToGPU : Pass<"convert-rt-to-gpu", "::mlir::ModuleOp"> {
  let summary = "Fuse elementwise and row-reduction kernels into generated GPU kernels";
  let description = [{
    For the CUDA target. Elementwise rt.kernel calls (arithmetic with
    broadcasting, comparisons, `where`, unary math, activations, `cast`,
    `constant_of_shape`, `range`, `trilu`, `rotary_embedding`,
    `batch_normalization`, `max_pool`, `average_pool`, `im2col`,
    `masked_scale`) and row reductions (`softmax`, `log_softmax`,
    `layer_normalization`, `rms_normalization`, `global_average_pool`, and
    `reduce_sum`/`reduce_mean`/`reduce_max` of floats over one contiguous
    block of axes) become `gpu.func` kernels in
    `gpu.module @shardflow_kernels`, called by `rt.launch`.

    Fusion is producer-consumer: an elementwise kernel joins the group that
    computes an operand whose buffer has no other reader, is not returned,
    and is read element for element; that buffer disappears (the value
    stays in a register). A row reduction takes such a group as its
    prologue. Groups never reach across collectives. Elementwise kernels
    run 256 threads per block; with `vectorize` each thread takes as many
    consecutive elements as fit in 16 bytes of the group's narrowest type
    (at most 8, halved until they divide the element count; booleans one),
    loaded and stored as vectors where the operands allow (the runtime
    checks that every buffer starts at a multiple of 16 bytes), and row
    reductions over contiguous rows step through the row the same way. A
    row reduction over a contiguous row of up to 1024 f16/bf16/f32
    elements runs one warp per row (8 rows per block, warp-shuffle
    reductions), any other one block of up to 256 threads per row, with
    block-wide reductions. Code computes
    in f32 for f16, bf16 and f32 data and rounds once when it stores.

    Contractions, attention and data movement (`matmul`, `gemm`,
    `attention`, `transpose`, `slice`, `concat`, `split`, `expand`,
    `gather`, `pad`) stay rt.kernel calls for the CUDA runtime; any other
    kernel is an error naming it. The CUDA target's rt rewrites
    (`cuda-*` passes, run by `cuda-codegen-pipeline` before this pass)
    lower what has no form here (convolutions, `scatter_nd`,
    `training_dropout`, matmuls of types cuBLASLt does not multiply) and
    fold what cuBLASLt can do into its GEMMs: a kernel that one of them
    rewrites, left in this pass's input, is an error whose note names the
    pass.

    Some kernels are generated as launches of their own, never fused:
    reductions that are not row reductions (axes that are not one
    contiguous block, integers), einsums (one thread per output element, a
    loop per summed label), `cumsum` (one thread per line, or one block per
    line along the last axis or when few lines are long: a block scan in
    tiles), `gather_elements` (one thread per element), `topk` (one block
    per line, k rounds of two block reductions) and `scatter_nd_updates`
    (writing into its data in place, taking the index tuples in order).
    Kernels that check their data (these two and `rotary_embedding` with
    position ids for indices, integer `div` for zero divisors) get
    `checks`: they take a status word in which they report what they
    found. Unsigned integer buffers are passed as the signless integers of
    their width; the code picks unsigned operations.

    With `sibling-fusion`, elementwise groups that stand next to each other
    in the program and do not depend on each other (Llama's rotary
    embeddings of the query and the key) become one launch: each group
    takes its own range of thread blocks, and its threads run its code
    alone, as in a launch of its own. Only allocations and views may lie
    between them, so no other operation sees either run earlier or later.
  }];
  let options = [
    Option<"vectorize", "vectorize", "bool", /*default=*/"true",
           "Let each thread of an elementwise kernel or row reduction take up "
           "to 16 bytes of consecutive elements, loaded and stored as vectors">,
    Option<"siblingFusion", "sibling-fusion", "bool", /*default=*/"true",
           "Launch independent elementwise groups that stand next to each other "
           "as one kernel, each in its own range of thread blocks">,
  ];
  let dependentDialects = ["::mlir::gpu::GPUDialect", "::mlir::arith::ArithDialect",
                           "::mlir::math::MathDialect", "::mlir::memref::MemRefDialect",
                           "::mlir::scf::SCFDialect", "::mlir::vector::VectorDialect"];
}

#endif // SHARDFLOW_CONVERSION_PASSES_TD
