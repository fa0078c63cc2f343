//===- PlanMemory.cpp - place rt buffers in one arena ----------------------===//
//
// Every rt.alloc gets an offset in the rank's arena so that buffers whose
// live ranges overlap never share bytes, and buffers that are dead reuse
// the space of earlier ones. Live ranges are op indices in the (single,
// straight-line) block: from the first op that uses the buffer (its
// writer) to the last op that uses it or any view of it. Placement is the
// greedy "lowest offset that fits" in program order, which is simple,
// deterministic and close to optimal for the chain-like graphs of neural
// networks. The plan is checked after it is made.
//
//===----------------------------------------------------------------------===//

#include "shardflow/Dialect/RT/IR/RTOps.h"
#include "shardflow/Dialect/RT/Transforms/Passes.h"
#include "shardflow/Dialect/NN/IR/NNOps.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/DenseMap.h"

namespace shardflow::rt {
#define GEN_PASS_DEF_RTPLANMEMORY
#include "shardflow/Dialect/RT/Transforms/Passes.h.inc"
} // namespace shardflow::rt

using namespace mlir;
using namespace shardflow;

namespace {

struct Interval {
  rt::AllocOp alloc;
  int64_t first = 0, last = 0; // op indices, inclusive
  int64_t bytes = 0, offset = 0;
};

int64_t bufferBytes(MemRefType t) {
  return t.getNumElements() * nn::getElementStorageBytes(t.getElementType());
}

struct RTPlanMemoryPass
    : public rt::impl::RTPlanMemoryBase<RTPlanMemoryPass> {
  using RTPlanMemoryBase::RTPlanMemoryBase;

  void runOnOperation() override {
    func::FuncOp fn = getOperation();
    if (fn.getBody().getBlocks().size() != 1) {
      fn.emitOpError("rt-plan-memory expects a single-block function");
      return signalPassFailure();
    }
    if (alignment < 1 || (alignment & (alignment - 1))) {
      fn.emitOpError("alignment must be a power of two, got ") << alignment;
      return signalPassFailure();
    }
    Block &block = fn.getBody().front();
    llvm::DenseMap<Operation *, int64_t> index;
    for (Operation &op : block)
      index[&op] = index.size();
    int64_t end = index.size();

    // Live range of each buffer, following views to their uses.
    SmallVector<Interval> intervals;
    for (Operation &op : block) {
      auto alloc = dyn_cast<rt::AllocOp>(op);
      if (!alloc)
        continue;
      Interval in{alloc, end, index[&op], bufferBytes(alloc.getType()), 0};
      SmallVector<Value> worklist{alloc.getResult()};
      while (!worklist.empty()) {
        Value v = worklist.pop_back_val();
        for (Operation *user : v.getUsers()) {
          int64_t at = isa<func::ReturnOp>(user) ? end : index[user];
          in.first = std::min(in.first, index[user]);
          in.last = std::max(in.last, at);
          if (auto view = dyn_cast<rt::ViewOp>(user))
            worklist.push_back(view.getResult());
        }
      }
      if (in.first == end) // never used: occupies nothing beyond its alloc
        in.first = in.last = index[&op];
      intervals.push_back(in);
    }

    // Greedy placement in order of first use.
    llvm::stable_sort(intervals, [](const Interval &a, const Interval &b) {
      return a.first < b.first;
    });
    SmallVector<Interval *> live; // sorted by offset
    int64_t peak = 0;
    for (Interval &in : intervals) {
      llvm::erase_if(live, [&](Interval *o) { return o->last < in.first; });
      int64_t offset = 0;
      for (Interval *o : live) {
        if (o->offset - offset >= in.bytes)
          break;
        offset = std::max(offset, alignTo(o->offset + o->bytes));
      }
      in.offset = offset;
      peak = std::max(peak, offset + in.bytes);
      auto pos = llvm::lower_bound(live, &in, [](Interval *a, Interval *b) {
        return a->offset < b->offset;
      });
      live.insert(pos, &in);
    }

    // Check: buffers live at the same time never overlap in memory.
    for (size_t i = 0; i < intervals.size(); ++i)
      for (size_t j = i + 1; j < intervals.size(); ++j) {
        const Interval &a = intervals[i], &b = intervals[j];
        bool together = a.first <= b.last && b.first <= a.last;
        bool overlap = a.offset < b.offset + b.bytes && b.offset < a.offset + a.bytes;
        if (together && overlap && a.bytes && b.bytes) {
          rt::AllocOp(a.alloc).emitOpError(
              "memory plan overlaps a buffer live at the same time");
          return signalPassFailure();
        }
      }

    OpBuilder builder(fn.getContext());
    for (Interval &in : intervals)
      in.alloc.setOffsetAttr(builder.getI64IntegerAttr(in.offset));
    fn->setAttr("rt.peak_bytes", builder.getI64IntegerAttr(alignTo(peak)));
  }

  int64_t alignTo(int64_t v) const {
    return (v + alignment - 1) / alignment * alignment;
  }
};

} // namespace
