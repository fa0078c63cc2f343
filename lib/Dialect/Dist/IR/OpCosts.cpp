//===- OpCosts.cpp - FLOPs and bytes of an op ------------------------------===//
//
// The cost estimators the op registry names in each op's entry. They read
// the op's current types, so the same estimate serves the global program
// (stage balancing) and a rank's piece of it (the planner's per-rank
// time). FLOPs count a multiply-add as two, as the field's MFU figures
// do; bytes are each operand read and each result written once, what a
// kernel that streams its tensors moves. Elementwise counts per element
// are rough (an exp or a tanh is one), which is what matters next to the
// contractions that dominate a transformer's time.
//
//===----------------------------------------------------------------------===//

#include "OpFactBuilders.h"

using namespace mlir;
using namespace shardflow;
using namespace shardflow::dist;

static double elements(Type t) {
  auto shaped = dyn_cast<ShapedType>(t);
  return shaped && shaped.hasStaticShape() ? double(shaped.getNumElements()) : 0;
}

static double bytesOf(Type t) {
  auto shaped = dyn_cast<ShapedType>(t);
  if (!shaped || !shaped.hasStaticShape())
    return 0;
  return double(shaped.getNumElements()) * double(nn::getElementStorageBytes(shaped.getElementType()));
}

/// Every operand read and every result written once.
static double streamedBytes(Operation *op) {
  double bytes = 0;
  for (Type t : op->getOperandTypes())
    bytes += bytesOf(t);
  for (Type t : op->getResultTypes())
    bytes += bytesOf(t);
  return bytes;
}

static double resultElements(Operation *op) {
  double n = 0;
  for (Type t : op->getResultTypes())
    n += elements(t);
  return n;
}

std::function<OpCost(Operation *)> dist::costPerElement(double flopsPerElement) {
  return [flopsPerElement](Operation *op) {
    return OpCost{flopsPerElement * resultElements(op), streamedBytes(op)};
  };
}

std::function<OpCost(Operation *)> dist::costPerInputElement(double flopsPerElement) {
  return [flopsPerElement](Operation *op) {
    return OpCost{flopsPerElement * elements(op->getOperand(0).getType()), streamedBytes(op)};
  };
}

OpCost dist::viewCost(Operation *) { return {}; }

OpCost dist::copyCost(Operation *op) { return {0, streamedBytes(op)}; }

OpCost dist::sourceCost(Operation *op) {
  double bytes = 0;
  for (Type t : op->getResultTypes())
    bytes += bytesOf(t);
  return {0, bytes};
}

/// 2 M N K per product of the batch: the result's elements times 2 K.
OpCost dist::matmulCost(Operation *op) {
  auto lhs = cast<RankedTensorType>(op->getOperand(0).getType());
  int64_t k = lhs.getShape().back();
  return {2.0 * double(k) * resultElements(op), streamedBytes(op)};
}

OpCost dist::gemmCost(Operation *op) {
  auto gemm = cast<nn::GemmOp>(op);
  auto a = cast<RankedTensorType>(gemm.getA().getType());
  int64_t k = gemm.getTransA() ? a.getDimSize(0) : a.getDimSize(1);
  // Plus one add per element for C.
  double c = gemm.getC() ? resultElements(op) : 0;
  return {2.0 * double(k) * resultElements(op) + c, streamedBytes(op)};
}

/// Two operations per term of the sum: every combination of the labels'
/// values, one multiply-add per operand past the first.
OpCost dist::einsumCost(Operation *op) {
  auto einsum = cast<nn::EinsumOp>(op);
  std::string why;
  auto equation = nn::parseEinsumEquation(einsum.getEquation(), einsum.getInputs().size(), why);
  if (failed(equation))
    return {resultElements(op), streamedBytes(op)};
  llvm::DenseMap<char, int64_t> sizes;
  for (auto [labels, input] : llvm::zip(equation->inputs, einsum.getInputs())) {
    ArrayRef<int64_t> shape = cast<RankedTensorType>(input.getType()).getShape();
    // An ellipsis spans the leading dims the labels do not name.
    size_t offset = shape.size() >= labels.size() ? shape.size() - labels.size() : 0;
    double leading = 1;
    for (size_t d = 0; d < offset; ++d)
      leading *= double(shape[d]);
    sizes['.'] = std::max<int64_t>(sizes.lookup('.'), int64_t(leading));
    for (auto [i, label] : llvm::enumerate(labels))
      if (label != '.' && offset + i < shape.size())
        sizes[label] = shape[offset + i];
  }
  double terms = 1;
  for (auto &[label, size] : sizes)
    terms *= double(std::max<int64_t>(size, 1));
  double multiplies = double(std::max<size_t>(einsum.getInputs().size(), 2) - 1);
  return {2.0 * multiplies * terms, streamedBytes(op)};
}

/// 2 (C / group) * window multiply-adds per output element.
OpCost dist::convCost(Operation *op) {
  auto conv = cast<nn::ConvOp>(op);
  ArrayRef<int64_t> w = cast<RankedTensorType>(conv.getWeight().getType()).getShape();
  double window = 1;
  for (int64_t d : w.drop_front(1)) // C / group, then the kernel dims
    window *= double(d);
  double bias = conv.getBias() ? resultElements(op) : 0;
  return {2.0 * window * resultElements(op) + bias, streamedBytes(op)};
}

/// One operation per window element per output element.
OpCost dist::poolCost(Operation *op) {
  double window = 1;
  if (auto kernel = op->getAttrOfType<DenseI64ArrayAttr>("kernel_shape")) {
    for (int64_t d : kernel.asArrayRef())
      window *= double(d);
  } else { // global pooling: the whole spatial extent
    ArrayRef<int64_t> in = cast<RankedTensorType>(op->getOperand(0).getType()).getShape();
    for (int64_t d : in.drop_front(2))
      window *= double(d);
  }
  return {window * elements(op->getResult(0).getType()), streamedBytes(op)};
}

/// Q K^T and P V, 2 D multiply-adds per score each, and the softmax (five
/// operations per score); a causal mask skips half the scores.
OpCost dist::attentionCost(Operation *op) {
  // nn.attention and nn.attention_grad: query, key and value first, and
  // the same attributes.
  auto q = cast<RankedTensorType>(op->getOperand(0).getType());
  auto k = cast<RankedTensorType>(op->getOperand(1).getType());
  auto v = cast<RankedTensorType>(op->getOperand(2).getType());
  auto intAttr = [&](StringRef name) {
    auto a = op->getAttrOfType<IntegerAttr>(name);
    return a ? a.getInt() : int64_t(0);
  };
  auto causal = op->getAttrOfType<BoolAttr>("is_causal");
  double batch = double(q.getDimSize(0)), heads, sq, sk, dqk, dv;
  if (q.getRank() == 4) {
    heads = double(q.getDimSize(1));
    sq = double(q.getDimSize(2));
    sk = double(k.getDimSize(2));
    dqk = double(q.getDimSize(3));
    dv = double(v.getDimSize(3));
  } else {
    heads = double(std::max<int64_t>(intAttr("q_num_heads"), 1));
    int64_t kvHeads = std::max<int64_t>(intAttr("kv_num_heads"), 1);
    sq = double(q.getDimSize(1));
    sk = double(k.getDimSize(1));
    dqk = double(q.getDimSize(2)) / heads;
    dv = double(v.getDimSize(2)) / double(kvHeads);
  }
  double scores = batch * heads * sq * sk;
  if (causal && causal.getValue())
    scores /= 2;
  // The backward recomputes Q K^T and the softmax, then four products:
  // dP = dY V^T, dQ = dS K, dK = dS^T Q, dV = P^T dY.
  if (isa<nn::AttentionGradOp>(op))
    return {scores * (6.0 * dqk + 4.0 * dv + 9.0), streamedBytes(op)};
  return {scores * (2.0 * dqk + 2.0 * dv + 5.0), streamedBytes(op)};
}
