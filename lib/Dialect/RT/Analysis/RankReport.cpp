//===- RankReport.cpp - what each rank holds and sends ---------------------===//
//
// See RankReport.h. Weights are counted by name (a weight may be loaded as
// several slices, e.g. a fused projection's column blocks); collectives by
// the bytes of their buffer and what a rank sends with ring algorithms.
//
//===----------------------------------------------------------------------===//

#include "shardflow/Dialect/RT/Analysis/RankReport.h"
#include "shardflow/Dialect/RT/IR/RTOps.h"
#include "shardflow/Support/ONNXLocation.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/Support/FormatVariadic.h"

#include <algorithm>

using namespace mlir;
using namespace shardflow;

/// --report: what each rank holds and what moves between ranks.
void shardflow::rt::printRankReport(ModuleOp module, llvm::raw_ostream &os) {
  auto bytesOf = [](Type t) -> int64_t {
    auto m = cast<MemRefType>(t);
    return m.getNumElements() * ((m.getElementTypeBitWidth() + 7) / 8);
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
    fn.walk([&](Operation *op) {
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
        int64_t elementBytes = (m.getElementTypeBitWidth() + 7) / 8;
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
      int64_t b = bytesOf(op->getOperand(0).getType());
      if (name == "rt.local_slice")
        return; // each rank keeps its piece: nothing moves
      int64_t groupSize = 0;
      if (auto groups = op->getAttrOfType<ArrayAttr>("groups"); groups && !groups.empty())
        groupSize = cast<DenseI64ArrayAttr>(groups[0]).size();
      // What a rank sends with ring algorithms (the cost model's count):
      // an all_reduce 2(n-1)/n of its buffer, a reduce_scatter and an
      // all_to_all (n-1)/n, an all_gather its piece to n-1 others, a
      // send or permute its buffer.
      int64_t n = std::max<int64_t>(groupSize, 1), out = b;
      if (name == "rt.all_reduce")
        out = 2 * (n - 1) * b / n;
      else if (name == "rt.reduce_scatter" || name == "rt.all_to_all")
        out = (n - 1) * b / n;
      else if (name == "rt.all_gather")
        out = (n - 1) * b;
      else if (name == "rt.recv")
        out = 0;
      std::string line;
      llvm::raw_string_ostream ls(line);
      ls << "  step " << steps.size() + 1 << ": " << name << " " << op->getOperand(0).getType()
         << ", " << b << " bytes per rank";
      if (groupSize)
        ls << ", groups of " << groupSize;
      ls << ", sends " << out << " (" << describeLocation(op->getLoc()) << ")";
      steps.push_back(line);
      moved += b;
      sent += out;
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
    os << llvm::formatv("  parameters per rank: {0} bytes in {1} weights ({2} sliced); "
                        "the whole model has {3} bytes: {4:F3} per rank\n",
                        local, weights, sliced, global,
                        global ? double(local) / double(global) : 1.0);
    if (sliced)
      os << llvm::formatv("  split weights: {0} of {1} weights, {2} of their {3} bytes per "
                          "rank ({4:F3}); the other {5} weights are whole on every rank "
                          "({6} bytes)\n",
                          sliced, weights, slicedLocal, slicedGlobal,
                          double(slicedLocal) / double(slicedGlobal), weights - sliced,
                          local - slicedLocal);
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
    for (const std::string &line : steps)
      os << line << "\n";
  });
}
