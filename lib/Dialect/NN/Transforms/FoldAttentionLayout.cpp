//===- FoldAttentionLayout.cpp - attention on [B, S, H*D] directly --------===//
//
// Exporters split heads with reshape [B, S, H*D] -> [B, S, H, D] and
// transpose to [B, H, S, D] before attention (Llama: then a rotary
// embedding, which has a 3-D form too), and undo both after it. Each
// transpose is a full copy of an activation. nn.attention also takes the
// 3-D form ([B, S, H*D] with `q_num_heads` / `kv_num_heads`), which reads
// the heads where they lie, so when Q, K and V all come from such a split
// and head transpose, the attention takes the 3-D tensors and its result
// (viewed as [B, S, H, Dv], a reshape, which costs nothing) replaces the
// transpose that followed it. The transposes and reshapes left without
// users are erased.
//
// It runs on the per-rank program, after sharding, so sharding sees the
// form the exporter wrote.
//
//===----------------------------------------------------------------------===//

#include "shardflow/Dialect/NN/IR/NNOps.h"
#include "shardflow/Dialect/NN/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/SetVector.h"

namespace shardflow::nn {
#define GEN_PASS_DEF_NNFOLDATTENTIONLAYOUT
#include "shardflow/Dialect/NN/Transforms/Passes.h.inc"
} // namespace shardflow::nn

using namespace mlir;
using namespace shardflow;

namespace {

constexpr int64_t kHeadsFirst[] = {0, 2, 1, 3};

/// The 3-D [B, S, H*D] tensor whose head split (reshape to [B, S, H, D]) and
/// transpose (0, 2, 1, 3) gave `v`, and H; or null.
std::pair<Value, int64_t> splitHeads(Value v) {
  auto t = v.getDefiningOp<nn::TransposeOp>();
  if (!t || t.getPerm() != ArrayRef<int64_t>(kHeadsFirst))
    return {};
  auto r = t.getInput().getDefiningOp<nn::ReshapeOp>();
  if (!r)
    return {};
  auto from = cast<RankedTensorType>(r.getInput().getType());
  auto to = cast<RankedTensorType>(r.getResult().getType());
  if (from.getRank() != 3 || to.getRank() != 4 || from.getDimSize(0) != to.getDimSize(0) ||
      from.getDimSize(1) != to.getDimSize(1) ||
      from.getDimSize(2) != to.getDimSize(2) * to.getDimSize(3))
    return {};
  return {r.getInput(), to.getDimSize(2)};
}

/// As splitHeads, also through a 4-D rotary embedding that only the
/// attention reads: it is rebuilt in its 3-D form (`num_heads` = H) on the
/// [B, S, H*D] tensor, which rotates the same features.
std::pair<Value, int64_t> splitHeadsSource(Value v, OpBuilder &b) {
  auto rotary = v.getDefiningOp<nn::RotaryEmbeddingOp>();
  if (!rotary)
    return splitHeads(v);
  if (!rotary.getResult().hasOneUse() || rotary.getNumHeads() != 0)
    return {};
  auto [x, heads] = splitHeads(rotary.getInput());
  if (!x)
    return {};
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPoint(rotary);
  auto flat = nn::RotaryEmbeddingOp::create(
      b, rotary.getLoc(), x, rotary.getCosCache(), rotary.getSinCache(),
      rotary.getPositionIds(), rotary.getInterleavedAttr(), b.getI64IntegerAttr(heads),
      rotary.getRotaryEmbeddingDimAttr());
  return {flat.getResult(), heads};
}

struct NNFoldAttentionLayout
    : shardflow::nn::impl::NNFoldAttentionLayoutBase<NNFoldAttentionLayout> {
  void runOnOperation() override {
    SmallVector<nn::AttentionOp> candidates;
    getOperation().walk([&](nn::AttentionOp a) { candidates.push_back(a); });
    for (nn::AttentionOp a : candidates) {
      if (cast<RankedTensorType>(a.getQuery().getType()).getRank() != 4)
        continue;
      // Check every operand before rewriting any (a rotary is rebuilt
      // only once the attention is sure to fold).
      auto folds = [&](Value operand) {
        auto rotary = operand.getDefiningOp<nn::RotaryEmbeddingOp>();
        if (rotary && (!rotary.getResult().hasOneUse() || rotary.getNumHeads() != 0))
          return false;
        return bool(splitHeads(rotary ? rotary.getInput() : operand).first);
      };
      if (!folds(a.getQuery()) || !folds(a.getKey()) || !folds(a.getValue()))
        continue;
      // The result must go back through the inverse transpose (every user).
      SmallVector<nn::TransposeOp> back;
      for (Operation *user : a.getResult().getUsers()) {
        auto t = dyn_cast<nn::TransposeOp>(user);
        if (!t || t.getPerm() != ArrayRef<int64_t>(kHeadsFirst))
          break;
        back.push_back(t);
      }
      if (back.empty() ||
          int64_t(back.size()) != std::distance(a.getResult().getUses().begin(),
                                                a.getResult().getUses().end()))
        continue;
      auto headsOf = [](Value operand) {
        auto rotary = operand.getDefiningOp<nn::RotaryEmbeddingOp>();
        return splitHeads(rotary ? rotary.getInput() : operand).second;
      };
      if (headsOf(a.getKey()) != headsOf(a.getValue()))
        continue;
      OpBuilder b(a);
      auto [q, hq] = splitHeadsSource(a.getQuery(), b);
      auto [k, hk] = splitHeadsSource(a.getKey(), b);
      auto [v, hv] = splitHeadsSource(a.getValue(), b);
      auto folded = nn::AttentionOp::create(
          b, a.getLoc(), q, k, v, a.getMask(), a.getIsCausalAttr(), b.getI64IntegerAttr(hq),
          b.getI64IntegerAttr(hk), a.getScaleAttr(), a.getSoftcapAttr());
      for (nn::TransposeOp t : back) {
        OpBuilder tb(t);
        auto view = nn::ReshapeOp::create(tb, t.getLoc(), t.getResult().getType(),
                                          folded.getResult());
        t.getResult().replaceAllUsesWith(view.getResult());
        t.erase();
      }
      // The old rotaries, head transposes (Q, K and V may share one) and
      // reshapes nothing reads any more, users before producers.
      SmallVector<Operation *> chain;
      for (Value in : {a.getQuery(), a.getKey(), a.getValue()})
        for (Operation *op = in.getDefiningOp();
             op && isa<nn::RotaryEmbeddingOp, nn::TransposeOp, nn::ReshapeOp>(op);
             op = op->getOperand(0).getDefiningOp()) {
          if (!llvm::is_contained(chain, op))
            chain.push_back(op);
          if (isa<nn::ReshapeOp>(op))
            break;
        }
      a.erase();
      bool erased = true;
      while (erased) {
        erased = false;
        for (Operation *&op : chain)
          if (op && op->use_empty()) {
            op->erase();
            op = nullptr;
            erased = true;
          }
      }
    }
  }
};

} // namespace
