//===- PadMisalignedGemmResults.cpp - aligned GEMM result rows ------------===//
//
// A plain matmul of a 2-D weight of N >= 64 columns whose result rows are
// not 16-byte aligned (GPT-2's [tokens, 50257] logits, in f32 or bf16)
// writes a result padded to a multiple of 64 columns (8 below 1024)
// instead, whose rows are, and a `slice` copies the N real columns into
// the result. cuBLASLt's fast kernels need every leading dimension
// aligned, the result's too: on an H200 the 8192 x 50257 x 768 bf16
// projection ran at about 95 TFLOP/s, against 480 to 730 for the aligned
// GEMMs of the same program (2026-11-26). The
// weight grows to the padded width at load: a slice of the stored tensor
// with `zero_padded` (what lies past the tensor reads as zeros). Its
// extra columns only make the result columns the slice leaves out, so
// a sharded weight's slice may read its neighbour's columns there.
//
// A result that only the function returns needs no slice: the padded
// buffer is returned, its result attribute `rt.columns` saying how many
// leading elements of each row are the output (the runtime downloads them
// with one 2-D copy), so neither the copy nor a second buffer of the
// result's size is needed.
//
//===----------------------------------------------------------------------===//

#include "Utils.h"

#include "shardflow/Dialect/NN/IR/NNOps.h"
#include "shardflow/Target/CUDA/Passes.h"

#include "mlir/IR/Builders.h"

namespace shardflow::cuda {
#define GEN_PASS_DEF_CUDAPADMISALIGNEDGEMMRESULTS
#include "shardflow/Target/CUDA/Passes.h.inc"
} // namespace shardflow::cuda

using namespace mlir;
using namespace shardflow;
using namespace shardflow::cuda;

namespace {

void padMisalignedGemmResults(func::FuncOp fn) {
  auto worldAttr = fn->getAttrOfType<IntegerAttr>("rt.world_size");
  int64_t world = worldAttr ? worldAttr.getInt() : 1;
  for (rt::KernelOp mm : kernelsNamed(fn, "matmul")) {
    if (mm.getInputs().size() != 2 || mm.getOutputs().size() != 1)
      continue;
    auto transB = dyn_cast_or_null<BoolAttr>(mm.getParam("trans_b"));
    if (mm.getParams().size() != (transB ? 1u : 0u))
      continue;
    auto w = mm.getInputs()[1].getDefiningOp<rt::WeightOp>();
    Value y = mm.getOutputs()[0];
    if (!w || !w->hasOneUse() || mm.getInputs()[0] == mm.getInputs()[1] ||
        !y.getDefiningOp<rt::AllocOp>())
      continue;
    auto wType = cast<MemRefType>(w.getType());
    ArrayRef<int64_t> ys = shapeOf(y);
    if (wType.getRank() != 2 || ys.empty() || !isGemmType(wType.getElementType()) ||
        !isGemmType(elemOf(y)))
      continue;
    int64_t nDim = transB && transB.getValue() ? 0 : 1, n = ys.back();
    int64_t outBytes = nn::getElementStorageBytes(elemOf(y));
    if (wType.getDimSize(nDim) != n || n < 64 || (n * outBytes) % 16 == 0)
      continue;
    int64_t padded = llvm::alignTo(n, n >= 1024 ? 64 : 8);
    // The stored tensor's shape and the weight's start on each rank: its
    // own slice when sharded, else the whole tensor from the origin.
    SmallVector<int64_t> stored(wType.getShape());
    if (auto perm = w.getPermutationAttr())
      for (auto [i, d] : llvm::enumerate(perm.asArrayRef()))
        stored[d] = wType.getDimSize(int64_t(i));
    OpBuilder b(w);
    if (!w.getGlobalShapeAttr()) {
      w.setGlobalShapeAttr(b.getDenseI64ArrayAttr(stored));
      SmallVector<Attribute> starts(size_t(world),
                                    b.getDenseI64ArrayAttr(SmallVector<int64_t>(2, 0)));
      w.setStartsAttr(b.getArrayAttr(starts));
    }
    w.setZeroPadded(true);
    SmallVector<int64_t> wShape(wType.getShape());
    wShape[size_t(nDim)] = padded;
    w.getResult().setType(MemRefType::get(wShape, wType.getElementType()));

    b.setInsertionPoint(mm);
    SmallVector<int64_t> pShape(ys);
    pShape.back() = padded;
    Value product = rt::AllocOp::create(b, mm.getLoc(), MemRefType::get(pShape, elemOf(y)),
                                        IntegerAttr());
    mm.getOutputsMutable().assign(product);
    if (y.hasOneUse() && isa<func::ReturnOp>(*y.getUsers().begin())) {
      OpOperand &use = *y.getUses().begin();
      unsigned result = use.getOperandNumber();
      use.set(product);
      y.getDefiningOp()->erase();
      SmallVector<Type> results(fn.getFunctionType().getResults());
      results[result] = product.getType();
      fn.setType(FunctionType::get(fn.getContext(), fn.getFunctionType().getInputs(), results));
      fn.setResultAttr(result, "rt.columns", b.getI64IntegerAttr(n));
      continue;
    }
    b.setInsertionPointAfter(mm);
    int64_t axis = int64_t(ys.size()) - 1;
    NamedAttribute params[] = {
        b.getNamedAttr("starts", b.getDenseI64ArrayAttr({0})),
        b.getNamedAttr("ends", b.getDenseI64ArrayAttr({n})),
        b.getNamedAttr("axes", b.getDenseI64ArrayAttr({axis})),
        b.getNamedAttr("steps", b.getDenseI64ArrayAttr({1}))};
    rt::KernelOp::create(b, mm.getLoc(), b.getStringAttr("slice"), ValueRange{product},
                         ValueRange{y}, b.getDictionaryAttr(params));
  }
}

struct CUDAPadMisalignedGemmResults
    : cuda::impl::CUDAPadMisalignedGemmResultsBase<CUDAPadMisalignedGemmResults> {
  void runOnOperation() override { padMisalignedGemmResults(getOperation()); }
};

} // namespace
