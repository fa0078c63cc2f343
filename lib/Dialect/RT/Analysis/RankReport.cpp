//===- RankReport.cpp - what each rank holds and sends ---------------------===//
//
// See RankReport.h. Weights are counted by name (a weight may be loaded as
// several slices, e.g. a fused projection's column blocks); collectives by
// the bytes of their buffer and what a rank sends with ring algorithms.
//
//===----------------------------------------------------------------------===//

#include "shardflow/Dialect/RT/Analysis/RankReport.h"
#include "shardflow/Dialect/NN/IR/NNOps.h"
#include "shardflow/Dialect/RT/IR/RTOps.h"
#include "shardflow/Planner/CollectiveCostModel.h"
#include "shardflow/Support/ONNXLocation.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <cmath>

using namespace mlir;
using namespace shardflow;

/// --report: what each rank holds and what moves between ranks.
/// "NVLink 10 us + 360 GB/s within 8 ranks, InfiniBand 25 us + 45 GB/s".
static std::string describeLevels(const CollectiveCostModel &model) {
  std::string text;
  for (const LinkLevel &level : model.levels()) {
    if (!text.empty())
      text += ", ";
    text += llvm::formatv("{0} {1:F0} us + {2:F0} GB/s", level.name, level.latencySeconds * 1e6,
                          level.busBandwidth / 1e9)
                .str();
    if (level.ranksPerGroup > 0)
      text += " within " + std::to_string(level.ranksPerGroup) + " ranks";
  }
  return text;
}

void shardflow::rt::printRankReport(ModuleOp module, llvm::raw_ostream &os) {
  CollectiveCostModel model = CollectiveCostModel::h100Cluster();
  const char *modelName = "H100 cluster";
  auto bytesOf = [](Type t) -> int64_t {
    auto m = cast<MemRefType>(t);
    return m.getNumElements() * nn::getElementStorageBytes(m.getElementType());
  };
  module.walk([&](func::FuncOp fn) {
    int64_t world = 1;
    if (auto w = fn->getAttrOfType<IntegerAttr>("rt.world_size"))
      world = w.getInt();
    // Per weight name: the bytes this rank holds (a weight may be loaded as
    // several slices, e.g. a fused projection's column blocks) and the
    // whole tensor's bytes.
    llvm::MapVector<StringRef, std::pair<int64_t, int64_t>> byName;
    SmallVector<int64_t> padding; // per rank: zero-padded bytes of weights
    int paddedWeights = 0;
    SmallVector<std::string> steps;
    int64_t moved = 0, sent = 0;
    double totalSeconds = 0;
    // Float initializers small enough to be embedded as constants are
    // parameters too (norm scales, biases): an rt.constant still located at
    // the initializer's name. Each rank holds all of it.
    int64_t embedded = 0, embeddedCount = 0;
    fn.walk([&](Operation *op) {
      if (auto c = dyn_cast<rt::ConstantOp>(op)) {
        auto m = cast<MemRefType>(c->getResult(0).getType());
        if (!getInitializerName(c->getLoc()).empty() && isa<FloatType>(m.getElementType())) {
          embedded += bytesOf(m);
          ++embeddedCount;
        }
        return;
      }
      if (auto w = dyn_cast<rt::WeightOp>(op)) {
        auto m = cast<MemRefType>(w.getType());
        int64_t n = m.getNumElements();
        if (auto g = w.getGlobalShapeAttr()) {
          n = 1;
          for (int64_t d : g.asArrayRef())
            n *= d;
        }
        auto &entry = byName[w.getName()];
        entry.first += bytesOf(w.getType());
        int64_t elementBytes = nn::getElementStorageBytes(m.getElementType());
        entry.second = n * elementBytes;
        // A zero-padded slice reaches past the stored tensor: count, per
        // rank, the buffer's elements outside it (the slice's shape in
        // stored order is the buffer's with the permutation undone).
        if (auto g = w.getGlobalShapeAttr(); g && w.getZeroPadded() && w.getStartsAttr()) {
          SmallVector<int64_t> shape(m.getShape());
          if (auto perm = w.getPermutationAttr())
            for (auto [i, d] : llvm::enumerate(perm.asArrayRef()))
              shape[d] = m.getShape()[i];
          ArrayAttr starts = w.getStartsAttr();
          padding.resize(std::max<size_t>(padding.size(), starts.size()), 0);
          for (auto [r, startsAttr] : llvm::enumerate(starts)) {
            ArrayRef<int64_t> start = cast<DenseI64ArrayAttr>(startsAttr).asArrayRef();
            int64_t inside = 1;
            for (auto [d, size] : llvm::enumerate(shape))
              inside *= std::clamp<int64_t>(g[d] - start[d], 0, size);
            padding[r] += (m.getNumElements() - inside) * elementBytes;
          }
          ++paddedWeights;
        }
        return;
      }
      StringRef name = op->getName().getStringRef();
      if (!name.starts_with("rt.") ||
          isa<rt::KernelOp, rt::LaunchOp, rt::AllocOp,
              rt::ViewOp, rt::ConstantOp>(op) ||
          op->getNumOperands() == 0)
        return;
      auto kind = runtime::parseCollectiveKind(name.drop_front(3));
      if (!kind || *kind == runtime::CollectiveKind::LocalSlice)
        return; // each rank keeps its piece of a local slice: nothing moves
      int64_t b = bytesOf(op->getOperand(0).getType());
      SmallVector<int64_t> group;
      if (auto groups = op->getAttrOfType<ArrayAttr>("groups"); groups && !groups.empty())
        group.assign(cast<DenseI64ArrayAttr>(groups[0]).asArrayRef().begin(),
                     cast<DenseI64ArrayAttr>(groups[0]).asArrayRef().end());
      else // a send, receive or permute: priced over the world's links
        for (int64_t r = 0; r < world; ++r)
          group.push_back(r);
      int64_t n = std::max<int64_t>(int64_t(group.size()), 1);
      // nccl-tests' algorithm bytes: an all_gather's output, the others'
      // operand.
      double algorithmBytes = double(b) * (*kind == runtime::CollectiveKind::AllGather ? n : 1);
      int64_t out = int64_t(std::floor(CollectiveCostModel::bytesSent(*kind, n, algorithmBytes) +
                                       1e-6));
      double seconds = model.seconds(*kind, group, algorithmBytes);
      std::string line;
      llvm::raw_string_ostream ls(line);
      ls << "  step " << steps.size() + 1 << ": " << name << " " << op->getOperand(0).getType()
         << ", " << b << " bytes per rank";
      if (op->getAttr("groups"))
        ls << ", groups of " << n;
      ls << llvm::formatv(", sends {0} in {1:F1} us over {2} (", out, seconds * 1e6,
                          model.levelOf(group).name)
         << describeLocation(op->getLoc()) << ")";
      steps.push_back(line);
      moved += b;
      sent += out;
      totalSeconds += seconds;
    });
    int64_t local = 0, global = 0, slicedLocal = 0, slicedGlobal = 0;
    int weights = int(byName.size()), sliced = 0;
    for (auto &[name, bytes] : byName) {
      local += bytes.first;
      global += bytes.second;
      if (bytes.first < bytes.second) {
        ++sliced;
        slicedLocal += bytes.first;
        slicedGlobal += bytes.second;
      }
    }
    int64_t peak = 0;
    if (auto p = fn->getAttrOfType<IntegerAttr>("rt.peak_bytes"))
      peak = p.getInt();
    os << "report: @" << fn.getName() << " on " << world << " rank"
       << (world == 1 ? "" : "s") << " (every rank runs the same program)\n";
    // Every float initializer is a parameter, weight or embedded constant;
    // the importer records their total (nn.parameter_bytes).
    int64_t weightsLocal = local;
    local += embedded;
    global += embedded;
    if (auto total = module->getAttrOfType<IntegerAttr>("nn.parameter_bytes"))
      global = std::max(global, total.getInt());
    os << llvm::formatv("  parameters per rank: {0} bytes in {1} weights ({2} sliced) and "
                        "{3} embedded constants ({4} bytes); the whole model has {5} bytes "
                        "of float initializers: {6:F3} per rank\n",
                        local, weights, sliced, embeddedCount, embedded, global,
                        global ? double(local) / double(global) : 1.0);
    if (sliced)
      os << llvm::formatv("  split weights: {0} of {1} weights, {2} of their {3} bytes per "
                          "rank ({4:F3}); the other {5} weights are whole on every rank "
                          "({6} bytes)\n",
                          sliced, weights, slicedLocal, slicedGlobal,
                          double(slicedLocal) / double(slicedGlobal), weights - sliced,
                          weightsLocal - slicedLocal);
    if (paddedWeights) {
      int64_t most = *llvm::max_element(padding);
      os << llvm::formatv("  zero padding: {0} of those bytes per rank{1} in {2} weight "
                          "slice{3} that reach past the stored tensor (a GEMM's result rows "
                          "aligned, or a vocabulary padded to the tensor-parallel size)\n",
                          most, llvm::all_equal(padding) ? "" : " at most", paddedWeights,
                          paddedWeights == 1 ? "" : "s");
    }
    os << "  peak activation bytes per rank: " << peak << "\n";
    os << "  collectives: " << steps.size() << ", " << moved
       << " bytes per rank in total; each rank sends " << sent
       << " (ring algorithms)\n";
    if (!steps.empty())
      os << llvm::formatv("  predicted communication time: {0:F1} us per run (the collective "
                          "cost model's {1}: {2})\n",
                          totalSeconds * 1e6, modelName, describeLevels(model));
    for (const std::string &line : steps)
      os << line << "\n";
  });
}
