//===- UnrollMicrobatches.cpp - a mesh axis's ranks, one after another -----===//
//
// dist-unroll-microbatches: gradient accumulation is data parallelism whose
// ranks take turns on one device. dist-annotate splits the batch over a
// mesh axis `microbatch` and the passes shard the program over it as over
// any axis; after dist-partition this pass runs the axis's ranks as copies
// of the per-rank program on one rank:
//   - a value is uniform along the axis (the same at every coordinate:
//     weights, optimizer state, what a collective over the axis returns)
//     or varying (one value per coordinate: a copy per micro-batch);
//   - an op with a varying operand is cloned per coordinate; a uniform op
//     stays one op;
//   - a collective over the axis becomes arithmetic on the copies plus the
//     same collective over the axes left;
//   - the ops are then ordered micro-batch by micro-batch, each pulling in
//     what it needs first, so a micro-batch's activations die before the
//     next one's forward starts.
//
//===----------------------------------------------------------------------===//

#include "shardflow/Dialect/Dist/IR/Layout.h"
#include "shardflow/Dialect/Dist/Transforms/Passes.h"
#include "shardflow/Dialect/NN/IR/NNOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/DenseSet.h"

namespace shardflow::dist {
#define GEN_PASS_DEF_DISTUNROLLMICROBATCHES
#include "shardflow/Dialect/Dist/Transforms/Passes.h.inc"
} // namespace shardflow::dist

using namespace mlir;
using namespace shardflow;
using namespace shardflow::dist;

namespace {

/// The axes of a collective before and after the unrolled one.
struct AxesAround {
  SmallVector<StringAttr> before, after;
  bool contains = false;
};

struct Unroller {
  MeshOp mesh;
  StringAttr axis;
  int64_t count = 1;
  /// Each varying value's copies, one per coordinate along the axis.
  DenseMap<Value, SmallVector<Value>> copies;
  /// The micro-batch each new op works for (clones, and the steps of sums
  /// over copies), which orders the program.
  DenseMap<Operation *, int64_t> microbatchOf;

  Value copy(Value v, int64_t k) {
    auto it = copies.find(v);
    return it == copies.end() ? v : it->second[k];
  }
  bool varying(Value v) { return copies.contains(v); }

  AxesAround split(ArrayAttr axes) {
    AxesAround a;
    for (Attribute attr : axes) {
      auto name = cast<StringAttr>(attr);
      if (name == axis)
        a.contains = true;
      else
        (a.contains ? a.after : a.before).push_back(name);
    }
    return a;
  }

  static RankedTensorType withDim(Value v, int64_t dim, int64_t size) {
    auto t = cast<RankedTensorType>(v.getType());
    SmallVector<int64_t> shape(t.getShape());
    shape[dim] = size;
    return RankedTensorType::get(shape, t.getElementType());
  }

  /// `proto` (a collective) again on `input` over `axes`, or `input` when
  /// `axes` is empty.
  Value collective(OpBuilder &b, Operation *proto, Value input, ArrayRef<StringAttr> axes,
                   RankedTensorType type) {
    if (axes.empty())
      return input;
    Operation *c = b.clone(*proto);
    c->setOperand(0, input);
    c->setAttr("axes", b.getStrArrayAttr(llvm::to_vector(
                           llvm::map_range(axes, [](StringAttr a) { return a.getValue(); }))));
    c->getResult(0).setType(type);
    return c->getResult(0);
  }

  /// The copies of `v` combined by `reduction`, step k belonging to
  /// micro-batch k.
  FailureOr<Value> combine(OpBuilder &b, Location loc, Value v, StringRef reduction) {
    Value acc = copy(v, 0);
    for (int64_t k = 1; k < count; ++k) {
      Value x = copy(v, k);
      Operation *step;
      if (reduction == "sum")
        step = nn::AddOp::create(b, loc, acc, x);
      else if (reduction == "max")
        step = nn::MaxOp::create(b, loc, acc, x);
      else if (reduction == "min")
        step = nn::MinOp::create(b, loc, acc, x);
      else if (reduction == "prod")
        step = nn::MulOp::create(b, loc, acc, x);
      else
        return emitError(loc, "dist-unroll-microbatches: unknown reduction '") << reduction << "'";
      microbatchOf[step] = k;
      acc = step->getResult(0);
    }
    return acc;
  }

  /// Block k of `count` along `dim` of `v`, for micro-batch k.
  Value block(OpBuilder &b, Location loc, Value v, int64_t dim, int64_t k) {
    int64_t size = cast<RankedTensorType>(v.getType()).getDimSize(dim) / count;
    auto slice = nn::SliceOp::create(b, loc, withDim(v, dim, size), v,
                                     b.getDenseI64ArrayAttr({k * size}),
                                     b.getDenseI64ArrayAttr({(k + 1) * size}),
                                     b.getDenseI64ArrayAttr({dim}), b.getDenseI64ArrayAttr({1}));
    microbatchOf[slice] = k;
    return slice;
  }

  /// Micro-batch k's block of `outer` along `dim`, split further over
  /// `inner` by `proto` (a reduce_scatter or an all_slice).
  Value blockOver(OpBuilder &b, Operation *proto, Value outer, int64_t dim, int64_t k,
                  ArrayRef<StringAttr> inner) {
    Value mine = block(b, proto->getLoc(), outer, dim, k);
    int64_t size = cast<RankedTensorType>(mine.getType()).getDimSize(dim);
    Value piece =
        collective(b, proto, mine, inner, withDim(mine, dim, size / mesh.groupSize(inner)));
    if (piece != mine)
      microbatchOf[piece.getDefiningOp()] = k;
    return piece;
  }

  LogicalResult unrollCollective(Operation *op, const AxesAround &axes);
  LogicalResult unrollFunction(func::FuncOp fn);
  /// Whether `op` is a keyed dropout whose ranks along the axis draw
  /// different blocks (its mask differs between micro-batches even where
  /// its input does not: a uniform cotangent's backward).
  bool drawsPerMicrobatch(Operation *op) {
    auto d = dyn_cast<nn::KeyedDropoutOp>(op);
    auto starts = d ? d.getStartsAttr() : DenseI64ArrayAttr();
    int64_t dims = d ? d.getType().getRank() : 0;
    if (!starts || int64_t(starts.size()) != mesh.getNumRanks() * dims)
      return false;
    ArrayRef<int64_t> values = starts.asArrayRef();
    for (int64_t r = 0, n = mesh.getNumRanks() / count; r < n; ++r)
      for (int64_t k = 1; k < count; ++k)
        if (values.slice(oldRankOf[r * count + k] * dims, dims) !=
            values.slice(oldRankOf[r * count] * dims, dims))
          return true;
    return false;
  }
  LogicalResult localizeRankAttributes(Operation *op, ArrayRef<int64_t> oldRankOf);
  void order(Block &body);
  /// The old mesh's rank of each (new rank, coordinate along the axis).
  SmallVector<int64_t> oldRankOf;
};

LogicalResult Unroller::unrollCollective(Operation *op, const AxesAround &axes) {
  OpBuilder b(op);
  Location loc = op->getLoc();
  Value input = op->getOperand(0), result = op->getResult(0);
  auto inType = cast<RankedTensorType>(input.getType());
  int64_t before = mesh.groupSize(axes.before), after = mesh.groupSize(axes.after);
  if (auto r = dyn_cast<AllReduceOp>(op)) {
    // Every coordinate's sum: one value.
    auto sum = combine(b, loc, input, r.getReduction());
    if (failed(sum))
      return failure();
    SmallVector<StringAttr> rest(axes.before);
    rest.append(axes.after);
    result.replaceAllUsesWith(collective(b, op, *sum, rest, inType));
    return success();
  }
  if (auto g = dyn_cast<AllGatherOp>(op)) {
    // Group member (p, k, s) holds block (p*count + k)*after + s.
    int64_t dim = g.getDim();
    SmallVector<Value> pieces;
    for (int64_t k = 0; k < count; ++k) {
      Value x = copy(input, k);
      Value piece = collective(b, op, x, axes.after,
                               withDim(x, dim, inType.getDimSize(dim) * after));
      if (Operation *def = piece.getDefiningOp(); def && piece != x)
        microbatchOf[def] = k;
      pieces.push_back(piece);
    }
    Value joined = nn::ConcatOp::create(b, loc, pieces, b.getI64IntegerAttr(dim));
    microbatchOf[joined.getDefiningOp()] = count - 1;
    result.replaceAllUsesWith(collective(
        b, op, joined, axes.before,
        withDim(joined, dim, inType.getDimSize(dim) * after * count * before)));
    return success();
  }
  if (auto rs = dyn_cast<ReduceScatterOp>(op)) {
    int64_t dim = rs.getDim();
    auto sum = combine(b, loc, input, rs.getReduction());
    if (failed(sum))
      return failure();
    Value outer = collective(b, op, *sum, axes.before,
                             withDim(*sum, dim, inType.getDimSize(dim) / before));
    SmallVector<Value> results;
    for (int64_t k = 0; k < count; ++k) {
      results.push_back(blockOver(b, op, outer, dim, k, axes.after));
    }
    copies[result] = results;
    return success();
  }
  if (auto s = dyn_cast<AllSliceOp>(op)) {
    int64_t dim = s.getDim();
    SmallVector<Value> results;
    Value sharedOuter;
    for (int64_t k = 0; k < count; ++k) {
      Value x = copy(input, k);
      Value outer;
      if (!varying(input) && sharedOuter) {
        outer = sharedOuter;
      } else {
        outer = collective(b, op, x, axes.before,
                           withDim(x, dim, inType.getDimSize(dim) / before));
        if (varying(input) && outer != x)
          microbatchOf[outer.getDefiningOp()] = k;
        sharedOuter = outer;
      }
      results.push_back(blockOver(b, op, outer, dim, k, axes.after));
    }
    copies[result] = results;
    return success();
  }
  return op->emitOpError("over the micro-batch axis '")
         << axis.getValue() << "' cannot be unrolled (only all_reduce, all_gather, "
         << "reduce_scatter and all_slice can)";
}

/// Per-rank attributes hold one entry per rank of the old mesh: keep those
/// of coordinate 0 along the axis, which must equal the others'.
LogicalResult Unroller::localizeRankAttributes(Operation *op, ArrayRef<int64_t> oldRankOf) {
  int64_t oldRanks = mesh.getNumRanks(), newRanks = oldRanks / count;
  auto sameAlongAxis = [&](auto get) -> std::optional<SmallVector<int64_t>> {
    SmallVector<int64_t> keep;
    for (int64_t r = 0; r < newRanks; ++r)
      for (int64_t k = 0; k < count; ++k)
        if (get(oldRankOf[r * count + k]) != get(oldRankOf[r * count]))
          return std::nullopt;
    for (int64_t r = 0; r < newRanks; ++r)
      keep.push_back(oldRankOf[r * count]);
    return keep;
  };
  if (auto w = dyn_cast<nn::WeightOp>(op)) {
    ArrayAttr starts = w.getStartsAttr();
    if (!starts || int64_t(starts.size()) != oldRanks || oldRanks == 1)
      return success();
    auto keep = sameAlongAxis([&](int64_t r) { return starts[r]; });
    if (!keep)
      return op->emitOpError("is split over the micro-batch axis '")
             << axis.getValue() << "': micro-batches share their weights";
    SmallVector<Attribute> kept;
    for (int64_t r : *keep)
      kept.push_back(starts[r]);
    w.setStartsAttr(ArrayAttr::get(op->getContext(), kept));
    return success();
  }
  if (auto d = dyn_cast<nn::KeyedDropoutOp>(op)) {
    auto starts = d.getStartsAttr();
    int64_t dims = d.getType().getRank();
    if (!starts || int64_t(starts.size()) != oldRanks * dims || oldRanks == 1)
      return success();
    ArrayRef<int64_t> values = starts.asArrayRef();
    auto keep = sameAlongAxis([&](int64_t r) { return values.slice(r * dims, dims).vec(); });
    if (!keep)
      return op->emitOpError("is split over the micro-batch axis '")
             << axis.getValue() << "' but is no copy of a micro-batch's";
    SmallVector<int64_t> kept;
    for (int64_t r : *keep)
      kept.append(values.begin() + r * dims, values.begin() + (r + 1) * dims);
    d.setStartsAttr(DenseI64ArrayAttr::get(op->getContext(), kept));
    return success();
  }
  if (auto g = dyn_cast<nn::GatherOp>(op)) {
    auto starts = g.getAxisStartsAttr();
    if (!starts || int64_t(starts.size()) != oldRanks || oldRanks == 1)
      return success();
    ArrayRef<int64_t> values = starts.asArrayRef();
    auto keep = sameAlongAxis([&](int64_t r) { return values[r]; });
    if (!keep)
      return op->emitOpError("splits its table over the micro-batch axis '")
             << axis.getValue() << "'";
    SmallVector<int64_t> kept;
    for (int64_t r : *keep)
      kept.push_back(values[r]);
    g.setAxisStartsAttr(DenseI64ArrayAttr::get(op->getContext(), kept));
  }
  return success();
}

LogicalResult Unroller::unrollFunction(func::FuncOp fn) {
  // The arguments are whole and uniform: each copy takes its micro-batch
  // through the all_slice dist-partition put after them.
  Block &body = fn.getBody().front();
  SmallVector<Operation *> ops;
  for (Operation &op : body.without_terminator())
    ops.push_back(&op);
  SmallVector<Operation *> dead;
  for (Operation *op : ops) {
    if (isa<CollectivePermuteOp, SendOp, RecvOp>(op))
      return op->emitOpError("names ranks of the mesh; it cannot be unrolled over the "
                             "micro-batch axis '")
             << axis.getValue() << "'";
    if (auto axesAttr = op->getAttrOfType<ArrayAttr>("axes");
        axesAttr && op->getDialect() == mesh->getDialect()) {
      AxesAround axes = split(axesAttr);
      if (axes.contains) {
        if (failed(unrollCollective(op, axes)))
          return failure();
        dead.push_back(op);
        continue;
      }
    }
    if (!llvm::any_of(op->getOperands(), [&](Value v) { return varying(v); }) &&
        !drawsPerMicrobatch(op))
      continue;
    OpBuilder b(op);
    for (int64_t k = 0; k < count; ++k) {
      IRMapping mapping;
      for (Value v : op->getOperands())
        mapping.map(v, copy(v, k));
      Operation *clone = b.clone(*op, mapping);
      microbatchOf[clone] = k;
      // A keyed dropout's copy draws its micro-batch's elements: the
      // blocks of the ranks at coordinate k.
      if (auto d = dyn_cast<nn::KeyedDropoutOp>(clone))
        if (auto starts = d.getStartsAttr()) {
          int64_t dims = d.getType().getRank();
          if (int64_t(starts.size()) == mesh.getNumRanks() * dims) {
            SmallVector<int64_t> mine;
            for (int64_t r = 0, n = mesh.getNumRanks() / count; r < n; ++r)
              for (int64_t i = 0; i < dims; ++i)
                mine.push_back(starts[oldRankOf[r * count + k] * dims + i]);
            d.setStartsAttr(DenseI64ArrayAttr::get(op->getContext(), mine));
          }
        }
      for (auto [r, c] : llvm::zip(op->getResults(), clone->getResults()))
        copies[r].push_back(c);
    }
    dead.push_back(op);
  }
  auto ret = cast<func::ReturnOp>(body.getTerminator());
  for (auto [i, v] : llvm::enumerate(ret.getOperands()))
    if (varying(v))
      return ret.emitOpError("result ")
             << i << " differs between micro-batches (it is not gathered whole)";
  for (Operation *op : llvm::reverse(dead)) {
    for (Value r : op->getResults())
      copies.erase(r);
    op->dropAllUses();
    op->erase();
  }
  order(body);
  return success();
}

/// Micro-batch by micro-batch, each op after what it reads; what no
/// micro-batch needs last, in program order.
void Unroller::order(Block &body) {
  SmallVector<Operation *> ops;
  for (Operation &op : body.without_terminator())
    ops.push_back(&op);
  llvm::DenseSet<Operation *> placed;
  SmallVector<Operation *> sequence;
  auto place = [&](Operation *root) {
    SmallVector<std::pair<Operation *, unsigned>> stack{{root, 0}};
    while (!stack.empty()) {
      auto &[op, next] = stack.back();
      if (placed.contains(op)) {
        stack.pop_back();
        continue;
      }
      bool descended = false;
      while (next < op->getNumOperands()) {
        Operation *def = op->getOperand(next++).getDefiningOp();
        if (def && def->getBlock() == &body && !placed.contains(def)) {
          stack.push_back({def, 0});
          descended = true;
          break;
        }
      }
      if (descended)
        continue;
      placed.insert(op);
      sequence.push_back(op);
      stack.pop_back();
    }
  };
  for (int64_t k = 0; k < count; ++k)
    for (Operation *op : ops)
      if (auto it = microbatchOf.find(op); it != microbatchOf.end() && it->second == k)
        place(op);
  for (Operation *op : ops)
    place(op);
  Operation *terminator = body.getTerminator();
  for (Operation *op : sequence)
    op->moveBefore(terminator);
}

struct DistUnrollMicrobatchesPass
    : public shardflow::dist::impl::DistUnrollMicrobatchesBase<DistUnrollMicrobatchesPass> {
  using DistUnrollMicrobatchesBase::DistUnrollMicrobatchesBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    MeshOp mesh = getModuleMesh(module);
    if (!mesh)
      return signalPassFailure();
    int64_t index = mesh.axisIndex(axis);
    if (index < 0) {
      mesh.emitOpError("has no axis '") << axis << "' to unroll";
      return signalPassFailure();
    }
    Unroller u;
    u.mesh = mesh;
    u.axis = StringAttr::get(&getContext(), axis);
    u.count = mesh.getAxisSizes()[index];

    // Old rank of each (new rank, coordinate along the axis), the new rank
    // major: the old mesh's rank numbering with the axis's coordinate
    // taken out.
    ArrayRef<int64_t> sizes = mesh.getAxisSizes();
    int64_t inner = 1;
    for (int64_t s : sizes.drop_front(index + 1))
      inner *= s;
    SmallVector<int64_t> oldRankOf;
    for (int64_t r = 0, n = mesh.getNumRanks() / u.count; r < n; ++r)
      for (int64_t k = 0; k < u.count; ++k)
        oldRankOf.push_back((r / inner * u.count + k) * inner + r % inner);

    u.oldRankOf = oldRankOf;
    for (auto fn : module.getOps<func::FuncOp>())
      if (failed(u.unrollFunction(fn)))
        return signalPassFailure();
    WalkResult walk = module.walk([&](Operation *op) {
      return failed(u.localizeRankAttributes(op, oldRankOf)) ? WalkResult::interrupt()
                                                             : WalkResult::advance();
    });
    if (walk.wasInterrupted())
      return signalPassFailure();

    SmallVector<Attribute> names;
    SmallVector<int64_t> kept;
    for (auto [i, name] : llvm::enumerate(mesh.getAxisNames()))
      if (int64_t(i) != index) {
        names.push_back(name);
        kept.push_back(sizes[i]);
      }
    if (names.empty() && SymbolTable::symbolKnownUseEmpty(mesh, module)) {
      mesh.erase();
      return;
    }
    Builder b(&getContext());
    mesh.setAxisNamesAttr(b.getArrayAttr(names));
    mesh.setAxisSizesAttr(b.getDenseI64ArrayAttr(kept));
  }
};

} // namespace
