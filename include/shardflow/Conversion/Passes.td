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
    `batch_normalization`, `max_pool`, `average_pool`) and row reductions
    (`softmax`, `log_softmax`, `layer_normalization`, `rms_normalization`,
    `global_average_pool`, and `reduce_sum`/`reduce_mean`/`reduce_max` of
    floats over one contiguous block of axes) become `gpu.func` kernels in
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

    A `split` along the last dimension of a [B, S, W] buffer whose three
    pieces only one `attention` reads, as its query, key and value, goes
    away: the attention takes the buffer three times with `packed_qkv`
    (the pieces' widths) and reads the pieces in place.

    Contractions, attention and data movement (`matmul`, `gemm`,
    `attention`, `transpose`, `slice`, `concat`, `split`, `expand`,
    `gather`, `pad`) stay rt.kernel calls for the CUDA runtime; any other
    kernel is an error naming it. With `gemm-epilogues`, a matmul whose
    result only a bias add reads (a bias over its last dimension), and
    that add's result only a tanh gelu or a relu, becomes one matmul with
    the cuBLASLt epilogue `bias`, `gelu_bias` or `relu_bias`. With
    `gemm-residuals`, a matmul of a 2-D weight, plain or with the `bias`
    epilogue, whose result only an add of another buffer of its shape reads
    (the residual stream) takes that buffer as cuBLASLt's C (`residual`,
    the last input) and writes the sum itself. A plain f16
    or bf16 matmul whose result only a cast to f32 reads, where no kernel
    reads the cast's result (the returned logits of a `--dtype` program),
    writes f32 itself (accumulated in f32, rounded once). A 2-D weight
    [K, N] that only matmuls read as their second operand, whose rows are
    not 16-byte aligned while its columns would be (GPT-2's [768, 50257]
    vocabulary projection), is loaded transposed (`permutation` on
    rt.weight) and read with the matmul's `trans_b`, so cuBLASLt can pick
    its kernels for aligned operands. With `gemm-padding`, a plain matmul
    of a 2-D weight (of at least 64 columns) whose result rows are not
    16-byte aligned (GPT-2's f32 or bf16 logits, 50257 wide) writes a
    result padded to a multiple of 64 columns (8 below 1024), whose rows
    are; the weight is read with the padded width at load (`zero_padded`, a
    slice of the stored tensor that may reach past it). A padded result
    that only the function returns is returned as it is, its result
    attribute `rt.columns` giving the real columns (the artifact's output
    `columns=`: the runtime downloads them with one 2-D copy); any other
    gets a `slice` that copies the real columns into the result. An einsum
    that contracts the last dimension of its first operand with the first
    of its second ("...a,abc->...bc") becomes a matmul of views; any other
    two-operand float einsum with an explicit output, no ellipsis and no
    label summed within one operand becomes transposes (where the order
    differs) around one batched matmul; and a
    `conv` becomes a generated `im2col` kernel, a matmul of the grouped
    weight view with its patch matrix (already in NCHW order) and, with a
    bias, a generated add.

    Some kernels are generated as launches of their own, never fused:
    reductions that are not row reductions (axes that are not one
    contiguous block, integers), other einsums (one thread per output
    element, a loop per summed label), `cumsum` (one thread per line, or
    one block per line along the last axis or when few lines are long: a
    block scan in tiles), `gather_elements` (one thread per element),
    `topk` (one block per line,
    k rounds of two block reductions) and `scatter_nd`, which becomes a copy
    of its data (`identity`, fused like any elementwise kernel) and
    `scatter_nd_updates` writing into the copy in place, taking the index
    tuples in order. Kernels that check their data (these two and
    `rotary_embedding` with position ids for indices, integer `div` for
    zero divisors) get `checks`: they take a status word in which they
    report what they found. Unsigned integer buffers are passed as the
    signless integers of their width; the code picks unsigned operations.
    A `training_dropout` mask depends on the seed and shape only: it is
    drawn here into a constant (at most 2^24 elements), and the result
    becomes a generated masked scale.

    With `sibling-fusion`, elementwise groups that stand next to each other
    in the program and do not depend on each other (Llama's rotary
    embeddings of the query and the key) become one launch: each group
    takes its own range of thread blocks, and its threads run its code
    alone, as in a launch of its own. Only allocations and views may lie
    between them, so no other operation sees either run earlier or later.
  }];
  let options = [
    Option<"gemmEpilogues", "gemm-epilogues", "bool", /*default=*/"true",
           "Fold bias adds (and a following tanh gelu or relu) into matmuls">,
    Option<"gemmResiduals", "gemm-residuals", "bool", /*default=*/"true",
           "Let a matmul of a 2-D weight (plain or with a bias epilogue) add the "
           "residual that its only reader adds, as cuBLASLt's C">,
    Option<"gemmPadding", "gemm-padding", "bool", /*default=*/"true",
           "Let a plain matmul of a 2-D weight whose result rows are not 16-byte "
           "aligned write a result padded to aligned rows (the weight zero-padded "
           "at load): returned as it is, or its real columns copied out by a slice">,
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
