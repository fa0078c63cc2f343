//===- SplitFusedProjections.cpp - one GEMM per piece of a fused projection -===//
//
// GPT-2 and BERT-style exports compute Q, K and V with one matmul against a
// fused [K, 3N] weight (plus a fused bias) and split the result along its
// last dimension. On the GPU the split is a copy of the whole activation.
// When the weight (and the bias) are loaded data (model weights or
// constants, through casts, reshapes and dist.all_slice) read only there,
// each piece is instead computed by its own matmul against its column block
// of the weight: a weight slice the runtime loads at start (the same
// `global_shape`/`starts` table sharding uses), so the split and its copy
// disappear, and each bias add rides on its GEMM's epilogue.
//
// Partitioned programs are handled too: the megatron presets shard the
// fused weight by heads as [K, 3, N] and compute it with an einsum
// "...a,abc->...bc" whose result is split along the "3" axis and squeezed.
// There the pieces' weight slices carry one start per rank, composed with
// the rank's own slice.
//
// A split whose pieces are exactly the query, key and value of one 3-D
// attention stays: the CUDA target's attention reads them in the fused
// result, and one GEMM of the full width beats three of a third. The heads
// form feeding one attention becomes that form: the rank's [K, 3, N] weight
// block has the bytes of a [K, 3N] one.
//
//===----------------------------------------------------------------------===//

#include "shardflow/Dialect/Dist/IR/DistOps.h"
#include "shardflow/Dialect/NN/IR/NNOps.h"
#include "shardflow/Dialect/NN/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"

namespace shardflow::nn {
#define GEN_PASS_DEF_NNSPLITFUSEDPROJECTIONS
#include "shardflow/Dialect/NN/Transforms/Passes.h.inc"
} // namespace shardflow::nn

using namespace mlir;
using namespace shardflow;

namespace {

RankedTensorType typeOf(Value v) { return cast<RankedTensorType>(v.getType()); }

/// Where a block starts, per rank: one list (the same on every rank) or one
/// list per rank of the mesh.
using RankOffsets = SmallVector<SmallVector<int64_t>>;

const SmallVector<int64_t> &atRank(const RankOffsets &o, size_t r) {
  return o[o.size() == 1 ? 0 : r];
}

bool sameOnEveryRank(const RankOffsets &o) {
  return llvm::all_of(o, [&](const SmallVector<int64_t> &x) { return x == o.front(); });
}

/// Builds blocks of loaded values (weights, constants, and casts, reshapes
/// and dist.all_slice of them) as new loaded values, so that reading a
/// block costs no copy at run time.
struct Slicer {
  dist::MeshOp mesh; // null in a program without one
  OpBuilder &b;

  int64_t numRanks() { return mesh ? mesh.getNumRanks() : 1; }

  /// `v[offsets[r] : offsets[r] + sizes]` on each rank r, or null when `v`
  /// is not loaded data of a form this knows.
  Value slice(Value v, const RankOffsets &offsets, ArrayRef<int64_t> sizes) {
    RankedTensorType type = typeOf(v);
    if (sizes == type.getShape() &&
        llvm::all_of(offsets, [](auto &o) { return llvm::all_of(o, [](int64_t x) { return x == 0; }); }))
      return v;
    Operation *def = v.getDefiningOp();
    if (!def)
      return {};
    if (auto w = dyn_cast<nn::WeightOp>(def))
      return sliceWeight(w, offsets, sizes);
    if (auto c = dyn_cast<nn::CastOp>(def)) {
      Value in = slice(c.getInput(), offsets, sizes);
      return in ? nn::CastOp::create(b, c.getLoc(), in, c.getToAttr()).getResult() : Value();
    }
    if (auto c = dyn_cast<nn::ConstantOp>(def))
      return sliceConstant(c, offsets, sizes);
    if (auto r = dyn_cast<nn::ReshapeOp>(def))
      return sliceReshape(r, offsets, sizes);
    if (auto a = dyn_cast<dist::AllSliceOp>(def))
      return sliceAllSlice(a, offsets, sizes);
    return {};
  }

  /// `as`: the shape to read a whole weight (one without `starts`) in: the
  /// same bytes, row-major, in a shape of the same element count.
  Value sliceWeight(nn::WeightOp w, const RankOffsets &offsets, ArrayRef<int64_t> sizes,
                    ArrayRef<int64_t> as = {}) {
    if (w.getStoredShapeAttr())
      return {}; // zero-padded past its stored tensor: not sliced again
    RankedTensorType local = typeOf(w.getResult());
    ArrayRef<int64_t> global = w.getGlobalShape() ? *w.getGlobalShape() : local.getShape();
    if (!as.empty())
      global = as;
    RankOffsets starts;
    if (auto list = w.getStartsAttr())
      for (Attribute s : list)
        starts.emplace_back(cast<DenseI64ArrayAttr>(s).asArrayRef());
    else
      starts.emplace_back(global.size(), 0);
    // A program with a mesh has one start per rank; one without has one.
    size_t n = size_t(numRanks());
    if ((starts.size() != 1 && starts.size() != n) || (offsets.size() != 1 && offsets.size() != n))
      return {};
    SmallVector<Attribute> table;
    for (size_t r = 0; r < n; ++r) {
      SmallVector<int64_t> start(atRank(starts, r));
      for (auto [s, o] : llvm::zip(start, atRank(offsets, r)))
        s += o;
      table.push_back(b.getDenseI64ArrayAttr(start));
    }
    return nn::WeightOp::create(
        b, w.getLoc(), RankedTensorType::get(sizes, local.getElementType()), w.getNameAttr(),
        w.getStorageAttr(), w.getFileAttr(), w.getOffsetAttr(), w.getSizeAttr(),
        b.getDenseI64ArrayAttr(global), b.getArrayAttr(table), DenseI64ArrayAttr());
  }

  Value sliceConstant(nn::ConstantOp c, const RankOffsets &offsets, ArrayRef<int64_t> sizes) {
    auto dense = dyn_cast<DenseElementsAttr>(c.getValue());
    if (!dense || !sameOnEveryRank(offsets))
      return {};
    auto type = RankedTensorType::get(sizes, dense.getElementType());
    if (dense.isSplat())
      return nn::ConstantOp::create(b, c.getLoc(), dense.resizeSplat(type));
    ArrayRef<int64_t> shape = dense.getType().getShape();
    const SmallVector<int64_t> &start = offsets.front();
    SmallVector<Attribute> all(dense.getValues<Attribute>()), values;
    SmallVector<int64_t> idx(sizes.size(), 0);
    for (int64_t n = type.getNumElements(), i = 0; i < n; ++i) {
      int64_t flat = 0;
      for (size_t d = 0; d < sizes.size(); ++d)
        flat = flat * shape[d] + start[d] + idx[d];
      values.push_back(all[flat]);
      for (size_t d = sizes.size(); d-- > 0;) {
        if (++idx[d] < sizes[d])
          break;
        idx[d] = 0;
      }
    }
    return nn::ConstantOp::create(b, c.getLoc(), DenseElementsAttr::get(type, values));
  }

  /// A block of a reshape's result is a block of its input when it is one
  /// contiguous run of elements that is a block there too. Otherwise, when
  /// the input is a whole weight (behind a cast), it is a block of that
  /// weight read in the reshape's shape: the loader gathers any block.
  Value sliceReshape(nn::ReshapeOp r, const RankOffsets &offsets, ArrayRef<int64_t> sizes) {
    if (Value v = sliceContiguousReshape(r, offsets, sizes))
      return v;
    nn::CastOp c = r.getInput().getDefiningOp<nn::CastOp>();
    auto w = (c ? c.getInput() : r.getInput()).getDefiningOp<nn::WeightOp>();
    if (!w || w.getStartsAttr() || w.getGlobalShape())
      return {};
    Value block = sliceWeight(w, offsets, sizes, typeOf(r.getResult()).getShape());
    if (!block || !c)
      return block;
    return nn::CastOp::create(b, c.getLoc(), block, c.getToAttr()).getResult();
  }

  Value sliceContiguousReshape(nn::ReshapeOp r, const RankOffsets &offsets,
                               ArrayRef<int64_t> sizes) {
    ArrayRef<int64_t> shape = typeOf(r.getResult()).getShape();
    ArrayRef<int64_t> inShape = typeOf(r.getInput()).getShape();
    // Contiguous: size 1 before some dimension k, whole after it.
    size_t k = 0;
    while (k + 1 < sizes.size() && sizes[k] == 1)
      ++k;
    for (size_t d = k + 1; d < sizes.size(); ++d)
      if (sizes[d] != shape[d])
        return {};
    int64_t length = 1;
    for (int64_t s : sizes)
      length *= s;
    RankOffsets inOffsets;
    SmallVector<int64_t> inSizes;
    for (const SmallVector<int64_t> &o : offsets) {
      int64_t first = 0;
      for (size_t d = 0; d < shape.size(); ++d)
        first = first * shape[d] + o[d];
      // The run [first, first + length) as a block of the input: whole
      // innermost dimensions, a range of one more, single indices before.
      int64_t inner = 1;
      size_t j = inShape.size() - 1;
      while (j > 0 && length % (inner * inShape[j]) == 0 && first % (inner * inShape[j]) == 0) {
        inner *= inShape[j];
        --j;
      }
      SmallVector<int64_t> start(inShape.size(), 0), size(inShape.begin(), inShape.end());
      int64_t rest = first / inner;
      for (size_t d = j + 1; d-- > 0;) {
        start[d] = rest % inShape[d];
        rest /= inShape[d];
        size[d] = 1;
      }
      size[j] = length / inner;
      if (length % inner || start[j] + size[j] > inShape[j] || (!inSizes.empty() && size != inSizes))
        return {};
      inSizes = size;
      inOffsets.push_back(start);
    }
    Value in = slice(r.getInput(), inOffsets, inSizes);
    return in ? reshapeTo(in, sizes) : Value();
  }

  /// dist.all_slice keeps block `indexAlong(rank)` of its input along `dim`.
  Value sliceAllSlice(dist::AllSliceOp a, const RankOffsets &offsets, ArrayRef<int64_t> sizes) {
    if (!mesh || a.getMesh() != mesh.getSymName())
      return {};
    SmallVector<StringAttr> axes;
    for (Attribute x : a.getAxes())
      axes.push_back(cast<StringAttr>(x));
    int64_t dim = a.getDim(), local = typeOf(a.getResult()).getDimSize(dim);
    RankOffsets inOffsets;
    for (int64_t r = 0, n = numRanks(); r < n; ++r) {
      SmallVector<int64_t> o(atRank(offsets, size_t(r)));
      o[dim] += mesh.indexAlong(r, axes) * local;
      inOffsets.push_back(o);
    }
    if (Value in = slice(a.getInput(), inOffsets, sizes))
      return in;
    // Data that cannot differ per rank (a constant): slice it in the other
    // dimensions and keep the all_slice, when the block covers `dim` whole.
    if (sizes[dim] != local || !sameOnEveryRank(offsets) || offsets.front()[dim] != 0)
      return {};
    SmallVector<int64_t> inSizes(sizes);
    inSizes[dim] = typeOf(a.getInput()).getDimSize(dim);
    Value in = slice(a.getInput(), offsets, inSizes);
    if (!in)
      return {};
    return dist::AllSliceOp::create(b, a.getLoc(),
                                    RankedTensorType::get(sizes, typeOf(in).getElementType()),
                                    in, a.getMeshAttr(), a.getAxesAttr(), a.getDimAttr());
  }

  /// `v` with shape `shape` (the same elements): a weight slice drops its
  /// size-1 dimensions by merging each into the next (its start moves with
  /// it), and otherwise a reshape, which costs nothing.
  Value reshapeTo(Value v, ArrayRef<int64_t> shape) {
    if (typeOf(v).getShape() == shape)
      return v;
    if (auto r = v.getDefiningOp<nn::ReshapeOp>(); r && typeOf(r.getInput()).getShape() == shape) {
      Value in = r.getInput();
      if (r->use_empty())
        r->erase();
      return in;
    }
    nn::CastOp c = v.getDefiningOp<nn::CastOp>();
    auto w = (c ? c.getInput() : v).getDefiningOp<nn::WeightOp>();
    if (w && w.getGlobalShape() && !w.getStoredShapeAttr() && (!c || c.getInput().hasOneUse())) {
      SmallVector<int64_t> local(typeOf(w.getResult()).getShape()),
          global(*w.getGlobalShape());
      RankOffsets starts;
      for (Attribute s : w.getStartsAttr())
        starts.emplace_back(cast<DenseI64ArrayAttr>(s).asArrayRef());
      for (size_t d = 0; d + 1 < local.size();) {
        if (local[d] != 1) {
          ++d;
          continue;
        }
        for (SmallVector<int64_t> &s : starts) {
          s[d + 1] += s[d] * global[d + 1];
          s.erase(s.begin() + d);
        }
        global[d + 1] *= global[d];
        global.erase(global.begin() + d);
        local.erase(local.begin() + d);
      }
      if (local == shape) {
        SmallVector<Attribute> table;
        for (const SmallVector<int64_t> &s : starts)
          table.push_back(b.getDenseI64ArrayAttr(s));
        Value nw = nn::WeightOp::create(
            b, w.getLoc(), RankedTensorType::get(shape, typeOf(w.getResult()).getElementType()),
            w.getNameAttr(), w.getStorageAttr(), w.getFileAttr(), w.getOffsetAttr(),
            w.getSizeAttr(), b.getDenseI64ArrayAttr(global), b.getArrayAttr(table),
            DenseI64ArrayAttr());
        if (c)
          nw = nn::CastOp::create(b, c.getLoc(), nw, c.getToAttr());
        eraseDead(v.getDefiningOp());
        return nw;
      }
    }
    return nn::ReshapeOp::create(b, v.getLoc(),
                                 RankedTensorType::get(shape, typeOf(v).getElementType()), v);
  }

  /// Erases `op` when nothing reads it, and then the ops that only it read
  /// among the kinds this pass builds and replaces.
  static void eraseDead(Operation *op) {
    SmallVector<Operation *> work = {op};
    while (!work.empty()) {
      Operation *o = work.pop_back_val();
      if (!o || !o->use_empty() ||
          !isa<nn::WeightOp, nn::CastOp, nn::ConstantOp, nn::ReshapeOp, nn::SqueezeOp,
               nn::AddOp, nn::MatMulOp, nn::EinsumOp, nn::SplitOp, dist::AllSliceOp>(o))
        continue;
      SmallVector<Operation *> defs;
      for (Value operand : o->getOperands())
        defs.push_back(operand.getDefiningOp());
      o->erase();
      work.append(defs.begin(), defs.end());
    }
  }
};

/// Loaded data (a weight or constant, through casts, reshapes and
/// dist.all_slice) that nothing else reads.
bool isLoadedAndPrivate(Value v) {
  while (true) {
    if (!v.hasOneUse())
      return false;
    Operation *def = v.getDefiningOp();
    if (isa_and_nonnull<nn::WeightOp, nn::ConstantOp>(def))
      return true;
    if (!isa_and_nonnull<nn::CastOp, nn::ReshapeOp, dist::AllSliceOp>(def))
      return false;
    v = def->getOperand(0);
  }
}

/// Whether the split's three pieces are exactly the query, key and value
/// of one 3-D attention ([B, S, H*D]) and read nowhere else: directly, or
/// (`squeezed`, the heads form) each through one squeeze. The CUDA target's
/// attention then reads them where the fused product holds them
/// (convert-rt-to-gpu), so one GEMM computes all three: better than three
/// GEMMs of a third of the width.
bool feedsOneAttention(nn::SplitOp split, bool squeezed) {
  if (split.getNumResults() != 3)
    return false;
  nn::AttentionOp attention;
  for (auto [i, piece] : llvm::enumerate(split.getResults())) {
    Value read = piece;
    if (squeezed) {
      auto sq = piece.hasOneUse() ? dyn_cast<nn::SqueezeOp>(*piece.getUsers().begin())
                                  : nn::SqueezeOp();
      if (!sq)
        return false;
      read = sq.getResult();
    }
    if (!read.hasOneUse())
      return false;
    OpOperand &use = *read.getUses().begin();
    auto a = dyn_cast<nn::AttentionOp>(use.getOwner());
    if (!a || use.getOperandNumber() != i || (attention && a != attention))
      return false;
    attention = a;
  }
  return typeOf(attention.getQuery()).getRank() == 3;
}

struct NNSplitFusedProjections
    : shardflow::nn::impl::NNSplitFusedProjectionsBase<NNSplitFusedProjections> {
  using NNSplitFusedProjectionsBase::NNSplitFusedProjectionsBase;

  void runOnOperation() override {
    func::FuncOp fn = getOperation();
    auto module = fn->getParentOfType<ModuleOp>();
    dist::MeshOp mesh;
    if (module) {
      auto meshes = module.getOps<dist::MeshOp>();
      if (!meshes.empty()) {
        // The weights' start tables are per rank of one mesh.
        if (std::next(meshes.begin()) != meshes.end())
          return;
        mesh = *meshes.begin();
      }
    }
    SmallVector<nn::SplitOp> splits;
    fn.walk([&](nn::SplitOp s) { splits.push_back(s); });
    for (nn::SplitOp split : splits)
      rewrite(split, mesh);
  }

  /// The heads form feeding one attention: [K, 3, N] weights (and a [3, N]
  /// bias) are laid out like [K, 3N] ones, so the einsum becomes one matmul
  /// against the weight viewed as [K, 3N], split along its last axis: the
  /// same form as an unpartitioned program's, which the CUDA attention reads
  /// in place.
  void packForAttention(nn::SplitOp split, nn::AddOp add, Value x, Value w, Value bias,
                        dist::MeshOp mesh) {
    OpBuilder b(split);
    ArrayRef<int64_t> wShape = typeOf(w).getShape();
    int64_t n = wShape[2], width = wShape[1] * n;
    Type element = typeOf(w).getElementType();
    Location loc = split.getInput().getLoc();
    Value flat = nn::ReshapeOp::create(b, w.getLoc(),
                                       RankedTensorType::get({wShape[0], width}, element), w);
    Value fused = nn::MatMulOp::create(b, loc, x, flat);
    if (bias) {
      // The rank's [3, N] block of a bias in a weight is loaded as such
      // (no per-forward copy of a dist.all_slice).
      Slicer slicer{mesh, b};
      Value block = bias;
      if (auto a = bias.getDefiningOp<dist::AllSliceOp>()) {
        SmallVector<int64_t> zeros(typeOf(bias).getRank(), 0);
        Value loaded = slicer.sliceAllSlice(a, {zeros}, typeOf(bias).getShape());
        if (loaded && !loaded.getDefiningOp<dist::AllSliceOp>())
          block = loaded;
        else if (loaded)
          Slicer::eraseDead(loaded.getDefiningOp());
      }
      Value row = nn::ReshapeOp::create(
          b, bias.getLoc(), RankedTensorType::get({width}, typeOf(bias).getElementType()), block);
      fused = nn::AddOp::create(b, add.getLoc(), fused, row);
    }
    RankedTensorType type = typeOf(fused);
    SmallVector<int64_t> pieceShape(type.getShape());
    pieceShape.back() = n;
    SmallVector<Type> types(3, RankedTensorType::get(pieceShape, type.getElementType()));
    auto packed = nn::SplitOp::create(b, split.getLoc(), types, fused,
                                      b.getI64IntegerAttr(type.getRank() - 1),
                                      b.getDenseI64ArrayAttr({n, n, n}));
    for (auto [result, piece] : llvm::zip(split.getResults(), packed.getResults())) {
      Operation *squeeze = *result.getUsers().begin();
      squeeze->getResult(0).replaceAllUsesWith(piece);
      squeeze->erase();
    }
    Slicer::eraseDead(split);
  }

  /// The fused product behind a split: `matmul(x, W)` (W [K, 3N], split
  /// along the last axis) or `einsum(x, W)` "...a,abc->...bc" (W [K, 3, N],
  /// split into pieces of 1 along the "3" axis, each squeezed), plus an
  /// optional bias over the trailing dimensions.
  void rewrite(nn::SplitOp split, dist::MeshOp mesh) {
    Value fused = split.getInput();
    int64_t rank = typeOf(fused).getRank();
    if (rank < 2 || !fused.hasOneUse())
      return;
    Value product = fused, bias;
    nn::AddOp add = fused.getDefiningOp<nn::AddOp>();
    if (add) {
      Value lhs = add.getLhs(), rhs = add.getRhs();
      product = isa_and_nonnull<nn::MatMulOp, nn::EinsumOp>(lhs.getDefiningOp()) ? lhs : rhs;
      bias = product == lhs ? rhs : lhs;
      if (typeOf(product) != typeOf(fused) || !isLoadedAndPrivate(bias))
        return;
    }
    if (!product.hasOneUse())
      return;
    Value x, w;
    bool headsForm = false;
    if (auto m = product.getDefiningOp<nn::MatMulOp>()) {
      x = m.getLhs();
      w = m.getRhs();
      if (int64_t(split.getAxis()) != rank - 1 || typeOf(w).getRank() != 2)
        return;
      if (bias && typeOf(bias).getRank() != 1)
        return;
      if (attentionInPlace && feedsOneAttention(split, /*squeezed=*/false))
        return;
    } else if (auto e = product.getDefiningOp<nn::EinsumOp>()) {
      std::string eq = e.getEquation().str();
      llvm::erase(eq, ' ');
      if (eq != "...a,abc->...bc" || e.getInputs().size() != 2)
        return;
      x = e.getInputs()[0];
      w = e.getInputs()[1];
      headsForm = true;
      if (int64_t(split.getAxis()) != rank - 2 || typeOf(w).getRank() != 3 ||
          !llvm::all_of(split.getSizes(), [](int64_t s) { return s == 1; }))
        return;
      if (bias && (typeOf(bias).getRank() != 2 ||
                   typeOf(bias).getShape() != typeOf(fused).getShape().take_back(2)))
        return;
      // Every piece is read only through a squeeze of the split axis.
      for (Value piece : split.getResults())
        for (Operation *user : piece.getUsers()) {
          auto sq = dyn_cast<nn::SqueezeOp>(user);
          if (!sq || sq.getAxes().size() != 1 ||
              (sq.getAxes()[0] != rank - 2 && sq.getAxes()[0] != -2))
            return;
        }
      if (attentionInPlace && feedsOneAttention(split, /*squeezed=*/true)) {
        packForAttention(split, add, x, w, bias, mesh);
        return;
      }
    } else {
      return;
    }
    if (!isLoadedAndPrivate(w))
      return;

    OpBuilder b(split);
    Slicer slicer{mesh, b};
    ArrayRef<int64_t> wShape = typeOf(w).getShape();
    SmallVector<Value> pieces;
    auto abandon = [&]() {
      for (Value p : pieces)
        Slicer::eraseDead(p.getDefiningOp());
    };
    int64_t offset = 0;
    for (Value result : split.getResults()) {
      RankedTensorType want = typeOf(result);
      Value wi, bi;
      int64_t size = want.getShape()[headsForm ? rank - 2 : rank - 1];
      if (headsForm) {
        // Piece `offset` of the heads axis: W[:, offset, :] as [K, N].
        wi = slicer.slice(w, {{0, offset, 0}}, {wShape[0], 1, wShape[2]});
        if (wi)
          wi = slicer.reshapeTo(wi, {wShape[0], wShape[2]});
        if (bias) {
          int64_t n = typeOf(bias).getShape()[1];
          bi = slicer.slice(bias, {{offset, 0}}, {1, n});
          if (bi)
            bi = slicer.reshapeTo(bi, {n});
        }
      } else {
        wi = slicer.slice(w, {{0, offset}}, {wShape[0], size});
        if (bias)
          bi = slicer.slice(bias, {{offset}}, {size});
      }
      if (!wi || (bias && !bi)) {
        if (wi)
          Slicer::eraseDead(wi.getDefiningOp());
        if (bi)
          Slicer::eraseDead(bi.getDefiningOp());
        abandon();
        return;
      }
      Value piece = nn::MatMulOp::create(b, product.getLoc(), x, wi);
      if (bias)
        piece = nn::AddOp::create(b, add.getLoc(), piece, bi);
      pieces.push_back(piece);
      SmallVector<int64_t> expected(want.getShape());
      if (headsForm)
        expected.erase(expected.begin() + (rank - 2));
      if (typeOf(piece).getShape() != ArrayRef<int64_t>(expected) ||
          typeOf(piece).getElementType() != want.getElementType()) {
        abandon();
        return;
      }
      offset += size;
    }
    for (auto [result, piece] : llvm::zip(split.getResults(), pieces)) {
      if (!headsForm) {
        result.replaceAllUsesWith(piece);
        continue;
      }
      for (Operation *user : llvm::make_early_inc_range(result.getUsers())) {
        user->getResult(0).replaceAllUsesWith(piece);
        user->erase();
      }
    }
    Slicer::eraseDead(split);
  }
};

} // namespace
