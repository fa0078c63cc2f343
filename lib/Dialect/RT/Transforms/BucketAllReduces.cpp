//===- BucketAllReduces.cpp - gradient buckets ------------------------------===//
//
// rt-bucket-all-reduces: see Passes.td. A bucket is concatenated and
// reduced where its last member was (each member's input was ready at its
// own place, earlier, and nothing touches it in between: such an op closes
// the bucket), and split back before the first op that touches a member's
// buffer, so every reader still sees the reduced value.
//
//===----------------------------------------------------------------------===//

#include "shardflow/Dialect/RT/IR/RTOps.h"
#include "shardflow/Dialect/RT/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/DenseSet.h"

namespace shardflow::rt {
#define GEN_PASS_DEF_RTBUCKETALLREDUCES
#include "shardflow/Dialect/RT/Transforms/Passes.h.inc"
} // namespace shardflow::rt

using namespace mlir;
using namespace shardflow;

namespace {

int64_t bytesOf(Value v) {
  auto t = cast<MemRefType>(v.getType());
  return t.getNumElements() * std::max<int64_t>(t.getElementTypeBitWidth() / 8, 1);
}

/// Whether two all-reduces can share a bucket.
bool compatible(rt::AllReduceOp a, rt::AllReduceOp b) {
  return a.getGroups() == b.getGroups() && a.getReduction() == b.getReduction() &&
         cast<MemRefType>(a.getInput().getType()).getElementType() ==
             cast<MemRefType>(b.getInput().getType()).getElementType();
}

/// A 1-D view of `v`.
Value flat(OpBuilder &b, Location loc, Value v) {
  auto t = cast<MemRefType>(v.getType());
  if (t.getRank() == 1)
    return v;
  return rt::ViewOp::create(b, loc, MemRefType::get({t.getNumElements()}, t.getElementType()), v);
}

/// The first op after `from` that reads or writes one of `buffers` or any
/// alias of one (a view itself reads nothing), or the block's terminator.
Operation *firstToucher(Operation *from, llvm::DenseSet<Value> buffers) {
  // Every alias of the buffers: their roots and every view of those,
  // wherever it is made (before `from` too).
  SmallVector<Value> work;
  for (Value v : llvm::to_vector(buffers)) {
    while (auto view = v.getDefiningOp<rt::ViewOp>())
      v = view.getSource();
    buffers.insert(v);
    work.push_back(v);
  }
  while (!work.empty())
    for (Operation *user : work.pop_back_val().getUsers())
      if (auto view = dyn_cast<rt::ViewOp>(user); view && buffers.insert(view.getResult()).second)
        work.push_back(view.getResult());
  for (Operation *op = from->getNextNode(); op; op = op->getNextNode()) {
    if (isa<rt::ViewOp>(op))
      continue;
    if (op->hasTrait<OpTrait::IsTerminator>() ||
        llvm::any_of(op->getOperands(), [&](Value v) { return buffers.contains(v); }))
      return op;
  }
  return nullptr;
}

/// Replaces `members` (two or more) by one all-reduce: concatenated and
/// reduced where the last member was (every member's gradient is ready
/// there), split back just before the first op that touches a member's
/// buffer. The backward between the two runs while the bucket is reduced
/// (on CUDA the all-reduce is on the communication stream, and only the
/// split waits for it).
void issue(MutableArrayRef<rt::AllReduceOp> members) {
  llvm::DenseSet<Value> buffers;
  for (rt::AllReduceOp m : members) {
    buffers.insert(m.getInput());
    buffers.insert(m.getOutput());
  }
  Operation *splitAt = firstToucher(members.back(), buffers);
  OpBuilder b(members.back());
  Location loc = members.back().getLoc();
  auto elem = cast<MemRefType>(members.front().getInput().getType()).getElementType();
  int64_t total = 0;
  SmallVector<Value> ins, outs;
  SmallVector<int64_t> sizes;
  for (rt::AllReduceOp m : members) {
    int64_t n = cast<MemRefType>(m.getInput().getType()).getNumElements();
    sizes.push_back(n);
    total += n;
  }
  for (rt::AllReduceOp m : members)
    ins.push_back(flat(b, m.getLoc(), m.getInput()));
  auto bucket = rt::AllocOp::create(b, loc, MemRefType::get({total}, elem), IntegerAttr());
  rt::KernelOp::create(b, loc, b.getStringAttr("concat"), ins, ValueRange{bucket},
                       b.getDictionaryAttr(b.getNamedAttr("axis", b.getI64IntegerAttr(0))));
  rt::AllReduceOp::create(b, loc, bucket, bucket, members.front().getGroupsAttr(),
                          members.front().getReductionAttr());
  b.setInsertionPoint(splitAt);
  for (rt::AllReduceOp m : members)
    outs.push_back(flat(b, m.getLoc(), m.getOutput()));
  rt::KernelOp::create(
      b, loc, b.getStringAttr("split"), ValueRange{bucket}, outs,
      b.getDictionaryAttr({b.getNamedAttr("axis", b.getI64IntegerAttr(0)),
                           b.getNamedAttr("sizes", b.getDenseI64ArrayAttr(sizes))}));
  for (rt::AllReduceOp m : members)
    m.erase();
}

struct RTBucketAllReducesPass
    : public rt::impl::RTBucketAllReducesBase<RTBucketAllReducesPass> {
  using RTBucketAllReducesBase::RTBucketAllReducesBase;

  void runOnOperation() override {
    func::FuncOp fn = getOperation();
    if (fn.getBody().empty())
      return;
    SmallVector<rt::AllReduceOp> bucket;
    llvm::DenseSet<Value> results; // the members' buffers and views of them
    int64_t bytes = 0;
    auto flush = [&](Operation *) {
      if (bucket.size() > 1)
        issue(bucket);
      bucket.clear();
      results.clear();
      bytes = 0;
    };
    SmallVector<Operation *> ops;
    for (Operation &op : fn.getBody().front())
      ops.push_back(&op);
    for (Operation *op : ops) {
      // A view reads nothing: its result stands for the member's buffer.
      if (auto view = dyn_cast<rt::ViewOp>(op)) {
        if (results.contains(view.getSource()))
          results.insert(view.getResult());
        continue;
      }
      auto reduce = dyn_cast<rt::AllReduceOp>(op);
      // An op that reads (or writes) a member's buffer: the bucket is
      // issued before it. The member's input counts too: an in-place
      // all-reduce's output is its input.
      bool touches = llvm::any_of(op->getOperands(),
                                  [&](Value v) { return results.contains(v); });
      if (touches || (reduce && !bucket.empty() &&
                      (!compatible(bucket.front(), reduce) ||
                       bytes + bytesOf(reduce.getInput()) > bucketBytes)) ||
          isa<func::ReturnOp>(op))
        flush(op);
      if (!reduce || isa<func::ReturnOp>(op))
        continue;
      bucket.push_back(reduce);
      bytes += bytesOf(reduce.getInput());
      results.insert(reduce.getOutput());
      results.insert(reduce.getInput());
    }
  }
};

} // namespace
