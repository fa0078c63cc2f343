//===- KeyedDropoutStarts.cpp - a keyed dropout's block start, per rank ---===//
//
// A keyed dropout of a partitioned program draws its rank's block of the
// whole tensor: the CPU kernel picks its block start from the per-rank
// `starts` parameter by the rank it runs on. Generated code does not know
// the rank, so the starts become a constant [ranks, dims] table of which
// `rt.local_slice` copies this rank's row, and the kernel reads its start
// from that buffer, its third input.
//
//===----------------------------------------------------------------------===//

#include "Utils.h"

#include "shardflow/Target/CUDA/Passes.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"

namespace shardflow::cuda {
#define GEN_PASS_DEF_CUDAKEYEDDROPOUTSTARTS
#include "shardflow/Target/CUDA/Passes.h.inc"
} // namespace shardflow::cuda

using namespace mlir;
using namespace shardflow;
using namespace shardflow::cuda;

namespace {

LogicalResult addStarts(func::FuncOp fn) {
  for (rt::KernelOp k : kernelsNamed(fn, "keyed_dropout")) {
    auto starts = dyn_cast_or_null<DenseI64ArrayAttr>(k.getParam("starts"));
    if (!starts || k.getInputs().size() != 2)
      continue;
    int64_t dims = shapeOf(k.getInputs()[0]).size();
    if (dims == 0 || starts.size() % dims != 0)
      return k.emitOpError("keyed_dropout starts hold ")
             << starts.size() << " values, not one start per dim for each rank";
    int64_t ranks = starts.size() / dims;
    OpBuilder b(k);
    Location loc = k.getLoc();
    Type i64 = b.getI64Type();
    Value table = rt::ConstantOp::create(
        b, loc, MemRefType::get({ranks, dims}, i64),
        DenseElementsAttr::get(RankedTensorType::get({ranks, dims}, i64), starts.asArrayRef()));
    Value mine = rt::AllocOp::create(b, loc, MemRefType::get({1, dims}, i64), IntegerAttr());
    SmallVector<Attribute> rows;
    for (int64_t r = 0; r < ranks; ++r)
      rows.push_back(b.getDenseI64ArrayAttr({r, 0}));
    rt::LocalSliceOp::create(b, loc, table, mine, b.getArrayAttr(rows));
    SmallVector<Value> inputs(k.getInputs());
    inputs.push_back(mine);
    rt::KernelOp::create(b, loc, k.getKernelAttr(), inputs, k.getOutputs(), k.getParams());
    k.erase();
  }
  return success();
}

struct CUDAKeyedDropoutStarts : cuda::impl::CUDAKeyedDropoutStartsBase<CUDAKeyedDropoutStarts> {
  void runOnOperation() override {
    if (failed(addStarts(getOperation())))
      signalPassFailure();
  }
};

} // namespace
