//===- DistOps.td - the dist dialect -----------------------*- tablegen -*-===//
//
// dist holds how a program is distributed: a device mesh with named axes, a
// sharding per tensor, and, after partitioning, the collectives that move
// data between the ranks of the mesh.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDFLOW_DIALECT_DIST_DISTOPS_TD
#define SHARDFLOW_DIALECT_DIST_DISTOPS_TD

include "mlir/IR/OpBase.td"
include "mlir/IR/AttrTypeBase.td"
include "mlir/IR/CommonTypeConstraints.td"
include "mlir/IR/CommonAttrConstraints.td"
include "mlir/IR/SymbolInterfaces.td"
include "mlir/Interfaces/SideEffectInterfaces.td"

def Dist_Dialect : Dialect {
  let name = "dist";
  let cppNamespace = "::shardflow::dist";
  let summary = "Device meshes, tensor shardings and collectives";
  let description = [{
    A program is distributed over a `dist.mesh`: an n-dimensional grid of
    ranks whose axes have names and sizes (`["dp"=2, "tp"=4]`). Rank numbers
    are the row-major linearization of mesh coordinates: the first axis is
    the major one.

    A `#dist.sharding` says, for each dimension of a tensor, which mesh axes
    split it (major to minor), and which axes hold partial sums
    (`unreduced`). Axes named nowhere replicate the tensor. Before
    partitioning, shardings are attached to values: `dist.shardings` on ops
    (one per result), `dist.sharding` on function arguments and results,
    and `dist.constraint` in the middle of a program. After partitioning
    every tensor has its per-rank (local) shape and the `dist` collectives
    move data between ranks.
  }];
  let useDefaultAttributePrinterParser = 1;
  let hasOperationAttrVerify = 1;
  let hasRegionArgAttrVerify = 1;
  let hasRegionResultAttrVerify = 1;
  let dependentDialects = ["::mlir::func::FuncDialect"];
}

class Dist_Attr<string name, string attrMnemonic, list<Trait> traits = []>
    : AttrDef<Dist_Dialect, name, traits> {
  let mnemonic = attrMnemonic;
}

def Dist_DimShardingAttr : Dist_Attr<"DimSharding", "dim"> {
  let summary = "How one tensor dimension is split over mesh axes";
  let description = [{
    `axes` split the dimension, major to minor. An `open` dimension may be
    split further by propagation; a closed one may not. Printed inside a
    sharding as `{"tp"}`, `{"dp", "tp"}`, `{}` (closed, replicated) or
    `{"tp", ?}` / `{?}` (open).
  }];
  let parameters = (ins ArrayRefParameter<"::mlir::StringAttr", "mesh axes">:$axes,
                        "bool":$open);
  let hasCustomAssemblyFormat = 1;
}

def Dist_ShardingAttr : Dist_Attr<"Sharding", "sharding"> {
  let summary = "How a tensor is laid out over a mesh";
  let description = [{
    ```mlir
    #dist.sharding<@mesh, [{"dp"}, {}, {"tp", ?} ]>
    #dist.sharding<@mesh, [{"dp"}, {} ], unreduced = ["tp"]>
    #dist.sharding<@mesh, [{?}, {?} ], replicated = ["tp"]>
    ```
    One entry per dimension of the tensor. `replicated` axes are ones the
    tensor must not be split over (propagation leaves them alone even in
    open dimensions). `unreduced` axes hold partial sums: the value is the
    sum of the ranks' pieces along those axes.
    Every mesh axis appears at most once, and the product of a dimension's
    axis sizes divides the dimension.
  }];
  let parameters = (ins "::mlir::FlatSymbolRefAttr":$mesh,
                        ArrayRefParameter<"DimShardingAttr", "dimensions">:$dims,
                        ArrayRefParameter<"::mlir::StringAttr", "replicated axes">:$replicated,
                        ArrayRefParameter<"::mlir::StringAttr", "unreduced axes">:$unreduced);
  let hasCustomAssemblyFormat = 1;
  let extraClassDeclaration = [{
    /// Every dimension closed and split over no axis, nothing unreduced.
    static ShardingAttr getReplicated(::mlir::MLIRContext *ctx,
                                      ::mlir::FlatSymbolRefAttr mesh, int64_t rank);
    /// Whether no dimension is split and nothing is unreduced.
    bool isFullyReplicated() const;
    /// The axes of dimension `d`.
    ::llvm::ArrayRef<::mlir::StringAttr> axesOf(int64_t d) const {
      return getDims()[d].getAxes();
    }
  }];
}

def Dist_AxisList : TypedArrayAttrBase<StrAttr, "list of mesh axis names">;

class Dist_Op<string mnemonic, list<Trait> traits = []>
    : Op<Dist_Dialect, mnemonic, traits>;

//===----------------------------------------------------------------------===//
// Mesh
//===----------------------------------------------------------------------===//

def Dist_MeshOp : Dist_Op<"mesh", [Symbol, HasParent<"::mlir::ModuleOp">]> {
  let summary = "A mesh of ranks with named axes";
  let description = [{
    ```mlir
    dist.mesh @mesh ["dp"=2, "tp"=4]
    ```
    Axis names are unique and sizes positive. The mesh holds the product of
    its sizes ranks, numbered row-major (the first axis is the major one).
  }];
  let arguments = (ins SymbolNameAttr:$sym_name, Dist_AxisList:$axis_names,
                       DenseI64ArrayAttr:$axis_sizes);
  let hasCustomAssemblyFormat = 1;
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    int64_t getNumRanks();
    /// The index of axis `name`, or -1.
    int64_t axisIndex(::llvm::StringRef name);
    int64_t axisSize(::llvm::StringRef name);
    /// The product of the sizes of `axes`.
    int64_t groupSize(::llvm::ArrayRef<::mlir::StringAttr> axes);
    /// The ranks that differ from each other only in their coordinates along
    /// `axes`, one group per combination of the other coordinates. Within a
    /// group, ranks are ordered by their coordinates along `axes`, the
    /// first axis major: member k holds shard k of a dimension split over
    /// `axes`.
    ::llvm::SmallVector<::llvm::SmallVector<int64_t>>
    groups(::llvm::ArrayRef<::mlir::StringAttr> axes);
    /// The position of `rank` along `axes` (its index within its group).
    int64_t indexAlong(int64_t rank, ::llvm::ArrayRef<::mlir::StringAttr> axes);
  }];
}

//===----------------------------------------------------------------------===//
// Annotations
//===----------------------------------------------------------------------===//

def Dist_ConstraintOp : Dist_Op<"constraint",
    [Pure, AllTypesMatch<["input", "result"]>]> {
  let summary = "Require a sharding for a value at this point of the program";
  let description = [{
    The result is `input`, laid out as `sharding`. Propagation treats the
    sharding as a seed; partitioning reshards `input` to it.

    ```mlir
    %y = dist.constraint %x <@mesh, [{"dp"}, {} ]> : tensor<8x16xf32>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$input, Dist_ShardingAttr:$sharding);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "$input custom<Sharding>($sharding) attr-dict `:` type($result)";
  let hasVerifier = 1;
}

def Dist_ReshardOp : Dist_Op<"reshard",
    [Pure, AllTypesMatch<["input", "result"]>]> {
  let summary = "Change a value's sharding";
  let description = [{
    The result is `input` laid out as `sharding`, whatever `input`'s own
    sharding is. Partitioning turns it into the collectives that move the
    data (see docs/sharding.md).
  }];
  let arguments = (ins AnyRankedTensor:$input, Dist_ShardingAttr:$sharding);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "$input custom<Sharding>($sharding) attr-dict `:` type($result)";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Collectives on per-rank tensors
//===----------------------------------------------------------------------===//

class Dist_AxesCollectiveOp<string mnemonic, string text, dag extra,
                            list<Trait> traits = []>
    : Dist_Op<mnemonic, !listconcat([Pure], traits)> {
  let summary = text;
  let arguments = !con((ins AnyRankedTensor:$input, FlatSymbolRefAttr:$mesh,
                            Dist_AxisList:$axes), extra);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = [{
    $input `on` $mesh $axes attr-dict `:` type($input) `->` type($result)
  }];
  let hasVerifier = 1;
}

def Dist_AllReduceOp : Dist_AxesCollectiveOp<"all_reduce",
    "Sum (or reduce) a value over the ranks along mesh axes",
    (ins DefaultValuedAttr<StrAttr, "\"sum\"">:$reduction)> {
  let description = [{
    ```mlir
    %s = dist.all_reduce %p on @mesh ["tp"] : tensor<4x8xf32> -> tensor<4x8xf32>
    ```
    `reduction` is sum, prod, max or min.
  }];
}

def Dist_AllGatherOp : Dist_AxesCollectiveOp<"all_gather",
    "Concatenate the shards along `dim` from the ranks along mesh axes",
    (ins I64Attr:$dim)> {
  let description = [{
    The result is `input` with dimension `dim` multiplied by the product of
    the axes' sizes; shards are concatenated in the order of the ranks'
    coordinates along `axes`, the first axis major.
  }];
}

def Dist_ReduceScatterOp : Dist_AxesCollectiveOp<"reduce_scatter",
    "Sum over the ranks along mesh axes, each keeping its shard along `dim`",
    (ins I64Attr:$dim, DefaultValuedAttr<StrAttr, "\"sum\"">:$reduction)>;

def Dist_AllToAllOp : Dist_AxesCollectiveOp<"all_to_all",
    "Move a split from `concat_dim` to `split_dim`",
    (ins I64Attr:$split_dim, I64Attr:$concat_dim)> {
  let description = [{
    `input` is split along `split_dim` into one piece per rank of the group;
    each rank receives the pieces in group order and concatenates them along
    `concat_dim`. A tensor split over `axes` along `concat_dim` becomes one
    split along `split_dim`.
  }];
}

def Dist_AllSliceOp : Dist_AxesCollectiveOp<"all_slice",
    "Keep this rank's shard along `dim` of a value replicated along mesh axes",
    (ins I64Attr:$dim)> {
  let description = [{
    The inverse of `all_gather`, and free: no data moves. The result is
    `input` with dimension `dim` divided by the product of the axes' sizes.
  }];
}

def Dist_RankLists : TypedArrayAttrBase<DenseI64ArrayAttr, "list of rank lists">;

def Dist_CollectivePermuteOp : Dist_Op<"collective_permute",
    [Pure, AllTypesMatch<["input", "result"]>]> {
  let summary = "Each rank sends its value to one rank and receives one";
  let description = [{
    `pairs` lists [source, target] ranks of the mesh; no rank sends or
    receives twice; a rank that is no pair's target gets zeros.
  }];
  let arguments = (ins AnyRankedTensor:$input, FlatSymbolRefAttr:$mesh,
                       Dist_RankLists:$pairs);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "$input `on` $mesh attr-dict `:` type($result)";
  let hasVerifier = 1;
}

def Dist_SendOp : Dist_Op<"send"> {
  let summary = "Send a value to a peer rank";
  let description = [{
    `peers[r]` is the rank that rank r sends to, or -1 when r does not send.
  }];
  let arguments = (ins AnyRankedTensor:$input, FlatSymbolRefAttr:$mesh,
                       DenseI64ArrayAttr:$peers);
  let assemblyFormat = "$input `on` $mesh attr-dict `:` type($input)";
  let hasVerifier = 1;
}

def Dist_RecvOp : Dist_Op<"recv"> {
  let summary = "Receive a value from a peer rank";
  let description = [{
    `peers[r]` is the rank that rank r receives from, or -1 when r does not
    receive (its result is then zeros).
  }];
  let arguments = (ins FlatSymbolRefAttr:$mesh, DenseI64ArrayAttr:$peers);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "`on` $mesh attr-dict `:` type($result)";
  let hasVerifier = 1;
}

#endif // SHARDFLOW_DIALECT_DIST_DISTOPS_TD
