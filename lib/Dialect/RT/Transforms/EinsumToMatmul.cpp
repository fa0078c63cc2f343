//===- EinsumToMatmul.cpp - two-operand einsums as matmuls -----------------===//
//
// The megatron presets turn a fused projection into an einsum
// ("...a,abc->...bc": activations times the rank's [K, 3, N/tp] block of
// the weight), and exporters write attention scores and other batched
// products as einsums too. Both targets multiply matrices fast (OpenBLAS,
// cuBLASLt) and run a general einsum as a loop nest (one thread per output
// element on CUDA, one serial loop with f64 accumulation on the CPU, where
// the megatron GPT-2's two projections took 90% of a forward). So a float
// einsum that is a matmul becomes one: a matmul of views when the labels
// are already in GEMM order, else transposes around one batched matmul.
// Both targets' pipelines run this pass (on CUDA, cuda-codegen-pipeline
// as the first of its rewrites).
//
//===----------------------------------------------------------------------===//

#include "shardflow/Dialect/RT/IR/RTOps.h"
#include "shardflow/Dialect/RT/Transforms/Passes.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/Sequence.h"

#include <cctype>
#include <string>

namespace shardflow::rt {
#define GEN_PASS_DEF_RTEINSUMTOMATMUL
#include "shardflow/Dialect/RT/Transforms/Passes.h.inc"
} // namespace shardflow::rt

using namespace mlir;
using namespace shardflow;

namespace {

ArrayRef<int64_t> shapeOf(Value v) { return cast<MemRefType>(v.getType()).getShape(); }
Type elemOf(Value v) { return cast<MemRefType>(v.getType()).getElementType(); }
int64_t numel(Value v) { return cast<MemRefType>(v.getType()).getNumElements(); }

/// The element types both targets' GEMMs take (f16 and bf16 run through
/// f32 on the CPU).
bool isMatmulType(Type t) { return t.isF32() || t.isF16() || t.isBF16(); }

/// An einsum that contracts the last dimension of its first operand with
/// the first of its second ("...a,abc->...bc", what the megatron preset
/// makes of a fused projection) is a matmul of views: [..., a] times
/// [a, b*c], viewed back as [..., b, c].
bool rewriteAsMatmulOfViews(rt::KernelOp k, const std::string &text) {
  // "<lhs>,<rhs>-><out>", lhs = P + "a", rhs = "a" + R, out = P + R,
  // with the labels of P ("..." allowed), a and R all distinct.
  size_t comma = text.find(','), arrow = text.find("->");
  if (comma == std::string::npos || arrow == std::string::npos || arrow < comma)
    return false;
  std::string lhs = text.substr(0, comma), rhs = text.substr(comma + 1, arrow - comma - 1),
              out = text.substr(arrow + 2);
  if (lhs.empty() || rhs.size() < 2 || rhs.find('.') != std::string::npos)
    return false;
  char a = lhs.back();
  std::string prefix = lhs.substr(0, lhs.size() - 1), rest = rhs.substr(1);
  if (rhs.front() != a || out != prefix + rest)
    return false;
  std::string labels = prefix + a + rest;
  llvm::erase_if(labels, [](char c) { return c == '.'; });
  llvm::SmallDenseSet<char> seen(labels.begin(), labels.end());
  if (seen.size() != labels.size())
    return false;
  Value x = k.getInputs()[0], w = k.getInputs()[1], y = k.getOutputs()[0];
  ArrayRef<int64_t> ws = shapeOf(w), ys = shapeOf(y);
  int64_t contracted = ws.front(), cols = numel(w) / std::max<int64_t>(contracted, 1);
  if (ys.size() < rest.size() || shapeOf(x).back() != contracted)
    return false;
  SmallVector<int64_t> flatOut(ys.drop_back(rest.size()));
  flatOut.push_back(cols);
  OpBuilder b(k);
  Location loc = k.getLoc();
  Value w2 = rt::ViewOp::create(b, loc, MemRefType::get({contracted, cols}, elemOf(w)), w);
  // The matmul writes a fresh buffer; the einsum's result becomes its view.
  auto flat = rt::AllocOp::create(b, loc, MemRefType::get(flatOut, elemOf(y)), IntegerAttr());
  rt::KernelOp::create(b, loc, b.getStringAttr("matmul"), ValueRange{x, w2},
                       ValueRange{flat}, b.getDictionaryAttr({}));
  auto view = rt::ViewOp::create(b, loc, cast<MemRefType>(y.getType()), flat);
  Operation *alloc = y.getDefiningOp();
  y.replaceAllUsesWith(view.getResult());
  k.erase();
  if (alloc && alloc->use_empty())
    alloc->erase();
  return true;
}

/// A two-operand einsum with an explicit output, no ellipsis and no label
/// twice in a term, each label of which is in the output or in both
/// operands, is one batched matmul: batch labels (in all three terms),
/// M (first operand and output), K (both operands only), N (second operand
/// and output). Operands are transposed to [batch, M, K] and [batch, K, N]
/// where their order differs, and the [batch, M, N] product to the output's
/// order: the target's GEMM does the arithmetic. Other einsums stay.
bool rewriteAsBatchedMatmul(rt::KernelOp k, const std::string &text) {
  Value x = k.getInputs()[0], w = k.getInputs()[1], y = k.getOutputs()[0];
  Type elem = elemOf(y);
  if (elemOf(x) != elem || elemOf(w) != elem || !y.getDefiningOp<rt::AllocOp>())
    return false;
  size_t comma = text.find(','), arrow = text.find("->");
  if (comma == std::string::npos || arrow == std::string::npos || arrow < comma)
    return false;
  std::string terms[3] = {text.substr(0, comma), text.substr(comma + 1, arrow - comma - 1),
                          text.substr(arrow + 2)};
  Value values[3] = {x, w, y};
  // Every term: letters only, each once, one per dimension; sizes agree.
  llvm::DenseMap<char, int64_t> size;
  bool ok = true;
  for (int t = 0; t < 3 && ok; ++t) {
    ArrayRef<int64_t> shape = shapeOf(values[t]);
    llvm::SmallDenseSet<char> seen;
    ok = terms[t].size() == shape.size();
    for (size_t d = 0; d < terms[t].size() && ok; ++d) {
      char c = terms[t][d];
      ok = std::isalpha(static_cast<unsigned char>(c)) && seen.insert(c).second &&
           (!size.count(c) || size[c] == shape[d]);
      size[c] = shape[d];
    }
  }
  if (!ok)
    return false;
  auto in = [&](int t, char c) { return terms[t].find(c) != std::string::npos; };
  std::string batch, m, n, kk;
  for (char c : terms[2]) {
    if (in(0, c) && in(1, c))
      batch.push_back(c);
    else if (in(0, c))
      m.push_back(c);
    else if (in(1, c))
      n.push_back(c);
    else
      ok = false; // an output label in no input
  }
  for (char c : terms[0])
    if (!in(2, c))
      in(1, c) ? kk.push_back(c) : (void)(ok = false); // summed within one operand
  for (char c : terms[1])
    if (!in(2, c) && !in(0, c))
      ok = false;
  if (!ok)
    return false;
  auto product = [&](const std::string &labels) {
    int64_t p = 1;
    for (char c : labels)
      p *= size[c];
    return p;
  };
  OpBuilder b(k);
  Location loc = k.getLoc();
  // `v` (labels `from`) in the order `to`: a transpose unless it is already.
  auto arrange = [&](Value v, const std::string &from, const std::string &to) -> Value {
    SmallVector<int64_t> perm, shape;
    for (char c : to) {
      perm.push_back(int64_t(from.find(c)));
      shape.push_back(size[c]);
    }
    if (llvm::equal(perm, llvm::seq<int64_t>(0, perm.size())))
      return v;
    auto t = rt::AllocOp::create(b, loc, MemRefType::get(shape, elem), IntegerAttr());
    rt::KernelOp::create(b, loc, b.getStringAttr("transpose"), ValueRange{v}, ValueRange{t},
                         b.getDictionaryAttr(
                             {b.getNamedAttr("perm", b.getDenseI64ArrayAttr(perm))}));
    return t;
  };
  auto shaped = [&](std::initializer_list<int64_t> dims) {
    SmallVector<int64_t> shape;
    if (!batch.empty())
      shape.push_back(product(batch));
    shape.append(dims.begin(), dims.end());
    return MemRefType::get(shape, elem);
  };
  int64_t M = product(m), N = product(n), K = product(kk);
  Value a = rt::ViewOp::create(b, loc, shaped({M, K}), arrange(x, terms[0], batch + m + kk));
  Value bt = rt::ViewOp::create(b, loc, shaped({K, N}), arrange(w, terms[1], batch + kk + n));
  auto prod = rt::AllocOp::create(b, loc, shaped({M, N}), IntegerAttr());
  rt::KernelOp::create(b, loc, b.getStringAttr("matmul"), ValueRange{a, bt}, ValueRange{prod},
                       b.getDictionaryAttr({}));
  std::string natural = batch + m + n;
  SmallVector<int64_t> naturalShape;
  for (char c : natural)
    naturalShape.push_back(size[c]);
  Value full = rt::ViewOp::create(b, loc, MemRefType::get(naturalShape, elem), prod);
  if (natural == terms[2]) {
    Operation *alloc = y.getDefiningOp();
    y.replaceAllUsesWith(full);
    k.erase();
    if (alloc->use_empty())
      alloc->erase();
    return true;
  }
  SmallVector<int64_t> perm;
  for (char c : terms[2])
    perm.push_back(int64_t(natural.find(c)));
  rt::KernelOp::create(b, loc, b.getStringAttr("transpose"), ValueRange{full}, ValueRange{y},
                       b.getDictionaryAttr({b.getNamedAttr("perm", b.getDenseI64ArrayAttr(perm))}));
  k.erase();
  return true;
}

} // namespace

/// Two-operand float einsums that are matmuls become them (the megatron
/// view form first, then the batched form); the rest stay einsums.
void rt::rewriteEinsumsAsMatmuls(func::FuncOp fn) {
  SmallVector<rt::KernelOp> einsums;
  fn.walk([&](rt::KernelOp k) {
    if (k.getKernel() == "einsum" && k.getInputs().size() == 2 && k.getOutputs().size() == 1 &&
        isMatmulType(elemOf(k.getOutputs()[0])))
      einsums.push_back(k);
  });
  for (rt::KernelOp k : einsums) {
    auto eq = dyn_cast_or_null<StringAttr>(k.getParam("equation"));
    if (!eq)
      continue;
    std::string text = eq.str();
    llvm::erase_if(text, [](char c) { return c == ' '; });
    if (!rewriteAsMatmulOfViews(k, text))
      rewriteAsBatchedMatmul(k, text);
  }
}

namespace {
struct RTEinsumToMatmulPass : public rt::impl::RTEinsumToMatmulBase<RTEinsumToMatmulPass> {
  void runOnOperation() override { rt::rewriteEinsumsAsMatmuls(getOperation()); }
};
} // namespace
