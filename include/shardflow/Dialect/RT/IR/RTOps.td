//===- RTOps.td - the rt dialect ---------------------------*- tablegen -*-===//
//
// rt is the bufferized per-rank program that shard-run executes: buffers
// with planned offsets in one arena, kernel calls in destination-passing
// style, weights and constants. Collective and send/recv ops join it when
// programs are partitioned.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDFLOW_DIALECT_RT_RTOPS_TD
#define SHARDFLOW_DIALECT_RT_RTOPS_TD

include "mlir/IR/OpBase.td"
include "mlir/IR/CommonTypeConstraints.td"
include "mlir/IR/CommonAttrConstraints.td"
include "mlir/Interfaces/SideEffectInterfaces.td"

def RT_Dialect : Dialect {
  let name = "rt";
  let cppNamespace = "::shardflow::rt";
  let summary = "The bufferized per-rank program run by shard-run";
  let description = [{
    An `rt` program is one function per rank. Every intermediate value lives
    in a buffer (`rt.alloc`) that the memory planner places at an offset in
    one arena; `rt.kernel` calls a runtime kernel that reads its `ins` and
    writes its `outs`; `rt.view` reinterprets a buffer's shape without
    copying; `rt.weight` and `rt.constant` are read-only buffers outside the
    arena. The planned function carries `rt.peak_bytes`, the arena size.
  }];
  let dependentDialects = ["::mlir::memref::MemRefDialect", "::mlir::func::FuncDialect"];
}

def RT_Buffer : StaticShapeMemRefOf<[AnyType]>;

class RT_Op<string mnemonic, list<Trait> traits = []>
    : Op<RT_Dialect, mnemonic, traits>;

def RT_AllocOp : RT_Op<"alloc"> {
  let summary = "A buffer in the rank's arena";
  let description = [{
    Before memory planning `offset` is absent; the planner sets it (bytes
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

def RT_WeightOp : RT_Op<"weight", [Pure]> {
  let summary = "A read-only weight mapped from the model's files";
  let description = [{ Carries the location of nn.weight (storage, file, offset, size). }];
  let arguments = (ins StrAttr:$name, StrAttr:$storage, OptionalAttr<StrAttr>:$file,
                       OptionalAttr<I64Attr>:$offset, OptionalAttr<I64Attr>:$size);
  let results = (outs RT_Buffer:$result);
  let assemblyFormat = "$name attr-dict `:` type($result)";
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
    them. Outputs never alias inputs.

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
}

#endif // SHARDFLOW_DIALECT_RT_RTOPS_TD
