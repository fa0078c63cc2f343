//===- OpHandlers.cpp - the ONNX ops the importer supports ----------------===//
//
// The single list of supported ops, per domain: op type -> (handler, first
// version of the domain it exists in). The default ONNX domain is keyed by
// opset; com.microsoft (onnxruntime's contrib ops, as its transformer
// optimizer and onnxruntime-genai's model builder write them) by that
// domain's version. A node whose op is not in its domain's table is refused
// by name, and a node of any other domain by its domain.
//
//===----------------------------------------------------------------------===//

#include "GraphImporter.h"

#include "llvm/Support/Format.h"

namespace shardflow::onnx_import {

const llvm::StringMap<std::pair<GraphImporter::Handler, int64_t>> &
GraphImporter::handlers() {
  using G = GraphImporter;
  static const llvm::StringMap<std::pair<Handler, int64_t>> table = {
      {"Add", {&G::binary<nn::AddOp>, 1}},
      {"Sub", {&G::binary<nn::SubOp>, 1}},
      {"Mul", {&G::binary<nn::MulOp>, 1}},
      {"Div", {&G::binary<nn::DivOp>, 1}},
      {"Pow", {&G::binary<nn::PowOp>, 1}},
      {"Mod", {&G::importMod, 10}},
      {"Equal", {&G::binary<nn::EqualOp>, 1}},
      {"Less", {&G::binary<nn::LessOp>, 1}},
      {"Greater", {&G::binary<nn::GreaterOp>, 1}},
      {"And", {&G::binary<nn::AndOp>, 1}},
      {"Min", {&G::variadicChain<nn::MinOp>, 1}},
      {"Max", {&G::variadicChain<nn::MaxOp>, 1}},
      {"Sum", {&G::variadicChain<nn::AddOp>, 1}},
      {"Sqrt", {&G::unary<nn::SqrtOp>, 1}},
      {"Exp", {&G::unary<nn::ExpOp>, 1}},
      {"Log", {&G::unary<nn::LogOp>, 1}},
      {"Neg", {&G::unary<nn::NegOp>, 1}},
      {"Abs", {&G::unary<nn::AbsOp>, 1}},
      {"Reciprocal", {&G::unary<nn::ReciprocalOp>, 1}},
      {"Tanh", {&G::unary<nn::TanhOp>, 1}},
      {"Sigmoid", {&G::unary<nn::SigmoidOp>, 1}},
      {"Relu", {&G::unary<nn::ReluOp>, 1}},
      {"Erf", {&G::unary<nn::ErfOp>, 1}},
      {"Cos", {&G::unary<nn::CosOp>, 7}},
      {"Sin", {&G::unary<nn::SinOp>, 7}},
      {"Floor", {&G::unary<nn::FloorOp>, 6}},
      {"Ceil", {&G::unary<nn::CeilOp>, 6}},
      {"Round", {&G::unary<nn::RoundOp>, 11}},
      {"Sign", {&G::importSign, 9}},
      {"Softplus", {&G::importSoftplus, 1}},
      {"Elu", {&G::importElu, 6}},
      {"Selu", {&G::importSelu, 6}},
      {"HardSigmoid", {&G::importHardSigmoid, 6}},
      {"HardSwish", {&G::importHardSwish, 14}},
      {"Mish", {&G::importMish, 18}},
      {"PRelu", {&G::importPRelu, 9}},
      // Comparisons and tests written with the ops above (Ops/Elementwise.cpp).
      {"LessOrEqual", {&G::importLessOrEqual, 12}},
      {"GreaterOrEqual", {&G::importGreaterOrEqual, 12}},
      {"IsNaN", {&G::importIsNaN, 9}},
      {"IsInf", {&G::importIsInf, 10}},
      {"Or", {&G::importOr, 7}},
      {"Xor", {&G::importXor, 7}},
      {"CastLike", {&G::importCastLike, 15}},
      {"Size", {&G::importSize, 1}},
      {"Not", {&G::unary<nn::NotOp>, 1}},
      {"Identity", {&G::unary<nn::IdentityOp>, 1}},
      {"LeakyRelu", {&G::importLeakyRelu, 1}},
      {"Gelu", {&G::importGelu, 20}},
      {"Clip", {&G::importClip, 1}},
      {"Dropout", {&G::importDropout, 1}},
      {"Cast", {&G::importCast, 1}},
      {"Softmax", {&G::softmax<nn::SoftmaxOp>, 1}},
      {"LogSoftmax", {&G::softmax<nn::LogSoftmaxOp>, 1}},
      {"MatMul", {&G::importMatMul, 1}},
      {"Gemm", {&G::importGemm, 1}},
      {"Einsum", {&G::importEinsum, 12}},
      {"Conv", {&G::importConv, 1}},
      {"MaxPool", {&G::pool<nn::MaxPoolOp>, 1}},
      {"AveragePool", {&G::pool<nn::AveragePoolOp>, 1}},
      {"GlobalAveragePool", {&G::importGlobalAveragePool, 1}},
      {"BatchNormalization", {&G::importBatchNormalization, 1}},
      {"LayerNormalization", {&G::importLayerNormalization, 17}},
      {"RMSNormalization", {&G::importRMSNormalization, 23}},
      // ONNX normalization ops (compositions, Ops/Normalization.cpp)
      {"GroupNormalization", {&G::importGroupNormalization, 18}},
      {"InstanceNormalization", {&G::importInstanceNormalization, 1}},
      {"ReduceMean", {&G::reduce<nn::ReduceMeanOp, 18>, 1}},
      {"ReduceSum", {&G::reduce<nn::ReduceSumOp, 13>, 1}},
      {"ReduceMax", {&G::reduce<nn::ReduceMaxOp, 18>, 1}},
      {"ReduceMin", {&G::reduce<nn::ReduceMinOp, 18>, 1}},
      {"ReduceProd", {&G::reduce<nn::ReduceProdOp, 18>, 1}},
      {"ArgMax", {&G::importArgMax, 1}},
      {"ArgMin", {&G::importArgMin, 1}},
      // ONNX reduction ops (compositions, Ops/Reduction.cpp)
      {"ReduceL2", {&G::importReduceL2, 1}},
      {"ReduceLogSumExp", {&G::importReduceLogSumExp, 1}},
      {"ReduceSumSquare", {&G::importReduceSumSquare, 1}},
      {"Reshape", {&G::importReshape, 5}},
      {"Transpose", {&G::importTranspose, 1}},
      {"Flatten", {&G::importFlatten, 1}},
      {"Squeeze", {&G::importSqueeze, 1}},
      {"Unsqueeze", {&G::importUnsqueeze, 1}},
      {"Concat", {&G::importConcat, 1}},
      {"Split", {&G::importSplit, 1}},
      {"Slice", {&G::importSlice, 10}},
      {"Pad", {&G::importPad, 11}},
      {"Gather", {&G::importGather, 1}},
      {"GatherElements", {&G::importGatherElements, 11}},
      {"ScatterND", {&G::importScatterND, 11}},
      {"Expand", {&G::importExpand, 8}},
      {"Where", {&G::importWhere, 9}},
      {"Trilu", {&G::importTrilu, 14}},
      {"CumSum", {&G::importCumSum, 11}},
      {"Range", {&G::importRange, 11}},
      {"Shape", {&G::importShape, 1}},
      {"ConstantOfShape", {&G::importConstantOfShape, 9}},
      {"Constant", {&G::importConstant, 1}},
      {"TopK", {&G::importTopK, 10}},
      {"Attention", {&G::importAttention, 23}},
      {"RotaryEmbedding", {&G::importRotaryEmbedding, 23}},
      // onnxruntime's SimplifiedLayerNormalization, which it registers in
      // the default domain (builders also write it in com.microsoft, below).
      {"SimplifiedLayerNormalization",
       {&G::importSimplifiedLayerNormalization, 1}},
      // ONNX data movement and loss ops
      {"GatherND", {&G::importGatherND, 11}},
      {"ScatterElements", {&G::importScatterElements, 11}},
      {"OneHot", {&G::importOneHot, 9}},
      {"Tile", {&G::importTile, 6}},
      {"NonZero", {&G::importNonZero, 9}},
      {"NegativeLogLikelihoodLoss", {&G::importNegativeLogLikelihoodLoss, 13}},
      {"SoftmaxCrossEntropyLoss", {&G::importSoftmaxCrossEntropyLoss, 13}},
  };
  return table;
}

const llvm::StringMap<std::pair<GraphImporter::Handler, int64_t>> &
GraphImporter::contribHandlers() {
  using G = GraphImporter;
  // Quantized contrib ops (MatMulNBits, QAttention, QLinear*, ...) are left
  // out on purpose: they are refused by name.
  static const llvm::StringMap<std::pair<Handler, int64_t>> table = {
      {"SkipLayerNormalization", {&G::importSkipLayerNormalization, 1}},
      {"SkipSimplifiedLayerNormalization",
       {&G::importSkipSimplifiedLayerNormalization, 1}},
      {"SimplifiedLayerNormalization",
       {&G::importSimplifiedLayerNormalization, 1}},
      {"Gelu", {&G::importContribGelu, 1}},
      {"BiasGelu", {&G::importBiasGelu, 1}},
      {"FastGelu", {&G::importFastGelu, 1}},
      {"QuickGelu", {&G::importQuickGelu, 1}},
      {"RotaryEmbedding", {&G::importContribRotaryEmbedding, 1}},
      {"Attention", {&G::importContribAttention, 1}},
      {"MultiHeadAttention", {&G::importMultiHeadAttention, 1}},
      {"GroupQueryAttention", {&G::importGroupQueryAttention, 1}},
  };
  return table;
}

void GraphImporter::printSupportedOps(llvm::raw_ostream &os) {
  auto print = [&](const llvm::StringMap<std::pair<Handler, int64_t>> &table) {
    SmallVector<std::pair<StringRef, int64_t>> ops;
    for (const auto &entry : table)
      ops.push_back({entry.getKey(), entry.getValue().second});
    llvm::sort(ops);
    for (auto [name, since] : ops)
      os << "  " << llvm::left_justify(name, 34) << " since " << since << "\n";
  };
  os << "default domain (ai.onnx), models of opset " << kMinOpset << " to " << kMaxOpset
     << ": " << handlers().size() << " ops\n";
  print(handlers());
  os << "com.microsoft (onnxruntime's contrib ops): " << contribHandlers().size() << " ops\n";
  print(contribHandlers());
}

} // namespace shardflow::onnx_import

void shardflow::printSupportedOps(llvm::raw_ostream &os) {
  onnx_import::GraphImporter::printSupportedOps(os);
}
