//===- FusionGroups.cpp - rt kernels grouped into generated kernels -------===//
//
// Fusion is producer-consumer over buffers: an elementwise kernel joins the
// group that computes one of its operands when that operand's buffer (seen
// through views) has no other reader, is not returned, and is read element
// for element (no broadcast). The buffer then never exists: the value stays
// in a register. A row reduction takes such a group as its prologue (the
// residual add before a layer norm). A group is emitted where its last
// member stood, so a group closes as soon as anything else reads one of
// its outputs, and at any instruction that is not a kernel call (a
// collective may write a buffer in place).
//
// Sibling fusion then launches neighbouring groups that do not depend on
// each other as one kernel, each in its own range of thread blocks.
//
//===----------------------------------------------------------------------===//

#include "FusionGroups.h"

#include "shardflow/Runtime/Format/KernelSignature.h"
#include "shardflow/Target/CUDA/GemmTypes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/DenseMap.h"

using namespace mlir;
using namespace shardflow;
using namespace shardflow::rtgpu;

/// How the CUDA target runs kernel `name` (the kernel signature table);
/// None for a kernel the table lacks.
static runtime::CudaImpl cudaImplOf(StringRef name) {
  const runtime::KernelSignature *kernel = runtime::findKernelSignature(name);
  return kernel ? kernel->cuda : runtime::CudaImpl::None;
}

bool shardflow::rtgpu::isRuntimeKernel(StringRef name) {
  return cudaImplOf(name) == runtime::CudaImpl::Runtime;
}

/// The CUDA rt rewrite that turns kernel `name` into kernels this pass
/// generates or the runtime runs (cuda-codegen-pipeline runs it first), or
/// "" when there is none.
static StringRef rewritingPass(StringRef name) {
  const runtime::KernelSignature *kernel = runtime::findKernelSignature(name);
  return kernel && kernel->cuda == runtime::CudaImpl::Rewritten ? kernel->cudaRewrite : "";
}

bool shardflow::rtgpu::isElementwise(StringRef name) {
  return cudaImplOf(name) == runtime::CudaImpl::Elementwise;
}

bool shardflow::rtgpu::readsNeighbours(StringRef name) {
  return cudaImplOf(name) == runtime::CudaImpl::Neighbours;
}

bool shardflow::rtgpu::isReduction(StringRef name) {
  return cudaImplOf(name) == runtime::CudaImpl::Reduction;
}

bool shardflow::rtgpu::isStandalone(rt::KernelOp k) {
  runtime::CudaImpl impl = cudaImplOf(k.getKernel());
  return impl == runtime::CudaImpl::Reduction || impl == runtime::CudaImpl::Standalone;
}

std::optional<RowGeometry> shardflow::rtgpu::rowGeometry(rt::KernelOp k) {
  StringRef name = k.getKernel();
  bool softmax = name == "softmax" || name == "log_softmax";
  bool norm = name == "layer_normalization" || name == "rms_normalization" ||
              name == "normalization_grad";
  if (!softmax && !norm && !isReduction(name))
    return std::nullopt;
  ArrayRef<int64_t> shape = cast<MemRefType>(k.getInputs()[0].getType()).getShape();
  int64_t rank = shape.size(), first, last;
  if (name == "global_average_pool") {
    if (rank < 3)
      return std::nullopt;
    first = 2, last = rank - 1; // every spatial dimension
  } else if (isReduction(name)) {
    if (!isa<FloatType>(cast<MemRefType>(k.getInputs()[0].getType()).getElementType()))
      return std::nullopt;
    auto axes = dyn_cast_or_null<DenseI64ArrayAttr>(k.getParam("axes"));
    if (!axes || axes.empty())
      return std::nullopt;
    ArrayRef<int64_t> a = axes.asArrayRef();
    for (size_t i = 1; i < a.size(); ++i)
      if (a[i] != a[i - 1] + 1)
        return std::nullopt; // not one contiguous block
    first = a.front(), last = a.back();
  } else {
    auto axisAttr = dyn_cast_or_null<IntegerAttr>(k.getParam("axis"));
    int64_t axis = axisAttr ? axisAttr.getInt() : -1;
    if (axis < 0)
      axis += rank;
    first = axis;
    last = softmax ? axis : rank - 1;
  }
  if (first < 0 || last >= rank || first > last)
    return std::nullopt;
  RowGeometry g;
  g.first = first;
  for (int64_t d = first; d <= last; ++d)
    g.length *= shape[d];
  for (int64_t d = last + 1; d < rank; ++d)
    g.inner *= shape[d];
  // Rows are the positions outside the reduced extent, even when that
  // extent is empty (a reduction of nothing still writes its identity).
  g.rows = 1;
  for (int64_t d = 0; d < rank; ++d)
    if (d < first || d > last)
      g.rows *= shape[d];
  return g;
}

namespace {

/// Whether `operand` can take its value from the register of the group
/// member that computes it: it is read element for element (no broadcast)
/// and its buffer has exactly one writer.
bool readsElementwise(Value operand, ArrayRef<int64_t> readShape) {
  if (shapeOf(operand) != readShape)
    return false;
  auto alloc = rootOf(operand).getDefiningOp<rt::AllocOp>();
  if (!alloc)
    return false;
  int writers = 0;
  for (Operation *user : alloc.getResult().getUsers())
    if (auto k = dyn_cast<rt::KernelOp>(user);
        k && llvm::is_contained(k.getOutputs(), alloc.getResult()))
      ++writers;
  return writers == 1;
}

rt::KernelOp writerOf(Value v) {
  Value root = rootOf(v);
  for (Operation *user : root.getUsers())
    if (auto k = dyn_cast<rt::KernelOp>(user); k && llvm::is_contained(k.getOutputs(), root))
      return k;
  return {};
}

/// The buffers (roots) a group's members read from outside the group, and
/// those they write.
void buffersOf(const Group &g, llvm::SmallPtrSetImpl<Value> &reads,
               llvm::SmallPtrSetImpl<Value> &writes) {
  for (rt::KernelOp k : g.members)
    for (Value out : k.getOutputs())
      writes.insert(rootOf(out));
  for (rt::KernelOp k : g.members)
    for (Value in : k.getInputs())
      if (!writes.contains(rootOf(in)))
        reads.insert(rootOf(in));
}

} // namespace

LogicalResult shardflow::rtgpu::formGroups(func::FuncOp fn,
                                          SmallVectorImpl<std::unique_ptr<Group>> &groups) {
  DenseMap<Operation *, Group *> groupOf; // kernel -> its group
  auto closeAll = [&] {
    for (auto &g : groups)
      g->closed = true;
  };
  for (Operation &op : fn.getBody().front()) {
    auto k = dyn_cast<rt::KernelOp>(&op);
    if (!k) {
      if (!isa<rt::AllocOp, rt::ViewOp, rt::WeightOp, rt::ConstantOp, func::ReturnOp>(op))
        closeAll();
      continue;
    }
    StringRef name = k.getKernel();
    bool elementwise = isElementwise(name) || readsNeighbours(name),
         row = isRowReduction(k);
    // Anything this kernel reads from an open group that it does not join
    // closes that group (the group is emitted at its last member).
    auto closeReadGroups = [&](Group *except) {
      for (Value in : k.getInputs())
        if (rt::KernelOp w = writerOf(in))
          if (Group *g = groupOf.lookup(w); g && g != except)
            g->closed = true;
    };
    if (!elementwise && !row && isStandalone(k)) {
      // A launch of its own. Groups that write what it writes end before
      // it (scatter_nd_updates writes into the copy `identity` made).
      closeReadGroups(nullptr);
      for (auto &g : groups)
        for (rt::KernelOp m : g->members)
          for (Value mo : m.getOutputs())
            for (Value o : k.getOutputs())
              if (rootOf(mo) == rootOf(o))
                g->closed = true;
      groups.push_back(std::make_unique<Group>());
      Group *g = groups.back().get();
      g->kind = Group::Kind::Standalone;
      g->members.push_back(k);
      g->closed = true;
      groupOf[k] = g;
      continue;
    }
    if (!elementwise && !row) {
      closeReadGroups(nullptr);
      if (!isRuntimeKernel(name)) {
        InFlightDiagnostic diag = k.emitOpError("kernel '")
                                  << name << "' has no CUDA implementation yet (neither "
                                  << "generated code nor a runtime kernel); compile with "
                                  << "--target cpu";
        if (StringRef pass = rewritingPass(name); !pass.empty())
          diag.attachNote() << pass << " rewrites the '" << name << "' kernels it can into "
                            << "ones that have one; cuda-codegen-pipeline runs it before "
                            << "convert-rt-to-gpu";
        return diag;
      }
      if (name == "matmul" && k.getInputs().size() == 2 && k.getOutputs().size() == 1 &&
          !cuda::isGemmType(elemOf(k.getOutputs()[0]))) {
        InFlightDiagnostic diag = k.emitOpError("kernel 'matmul' of ")
                                  << elemOf(k.getOutputs()[0])
                                  << " has no CUDA implementation (cuBLASLt multiplies f32, "
                                  << "f16 and bf16)";
        diag.attachNote() << "cuda-lower-non-gemm-matmuls makes it an einsum, which has one; "
                          << "cuda-codegen-pipeline runs it before convert-rt-to-gpu";
        return diag;
      }
      continue;
    }
    if ((name == "average_pool" || name == "batch_normalization") &&
        !isa<FloatType>(elemOf(k.getOutputs()[0])))
      return k.emitOpError("kernel '") << name << "' of " << elemOf(k.getOutputs()[0])
                                       << " has no CUDA implementation yet (floats only)";
    for (Value v : llvm::concat<Value>(k.getInputs(), k.getOutputs()))
      if (!isSupportedElement(elemOf(v)))
        return k.emitOpError("element type ") << elemOf(v) << " of kernel '" << name
                                              << "' is not supported on the CUDA target yet";
    // Producer groups this kernel can join: open elementwise groups all of
    // whose buffers it reads are read element for element (anything else
    // would read another thread's result).
    Value out = k.getOutputs()[0];
    SmallVector<Group *> producers, refused;
    for (auto [i, in] : llvm::enumerate(k.getInputs())) {
      rt::KernelOp w = writerOf(in);
      Group *g = w ? groupOf.lookup(w) : nullptr;
      if (!g || g->closed)
        continue;
      if (g->kind == Group::Kind::Row) {
        // An epilogue member: elementwise, reading the row's result (or an
        // earlier epilogue member's) element for element, never a value
        // of the prologue (which lives in no register there).
        bool ok = isElementwise(name) && k.getOutputs().size() == 1 &&
                  !w->isBeforeInBlock(g->row) &&
                  numel(out) == numel(g->row.getOutputs()[0]) &&
                  readsElementwise(in, shapeOf(out));
        (ok ? producers : refused).push_back(g);
        continue;
      }
      if (g->kind != Group::Kind::Loop)
        continue;
      // Batch normalization reads its input (not its statistics) element
      // for element.
      bool neighbours = readsNeighbours(name) && !(name == "batch_normalization" && i == 0);
      bool ok = !neighbours && (!row || i == 0) &&
                numel(rootOf(in)) == g->iterations &&
                readsElementwise(in, row ? shapeOf(in) : shapeOf(out)) &&
                (row || g->iterations == numel(out));
      if (!ok) {
        refused.push_back(g);
        continue;
      }
      if (!llvm::is_contained(producers, g))
        producers.push_back(g);
    }
    llvm::erase_if(producers, [&](Group *g) { return llvm::is_contained(refused, g); });
    // The norms' backward reads its cotangent row by row as well as its
    // input: both from memory, so no prologue computes either.
    if (name == "normalization_grad")
      producers.clear();
    // A Row group takes an epilogue member only when it is the one group
    // that member joins (Loop members merged in would run after the row).
    if (producers.size() > 1 || row)
      llvm::erase_if(producers, [](Group *g) { return g->kind == Group::Kind::Row; });
    // max_pool_with_indices writes values and indices: a group of its own
    // that nothing joins (a consumer would find the indices in no register).
    bool twoOutputs = name == "max_pool_with_indices";
    if (elementwise && k.getOutputs().size() != (twoOutputs ? 2 : 1))
      return k.emitOpError("elementwise kernel with ") << k.getOutputs().size() << " outputs";
    Group *target;
    if (producers.empty()) {
      groups.push_back(std::make_unique<Group>());
      target = groups.back().get();
      target->iterations = numel(out);
    } else {
      target = producers.front();
      for (Group *other : ArrayRef<Group *>(producers).drop_front()) {
        llvm::append_range(target->members, other->members);
        for (rt::KernelOp m : other->members)
          groupOf[m] = target;
        other->members.clear();
        other->closed = true;
      }
      llvm::sort(target->members, [](rt::KernelOp a, rt::KernelOp b) {
        return a->isBeforeInBlock(b);
      });
    }
    closeReadGroups(target);
    target->members.push_back(k);
    groupOf[k] = target;
    if (row) {
      // Open for an epilogue, unless the row's result is one value a row
      // (a reduction, written by one thread).
      target->kind = Group::Kind::Row;
      target->row = k;
      target->closed = isReduction(name);
    }
    if (twoOutputs)
      target->closed = true;
  }
  llvm::erase_if(groups, [](const std::unique_ptr<Group> &g) { return g->members.empty(); });
  // A buffer a member writes never exists in memory when only members of
  // its group read it (and the function does not return it).
  for (auto &g : groups) {
    llvm::SmallPtrSet<Operation *, 16> members;
    for (rt::KernelOp m : g->members)
      members.insert(m);
    for (rt::KernelOp m : g->members) {
      Value out = m.getOutputs()[0];
      SmallVector<Operation *> readers, views;
      collectReaders(out, readers, views);
      if (!out.getDefiningOp<rt::AllocOp>() || readers.empty() ||
          !llvm::all_of(readers, [&](Operation *r) { return members.contains(r); }))
        continue;
      g->internal.insert(out.getDefiningOp());
      g->internal.insert(views.begin(), views.end());
    }
  }
  return success();
}

void shardflow::rtgpu::fuseSiblings(SmallVectorImpl<std::unique_ptr<Group>> &groups) {
  // A launch takes at most this many groups (its code holds all of them).
  constexpr size_t kMaxSiblings = 8;
  // Groups in the order of their launches (each at its last member).
  SmallVector<Group *> order;
  for (auto &g : groups)
    order.push_back(g.get());
  llvm::sort(order, [](Group *a, Group *b) {
    return a->members.back()->isBeforeInBlock(b->members.back());
  });
  // Whether `next` can join the run: only allocations, views and members
  // of `next` lie between the run's last launch and next's (so moving the
  // run's launches to next's changes what no other operation sees), and
  // neither writes what the other reads or writes.
  auto joins = [&](ArrayRef<Group *> run, Group *next) {
    if (run.size() >= kMaxSiblings)
      return false;
    Operation *end = next->members.back();
    for (Operation *op = run.back()->members.back()->getNextNode(); op != end;
         op = op->getNextNode()) {
      if (isa<rt::AllocOp, rt::ViewOp, rt::WeightOp, rt::ConstantOp>(op))
        continue;
      auto k = dyn_cast<rt::KernelOp>(op);
      if (!k || !llvm::is_contained(next->members, k))
        return false;
    }
    llvm::SmallPtrSet<Value, 16> nextReads, nextWrites;
    buffersOf(*next, nextReads, nextWrites);
    for (Group *g : run) {
      llvm::SmallPtrSet<Value, 16> reads, writes;
      buffersOf(*g, reads, writes);
      for (Value w : writes)
        if (nextReads.contains(w) || nextWrites.contains(w))
          return false;
      for (Value w : nextWrites)
        if (reads.contains(w))
          return false;
    }
    return true;
  };
  SmallVector<Group *> run;
  auto finish = [&] {
    if (run.size() > 1) {
      run.back()->siblings.assign(run.begin(), run.end() - 1);
      for (Group *g : ArrayRef<Group *>(run).drop_back())
        g->absorbed = true;
    }
    run.clear();
  };
  for (Group *g : order) {
    if (g->kind != Group::Kind::Loop || g->iterations == 0) {
      finish();
      continue;
    }
    if (run.empty() || !joins(run, g))
      finish();
    run.push_back(g);
  }
  finish();
}
