//===- RTToGPU.cpp - fuse rt kernels into generated GPU kernels -------------===//
//
// For the CUDA target, every rt.kernel that is elementwise (arithmetic,
// comparisons, select, unary math, activations, casts, fills) or a row
// reduction (softmax, log-softmax, layer and RMS normalization) becomes
// code the compiler generates, in one `gpu.module @shardflow_kernels`, and
// is called by rt.launch. Contractions and attention stay rt.kernel calls:
// the runtime runs them with cuBLASLt and its attention kernel, as it runs
// data movement (transpose, slice, concat, split, expand, gather, pad).
//
// The CUDA target's rt rewrites (lib/Target/CUDA/Transforms, run by
// cuda-codegen-pipeline) come first: they turn convolutions, integer
// matmuls, scatters and training dropout into kernels of these kinds and
// fold what cuBLASLt can do into its GEMMs. This pass only groups and
// emits; a kernel one of them rewrites, left in its input, is an error
// whose note names that pass.
//
// Fusion is producer-consumer over buffers (FusionGroups.cpp): an
// elementwise kernel joins the group that computes one of its operands when
// that operand's buffer has no other reader, is not returned, and is read
// element for element; the buffer then never exists, the value stays in a
// register. A row reduction takes such a group as its prologue. Each group
// becomes one generated kernel (GroupEmitter.cpp, each member's code from
// KernelEmitter.cpp) and one rt.launch where its last member stood.
//
// Reductions that are not row reductions, cumsum, gather_elements,
// scatter_nd_updates, einsum and topk are generated as launches of their
// own (StandaloneKernels.cpp); kernels that read indices from data report
// an out-of-range one through a status word (Emitter.h).
//
// Generated code computes in f32 for f16/bf16/f32 data (f64 stays f64) and
// rounds once when it stores. Every argument is a flat memref of its
// buffer's element count (the launch ABI passes bare pointers), so indexing
// is linear and views cost nothing.
//
//===----------------------------------------------------------------------===//

#include "FusionGroups.h"
#include "GroupEmitter.h"

#include "shardflow/Conversion/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/IR/Builders.h"

namespace shardflow {
#define GEN_PASS_DEF_CONVERTRTTOGPU
#include "shardflow/Conversion/Passes.h.inc"
} // namespace shardflow

using namespace mlir;
using namespace shardflow;
using namespace shardflow::rtgpu;

namespace {

struct ConvertRTToGPU : shardflow::impl::ConvertRTToGPUBase<ConvertRTToGPU> {
  using ConvertRTToGPUBase::ConvertRTToGPUBase;
  void runOnOperation() override;
};

void ConvertRTToGPU::runOnOperation() {
  ModuleOp module = getOperation();
  SmallVector<func::FuncOp> fns(module.getOps<func::FuncOp>());
  gpu::GPUModuleOp kernels;
  GroupEmitter emitter(vectorize);
  int id = 0;
  for (func::FuncOp fn : fns) {
    if (fn.isExternal())
      continue;
    SmallVector<std::unique_ptr<Group>> groups;
    if (failed(formGroups(fn, groups)))
      return signalPassFailure();
    if (groups.empty())
      continue;
    if (!kernels) {
      module->setAttr(gpu::GPUDialect::getContainerModuleAttrName(),
                      UnitAttr::get(module.getContext()));
      OpBuilder b = OpBuilder::atBlockEnd(module.getBody());
      kernels = gpu::GPUModuleOp::create(b, module.getLoc(), kModuleName);
    }
    if (siblingFusion)
      fuseSiblings(groups);
    for (auto &g : groups)
      if (!g->absorbed && failed(emitter.emitGroup(*g, kernels, id++)))
        return signalPassFailure();
  }
}

} // namespace
