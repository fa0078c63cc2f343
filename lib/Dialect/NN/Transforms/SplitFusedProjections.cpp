//===- SplitFusedProjections.cpp - one GEMM per piece of a fused projection -===//
//
// GPT-2 and BERT-style exports compute Q, K and V with one matmul against a
// fused [K, 3N] weight (plus a fused bias) and split the result along its
// last dimension. On the GPU the split is a copy of the whole activation.
// When the weight (and the bias) are model weights or constants read only
// there, each piece is instead computed by its own matmul against its
// column block of the weight: a weight slice the runtime loads at start
// (the same `global_shape`/`starts` table sharding uses), so the split and
// its copy disappear, and each bias add rides on its GEMM's epilogue.
//
// Programs that carry a mesh are left alone (their weights' slice tables
// are per rank); the pass runs on the CUDA target's per-rank program.
//
//===----------------------------------------------------------------------===//

#include "shardflow/Dialect/NN/IR/NNOps.h"
#include "shardflow/Dialect/NN/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"

namespace shardflow::nn {
#define GEN_PASS_DEF_NNSPLITFUSEDPROJECTIONS
#include "shardflow/Dialect/NN/Transforms/Passes.h.inc"
} // namespace shardflow::nn

using namespace mlir;
using namespace shardflow;

namespace {

RankedTensorType typeOf(Value v) { return cast<RankedTensorType>(v.getType()); }

/// A weight read only through `v`: the nn.weight itself, or an nn.cast of
/// it (mixed precision). Returns the weight and the cast (or null).
std::pair<nn::WeightOp, nn::CastOp> soleWeight(Value v) {
  if (!v.hasOneUse())
    return {};
  if (auto cast = v.getDefiningOp<nn::CastOp>()) {
    auto w = cast.getInput().getDefiningOp<nn::WeightOp>();
    if (w && w.getResult().hasOneUse() && !w.getGlobalShape())
      return {w, cast};
    return {};
  }
  auto w = v.getDefiningOp<nn::WeightOp>();
  if (w && !w.getGlobalShape())
    return {w, nn::CastOp()};
  return {};
}

/// The block of `w` (and its cast) starting at column `offset` of its last
/// dimension with `size` columns, as a new weight slice (one rank).
Value sliceWeight(OpBuilder &b, nn::WeightOp w, nn::CastOp cast, int64_t offset, int64_t size) {
  RankedTensorType whole = typeOf(w.getResult());
  SmallVector<int64_t> shape(whole.getShape());
  SmallVector<int64_t> start(shape.size(), 0);
  start.back() = offset;
  shape.back() = size;
  auto slice = nn::WeightOp::create(
      b, w.getLoc(), RankedTensorType::get(shape, whole.getElementType()), w.getNameAttr(),
      w.getStorageAttr(), w.getFileAttr(), w.getOffsetAttr(), w.getSizeAttr(),
      b.getDenseI64ArrayAttr(whole.getShape()),
      b.getArrayAttr({b.getDenseI64ArrayAttr(start)}));
  if (!cast)
    return slice;
  return nn::CastOp::create(b, cast.getLoc(), slice, cast.getToAttr());
}

/// Columns [offset, offset + size) of a 1-D bias: a weight slice or a
/// slice of a constant.
Value sliceBias(OpBuilder &b, Value bias, int64_t offset, int64_t size) {
  if (auto c = bias.getDefiningOp<nn::ConstantOp>()) {
    auto dense = dyn_cast<DenseElementsAttr>(c.getValue());
    if (!dense)
      return {};
    auto type = RankedTensorType::get({size}, dense.getElementType());
    if (dense.isSplat())
      return nn::ConstantOp::create(b, c.getLoc(), dense.resizeSplat(type));
    SmallVector<Attribute> values(dense.getValues<Attribute>());
    return nn::ConstantOp::create(
        b, c.getLoc(),
        DenseElementsAttr::get(type, ArrayRef<Attribute>(values).slice(offset, size)));
  }
  auto [w, cast] = soleWeight(bias);
  if (!w)
    return {};
  return sliceWeight(b, w, cast, offset, size);
}

struct NNSplitFusedProjections
    : shardflow::nn::impl::NNSplitFusedProjectionsBase<NNSplitFusedProjections> {
  void runOnOperation() override {
    func::FuncOp fn = getOperation();
    bool hasMesh = false;
    fn->getParentOp()->walk([&](Operation *op) {
      hasMesh |= op->getName().getStringRef() == "dist.mesh";
    });
    if (hasMesh)
      return;
    SmallVector<nn::SplitOp> splits;
    fn.walk([&](nn::SplitOp s) { splits.push_back(s); });
    for (nn::SplitOp split : splits)
      rewrite(split);
  }

  void rewrite(nn::SplitOp split) {
    Value fused = split.getInput();
    int64_t rank = typeOf(fused).getRank();
    if (rank < 2 || split.getAxis() != rank - 1 || !fused.hasOneUse())
      return;
    nn::AddOp add = fused.getDefiningOp<nn::AddOp>();
    Value product = fused, bias;
    if (add) {
      // matmul + bias, the bias 1-D over the last dimension, either side.
      Value lhs = add.getLhs(), rhs = add.getRhs();
      product = lhs.getDefiningOp<nn::MatMulOp>() ? lhs : rhs;
      bias = product == lhs ? rhs : lhs;
      if (typeOf(bias).getRank() != 1 || typeOf(product) != typeOf(fused) ||
          !bias.hasOneUse())
        return;
    }
    auto matmul = product.getDefiningOp<nn::MatMulOp>();
    if (!matmul || !product.hasOneUse())
      return;
    auto [w, cast] = soleWeight(matmul.getRhs());
    if (!w || typeOf(w.getResult()).getRank() != 2)
      return;
    if (bias && !bias.getDefiningOp<nn::ConstantOp>() && !soleWeight(bias).first)
      return;
    OpBuilder b(split);
    int64_t offset = 0;
    SmallVector<Value> pieces;
    for (auto [i, result] : llvm::enumerate(split.getResults())) {
      int64_t size = typeOf(result).getShape().back();
      Value wi = sliceWeight(b, w, cast, offset, size);
      Value piece = nn::MatMulOp::create(b, matmul.getLoc(), matmul.getLhs(), wi);
      if (bias) {
        Value bi = sliceBias(b, bias, offset, size);
        if (!bi) {
          // Undo: nothing was replaced yet.
          for (Value p : llvm::reverse(pieces))
            eraseChain(p);
          eraseChain(piece);
          return;
        }
        piece = nn::AddOp::create(b, add.getLoc(), piece, bi);
      }
      if (piece.getType() != result.getType()) {
        for (Value p : llvm::reverse(pieces))
          eraseChain(p);
        eraseChain(piece);
        return;
      }
      pieces.push_back(piece);
      offset += size;
    }
    for (auto [result, piece] : llvm::zip(split.getResults(), pieces))
      result.replaceAllUsesWith(piece);
    // The fused chain, users first.
    SmallVector<Operation *> dead = {split};
    if (add)
      dead.push_back(add);
    dead.push_back(matmul);
    if (cast)
      dead.push_back(cast);
    dead.push_back(w);
    if (bias)
      for (Operation *op = bias.getDefiningOp(); op;) {
        dead.push_back(op);
        auto c = dyn_cast<nn::CastOp>(op);
        op = c ? c.getInput().getDefiningOp() : nullptr;
      }
    for (Operation *op : dead)
      if (op->use_empty())
        op->erase();
  }

  /// Erases a piece built for a rewrite that was abandoned.
  static void eraseChain(Value v) {
    SmallVector<Operation *> work = {v.getDefiningOp()};
    while (!work.empty()) {
      Operation *op = work.pop_back_val();
      if (!op || !op->use_empty())
        continue;
      SmallVector<Operation *> operands;
      for (Value operand : op->getOperands())
        operands.push_back(operand.getDefiningOp());
      op->erase();
      for (Operation *def : operands)
        if (def && isa<nn::WeightOp, nn::CastOp, nn::ConstantOp, nn::AddOp, nn::MatMulOp>(def))
          work.push_back(def);
    }
  }
};

} // namespace
