//===- NNToRT.cpp - bufferize nn programs into rt kernel calls -------------===//
//
// The nn program is value-semantic and static-shaped, so bufferization is a
// straight walk: every tensor becomes a memref of the same shape, every
// result gets a fresh buffer (rt.alloc) that the op's kernel writes, and
// shape-only ops become views of their operand's buffer. Where each buffer
// lives in memory is decided later by rt-plan-memory.
//
// An nn.cast between float types of an nn.weight folds into the rt.weight,
// which then records the file's element type (`source_type`): the runtime
// converts the weight once at load instead of a kernel on every run. Likewise
// an nn.transpose of a weight (or of such a cast) becomes the rt.weight
// loaded with its dimensions permuted (`permutation`), and an nn.mul of a
// weight (or of such a cast) by a scalar constant the rt.weight scaled at
// load (`scale`).
//
// A splat constant of 4 KiB or more becomes a buffer an `expand` kernel
// fills from its one element at run time: the artifact writes out every
// byte of a constant.
//
// Training state (an nn.weight whose new value a result marked `nn.state`
// carries) becomes a writable rt.weight, never folded, and the program ends
// by copying each new value into its state.
//
// A partitioned program (per-rank tensors, `dist` collectives over a
// dist.mesh) becomes an SPMD rt program: each collective turns into the rt
// collective over the rank groups its mesh axes define, and the function
// runs on a world of the mesh's size (`rt.world_size`).
//
//===----------------------------------------------------------------------===//

#include "shardflow/Conversion/Passes.h"
#include "shardflow/Dialect/Dist/IR/DistOps.h"
#include "shardflow/Dialect/NN/IR/NNOps.h"
#include "shardflow/Dialect/RT/IR/RTOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/IR/SymbolTable.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/TypeSwitch.h"

#include <array>
#include <cmath>
#include <optional>

namespace shardflow {
#define GEN_PASS_DEF_CONVERTNNTORT
#include "shardflow/Conversion/Passes.h.inc"
} // namespace shardflow

using namespace mlir;
using namespace shardflow;

namespace {

/// Splat constants of at least this many bytes are filled by a kernel
/// instead of written out in the artifact.
constexpr int64_t kRuntimeSplatBytes = 4096;

MemRefType toBuffer(Type t) {
  auto tensor = cast<RankedTensorType>(t);
  return MemRefType::get(tensor.getShape(), tensor.getElementType());
}

/// Whether `w` is training state: a result of its function carries
/// `nn.state` with its name (nn-optimizer's step writes it), it starts at
/// zero, or it is marked `nn.shared_state` (another program writes it: a
/// pipeline stage's update). State is never folded into what reads it.
bool isState(nn::WeightOp w) {
  if (w.getStorage() == "zeros" || w->hasAttr("nn.shared_state"))
    return true;
  auto fn = w->getParentOfType<func::FuncOp>();
  for (unsigned i = 0; fn && i < fn.getNumResults(); ++i)
    if (auto state = fn.getResultAttrOfType<StringAttr>(i, "nn.state");
        state && state.getValue() == w.getName())
      return true;
  return false;
}

/// An nn.weight that is not state: what load-time folds apply to.
bool isFoldableWeight(Operation *op) {
  auto w = dyn_cast_or_null<nn::WeightOp>(op);
  return w && !isState(w);
}

/// An nn.cast from one float type to another of an nn.weight: it becomes
/// that weight's rt.weight, loaded in the cast's type (mixed precision).
bool isFoldedWeightCast(Operation *op) {
  auto c = dyn_cast<nn::CastOp>(op);
  if (!c || !isFoldableWeight(c.getInput().getDefiningOp()))
    return false;
  Type from = c.getInput().getType().getElementType(), to = c.getTo();
  return isa<FloatType>(from) && isa<FloatType>(to) && from != to;
}

/// An nn.transpose of an nn.weight, or of a folded cast of one: it becomes
/// that weight's rt.weight, loaded with its dimensions permuted.
bool isFoldedWeightTranspose(Operation *op) {
  auto t = dyn_cast<nn::TransposeOp>(op);
  if (!t)
    return false;
  Operation *source = t.getInput().getDefiningOp();
  return source && (isFoldableWeight(source) || isFoldedWeightCast(source));
}

/// An nn.mul of a float weight (or of its folded cast) by a splat scalar
/// constant, typed as the weight (no broadcast): the weight, and the
/// factor the runtime multiplies its elements by at load.
std::optional<std::pair<Value, double>> foldedWeightScale(Operation *op) {
  auto m = dyn_cast<nn::MulOp>(op);
  if (!m)
    return std::nullopt;
  for (auto [source, factor] : {std::pair(m.getLhs(), m.getRhs()),
                                std::pair(m.getRhs(), m.getLhs())}) {
    Operation *s = source.getDefiningOp();
    if (!s || !(isFoldableWeight(s) || isFoldedWeightCast(s)) ||
        source.getType() != m.getType() ||
        !isa<FloatType>(cast<RankedTensorType>(m.getType()).getElementType()))
      continue;
    auto c = factor.getDefiningOp<nn::ConstantOp>();
    auto dense = c ? dyn_cast<DenseFPElementsAttr>(c.getValue()) : DenseFPElementsAttr();
    if (!dense || !dense.isSplat())
      continue;
    double x = dense.getSplatValue<APFloat>().convertToDouble();
    if (std::isfinite(x) && x != 0)
      return std::pair(source, x);
  }
  return std::nullopt;
}
bool isFoldedWeightScale(Operation *op) { return foldedWeightScale(op).has_value(); }
/// A weight, or a folded cast of one, whose every reader folds it: it needs
/// no buffer of its own.
bool onlyFoldedReaders(Operation *op) {
  return !op->use_empty() && llvm::all_of(op->getUsers(), [](Operation *user) {
           return isFoldedWeightCast(user) || isFoldedWeightTranspose(user) ||
                  isFoldedWeightScale(user);
         });
}

/// A function that is already an rt program (buffers in, no nn ops), as
/// hand-written rt tests are: nothing to convert.
bool isRTFunction(func::FuncOp fn) {
  auto isBuffer = [](Type t) { return isa<MemRefType>(t); };
  if (!llvm::all_of(fn.getArgumentTypes(), isBuffer) ||
      !llvm::all_of(fn.getResultTypes(), isBuffer))
    return false;
  auto *nnDialect = fn->getContext()->getLoadedDialect<nn::NNDialect>();
  auto *distDialect = fn->getContext()->getLoadedDialect<dist::DistDialect>();
  bool hasTensorOps = false;
  fn.walk([&](Operation *op) {
    hasTensorOps |= op->getDialect() == nnDialect ||
                    (distDialect && op->getDialect() == distDialect);
  });
  return !hasTensorOps;
}

/// An rt rank table (a list of rank lists) from `lists`.
ArrayAttr rankTable(Builder &b, ArrayRef<SmallVector<int64_t>> lists) {
  SmallVector<Attribute> attrs;
  for (const SmallVector<int64_t> &list : lists)
    attrs.push_back(b.getDenseI64ArrayAttr(list));
  return b.getArrayAttr(attrs);
}

/// The rank groups of a collective over mesh `axes`: member k of a group is
/// the rank whose index along `axes` is k, which is the order in which the
/// rt collectives place (gather) and hand out (scatter) pieces.
ArrayAttr groupsOf(Builder &b, dist::MeshOp mesh, ArrayAttr axes) {
  SmallVector<StringAttr> names;
  for (Attribute a : axes)
    names.push_back(cast<StringAttr>(a));
  return rankTable(b, mesh.groups(names));
}

/// The per-rank start of dist.all_slice's result inside its input: rank r
/// keeps shard `indexAlong(r, axes)` along `dim`, as all_gather would have
/// placed it.
ArrayAttr sliceStarts(Builder &b, dist::MeshOp mesh, dist::AllSliceOp op) {
  SmallVector<StringAttr> names;
  for (Attribute a : op.getAxes())
    names.push_back(cast<StringAttr>(a));
  auto out = cast<RankedTensorType>(op.getResult().getType());
  int64_t dim = op.getDim();
  SmallVector<SmallVector<int64_t>> starts;
  for (int64_t r = 0, n = mesh.getNumRanks(); r < n; ++r) {
    SmallVector<int64_t> start(out.getRank(), 0);
    start[dim] = mesh.indexAlong(r, names) * out.getDimSize(dim);
    starts.push_back(start);
  }
  return rankTable(b, starts);
}

/// Converts one op of the dist dialect. Only the per-rank collectives of a
/// partitioned program have an rt form; `map` holds the buffers of the
/// operands and receives the buffers of the results.
LogicalResult convertDistOp(Operation &op, OpBuilder &b, IRMapping &map) {
  Location loc = op.getLoc();
  if (isa<dist::ConstraintOp, dist::ReshardOp>(op))
    return op.emitOpError(
        "belongs to a global (unpartitioned) program; partition it first "
        "(dist-partition) before convert-nn-to-rt");
  auto alloc = [&](Value result) -> Value {
    Value buffer =
        rt::AllocOp::create(b, loc, toBuffer(result.getType()), IntegerAttr());
    map.map(result, buffer);
    return buffer;
  };
  // Collectives over mesh axes: look the mesh up, map the input, give the
  // result a fresh buffer, then build the rt op from them.
  auto onMesh = [&](auto c, auto build) -> LogicalResult {
    dist::MeshOp mesh = dist::lookupMesh(&op, c.getMeshAttr());
    if (!mesh)
      return failure();
    build(mesh, map.lookup(c.getInput()), alloc(c.getResult()));
    return success();
  };
  return llvm::TypeSwitch<Operation *, LogicalResult>(&op)
      .Case([&](dist::AllReduceOp c) {
        return onMesh(c, [&](dist::MeshOp mesh, Value in, Value out) {
          rt::AllReduceOp::create(b, loc, in, out, groupsOf(b, mesh, c.getAxes()),
                                  b.getStringAttr(c.getReduction()));
        });
      })
      .Case([&](dist::AllGatherOp c) {
        return onMesh(c, [&](dist::MeshOp mesh, Value in, Value out) {
          rt::AllGatherOp::create(b, loc, in, out, groupsOf(b, mesh, c.getAxes()),
                                  c.getDimAttr());
        });
      })
      .Case([&](dist::ReduceScatterOp c) {
        return onMesh(c, [&](dist::MeshOp mesh, Value in, Value out) {
          rt::ReduceScatterOp::create(b, loc, in, out, groupsOf(b, mesh, c.getAxes()),
                                      c.getDimAttr(), b.getStringAttr(c.getReduction()));
        });
      })
      .Case([&](dist::AllToAllOp c) {
        return onMesh(c, [&](dist::MeshOp mesh, Value in, Value out) {
          rt::AllToAllOp::create(b, loc, in, out, groupsOf(b, mesh, c.getAxes()),
                                 c.getSplitDimAttr(), c.getConcatDimAttr());
        });
      })
      .Case([&](dist::AllSliceOp c) {
        return onMesh(c, [&](dist::MeshOp mesh, Value in, Value out) {
          rt::LocalSliceOp::create(b, loc, in, out, sliceStarts(b, mesh, c));
        });
      })
      .Case([&](dist::CollectivePermuteOp c) {
        // rt.collective_permute zeroes the output of a rank no pair targets,
        // as dist.collective_permute promises.
        Value in = map.lookup(c.getInput()), out = alloc(c.getResult());
        rt::CollectivePermuteOp::create(b, loc, in, out, c.getPairsAttr());
        return success();
      })
      .Case([&](dist::SendOp c) {
        rt::SendOp::create(b, loc, map.lookup(c.getInput()), c.getPeersAttr());
        return success();
      })
      .Case([&](dist::RecvOp c) {
        Value out = alloc(c.getResult());
        // rt.recv leaves the buffer of a rank that receives nothing as it
        // is (an arena slot with stale bytes); dist.recv gives such a rank
        // zeros, so fill the buffer first when some rank does not receive.
        if (llvm::is_contained(c.getPeers(), int64_t(-1)))
          rt::KernelOp::create(b, loc, b.getStringAttr("constant_of_shape"),
                               ValueRange(), ValueRange{out},
                               b.getDictionaryAttr(b.getNamedAttr(
                                   "value", b.getI64IntegerAttr(0))));
        rt::RecvOp::create(b, loc, out, c.getPeersAttr());
        return success();
      })
      .Default([&](Operation *other) {
        return other->emitOpError("has no rt form (convert-nn-to-rt)");
      });
}

/// rt.weight's marker of a weight zero-padded past its stored tensor.
UnitAttr zeroPadded(Builder &b, nn::WeightOp w) {
  return w.getStoredShapeAttr() ? b.getUnitAttr() : UnitAttr();
}

/// The kernel parameters of an nn op: its attributes, less the `dist.*`
/// annotations that sharding passes may leave on it (they describe the
/// layout, not the computation, and have no artifact form).
DictionaryAttr kernelParams(Operation &op) {
  SmallVector<NamedAttribute> params;
  for (NamedAttribute attr : op.getAttrs())
    if (!attr.getName().getValue().starts_with("dist."))
      params.push_back(attr);
  return DictionaryAttr::get(op.getContext(), params);
}

/// The results of nn.adamw_update that it may write straight into their
/// state's buffer (the program's copy into the state then goes): a result
/// returned as the new value of the state its matching operand reads,
/// where every other reader of that state runs before the update. The
/// kernel reads each element before it writes that element.
DenseMap<Value, StringAttr> updatesInPlace(func::FuncOp fn, ArrayRef<StringAttr> stateOf) {
  DenseMap<Value, StringAttr> inPlace;
  auto ret = cast<func::ReturnOp>(fn.getBody().front().getTerminator());
  for (auto [i, v] : llvm::enumerate(ret.getOperands())) {
    auto update = v.getDefiningOp<nn::AdamWUpdateOp>();
    if (!stateOf[i] || !update || inPlace.count(v))
      continue;
    unsigned operand = std::array<unsigned, 3>{0, 2, 3}[cast<OpResult>(v).getResultNumber()];
    Value old = update->getOperand(operand);
    auto w = old.getDefiningOp<nn::WeightOp>();
    if (!w || w.getName() != stateOf[i].getValue())
      continue;
    // Every reader of the old value, through the views rt makes of it.
    bool readLater = false;
    SmallVector<Value> values{old};
    while (!values.empty() && !readLater)
      for (Operation *user : values.pop_back_val().getUsers()) {
        if (user == update.getOperation())
          continue;
        if (user->getBlock() != update->getBlock() || !user->isBeforeInBlock(update))
          readLater = true;
        if (nn::isViewLike(user))
          values.append(user->result_begin(), user->result_end());
      }
    if (readLater)
      continue;
    if (llvm::count(update->getOperands(), old) != 1)
      continue;
    inPlace[v] = stateOf[i];
  }
  return inPlace;
}

LogicalResult convertFunction(func::FuncOp fn, std::optional<int64_t> world) {
  if (isRTFunction(fn))
    return success();
  if (world) {
    auto declared = fn->getAttrOfType<IntegerAttr>("rt.world_size");
    if (declared && declared.getInt() != *world)
      return fn.emitOpError("has rt.world_size = ")
             << declared.getInt() << " but its dist.mesh has " << *world
             << " ranks";
  }
  OpBuilder b(fn);
  SmallVector<Type> args, results;
  for (Type t : fn.getArgumentTypes())
    args.push_back(toBuffer(t));
  // A result marked `nn.state` is the new value of that state: a copy into
  // its buffer ends the program, and it is no result of the rt function.
  SmallVector<StringAttr> stateOf;
  SmallVector<DictionaryAttr> resultAttrs;
  for (auto [i, t] : llvm::enumerate(fn.getResultTypes())) {
    stateOf.push_back(fn.getResultAttrOfType<StringAttr>(i, "nn.state"));
    if (stateOf.back())
      continue;
    results.push_back(toBuffer(t));
    resultAttrs.push_back(fn.getResultAttrDict(i));
  }
  auto newFn = func::FuncOp::create(b, fn.getLoc(), fn.getName(),
                                    b.getFunctionType(args, results));
  newFn->setAttrs(fn->getAttrs());
  newFn.setFunctionType(b.getFunctionType(args, results));
  newFn.setAllResultAttrs(resultAttrs);
  llvm::StringMap<Value> stateBuffers;
  DenseMap<Value, StringAttr> inPlace = updatesInPlace(fn, stateOf);
  // The program runs on every rank of the mesh: rank tables of the
  // collectives and sliced weights are checked against this world.
  if (world)
    newFn->setAttr("rt.world_size", b.getI64IntegerAttr(*world));
  Block *entry = newFn.addEntryBlock();
  IRMapping map;
  for (auto [from, to] : llvm::zip(fn.getArguments(), entry->getArguments()))
    map.map(from, to);
  b.setInsertionPointToEnd(entry);

  for (Operation &op : fn.getBody().front()) {
    Location loc = op.getLoc();
    if (auto ret = dyn_cast<func::ReturnOp>(op)) {
      SmallVector<Value> vals;
      for (auto [i, v] : llvm::enumerate(ret.getOperands())) {
        if (!stateOf[i]) {
          vals.push_back(map.lookup(v));
          continue;
        }
        Value into = stateBuffers.lookup(stateOf[i].getValue());
        if (!into)
          return fn.emitOpError("result ")
                 << i << " is the new value of state '" << stateOf[i].getValue()
                 << "', which no nn.weight reads";
        if (into.getType() != toBuffer(v.getType()))
          return fn.emitOpError("result ")
                 << i << ", the new value of state '" << stateOf[i].getValue() << "', is "
                 << v.getType() << " but the state's buffer is " << into.getType()
                 << " (a state and its new value must be sharded alike)";
        if (inPlace.count(v))
          continue; // its kernel wrote it there
        // After every read of the old value: the program's last kernels.
        rt::KernelOp::create(b, loc, b.getStringAttr("identity"), ValueRange{map.lookup(v)},
                             ValueRange{into}, b.getDictionaryAttr({}));
      }
      func::ReturnOp::create(b, loc, vals);
      continue;
    }
    if (auto w = dyn_cast<nn::WeightOp>(op)) {
      if (w.getStoredShapeAttr() && !w.getGlobalShapeAttr())
        return w.emitOpError("is zero-padded past its stored shape but not partitioned: "
                             "dist-partition describes what each rank reads");
      bool state = isState(w);
      if (!state && onlyFoldedReaders(w))
        continue;
      auto nw = rt::WeightOp::create(b, loc, toBuffer(w.getType()),
                                     w.getNameAttr(), w.getStorageAttr(),
                                     w.getFileAttr(), w.getOffsetAttr(),
                                     w.getSizeAttr(), w.getGlobalShapeAttr(),
                                     w.getStartsAttr(), TypeAttr(), DenseI64ArrayAttr(),
                                     zeroPadded(b, w), FloatAttr(),
                                     state ? b.getUnitAttr() : UnitAttr());
      // The initializer's shape where a preset viewed it in another one.
      if (auto shape = w->getAttr("nn.model_shape"))
        nw->setAttr("nn.model_shape", shape);
      if (state && !stateBuffers.try_emplace(w.getName(), nw.getResult()).second)
        return w.emitOpError("is state read by two nn.weight ops; training state is one "
                             "buffer per name");
      map.map(w.getResult(), nw.getResult());
      continue;
    }
    if (isFoldedWeightTranspose(&op)) {
      // The transpose's type is the buffer's; the runtime permutes the
      // (converted) elements once, at load.
      auto t = cast<nn::TransposeOp>(op);
      auto c = t.getInput().getDefiningOp<nn::CastOp>();
      auto w = (c ? c.getInput() : t.getInput()).getDefiningOp<nn::WeightOp>();
      TypeAttr source = c ? TypeAttr::get(w.getType().getElementType()) : TypeAttr();
      ArrayRef<int64_t> perm = t.getPerm();
      bool identity = llvm::all_of(llvm::enumerate(perm),
                                   [](auto p) { return p.value() == int64_t(p.index()); });
      auto nw = rt::WeightOp::create(b, loc, toBuffer(t.getType()), w.getNameAttr(),
                                     w.getStorageAttr(), w.getFileAttr(), w.getOffsetAttr(),
                                     w.getSizeAttr(), w.getGlobalShapeAttr(),
                                     w.getStartsAttr(), source,
                                     identity ? DenseI64ArrayAttr() : t.getPermAttr(),
                                     zeroPadded(b, w), FloatAttr(), UnitAttr());
      map.map(t.getResult(), nw.getResult());
      continue;
    }
    if (isFoldedWeightCast(&op)) {
      if (onlyFoldedReaders(&op))
        continue;
      // The cast's type is the buffer's; the runtime converts the file's
      // elements (source_type) once, at load.
      auto c = cast<nn::CastOp>(op);
      auto w = c.getInput().getDefiningOp<nn::WeightOp>();
      auto nw = rt::WeightOp::create(
          b, loc, toBuffer(c.getType()), w.getNameAttr(), w.getStorageAttr(),
          w.getFileAttr(), w.getOffsetAttr(), w.getSizeAttr(),
          w.getGlobalShapeAttr(), w.getStartsAttr(),
          TypeAttr::get(w.getType().getElementType()), DenseI64ArrayAttr(), zeroPadded(b, w),
          FloatAttr(), UnitAttr());
      map.map(c.getResult(), nw.getResult());
      continue;
    }
    if (auto folded = foldedWeightScale(&op)) {
      // The product's type is the buffer's; the runtime multiplies the
      // file's elements (converted, with source_type) once, at load.
      auto [source, factor] = *folded;
      auto c = source.getDefiningOp<nn::CastOp>();
      auto w = (c ? c.getInput() : source).getDefiningOp<nn::WeightOp>();
      auto nw = rt::WeightOp::create(
          b, loc, toBuffer(op.getResult(0).getType()), w.getNameAttr(), w.getStorageAttr(),
          w.getFileAttr(), w.getOffsetAttr(), w.getSizeAttr(), w.getGlobalShapeAttr(),
          w.getStartsAttr(), c ? TypeAttr::get(w.getType().getElementType()) : TypeAttr(),
          DenseI64ArrayAttr(), zeroPadded(b, w), b.getF64FloatAttr(factor), UnitAttr());
      map.map(op.getResult(0), nw.getResult());
      continue;
    }
    if (auto c = dyn_cast<nn::ConstantOp>(op)) {
      // A factor that only folded products read lives in their rt.weight.
      if (!c->use_empty() && llvm::all_of(c->getUsers(), isFoldedWeightScale))
        continue;
      // A large splat (the zeros a gradient scatters into) is filled at
      // run time from its one element: the artifact holds every byte of a
      // constant.
      auto dense = dyn_cast<DenseElementsAttr>(c.getValue());
      RankedTensorType type = c.getType();
      if (dense && dense.isSplat() && type.getRank() > 0 &&
          type.getNumElements() * std::max<int64_t>(type.getElementTypeBitWidth() / 8, 1) >=
              kRuntimeSplatBytes) {
        auto scalar = RankedTensorType::get({}, type.getElementType());
        auto one = rt::ConstantOp::create(b, loc, toBuffer(scalar), dense.resizeSplat(scalar));
        auto alloc = rt::AllocOp::create(b, loc, toBuffer(type), IntegerAttr());
        rt::KernelOp::create(b, loc, b.getStringAttr("expand"), ValueRange{one},
                             ValueRange{alloc}, b.getDictionaryAttr({}));
        map.map(c.getResult(), alloc.getResult());
        continue;
      }
      auto nc = rt::ConstantOp::create(b, loc, toBuffer(c.getType()),
                                       c.getValue());
      map.map(c.getResult(), nc.getResult());
      continue;
    }
    if (isa_and_nonnull<dist::DistDialect>(op.getDialect())) {
      if (failed(convertDistOp(op, b, map)))
        return failure();
      continue;
    }
    if (op.getDialect() != op.getContext()->getLoadedDialect<nn::NNDialect>())
      return op.emitOpError("cannot be converted to rt");
    if (nn::isViewLike(&op)) {
      auto view = rt::ViewOp::create(b, loc, toBuffer(op.getResult(0).getType()),
                                     map.lookup(op.getOperand(0)));
      map.map(op.getResult(0), view.getResult());
      continue;
    }
    SmallVector<Value> ins, outs;
    for (Value v : op.getOperands())
      ins.push_back(map.lookup(v));
    for (Value r : op.getResults()) {
      if (StringAttr state = inPlace.lookup(r)) {
        Value into = stateBuffers.lookup(state.getValue());
        outs.push_back(into);
        map.map(r, into);
        continue;
      }
      auto alloc = rt::AllocOp::create(b, loc, toBuffer(r.getType()),
                                       IntegerAttr());
      outs.push_back(alloc);
      map.map(r, alloc);
    }
    // The kernel's parameters are the op's attributes, as the nn op had them
    // (less dist annotations).
    rt::KernelOp::create(b, loc,
                         b.getStringAttr(op.getName().stripDialect()), ins,
                         outs, kernelParams(op));
  }
  fn.erase();
  return success();
}

struct ConvertNNToRTPass
    : public shardflow::impl::ConvertNNToRTBase<ConvertNNToRTPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    // One program runs on one world, so every mesh must have as many ranks.
    std::optional<int64_t> world;
    dist::MeshOp first;
    for (dist::MeshOp mesh : module.getOps<dist::MeshOp>()) {
      int64_t n = mesh.getNumRanks();
      if (!world) {
        world = n;
        first = mesh;
      } else if (n != *world) {
        mesh.emitOpError("has ")
            << n << " ranks but dist.mesh @" << first.getSymName() << " has "
            << *world
            << "; the meshes of one program must have the same number of "
               "ranks (they share the rt.world_size of its functions)";
        return signalPassFailure();
      }
    }
    SmallVector<func::FuncOp> fns(module.getOps<func::FuncOp>());
    for (func::FuncOp fn : fns)
      if (failed(convertFunction(fn, world)))
        return signalPassFailure();
    // The rt program names ranks, not meshes: a mesh nothing refers to any
    // more is dropped.
    for (dist::MeshOp mesh :
         llvm::make_early_inc_range(module.getOps<dist::MeshOp>()))
      if (SymbolTable::symbolKnownUseEmpty(mesh, module))
        mesh.erase();
  }
};

} // namespace
