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
    rt.weight and rt.constant. Memory is planned separately
    (`rt-plan-memory`).

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

#endif // SHARDFLOW_CONVERSION_PASSES_TD
