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

#endif // SHARDFLOW_DIALECT_RT_TRANSFORMS_PASSES_TD
