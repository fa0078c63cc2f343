//===- RTOps.td - the rt dialect ---------------------------*- tablegen -*-===//
//
// rt is the bufferized per-rank program that shard-run executes: buffers
// with planned offsets in one arena, kernel calls and collectives in
// destination-passing style, weights (or this rank's slices of them) and
// constants.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDFLOW_DIALECT_RT_RTOPS_TD
#define SHARDFLOW_DIALECT_RT_RTOPS_TD

include "mlir/IR/OpBase.td"
include "mlir/IR/CommonTypeConstraints.td"
include "mlir/IR/CommonAttrConstraints.td"
include "mlir/Interfaces/SideEffectInterfaces.td"
include "mlir/IR/SymbolInterfaces.td"

def RT_Dialect : Dialect {
  let name = "rt";
  let cppNamespace = "::shardflow::rt";
  let summary = "The bufferized per-rank program run by shard-run";
  let description = [{
    An `rt` program is one function per rank. Every intermediate value lives
    in a buffer (`rt.alloc`) that the memory planner places at an offset in
    one arena; `rt.kernel` calls a runtime kernel that reads its `ins` and
    writes its `outs`; `rt.view` reinterprets a buffer's shape without
    copying; `rt.weight` and `rt.constant` are buffers outside the arena,
    read-only but for `writable` weights (training state). The planned function carries `rt.peak_bytes`, the arena size.

    The program is SPMD: every rank of the world (`rt.world_size` on the
    function, 1 when absent) runs the same function. Collectives (`rt.all_reduce`,
    `rt.all_gather`, `rt.reduce_scatter`, `rt.all_to_all`,
    `rt.collective_permute`, `rt.send`, `rt.recv`) name the ranks that take
    part by rank tables, a sliced `rt.weight` says which part of the weight
    each rank loads, and `rt.local_slice` which block of a buffer each rank
    keeps.
  }];
  let dependentDialects = ["::mlir::memref::MemRefDialect", "::mlir::func::FuncDialect"];
}

def RT_Buffer : StaticShapeMemRefOf<[AnyType]>;

class RT_Op<string mnemonic, list<Trait> traits = []>
    : Op<RT_Dialect, mnemonic, traits>;

def RT_AllocOp : RT_Op<"alloc"> {
  let summary = "A buffer in the rank's arena";
  let description = [{
    Before memory planning `offset` is absent; rt-plan-memory sets it (bytes
    from the start of the arena, 64-byte aligned).
  }];
  let arguments = (ins OptionalAttr<I64Attr>:$offset);
  let results = (outs RT_Buffer:$result);
  let assemblyFormat = "attr-dict `:` type($result)";
}

def RT_ViewOp : RT_Op<"view", [Pure]> {
  let summary = "The same bytes with another static shape (no copy)";
  let arguments = (ins RT_Buffer:$source);
  let results = (outs RT_Buffer:$result);
  let assemblyFormat = "$source attr-dict `:` type($source) `to` type($result)";
  let hasVerifier = 1;
}

def RT_RankLists : TypedArrayAttrBase<DenseI64ArrayAttr, "list of rank lists">;

def RT_WeightOp : RT_Op<"weight", [Pure]> {
  let summary = "A read-only weight, or this rank's slice of it";
  let description = [{
    Carries the location of nn.weight (storage, file, offset, size of the
    whole tensor). Without `global_shape` every rank loads the whole weight
    and the result type is its shape. With `global_shape` and `starts` (one
    start index list per rank, in rank order) the result is this rank's
    slice: the block of the global tensor at its start with the result's
    shape.

    With `source_type` the file holds elements of that float type and the
    buffer another float type (mixed precision: f32 bytes, a bf16 buffer);
    the runtime converts them once at load. `size`, `offset` and the slices
    refer to the bytes in the file.

    With `zero_padded` a slice may reach past `global_shape` (the tensor in
    the file): what lies past reads as zeros (a vocabulary padded to a
    multiple of the tensor-parallel size).

    With `permutation` the buffer holds the (sliced, converted) elements
    with their dimensions permuted: buffer dimension i is stored dimension
    `permutation[i]`, so the result type is the stored shape permuted, and
    `global_shape` and `starts` keep the stored order. The runtime permutes
    once at load (`convert-rt-to-gpu` stores a GEMM's weight transposed
    when that aligns its rows).

    With `scale` the runtime multiplies the elements by it at load (in f64,
    rounded once to the buffer's type): an nn.mul of a float weight by a
    scalar constant, folded (a bias that each of n ranks adds 1/n of).

    With `writable` the weight is persistent state that the program writes
    (a training step's weights, optimizer moments, step counter): a kernel
    may have it as its output, and the value lasts from one run to the
    next. Storage `zeros` (state that starts at zero, no file) is writable.
    A writable weight holds the bytes as stored: no `source_type`,
    `permutation` or `scale`.

    ```mlir
    %w = rt.weight "fc.weight" {storage = "external", file = "m.data",
        offset = 0 : i64, global_shape = array<i64: 64, 32>,
        starts = [array<i64: 0, 0>, array<i64: 32, 0>]} : memref<32x32xf32>
    %h = rt.weight "fc.weight" {storage = "external", file = "m.data",
        offset = 0 : i64, source_type = f32} : memref<64x32xbf16>
    %t = rt.weight "head.weight" {storage = "external", file = "m.data",
        offset = 8192 : i64, permutation = array<i64: 1, 0>} : memref<50257x64xf32>
    ```
  }];
  let arguments = (ins StrAttr:$name, StrAttr:$storage, OptionalAttr<StrAttr>:$file,
                       OptionalAttr<I64Attr>:$offset, OptionalAttr<I64Attr>:$size,
                       OptionalAttr<DenseI64ArrayAttr>:$global_shape,
                       OptionalAttr<RT_RankLists>:$starts,
                       OptionalAttr<TypeAttr>:$source_type,
                       OptionalAttr<DenseI64ArrayAttr>:$permutation,
                       UnitAttr:$zero_padded, OptionalAttr<F64Attr>:$scale,
                       UnitAttr:$writable);
  let results = (outs RT_Buffer:$result);
  let assemblyFormat = "$name attr-dict `:` type($result)";
  let hasVerifier = 1;
}

def RT_ConstantOp : RT_Op<"constant", [Pure]> {
  let summary = "A small read-only constant held in the program";
  let arguments = (ins ElementsAttr:$value);
  let results = (outs RT_Buffer:$result);
  let assemblyFormat = "$value attr-dict `:` type($result)";
  let hasVerifier = 1;
}

def RT_KernelOp : RT_Op<"kernel", [AttrSizedOperandSegments]> {
  let summary = "Call a runtime kernel: read `ins`, write `outs`";
  let description = [{
    `kernel` names the operation (the nn op's name without the dialect
    prefix, e.g. "matmul"); `params` holds its attributes as the nn op had
    them. The kernel and each parameter (its name and type) must be in the
    kernel signature table that RTKernels.td and the nn ODS generate, which
    the runtime reads too. Outputs never alias inputs.

    ```mlir
    rt.kernel "softmax" ins(%a : memref<2x8xf32>) outs(%b : memref<2x8xf32>)
        {params = {axis = 1 : i64}}
    ```
  }];
  let arguments = (ins StrAttr:$kernel, Variadic<RT_Buffer>:$inputs,
                       Variadic<RT_Buffer>:$outputs,
                       DefaultValuedAttr<DictionaryAttr, "{}">:$params);
  let assemblyFormat = [{
    $kernel (`ins` `(` $inputs^ `:` type($inputs) `)`)?
    `outs` `(` $outputs `:` type($outputs) `)` attr-dict
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// The kernel's entry in the kernel signature table, or nullptr.
    const ::shardflow::runtime::KernelSignature *getSignature();
    /// The parameter `name`, or null when absent; `name` must be one the
    /// kernel's signature has (a name the table lacks is a stale literal).
    ::mlir::Attribute getParam(::llvm::StringRef name);
  }];
}

//===----------------------------------------------------------------------===//
// Collectives
//===----------------------------------------------------------------------===//

def RT_LaunchOp : RT_Op<"launch", [AttrSizedOperandSegments,
                                    DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "Run a compiler-generated GPU kernel: read `ins`, write `outs`";
  let description = [{
    `kernel` names a `gpu.func` (with the `kernel` attribute) inside a
    `gpu.module` of the enclosing module; it is launched on `grid` thread
    blocks of `block` threads with `shared` bytes of dynamic shared memory.
    The kernel takes one argument per buffer, `ins` then `outs`, each a
    contiguous memref with the buffer's element type and element count (the
    kernel may view an N-d buffer as 1-d). Outputs never alias inputs.

    With `checks` the kernel checks its data (indices read from it, integer
    divisors) and takes one more argument, last: a `memref<2xi64>` status
    word the runtime provides, zeroed before each run. The kernel sets
    element 0 to what went wrong (low 8 bits; 1: an index out of range,
    element 1 the index; 2: an integer division by zero, element 1 the
    position in the result) plus 256 times the ordinal of the fused
    operation that found it, and the runtime then fails the run, naming
    the kernel and that operation's ONNX node: `checking_nodes` lists the
    ONNX node of each checking operation in ordinal order (an empty name
    where one has none).

    Arguments of unsigned buffers (`ui8` to `ui64`) have the signless
    integer type of the same width: generated code is signless and picks
    unsigned operations itself.

    ```mlir
    rt.launch @shardflow_kernels::@k0_add_gelu grid [96, 1, 1] block [256, 1, 1]
        ins(%a, %b : memref<8x3072xf32>, memref<3072xf32>)
        outs(%c : memref<8x3072xf32>)
    ```
  }];
  let arguments = (ins SymbolRefAttr:$kernel, DenseI64ArrayAttr:$grid,
                       DenseI64ArrayAttr:$block,
                       DefaultValuedAttr<I64Attr, "0">:$shared,
                       UnitAttr:$checks,
                       OptionalAttr<StrArrayAttr>:$checking_nodes,
                       Variadic<RT_Buffer>:$inputs, Variadic<RT_Buffer>:$outputs);
  let assemblyFormat = [{
    $kernel `grid` $grid `block` $block
    (`ins` `(` $inputs^ `:` type($inputs) `)`)?
    `outs` `(` $outputs `:` type($outputs) `)` attr-dict
  }];
  let hasVerifier = 1;
}

class RT_GroupCollectiveOp<string mnemonic, string text, dag extra>
    : RT_Op<mnemonic> {
  let summary = text;
  let arguments = !con((ins RT_Buffer:$input, RT_Buffer:$output,
                            RT_RankLists:$groups), extra);
  let assemblyFormat = [{
    `ins` `(` $input `:` type($input) `)` `outs` `(` $output `:` type($output) `)`
    attr-dict
  }];
  let hasVerifier = 1;
}

def RT_AllReduceOp : RT_GroupCollectiveOp<"all_reduce",
    "Reduce `input` element-wise over each group into `output`",
    (ins DefaultValuedAttr<StrAttr, "\"sum\"">:$reduction)> {
  let description = [{
    `groups` partitions (some of) the ranks into equally sized groups; a rank
    in no group does nothing. `reduction` is sum, prod, max or min. `output`
    has `input`'s type and may be the same buffer.
  }];
}

def RT_AllGatherOp : RT_GroupCollectiveOp<"all_gather",
    "Concatenate the group members' `input`s along `dim`",
    (ins I64Attr:$dim)> {
  let description = [{
    `output` is `input` with dimension `dim` multiplied by the group size;
    member k's `input` lands at the k-th position.
  }];
}

def RT_ReduceScatterOp : RT_GroupCollectiveOp<"reduce_scatter",
    "Reduce over the group, each member keeping one piece along `dim`",
    (ins I64Attr:$dim, DefaultValuedAttr<StrAttr, "\"sum\"">:$reduction)> {
  let description = [{
    `input` splits along `dim` into one piece per member; member k's
    `output` is the reduction of every member's k-th piece.
  }];
}

def RT_AllToAllOp : RT_GroupCollectiveOp<"all_to_all",
    "Move a dimension's split: scatter along `split_dim`, gather along `concat_dim`",
    (ins I64Attr:$split_dim, I64Attr:$concat_dim)> {
  let description = [{
    `input` splits along `split_dim` into one piece per member; piece k goes
    to member k; `output` is the pieces received, in member order,
    concatenated along `concat_dim`.
  }];
}

def RT_CollectivePermuteOp : RT_Op<"collective_permute"> {
  let summary = "Each rank sends `input` to one rank and receives `output` from one";
  let description = [{
    `pairs` lists [source, target] rank pairs; no rank sends or receives
    twice. A rank that is no pair's target gets zeros.
  }];
  let arguments = (ins RT_Buffer:$input, RT_Buffer:$output, RT_RankLists:$pairs);
  let assemblyFormat = [{
    `ins` `(` $input `:` type($input) `)` `outs` `(` $output `:` type($output) `)`
    attr-dict
  }];
  let hasVerifier = 1;
}

def RT_SendOp : RT_Op<"send"> {
  let summary = "Send a buffer to a peer rank";
  let description = [{
    `peers[r]` is the rank that rank r sends to, or -1 when rank r does not
    send. The peer runs a matching `rt.recv`.
  }];
  let arguments = (ins RT_Buffer:$input, DenseI64ArrayAttr:$peers);
  let assemblyFormat = "$input attr-dict `:` type($input)";
  let hasVerifier = 1;
}

def RT_RecvOp : RT_Op<"recv"> {
  let summary = "Receive a buffer from a peer rank";
  let description = [{
    `peers[r]` is the rank that rank r receives from, or -1 when rank r does
    not receive (its `output` is then left as it is).
  }];
  let arguments = (ins RT_Buffer:$output, DenseI64ArrayAttr:$peers);
  let assemblyFormat = "$output attr-dict `:` type($output)";
  let hasVerifier = 1;
}

def RT_LocalSliceOp : RT_Op<"local_slice"> {
  let summary = "Copy this rank's block of `input` into `output` (no communication)";
  let description = [{
    `starts` holds one start index list per rank of the world, in rank
    order, as a sliced `rt.weight` does. Each rank copies the block of
    `input` that begins at its start and has `output`'s shape. This is how a
    value that every rank holds whole becomes each rank's shard of it (the
    batch of a data-parallel input, say) without moving data between ranks.

    ```mlir
    rt.local_slice ins(%x : memref<8x16xf32>) outs(%y : memref<4x16xf32>)
        {starts = [array<i64: 0, 0>, array<i64: 4, 0>]}
    ```
  }];
  let arguments = (ins RT_Buffer:$input, RT_Buffer:$output, RT_RankLists:$starts);
  let assemblyFormat = [{
    `ins` `(` $input `:` type($input) `)` `outs` `(` $output `:` type($output) `)`
    attr-dict
  }];
  let hasVerifier = 1;
}

#endif // SHARDFLOW_DIALECT_RT_RTOPS_TD
