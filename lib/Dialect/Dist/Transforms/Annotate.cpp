//===- Annotate.cpp - the mesh and sharding seeds from options and presets -===//
//
// Seeds only say where a few tensors should be split; propagation carries
// them through the program. Presets look for patterns in the graph rather
// than for names, so they apply to any model with the same structure:
// - dp: the batch dimension (0) of every graph input;
// - megatron: linear layers (a matmul or gemm by a 2-D weight) are paired:
//   following a linear's output through ops that keep its columns apart
//   (elementwise ops, reshapes, transposes, attention, rotary embeddings)
//   until other linears read it marks it column-parallel (weight split by
//   columns, bias likewise) and those readers row-parallel (weight split by
//   rows). This finds the MLP pair (and gated MLPs) and attention's Q/K/V
//   and output projections;
// - megatron-sp: also splits the sequence dimension of the inputs and
//   outputs of normalizations and dropouts, so that the regions between a
//   row-parallel and the next column-parallel layer run on 1/tp of the
//   tokens.
// User seeds (--shard, annotations) have priority 0, the presets' weight
// seeds 1, batch seeds 1, sequence seeds 2.
//
//===----------------------------------------------------------------------===//

#include "shardflow/Dialect/Dist/IR/OpRegistry.h"
#include "shardflow/Dialect/Dist/Transforms/Passes.h"
#include "shardflow/Dialect/NN/IR/NNOps.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/StringExtras.h"

namespace shardflow::dist {
#define GEN_PASS_DEF_DISTANNOTATE
#include "shardflow/Dialect/Dist/Transforms/Passes.h.inc"
} // namespace shardflow::dist

using namespace mlir;
using namespace shardflow;
using namespace shardflow::dist;

namespace {

constexpr int kUserPriority = 0;
constexpr int kWeightPriority = 1;
constexpr int kBatchPriority = 1;
constexpr int kSequencePriority = 2;

/// Parses "dp=2,tp=4" into a mesh at the start of the module.
FailureOr<MeshOp> createMesh(ModuleOp module, StringRef spec) {
  SmallVector<Attribute> names;
  SmallVector<int64_t> sizes;
  Builder b(module.getContext());
  SmallVector<StringRef> parts;
  spec.split(parts, ',');
  for (StringRef part : parts) {
    auto [name, size] = part.trim().split('=');
    int64_t n;
    if (name.empty() || size.trim().getAsInteger(10, n) || n < 1) {
      module.emitError("--mesh: expected AXIS=SIZE entries separated by commas "
                       "(e.g. dp=2,tp=4), got '")
          << part << "'";
      return failure();
    }
    for (Attribute a : names)
      if (cast<StringAttr>(a).getValue() == name.trim()) {
        module.emitError("--mesh: axis '") << name.trim() << "' is given twice";
        return failure();
      }
    names.push_back(b.getStringAttr(name.trim()));
    sizes.push_back(n);
  }
  OpBuilder ob(module.getBodyRegion());
  auto mesh = MeshOp::create(ob, module.getLoc(), b.getStringAttr("mesh"),
                             b.getArrayAttr(names), b.getDenseI64ArrayAttr(sizes));
  return mesh;
}

/// Seeds `sharding` on `v` (replacing an earlier seed of lower priority).
void seed(Value v, ShardingAttr sharding, int priority, StringRef origin) {
  Builder b(v.getContext());
  if (auto arg = dyn_cast<BlockArgument>(v)) {
    auto fn = cast<func::FuncOp>(arg.getOwner()->getParentOp());
    unsigned i = arg.getArgNumber();
    if (auto p = fn.getArgAttrOfType<IntegerAttr>(i, "dist.priority"))
      if (p.getInt() < priority)
        return;
    if (!fn.getArgAttrOfType<IntegerAttr>(i, "dist.priority") &&
        fn.getArgAttr(i, kShardingAttr))
      return; // an annotation that came with the IR
    fn.setArgAttr(i, kShardingAttr, sharding);
    fn.setArgAttr(i, "dist.priority", b.getI64IntegerAttr(priority));
    fn.setArgAttr(i, "dist.origin", b.getStringAttr(origin));
    return;
  }
  Operation *op = v.getDefiningOp();
  if (auto p = op->getAttrOfType<IntegerAttr>("dist.priority"))
    if (p.getInt() < priority)
      return;
  if (!op->hasAttr("dist.priority") && op->hasAttr(kShardingsAttr))
    return;
  setValueSharding(v, sharding);
  op->setAttr("dist.priority", b.getI64IntegerAttr(priority));
  op->setAttr("dist.origin", b.getStringAttr(origin));
}

/// A sharding with `axes[d]` on each dim; other dims open.
ShardingAttr makeSeed(MLIRContext *ctx, MeshOp mesh, ArrayRef<AxisList> dims,
                      bool openRest = true) {
  SmallVector<DimShardingAttr> d;
  for (const AxisList &axes : dims)
    d.push_back(DimShardingAttr::get(ctx, axes, axes.empty() && openRest));
  return ShardingAttr::get(ctx, FlatSymbolRefAttr::get(mesh.getSymNameAttr()), d,
                           {}, {});
}

struct Linear;

struct Annotator {
  ModuleOp module;
  MeshOp mesh;
  StringRef dpAxis, tpAxis;
  /// The program becomes a training step (DistAnnotate's `training`).
  bool training = false;

  LogicalResult seedFromSpec(StringRef entry);
  void seedBatch();
  LogicalResult seedMicrobatches(StringRef axis);
  LogicalResult seedMegatron(bool sequence, bool wholeInitializers);
  void seedVocabulary(ArrayRef<Linear> linears,
                      const llvm::DenseSet<Operation *> &columnParallel,
                      const llvm::DenseSet<Operation *> &rowParallel);
};

LogicalResult Annotator::seedFromSpec(StringRef entry) {
  auto [name, spec] = entry.rsplit('=');
  if (name.empty() || entry.find('=') == StringRef::npos)
    return module.emitError("--shard: expected NAME=SPEC, got '") << entry << "'";
  SmallVector<Value> targets;
  module.walk([&](func::FuncOp fn) {
    for (BlockArgument arg : fn.getArguments())
      if (auto n = fn.getArgAttrOfType<StringAttr>(arg.getArgNumber(), "nn.name"))
        if (n.getValue() == name)
          targets.push_back(arg);
  });
  module.walk([&](nn::WeightOp w) {
    if (w.getName() == name)
      targets.push_back(w.getResult());
  });
  if (targets.empty())
    return module.emitError("--shard: no graph input or weight is named '") << name << "'";
  SmallVector<StringRef> dimSpecs;
  spec.split(dimSpecs, ',');
  SmallVector<AxisList> dims;
  MLIRContext *ctx = module.getContext();
  for (StringRef d : dimSpecs) {
    d = d.trim();
    AxisList axes;
    if (d != "_" && !d.empty()) {
      SmallVector<StringRef> names;
      d.split(names, '+');
      for (StringRef a : names) {
        if (mesh.axisIndex(a.trim()) < 0)
          return module.emitError("--shard ")
                 << name << ": unknown mesh axis '" << a.trim() << "' (the mesh has "
                 << mesh.getAxisNames() << ")";
        axes.push_back(StringAttr::get(ctx, a.trim()));
      }
    }
    dims.push_back(axes);
  }
  for (Value v : targets) {
    auto type = cast<RankedTensorType>(v.getType());
    if ((int64_t)dims.size() != type.getRank())
      return module.emitError("--shard ")
             << name << ": SPEC has " << dims.size() << " entries but '" << name
             << "' has rank " << type.getRank() << " (" << type << ")";
    // User dims are closed: `_` means "not split".
    SmallVector<DimShardingAttr> d;
    for (const AxisList &axes : dims)
      d.push_back(DimShardingAttr::get(ctx, axes, false));
    auto sharding = ShardingAttr::get(ctx, FlatSymbolRefAttr::get(mesh.getSymNameAttr()),
                                      d, {}, {});
    if (failed(verifySharding(sharding, type, mesh, [&] {
          return module.emitError("--shard ") << name << ": ";
        })))
      return failure();
    seed(v, sharding, kUserPriority, ("--shard " + entry).str());
  }
  return success();
}

void Annotator::seedBatch() {
  MLIRContext *ctx = module.getContext();
  int64_t n = mesh.axisSize(dpAxis);
  module.walk([&](func::FuncOp fn) {
    for (BlockArgument arg : fn.getArguments()) {
      auto type = dyn_cast<RankedTensorType>(arg.getType());
      if (!type || type.getRank() == 0 || type.getDimSize(0) % n != 0)
        continue;
      SmallVector<AxisList> dims(type.getRank());
      dims[0].push_back(StringAttr::get(ctx, dpAxis));
      seed(arg, makeSeed(ctx, mesh, dims), kBatchPriority, "--strategy dp (batch)");
    }
  });
}

/// Dimension 0 of every graph input split over `axis` as well, innermost:
/// coordinate k along it holds micro-batch k of the batch the other axes
/// give a rank. An input whose dimension 0 has size 1 is shared by all.
LogicalResult Annotator::seedMicrobatches(StringRef axis) {
  MLIRContext *ctx = module.getContext();
  int64_t m = mesh.axisSize(axis);
  WalkResult walk = module.walk([&](func::FuncOp fn) {
    for (BlockArgument arg : fn.getArguments()) {
      auto type = dyn_cast<RankedTensorType>(arg.getType());
      if (!type || type.getRank() == 0 || type.getDimSize(0) == 1)
        continue;
      unsigned i = arg.getArgNumber();
      auto name = fn.getArgAttrOfType<StringAttr>(i, "nn.name");
      auto existing = fn.getArgAttrOfType<ShardingAttr>(i, kShardingAttr);
      Layout layout = existing ? Layout::of(existing) : Layout::replicated(type.getRank());
      int64_t ranks = mesh.groupSize(layout.dims[0]);
      if (type.getDimSize(0) % (ranks * m) != 0) {
        auto diag = fn.emitError("--microbatches ")
                    << m << ": graph input '" << (name ? name.getValue() : "?")
                    << "' has a batch (dimension 0) of " << type.getDimSize(0);
        if (ranks > 1)
          diag << ", " << type.getDimSize(0) / ranks << " per rank of "
               << axesText(layout.dims[0]);
        diag << ", which does not split into " << m << " micro-batches";
        return WalkResult::interrupt();
      }
      if (!existing) {
        SmallVector<AxisList> dims(type.getRank());
        dims[0].push_back(StringAttr::get(ctx, axis));
        seed(arg, makeSeed(ctx, mesh, dims), kBatchPriority, "--microbatches");
        continue;
      }
      // Keep the seed's other dimensions, openness and priority.
      SmallVector<DimShardingAttr> dims(existing.getDims());
      AxisList axes(dims[0].getAxes());
      axes.push_back(StringAttr::get(ctx, axis));
      dims[0] = DimShardingAttr::get(ctx, axes, dims[0].getOpen());
      fn.setArgAttr(i, kShardingAttr,
                    ShardingAttr::get(ctx, existing.getMesh(), dims, existing.getReplicated(),
                                      existing.getUnreduced()));
      if (auto origin = fn.getArgAttrOfType<StringAttr>(i, "dist.origin"))
        fn.setArgAttr(i, "dist.origin",
                      StringAttr::get(ctx, origin.getValue() + ", --microbatches"));
    }
    return WalkResult::advance();
  });
  return failure(walk.wasInterrupted());
}

/// The 2-D weight a linear layer multiplies by, with whether its output
/// features are its dim 1 (x @ W) or dim 0 (Gemm with trans_b).
struct Linear {
  Operation *op;
  nn::WeightOp weight;
  int64_t outDim;
};

/// A projection by a fused weight that a Split then cuts into k equal
/// parts (GPT-2's c_attn: [D, 3D], then q, k and v): splitting the weight's
/// columns over ranks would give each rank a mix of q and k columns. The
/// weight is viewed as [K, k, N] instead (same bytes), the product becomes
/// an einsum giving [..., k, N], and the Split cuts the k axis, so that the
/// N axis (the heads) can be split like any column-parallel layer.
void unfuseSplitProjections(ModuleOp module) {
  SmallVector<nn::SplitOp> splits;
  module.walk([&](nn::SplitOp s) { splits.push_back(s); });
  for (nn::SplitOp split : splits) {
    auto type = cast<RankedTensorType>(split.getInput().getType());
    int64_t rank = type.getRank();
    int64_t k = split.getSizes().size();
    if (k < 2 || int64_t(split.getAxis()) != rank - 1 || rank < 2)
      continue;
    int64_t n = split.getSizes()[0];
    if (llvm::any_of(split.getSizes(), [&](int64_t s) { return s != n; }))
      continue;
    // Optional reshape of the rows (GPT-2's Conv1D: [B*S, 3D] back to
    // [B, S, 3D]) between the product and the split.
    Value fused = split.getInput();
    auto rows = fused.getDefiningOp<nn::ReshapeOp>();
    if (rows) {
      auto in = cast<RankedTensorType>(rows.getInput().getType());
      if (!rows->hasOneUse() || in.getRank() < 1 || in.getShape().back() != k * n)
        continue;
      fused = rows.getInput();
    }
    // Optional bias add between the product and the split.
    Value bias;
    Operation *add = nullptr;
    if (auto a = fused.getDefiningOp<nn::AddOp>()) {
      for (int side = 0; side < 2; ++side) {
        Value other = a->getOperand(1 - side);
        auto otherType = cast<RankedTensorType>(other.getType());
        if (a->getOperand(side).getDefiningOp<nn::MatMulOp>() && otherType.getRank() == 1 &&
            a->getOperand(side).hasOneUse()) {
          bias = other;
          add = a;
          fused = a->getOperand(side);
        }
      }
      if (!add)
        continue;
    }
    auto matmul = fused.getDefiningOp<nn::MatMulOp>();
    if (!matmul || !fused.hasOneUse() || (add && !add->getResult(0).hasOneUse()))
      continue;
    auto weight = matmul.getRhs().getDefiningOp<nn::WeightOp>();
    if (!weight || !weight->hasOneUse() ||
        cast<RankedTensorType>(weight.getType()).getRank() != 2 ||
        cast<RankedTensorType>(matmul.getLhs().getType()).getRank() < 2)
      continue;
    auto wType = cast<RankedTensorType>(weight.getType());
    int64_t kDim = wType.getDimSize(0);
    if (wType.getDimSize(1) != k * n)
      continue;
    OpBuilder b(split);
    Location loc = matmul.getLoc();
    // The initializer's own shape, for what writes it back (training).
    weight->setAttr("nn.model_shape", b.getDenseI64ArrayAttr(wType.getShape()));
    weight.getResult().setType(
        RankedTensorType::get({kDim, k, n}, wType.getElementType()));
    Value product = nn::EinsumOp::create(b, loc, ValueRange{matmul.getLhs(), weight},
                                         b.getStringAttr("...a,abc->...bc"));
    if (bias) {
      auto bType = cast<RankedTensorType>(bias.getType());
      auto pieces = RankedTensorType::get({k, n}, bType.getElementType());
      // A bias weight is viewed as [k, N] too (its gradient and state then
      // split like the weight's); another bias is reshaped.
      auto biasWeight = bias.getDefiningOp<nn::WeightOp>();
      auto embedded = bias.getDefiningOp<nn::ConstantOp>();
      if (biasWeight && biasWeight->hasOneUse() && bType.getRank() == 1) {
        biasWeight->setAttr("nn.model_shape", b.getDenseI64ArrayAttr(bType.getShape()));
        bias.setType(pieces);
      } else if (embedded && embedded->hasOneUse() && bType.getRank() == 1) {
        // An embedded initializer keeps its name (its location) and says
        // its own shape, for training, which makes it a weight.
        auto viewed = nn::ConstantOp::create(
            b, embedded.getLoc(), cast<DenseElementsAttr>(embedded.getValue()).reshape(pieces));
        viewed->setAttr("nn.model_shape", b.getDenseI64ArrayAttr(bType.getShape()));
        bias = viewed;
      } else {
        bias = nn::ReshapeOp::create(b, bias.getLoc(), pieces, bias);
      }
      product = nn::AddOp::create(b, add->getLoc(), product, bias);
    }
    if (rows) {
      SmallVector<int64_t> shape(type.getShape().drop_back());
      shape.append({k, n});
      product = nn::ReshapeOp::create(
          b, rows.getLoc(), RankedTensorType::get(shape, type.getElementType()), product);
    }
    SmallVector<Type> pieceTypes;
    SmallVector<int64_t> pieceShape(type.getShape());
    pieceShape.back() = 1;
    pieceShape.push_back(n);
    for (int64_t i = 0; i < k; ++i)
      pieceTypes.push_back(RankedTensorType::get(pieceShape, type.getElementType()));
    auto pieces = nn::SplitOp::create(b, split.getLoc(), pieceTypes, product,
                                      b.getI64IntegerAttr(rank - 1),
                                      b.getDenseI64ArrayAttr(SmallVector<int64_t>(k, 1)));
    for (int64_t i = 0; i < k; ++i) {
      Value piece = nn::SqueezeOp::create(b, split.getLoc(), pieces.getResult(i),
                                          b.getDenseI64ArrayAttr({rank - 1}));
      split.getResult(i).replaceAllUsesWith(piece);
    }
    Operation *embeddedBias = add ? add->getOperand(add->getOperand(0) == fused ? 1 : 0)
                                          .getDefiningOp<nn::ConstantOp>()
                                    : nullptr;
    split.erase();
    if (rows)
      rows.erase();
    if (add)
      add->erase();
    if (embeddedBias && embeddedBias->use_empty())
      embeddedBias->erase();
    matmul.erase();
  }
}

/// A linear layer written as one Gemm with its bias (the exporters' form
/// of GPT-2's Conv1D and of nn.Linear on 2-D inputs) as the product then
/// the bias add: a row-parallel layer's product is a partial sum, and the
/// bias must be added once, after the all-reduce (as Megatron's
/// RowParallelLinear does), not on every rank's part; a Gemm that keeps
/// the bias would need its inputs whole.
void unfuseGemmBiases(ModuleOp module) {
  SmallVector<nn::GemmOp> gemms;
  module.walk([&](nn::GemmOp g) { gemms.push_back(g); });
  for (nn::GemmOp g : gemms) {
    auto w = g.getB().getDefiningOp<nn::WeightOp>();
    if (!g.getC() || g.getTransA() || !w || cast<RankedTensorType>(w.getType()).getRank() != 2 ||
        g.getAlpha().convertToFloat() != 1.0f || g.getBeta().convertToFloat() != 1.0f)
      continue;
    OpBuilder b(g);
    Value product;
    if (g.getTransB())
      product = nn::GemmOp::create(b, g.getLoc(), g.getType(), g.getA(), g.getB(), Value(),
                                   g.getAlphaAttr(), g.getBetaAttr(), g.getTransAAttr(),
                                   g.getTransBAttr());
    else
      product = nn::MatMulOp::create(b, g.getLoc(), g.getType(), g.getA(), g.getB());
    Value sum = nn::AddOp::create(b, g.getLoc(), g.getType(), product, g.getC());
    g.replaceAllUsesWith(sum);
    g.erase();
  }
}

/// A projection by a fused weight whose result only slices read, each a
/// block of columns, of any widths (onnxruntime-genai's grouped-query
/// qkv_proj: 64 + 32 + 32 columns, for 4 query and 2 key/value heads):
/// each slice becomes its own product by the weight's column block, a
/// weight slice the runtime loads (`global_shape`/`starts`), so that each
/// block can be split by heads like any column-parallel layer.
void unfuseSlicedProjections(ModuleOp module) {
  SmallVector<nn::MatMulOp> matmuls;
  module.walk([&](nn::MatMulOp m) { matmuls.push_back(m); });
  for (nn::MatMulOp matmul : matmuls) {
    auto weight = matmul.getRhs().getDefiningOp<nn::WeightOp>();
    auto type = cast<RankedTensorType>(matmul.getType());
    if (!weight || !weight->hasOneUse() || weight.getGlobalShapeAttr() ||
        weight.getStoredShapeAttr() || cast<RankedTensorType>(weight.getType()).getRank() != 2 ||
        type.getRank() < 2 || matmul->use_empty())
      continue;
    int64_t last = type.getRank() - 1;
    SmallVector<nn::SliceOp> slices;
    for (Operation *user : matmul->getUsers()) {
      auto s = dyn_cast<nn::SliceOp>(user);
      if (!s || s.getAxes().size() != 1 || s.getAxes()[0] != last || s.getSteps()[0] != 1) {
        slices.clear();
        break;
      }
      slices.push_back(s);
    }
    // Slices of the whole width: splitting the weight gains nothing.
    if (slices.empty() || llvm::all_of(slices, [&](nn::SliceOp s) {
          return cast<RankedTensorType>(s.getType()).getDimSize(last) == type.getDimSize(last);
        }))
      continue;
    auto wType = cast<RankedTensorType>(weight.getType());
    Builder attrs(module.getContext());
    for (nn::SliceOp s : slices) {
      // The slice's start after clamping: its result's width is its size.
      int64_t width = cast<RankedTensorType>(s.getType()).getDimSize(last);
      int64_t start = s.getStarts()[0];
      if (start < 0)
        start += type.getDimSize(last);
      start = std::clamp<int64_t>(start, 0, type.getDimSize(last) - width);
      OpBuilder b(s);
      auto block = nn::WeightOp::create(
          b, weight.getLoc(), RankedTensorType::get({wType.getDimSize(0), width},
                                                    wType.getElementType()),
          weight.getNameAttr(), weight.getStorageAttr(), weight.getFileAttr(),
          weight.getOffsetAttr(), weight.getSizeAttr(), attrs.getDenseI64ArrayAttr(wType.getShape()),
          attrs.getArrayAttr({attrs.getDenseI64ArrayAttr({0, start})}), DenseI64ArrayAttr());
      Value product = nn::MatMulOp::create(b, matmul.getLoc(), matmul.getLhs(), block);
      s.getResult().replaceAllUsesWith(product);
      s.erase();
    }
    matmul.erase();
    weight.erase();
  }
}

std::optional<Linear> asLinear(Operation *op) {
  auto weightOf = [](Value v) -> nn::WeightOp {
    auto w = v.getDefiningOp<nn::WeightOp>();
    if (w && cast<RankedTensorType>(w.getType()).getRank() == 2)
      return w;
    return {};
  };
  if (auto m = dyn_cast<nn::MatMulOp>(op))
    if (auto w = weightOf(m.getRhs()))
      return Linear{op, w, 1};
  // The unfused form of a split projection ([K, k, N] weight).
  if (auto e = dyn_cast<nn::EinsumOp>(op))
    if (e.getInputs().size() == 2 && e.getEquation() == "...a,abc->...bc")
      if (auto w = e.getInputs()[1].getDefiningOp<nn::WeightOp>())
        return Linear{op, w, 2};
  if (auto g = dyn_cast<nn::GemmOp>(op))
    if (!g.getTransA())
      if (auto w = weightOf(g.getB()))
        return Linear{op, w, g.getTransB() ? 0 : 1};
  return std::nullopt;
}

LogicalResult Annotator::seedMegatron(bool sequence, bool wholeInitializers) {
  MLIRContext *ctx = module.getContext();
  int64_t tp = mesh.axisSize(tpAxis);
  StringAttr tpName = StringAttr::get(ctx, tpAxis);
  unfuseGemmBiases(module);
  unfuseSplitProjections(module);
  if (!wholeInitializers)
    unfuseSlicedProjections(module);
  SmallVector<Linear> linears;
  module.walk([&](Operation *op) {
    if (auto l = asLinear(op))
      linears.push_back(*l);
  });
  llvm::DenseSet<Operation *> rowParallel, columnParallel;
  for (const Linear &l : linears) {
    if (rowParallel.contains(l.op))
      continue;
    // Follow the output until linears read it; give up at anything else.
    SmallVector<Value> work{l.op->getResult(0)};
    llvm::DenseSet<Operation *> seen;
    SmallVector<Operation *> readers;
    bool ok = true;
    while (!work.empty() && ok) {
      Value v = work.pop_back_val();
      for (Operation *user : v.getUsers()) {
        if (!seen.insert(user).second)
          continue;
        if (auto r = asLinear(user)) {
          // The column-split value must be the input, not the weight.
          if (user->getOperand(0) == v) {
            readers.push_back(user);
            continue;
          }
        }
        if (!nn::keepsColumnsApart(user)) {
          ok = false;
          break;
        }
        for (Value r : user->getResults())
          work.push_back(r);
      }
    }
    if (!ok || readers.empty())
      continue;
    columnParallel.insert(l.op);
    for (Operation *r : readers)
      rowParallel.insert(r);
  }
  auto seedWeight = [&](Linear l, int64_t dim, StringRef role) {
    auto type = cast<RankedTensorType>(l.weight.getType());
    if (type.getDimSize(dim) % tp != 0)
      return;
    SmallVector<AxisList> dims(type.getRank());
    dims[dim].push_back(tpName);
    seed(l.weight.getResult(), makeSeed(ctx, mesh, dims, /*openRest=*/false),
         kWeightPriority, ("--strategy megatron (" + role + ")").str());
  };
  for (Linear l : linears) {
    if (columnParallel.contains(l.op) && !rowParallel.contains(l.op))
      seedWeight(l, l.outDim, "column-parallel");
    else if (rowParallel.contains(l.op) && !columnParallel.contains(l.op))
      seedWeight(l, l.outDim == 1 ? 0 : (l.outDim == 0 ? 1 : 0), "row-parallel");
  }
  seedVocabulary(linears, columnParallel, rowParallel);
  if (!sequence)
    return success();
  // Sequence parallelism: the token dimension of what normalizations and
  // dropouts read and write ([B, S, H]: dim 1; [T, H]: dim 0).
  auto seedTokens = [&](Value v) {
    auto type = dyn_cast<RankedTensorType>(v.getType());
    if (!type || type.getRank() < 2 || type.getRank() > 3)
      return;
    int64_t d = type.getRank() == 3 ? 1 : 0;
    if (type.getDimSize(d) % tp != 0)
      return;
    SmallVector<AxisList> dims(type.getRank());
    dims[d].push_back(tpName);
    seed(v, makeSeed(ctx, mesh, dims), kSequencePriority,
         "--strategy megatron-sp (sequence)");
  };
  auto isNorm = [](Operation *op) {
    return isa<nn::LayerNormalizationOp, nn::RMSNormalizationOp>(op);
  };
  // Norms that read the same value (a parallel block's two, GPT-NeoX's)
  // run on all tokens: a constraint gathers the value once for them, where
  // each norm's result would be gathered on its own.
  SmallVector<Value> shared;
  module.walk([&](Operation *op) {
    if (isNorm(op) && llvm::count_if(op->getOperand(0).getUsers(), isNorm) > 1 &&
        !llvm::is_contained(shared, op->getOperand(0)))
      shared.push_back(op->getOperand(0));
  });
  for (Value v : shared) {
    auto type = dyn_cast<RankedTensorType>(v.getType());
    if (!type || type.getRank() < 2 || type.getRank() > 3)
      continue;
    int64_t tokens = type.getRank() == 3 ? 1 : 0;
    SmallVector<DimShardingAttr> dims;
    for (int64_t d = 0; d < type.getRank(); ++d)
      dims.push_back(DimShardingAttr::get(ctx, {}, /*open=*/d != tokens));
    OpBuilder b(ctx);
    b.setInsertionPointAfterValue(v);
    auto meshRef = FlatSymbolRefAttr::get(mesh.getSymNameAttr());
    auto whole = ConstraintOp::create(b, v.getLoc(), type, v,
                                      ShardingAttr::get(ctx, meshRef, dims, {}, {}));
    whole->setAttr("dist.priority", b.getI64IntegerAttr(kSequencePriority));
    whole->setAttr("dist.origin",
                   b.getStringAttr("--strategy megatron-sp (norms sharing their input)"));
    v.replaceUsesWithIf(whole.getResult(),
                        [&](OpOperand &use) { return isNorm(use.getOwner()); });
  }
  module.walk([&](Operation *op) {
    if (!isNorm(op) && !isa<nn::DropoutOp, nn::KeyedDropoutOp>(op))
      return;
    if (op->getOperand(0).getDefiningOp<ConstraintOp>())
      return;
    seedTokens(op->getOperand(0));
    seedTokens(op->getResult(0));
  });
  return success();
}

/// Pads dimension `dim` of weight `w` (a vocabulary) with zeros to a
/// multiple of `tp`, as Megatron's --make-vocab-size-divisible-by does to
/// checkpoints, but here at load: the weight's type becomes the padded one
/// and `stored_shape` keeps the tensor in the file. Each rank's block is
/// rounded up to a multiple of 8 entries (aligned GEMM columns) where every
/// rank still gets real entries. Returns false (and changes nothing) when
/// no padding gives every rank some of them.
bool padVocabulary(nn::WeightOp w, int64_t dim, int64_t tp) {
  auto type = cast<RankedTensorType>(w.getType());
  int64_t entries = type.getDimSize(dim);
  int64_t block = (entries + tp - 1) / tp, aligned = (block + 7) / 8 * 8;
  if ((tp - 1) * aligned < entries)
    block = aligned;
  if ((tp - 1) * block >= entries || w.getStoredShapeAttr() || w.getGlobalShapeAttr())
    return false;
  Builder b(w.getContext());
  w.setStoredShapeAttr(b.getDenseI64ArrayAttr(type.getShape()));
  SmallVector<int64_t> shape(type.getShape());
  shape[dim] = block * tp;
  w.getResult().setType(RankedTensorType::get(shape, type.getElementType()));
  return true;
}

/// Whether `w` carries a sharding a preset must not replace: a --shard
/// seed or an annotation that came with the IR.
bool hasUserSharding(nn::WeightOp w) {
  if (!w->hasAttr(kShardingsAttr))
    return false;
  auto p = w->getAttrOfType<IntegerAttr>("dist.priority");
  return !p || p.getInt() < kWeightPriority;
}

/// Whether a [rows, cols] table or projection is a vocabulary's: at least
/// twice as many vocabulary entries as features. Token types and
/// classifier heads stay whole.
bool isVocabulary(int64_t entries, int64_t features) { return entries >= 2 * features; }

void Annotator::seedVocabulary(ArrayRef<Linear> linears,
                               const llvm::DenseSet<Operation *> &columnParallel,
                               const llvm::DenseSet<Operation *> &rowParallel) {
  MLIRContext *ctx = module.getContext();
  int64_t tp = mesh.axisSize(tpAxis);
  StringAttr tpName = StringAttr::get(ctx, tpAxis);
  auto seedDim = [&](nn::WeightOp w, int64_t dim, StringRef role) {
    auto type = cast<RankedTensorType>(w.getType());
    if (type.getDimSize(dim) % tp != 0 || type.getDimSize(dim) < tp)
      return;
    SmallVector<AxisList> dims(type.getRank());
    dims[dim].push_back(tpName);
    seed(w.getResult(), makeSeed(ctx, mesh, dims, /*openRest=*/false), kWeightPriority,
         ("--strategy megatron (" + role + ")").str());
  };
  // Token embedding lookups: each rank holds a block of the vocabulary's
  // rows. The tables looked up by ids from a graph input (maybe cast or
  // reshaped), the largest of them: not position embeddings or rotary
  // caches, whose split would cost an all_reduce for little memory.
  auto fromInput = [](Value v) {
    while (Operation *def = v.getDefiningOp()) {
      if (!isa<nn::CastOp, nn::ReshapeOp, nn::UnsqueezeOp, nn::SqueezeOp, nn::FlattenOp,
               nn::IdentityOp>(def))
        return false;
      v = def->getOperand(0);
    }
    return isa<BlockArgument>(v);
  };
  SmallVector<nn::WeightOp> tables;
  int64_t largest = 0;
  module.walk([&](nn::GatherOp g) {
    auto w = g.getInput().getDefiningOp<nn::WeightOp>();
    if (!w || g.getAxis() != 0 || !fromInput(g.getIndices()))
      return;
    auto type = cast<RankedTensorType>(w.getType());
    if (type.getRank() != 2 || !isVocabulary(type.getDimSize(0), type.getDimSize(1)))
      return;
    if (type.getNumElements() > largest)
      tables.clear();
    if (type.getNumElements() >= largest) {
      largest = type.getNumElements();
      tables.push_back(w);
    }
  });
  for (nn::WeightOp w : tables) {
    // A vocabulary tp does not divide is zero-padded (if only gathers read
    // it): the lookups keep addressing the real rows (axis_size).
    int64_t rows = cast<RankedTensorType>(w.getType()).getDimSize(0);
    bool onlyGathers = llvm::all_of(w->getUses(), [](OpOperand &use) {
      auto g = dyn_cast<nn::GatherOp>(use.getOwner());
      return g && use.getOperandNumber() == 0 && g.getAxis() == 0 && !g.getAxisSize();
    });
    if (hasUserSharding(w))
      continue;
    if (rows % tp != 0 && onlyGathers && padVocabulary(w, 0, tp)) {
      OpBuilder b(w);
      for (Operation *user : w->getUsers())
        cast<nn::GatherOp>(user).setAxisSizeAttr(b.getI64IntegerAttr(rows));
    }
    seedDim(w, 0, "vocabulary-parallel embedding");
  }
  // Output projections onto a vocabulary whose logits are results (through
  // ops that keep columns apart): column-parallel, the logits gathered.
  for (Linear l : linears) {
    if (columnParallel.contains(l.op) || rowParallel.contains(l.op) ||
        hasUserSharding(l.weight))
      continue;
    auto type = cast<RankedTensorType>(l.weight.getType());
    int64_t inDim = l.outDim == 0 ? 1 : 0;
    if (!isVocabulary(type.getDimSize(l.outDim), type.getDimSize(inDim)))
      continue;
    SmallVector<Value> work{l.op->getResult(0)};
    llvm::DenseSet<Operation *> seen;
    bool returned = false, ok = true;
    while (!work.empty() && ok) {
      Value v = work.pop_back_val();
      for (Operation *user : v.getUsers()) {
        if (isa<func::ReturnOp>(user)) {
          returned = true;
          continue;
        }
        if (!seen.insert(user).second)
          continue;
        if (asLinear(user) || !nn::keepsColumnsApart(user)) {
          ok = false;
          break;
        }
        for (Value r : user->getResults())
          work.push_back(r);
      }
    }
    if (!ok || !returned)
      continue;
    // Gathering the logits moves [tokens, vocabulary] per forward, against
    // the [features, vocabulary] weight the split saves: with more tokens
    // per data-parallel rank than features (GPT-2 small at batch 8 x 1024:
    // 8192 against 768) the gather costs more time than the split saves,
    // and the local and gathered logits more memory, so the projection
    // stays whole; with fewer (decoding, short prompts) it is split. A
    // training step's loss reads the split logits where they are (the
    // vocabulary-parallel cross-entropy): always split.
    auto product = cast<RankedTensorType>(l.op->getResult(0).getType());
    int64_t tokens = product.getNumElements() / product.getShape().back();
    if (mesh.axisIndex(dpAxis) >= 0)
      tokens /= mesh.axisSize(dpAxis);
    if (!training && tokens >= type.getDimSize(inDim))
      continue;
    // A vocabulary tp does not divide is zero-padded (a product with the
    // weight as its only use, no bias): the product gets the padded width
    // and a slice gives the logits back their width.
    int64_t vocab = type.getDimSize(l.outDim);
    bool plainProduct = isa<nn::MatMulOp>(l.op) ||
                        (isa<nn::GemmOp>(l.op) && l.op->getNumOperands() == 2);
    if (vocab % tp != 0 && plainProduct && l.weight->hasOneUse() &&
        padVocabulary(l.weight, l.outDim, tp)) {
      Value product = l.op->getResult(0);
      auto productType = cast<RankedTensorType>(product.getType());
      int64_t last = productType.getRank() - 1;
      SmallVector<int64_t> padded(productType.getShape());
      padded[last] = cast<RankedTensorType>(l.weight.getType()).getDimSize(l.outDim);
      product.setType(RankedTensorType::get(padded, productType.getElementType()));
      OpBuilder b(ctx);
      b.setInsertionPointAfter(l.op);
      Value logits = nn::SliceOp::create(
          b, l.op->getLoc(), productType, product, b.getDenseI64ArrayAttr({0}),
          b.getDenseI64ArrayAttr({vocab}), b.getDenseI64ArrayAttr({last}),
          b.getDenseI64ArrayAttr({1}));
      product.replaceAllUsesExcept(logits, logits.getDefiningOp());
    }
    seedDim(l.weight, l.outDim, "vocabulary-parallel output projection");
  }
}

struct DistAnnotatePass : public shardflow::dist::impl::DistAnnotateBase<DistAnnotatePass> {
  using DistAnnotateBase::DistAnnotateBase;

  static constexpr StringLiteral kMicrobatchAxis = "microbatch";

  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (microbatches < 1) {
      module.emitError("dist-annotate: microbatches must be >= 1, got ") << microbatches;
      return signalPassFailure();
    }
    FailureOr<MeshOp> mesh = findOrCreateMesh(module);
    if (failed(mesh))
      return signalPassFailure();
    Annotator a{module, *mesh, dpAxis, tpAxis, training};
    for (const std::string &entry : shard)
      if (failed(a.seedFromSpec(entry)))
        return signalPassFailure();
    if (failed(applyStrategy(a)))
      return signalPassFailure();
    if (microbatches > 1 && failed(a.seedMicrobatches(kMicrobatchAxis)))
      return signalPassFailure();
  }

  /// The mesh of `mesh_` or of the program, with the micro-batch axis
  /// last when there are micro-batches.
  FailureOr<MeshOp> findOrCreateMesh(ModuleOp module) {
    auto meshes = llvm::to_vector(module.getOps<MeshOp>());
    std::string spec = mesh_;
    if (!spec.empty() && !meshes.empty()) {
      module.emitError("--mesh given, but the program already has dist.mesh @")
          << meshes.front().getSymName();
      return failure();
    }
    // A single rank's micro-batches: a mesh of the micro-batch axis alone.
    bool microbatchMeshOnly = microbatches > 1 && spec.empty() && meshes.empty();
    if (microbatchMeshOnly)
      spec = (kMicrobatchAxis + "=" + Twine(int64_t(microbatches))).str();
    MeshOp mesh;
    if (!spec.empty()) {
      auto created = createMesh(module, spec);
      if (failed(created))
        return failure();
      mesh = *created;
    } else {
      mesh = getModuleMesh(module);
      if (!mesh)
        return failure();
    }
    if (microbatches <= 1 || microbatchMeshOnly)
      return mesh;
    if (mesh.axisIndex(kMicrobatchAxis) >= 0) {
      mesh.emitError("the mesh axis name '")
          << kMicrobatchAxis << "' is --microbatches' own; name the axis otherwise";
      return failure();
    }
    SmallVector<Attribute> names(mesh.getAxisNames().getValue());
    SmallVector<int64_t> sizes(mesh.getAxisSizes());
    names.push_back(StringAttr::get(module.getContext(), kMicrobatchAxis));
    sizes.push_back(microbatches);
    Builder b(module.getContext());
    mesh.setAxisNamesAttr(b.getArrayAttr(names));
    mesh.setAxisSizesAttr(b.getDenseI64ArrayAttr(sizes));
    return mesh;
  }

  LogicalResult applyStrategy(Annotator &a) {
    ModuleOp module = a.module;
    if (strategy.empty())
      return success();
    if (strategy != "dp" && strategy != "megatron" && strategy != "megatron-sp")
      return module.emitError("--strategy must be dp, megatron or megatron-sp, got '")
             << strategy << "'";
    bool hasDp = a.mesh.axisIndex(dpAxis) >= 0, hasTp = a.mesh.axisIndex(tpAxis) >= 0;
    if (strategy == "dp" && !hasDp)
      return module.emitError("--strategy dp needs a mesh axis named '")
             << dpAxis.getValue() << "' (or set --dp-axis)";
    if (strategy != "dp" && !hasTp)
      return module.emitError("--strategy ")
             << strategy.getValue() << " needs a mesh axis named '" << tpAxis.getValue()
             << "' (or set --tp-axis)";
    if (hasDp)
      a.seedBatch();
    if (strategy != "dp")
      return a.seedMegatron(strategy == "megatron-sp", wholeInitializers);
    return success();
  }
};

} // namespace
