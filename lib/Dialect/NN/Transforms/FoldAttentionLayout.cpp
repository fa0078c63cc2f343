//===- FoldAttentionLayout.cpp - attention on [B, S, H*D] directly --------===//
//
// Exporters split heads with reshape [B, S, H*D] -> [B, S, H, D] and
// transpose to [B, H, S, D] before attention (Llama: then a rotary
// embedding, which has a 3-D form too, or the rotation written out as
// x * cos + rotate_half(x) * sin with cos and sin [B, 1, S, D], which is
// rebuilt on the [B, S, H, D] tensor), and undo both after it. Each
// transpose is a full copy of an activation. nn.attention also takes the
// 3-D form ([B, S, H*D] with `q_num_heads` / `kv_num_heads`), which reads
// the heads where they lie, so when Q, K and V all come from such a split
// and head transpose, the attention takes the 3-D tensors and its result
// (viewed as [B, S, H, Dv], a reshape, which costs nothing) replaces the
// transpose that followed it. A training step's nn.attention_grad folds
// the same way: its query, key, value and result cotangent taken in the
// 3-D form (its saved log-sum-exp is the same in either layout), its
// cotangents viewed back. The transposes and reshapes left
// without users are erased.
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

#include <optional>

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

/// A rotation written out on a head-split tensor: x * cos + rotate_half(x) *
/// sin (any operand order), each intermediate read only by the next, the
/// result only by the attention; cos and sin [B|1, 1, S|1, D|1] (the same
/// for every head).
struct WrittenRotary {
  Value x, cos, sin;
};

std::optional<WrittenRotary> writtenRotary(Value v) {
  auto add = v.getDefiningOp<nn::AddOp>();
  if (!add || !add.getResult().hasOneUse())
    return std::nullopt;
  auto type = cast<RankedTensorType>(add.getResult().getType());
  if (type.getRank() != 4)
    return std::nullopt;
  auto perHead = [&](Value c) {
    auto t = dyn_cast<RankedTensorType>(c.getType());
    if (!t || t.getRank() != 4 || t.getDimSize(1) != 1 ||
        t.getElementType() != type.getElementType())
      return false;
    for (int d : {0, 2, 3})
      if (t.getDimSize(d) != 1 && t.getDimSize(d) != type.getDimSize(d))
        return false;
    return true;
  };
  // `m` = x * c with c per head (either order); x when it is.
  auto product = [&](Value m, Value &c) -> Value {
    auto mul = m.getDefiningOp<nn::MulOp>();
    if (!mul || !mul.getResult().hasOneUse() || mul.getResult().getType() != type)
      return {};
    for (auto [x, other] : {std::pair(mul.getLhs(), mul.getRhs()),
                            std::pair(mul.getRhs(), mul.getLhs())})
      if (x.getType() == type && perHead(other)) {
        c = other;
        return x;
      }
    return {};
  };
  for (auto [a, b] : {std::pair(add.getLhs(), add.getRhs()),
                      std::pair(add.getRhs(), add.getLhs())}) {
    WrittenRotary r;
    Value x = product(a, r.cos), rotated = product(b, r.sin);
    auto half = rotated ? rotated.getDefiningOp<nn::RotateHalfOp>() : nn::RotateHalfOp();
    if (x && half && half.getInput() == x && half.getResult().hasOneUse()) {
      r.x = x;
      return r;
    }
  }
  return std::nullopt;
}

/// The attention operand `v` folds: a head split and transpose, possibly
/// under a 4-D rotary embedding or a written-out rotation that only the
/// attention reads. Returns the head-split tensor's transpose input's
/// source ([B, S, H*D]) and H, as splitHeads.
std::pair<Value, int64_t> foldableSplit(Value v) {
  if (auto rotary = v.getDefiningOp<nn::RotaryEmbeddingOp>()) {
    if (!rotary.getResult().hasOneUse() || rotary.getNumHeads() != 0)
      return {};
    return splitHeads(rotary.getInput());
  }
  if (std::optional<WrittenRotary> r = writtenRotary(v))
    return splitHeads(r->x);
  return splitHeads(v);
}

/// The written-out rotation `r` rebuilt on the [B, S, H, D] tensor before
/// the head transpose (cos and sin viewed as [B, S, 1, D]: moving their
/// dimension of size 1 moves no element), viewed as [B, S, H*D].
Value flatWrittenRotary(const WrittenRotary &r, Value flat, OpBuilder &b, Location loc) {
  Value split = r.x.getDefiningOp<nn::TransposeOp>().getInput();
  auto perHead = [&](Value c) -> Value {
    auto t = cast<RankedTensorType>(c.getType());
    auto viewed = RankedTensorType::get(
        {t.getDimSize(0), t.getDimSize(2), 1, t.getDimSize(3)}, t.getElementType());
    return nn::ReshapeOp::create(b, loc, viewed, c);
  };
  Value cosine = nn::MulOp::create(b, loc, split, perHead(r.cos));
  Value rotated = nn::MulOp::create(b, loc, nn::RotateHalfOp::create(b, loc, split),
                                    perHead(r.sin));
  Value sum = nn::AddOp::create(b, loc, cosine, rotated);
  return nn::ReshapeOp::create(b, loc, flat.getType(), sum);
}

/// As splitHeads, also through a 4-D rotary embedding that only the
/// attention reads: it is rebuilt in its 3-D form (`num_heads` = H) on the
/// [B, S, H*D] tensor, which rotates the same features.
std::pair<Value, int64_t> splitHeadsSource(Value v, OpBuilder &b) {
  if (std::optional<WrittenRotary> r = writtenRotary(v)) {
    auto [x, heads] = splitHeads(r->x);
    if (!x)
      return {};
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPoint(v.getDefiningOp());
    return {flatWrittenRotary(*r, x, b, v.getLoc()), heads};
  }
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

/// The users of `v` when every one is the inverse head transpose (none at
/// all is fine); nullopt otherwise.
std::optional<SmallVector<nn::TransposeOp>> headMerges(Value v) {
  SmallVector<nn::TransposeOp> back;
  for (Operation *user : v.getUsers()) {
    auto t = dyn_cast<nn::TransposeOp>(user);
    if (!t || t.getPerm() != ArrayRef<int64_t>(kHeadsFirst))
      return std::nullopt;
    back.push_back(t);
  }
  return back;
}

/// Replaces each of `back` by a view of the 3-D `flat` in its [B, S, H, D]
/// type.
void replaceByViews(ArrayRef<nn::TransposeOp> back, Value flat) {
  for (nn::TransposeOp t : back) {
    OpBuilder tb(t);
    auto view = nn::ReshapeOp::create(tb, t.getLoc(), t.getResult().getType(), flat);
    t.getResult().replaceAllUsesWith(view.getResult());
    t.erase();
  }
}

/// Erases the ops of `chain` that nothing reads, users before producers,
/// until none is left unread.
void eraseUnread(SmallVectorImpl<Operation *> &chain) {
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

/// Adds the head transpose and split reshape (and rotary) behind `op` to
/// `chain`, once each.
void addSplitChain(Operation *op, SmallVectorImpl<Operation *> &chain) {
  for (; op && isa<nn::RotaryEmbeddingOp, nn::TransposeOp, nn::ReshapeOp>(op);
       op = op->getOperand(0).getDefiningOp()) {
    if (!llvm::is_contained(chain, op))
      chain.push_back(op);
    if (isa<nn::ReshapeOp>(op))
      break;
  }
}

/// An attention's backward on split and transposed heads, and its
/// cotangents transposed back: it takes the 3-D tensors as its forward
/// does. Its query, key and value are the forward's (no rotation is
/// looked through here: a rotary's result that both read keeps them
/// 4-D).
void foldAttentionGrad(nn::AttentionGradOp a) {
  if (cast<RankedTensorType>(a.getQuery().getType()).getRank() != 4)
    return;
  Value ins[] = {a.getQuery(), a.getKey(), a.getValue(), a.getResultGrad()};
  std::pair<Value, int64_t> flat[4];
  for (int i = 0; i < 4; ++i)
    if (!(flat[i] = splitHeads(ins[i])).first)
      return;
  if (flat[1].second != flat[2].second || flat[3].second != flat[0].second)
    return;
  std::optional<SmallVector<nn::TransposeOp>> back[3];
  for (int i = 0; i < 3; ++i)
    if (!(back[i] = headMerges(a->getResult(i))))
      return;
  OpBuilder b(a);
  SmallVector<Value> operands{flat[0].first, flat[1].first, flat[2].first, flat[3].first,
                              a.getLse()};
  if (Value mask = a.getMask())
    operands.push_back(mask);
  SmallVector<NamedAttribute> attrs(a->getAttrs());
  NamedAttrList list(attrs);
  list.set(a.getQNumHeadsAttrName(), b.getI64IntegerAttr(flat[0].second));
  list.set(a.getKvNumHeadsAttrName(), b.getI64IntegerAttr(flat[1].second));
  auto folded = nn::AttentionGradOp::create(b, a.getLoc(), operands, list.getAttrs());
  for (int i = 0; i < 3; ++i)
    replaceByViews(*back[i], folded->getResult(i));
  SmallVector<Operation *> chain;
  for (Value in : ins)
    addSplitChain(in.getDefiningOp(), chain);
  a.erase();
  eraseUnread(chain);
}

struct NNFoldAttentionLayout
    : shardflow::nn::impl::NNFoldAttentionLayoutBase<NNFoldAttentionLayout> {
  void runOnOperation() override {
    // A head split from another shape (the dynamo exporter's cotangents:
    // [B*S, H*D] -> [B, S, H, D]) reads the [B, S, H*D] view of its input
    // instead (a view of a view), the form the folds look for.
    getOperation().walk([&](nn::TransposeOp t) {
      auto r = t.getInput().getDefiningOp<nn::ReshapeOp>();
      if (t.getPerm() != ArrayRef<int64_t>(kHeadsFirst) || !r)
        return;
      auto to = cast<RankedTensorType>(r.getResult().getType());
      if (to.getRank() != 4 || cast<RankedTensorType>(r.getInput().getType()).getRank() == 3)
        return;
      OpBuilder b(r);
      auto flat = RankedTensorType::get(
          {to.getDimSize(0), to.getDimSize(1), to.getDimSize(2) * to.getDimSize(3)},
          to.getElementType());
      r->setOperand(0, nn::ReshapeOp::create(b, r.getLoc(), flat, r.getInput()).getResult());
    });
    SmallVector<nn::AttentionOp> candidates;
    getOperation().walk([&](nn::AttentionOp a) { candidates.push_back(a); });
    for (nn::AttentionOp a : candidates) {
      if (cast<RankedTensorType>(a.getQuery().getType()).getRank() != 4)
        continue;
      // Check every operand before rewriting any (a rotary is rebuilt
      // only once the attention is sure to fold).
      auto folds = [&](Value operand) { return bool(foldableSplit(operand).first); };
      if (!folds(a.getQuery()) || !folds(a.getKey()) || !folds(a.getValue()))
        continue;
      // The result must go back through the inverse transpose (every user).
      std::optional<SmallVector<nn::TransposeOp>> back = headMerges(a.getResult());
      if (!back || back->empty())
        continue;
      auto headsOf = [](Value operand) { return foldableSplit(operand).second; };
      if (headsOf(a.getKey()) != headsOf(a.getValue()))
        continue;
      OpBuilder b(a);
      auto [q, hq] = splitHeadsSource(a.getQuery(), b);
      auto [k, hk] = splitHeadsSource(a.getKey(), b);
      auto [v, hv] = splitHeadsSource(a.getValue(), b);
      auto folded = nn::AttentionOp::create(
          b, a.getLoc(), q, k, v, a.getMask(), a.getIsCausalAttr(), b.getI64IntegerAttr(hq),
          b.getI64IntegerAttr(hk), a.getScaleAttr(), a.getSoftcapAttr(), a.getSaveLseAttr());
      // The saved log-sum-exp ([B, Hq, Sq]) is the same in either layout.
      if (a.getLse())
        a.getLse().replaceAllUsesWith(folded.getLse());
      replaceByViews(*back, folded.getResult());
      // The old rotaries, head transposes (Q, K and V may share one) and
      // reshapes nothing reads any more, users before producers.
      SmallVector<Operation *> chain;
      for (Value in : {a.getQuery(), a.getKey(), a.getValue()}) {
        Operation *op = in.getDefiningOp();
        if (std::optional<WrittenRotary> r = writtenRotary(in)) {
          // add, its products, rotate_half; then the transpose and reshape.
          chain.push_back(op);
          for (Value operand : op->getOperands())
            chain.push_back(operand.getDefiningOp());
          for (Operation *mul : ArrayRef<Operation *>(chain).take_back(2))
            for (Value operand : mul->getOperands())
              if (auto half = operand.getDefiningOp<nn::RotateHalfOp>())
                chain.push_back(half);
          op = r->x.getDefiningOp();
        }
        addSplitChain(op, chain);
      }
      a.erase();
      eraseUnread(chain);
    }
    // The backward, where the forward's operands fold (its transposes go
    // once both have).
    SmallVector<nn::AttentionGradOp> grads;
    getOperation().walk([&](nn::AttentionGradOp a) { grads.push_back(a); });
    for (nn::AttentionGradOp a : grads)
      foldAttentionGrad(a);
  }
};

} // namespace
