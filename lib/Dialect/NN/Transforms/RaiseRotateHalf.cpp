//===- RaiseRotateHalf.cpp - written-out rotate_half to nn.rotate_half ----===//
//
// Rotary embeddings written out by exporters (Hugging Face's Llama, Mistral,
// Qwen, GPT-NeoX: x * cos + rotate_half(x) * sin) compute the rotation
// partner as
//
//   x1 = x[..., :h]    x2 = x[..., h:]         (two Slices, or one Split)
//   rotate_half(x) = Concat(-x2, x1, axis=-1)
//
// Each slice and the concat is a copy of the tensor (on the CUDA target a
// strided-copy launch each), and the negation a pass of its own. As one
// nn.rotate_half it is one pass, and on CUDA a generated elementwise
// kernel that reads each element's partner where it lies, so the products
// with cos and sin and their sum fuse with it into one launch.
//
// The rewrite is exact (a concat of the same elements, negated or not); the
// slices and the negation stay where something else reads them. With
// `explain`, each raised concat gets a remark.
//
//===----------------------------------------------------------------------===//

#include "shardflow/Dialect/NN/Transforms/Passes.h"

#include "Matching.h"

#include "mlir/IR/Builders.h"

#include <algorithm>
#include <optional>

namespace shardflow::nn {
#define GEN_PASS_DEF_NNRAISEROTATEHALF
#include "shardflow/Dialect/NN/Transforms/Passes.h.inc"
} // namespace shardflow::nn

using namespace mlir;
using namespace shardflow;
using namespace shardflow::nn::matching;

namespace {

/// The tensor `v` is a half of, along its last dimension: `first` for
/// x[..., :h], else x[..., h:], where x's last dimension is 2h; null when
/// `v` is no such half (a step-1 Slice of the last axis alone, or a
/// two-way even Split of it).
Value halfOf(Value v, bool first) {
  RankedTensorType vt = typeOf(v);
  if (!vt || vt.getRank() < 1 || !vt.hasStaticShape())
    return {};
  int64_t rank = vt.getRank(), h = vt.getShape().back();
  auto isHalfOf = [&](Value x) {
    RankedTensorType xt = typeOf(x);
    if (!xt || xt.getShape().drop_back() != vt.getShape().drop_back() ||
        xt.getShape().back() != 2 * h || xt.getElementType() != vt.getElementType())
      return false;
    return true;
  };
  if (auto slice = v.getDefiningOp<nn::SliceOp>()) {
    Value x = slice.getInput();
    ArrayRef<int64_t> axes = slice.getAxes(), starts = slice.getStarts(),
                      steps = slice.getSteps();
    if (!isHalfOf(x) || axes.size() != 1 || starts.size() != 1 ||
        (axes[0] != rank - 1 && axes[0] != -1) || (!steps.empty() && steps[0] != 1))
      return {};
    int64_t start = starts[0] < 0 ? starts[0] + 2 * h : starts[0];
    start = std::clamp<int64_t>(start, 0, 2 * h);
    // The result type says how many elements it took (h, checked above).
    return start == (first ? 0 : h) ? x : Value();
  }
  if (auto split = v.getDefiningOp<nn::SplitOp>()) {
    Value x = split.getInput();
    int64_t axis = static_cast<int64_t>(split.getAxis()); // I64Attr reads as unsigned
    if (axis < 0)
      axis += rank;
    if (!isHalfOf(x) || axis != rank - 1 || split.getNumResults() != 2 ||
        split.getSizes() != ArrayRef<int64_t>{h, h})
      return {};
    return cast<OpResult>(v).getResultNumber() == (first ? 0u : 1u) ? x : Value();
  }
  return {};
}

struct NNRaiseRotateHalfPass : public nn::impl::NNRaiseRotateHalfBase<NNRaiseRotateHalfPass> {
  using NNRaiseRotateHalfBase::NNRaiseRotateHalfBase;

  void runOnOperation() override {
    SmallVector<nn::ConcatOp> concats;
    getOperation().walk([&](nn::ConcatOp op) { concats.push_back(op); });
    for (nn::ConcatOp concat : concats) {
      RankedTensorType yt = typeOf(concat.getResult());
      if (concat.getInputs().size() != 2 || !yt || yt.getRank() < 1 ||
          !isa<FloatType>(yt.getElementType()))
        continue;
      int64_t rank = yt.getRank();
      int64_t axis = static_cast<int64_t>(concat.getAxis()); // I64Attr reads as unsigned
      if (axis < 0)
        axis += rank;
      if (axis != rank - 1)
        continue;
      auto neg = concat.getInputs()[0].getDefiningOp<nn::NegOp>();
      if (!neg)
        continue;
      Value x = halfOf(neg.getInput(), /*first=*/false);
      if (!x || halfOf(concat.getInputs()[1], /*first=*/true) != x || typeOf(x) != yt)
        continue;
      OpBuilder b(concat);
      SmallVector<Location> locs = {concat.getInputs()[1].getDefiningOp()->getLoc(),
                                    neg.getInput().getDefiningOp()->getLoc(), neg.getLoc(),
                                    concat.getLoc()};
      auto rotated = nn::RotateHalfOp::create(b, b.getFusedLoc(locs), yt, x);
      concat.getResult().replaceAllUsesWith(rotated.getResult());
      if (explain)
        rotated.emitRemark("raised to nn.rotate_half: last dimension ")
            << yt.getShape().back();
      // The concat, then whatever only it read.
      SmallVector<Operation *> dead = {concat, neg, neg.getInput().getDefiningOp(),
                                       concat.getInputs()[1].getDefiningOp()};
      for (Operation *op : dead)
        if (op && op->use_empty())
          op->erase();
    }
  }
};

} // namespace
