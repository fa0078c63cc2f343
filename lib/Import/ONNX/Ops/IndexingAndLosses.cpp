//===- IndexingAndLosses.cpp - GatherND, ScatterElements, OneHot, losses --===//
//
// GatherND, ScatterElements, OneHot, Tile, NonZero, SoftmaxCrossEntropyLoss
// and NegativeLogLikelihoodLoss. Each is a composition of existing nn ops
// (written at its handler), so it inherits their CPU and CUDA kernels,
// sharding rules and gradients; NonZero is computed at import from a
// constant input.
//
//===----------------------------------------------------------------------===//

#include "../GraphImporter.h"

namespace shardflow::onnx_import {

/// An i64 constant of `shape` holding `values` (row-major).
static Value i64Constant(OpBuilder &b, Location loc, ArrayRef<int64_t> shape,
                         ArrayRef<int64_t> values) {
  auto type = RankedTensorType::get(shape, b.getI64Type());
  return nn::ConstantOp::create(b, loc,
                                cast<ElementsAttr>(DenseElementsAttr::get(type, values)));
}

/// GatherND as Gather on the flattened data: the index tuple (negative
/// entries counted from the end) becomes one linear row number
/// sum(idx[j] * stride[j]) plus batch * rows-per-batch, and Gather takes
/// those rows (axis 0) of data reshaped to
/// [batch product * indexed product, remaining dims...]. Each entry
/// idx[j] * stride[j] is itself a gather from a constant
/// [0, stride[j], 2 stride[j], ...] of the dimension's length, so an entry
/// out of range is reported by the gather kernel with its value and the
/// dimension's size.
LogicalResult GraphImporter::importGatherND() {
  if (failed(requireInputs(2, 2)) || failed(allowOutputs(1)))
    return failure();
  Value x = input(0), idx = input(1);
  int64_t batchDims = attrInt("batch_dims", 0);
  if (!x || !idx || attrFailed)
    return failure();
  auto xt = typeOf(x), it = typeOf(idx);
  int64_t r = xt.getRank(), q = it.getRank();
  if (!it.getElementType().isSignlessInteger(64) &&
      !it.getElementType().isSignlessInteger(32))
    return fail("indices input must be int32 or int64");
  if (q < 1)
    return fail("indices input must have rank >= 1");
  if (batchDims < 0 || batchDims >= std::min(q, r))
    return fail("batch_dims " + std::to_string(batchDims) +
                " must be in [0, min(rank(data), rank(indices)))");
  int64_t k = it.getDimSize(q - 1);
  if (k < 0 || k > r - batchDims)
    return fail("indices' last dimension " + std::to_string(k) +
                " exceeds rank(data) - batch_dims = " +
                std::to_string(r - batchDims));
  for (int64_t d = 0; d < batchDims; ++d)
    if (it.getDimSize(d) != xt.getDimSize(d))
      return fail("batch dimension " + std::to_string(d) + " differs: data " +
                  shapeString(xt.getShape()) + ", indices " +
                  shapeString(it.getShape()));
  int64_t batch = 1, rowsPerBatch = 1;
  for (int64_t d = 0; d < batchDims; ++d)
    batch *= xt.getDimSize(d);
  SmallVector<int64_t> dims, strides(k, 1);
  for (int64_t j = 0; j < k; ++j)
    dims.push_back(xt.getDimSize(batchDims + j));
  for (int64_t j = k - 1; j >= 0; --j) {
    strides[j] = rowsPerBatch;
    rowsPerBatch *= dims[j];
  }
  int64_t rows = batch * rowsPerBatch;
  Type i64 = b.getI64Type();
  Value ix = idx;
  if (!it.getElementType().isSignlessInteger(64))
    ix = make<nn::CastOp>({idx}, {named("to", TypeAttr::get(i64))});
  // [..., k] -> [...]: the row number within one batch entry.
  SmallVector<int64_t> lead(it.getShape().drop_back());
  Value linear;
  if (k == 0) {
    linear = splat(RankedTensorType::get(lead, i64), b.getI64IntegerAttr(0));
  } else {
    // Entry j of each tuple picks from [0, stride_j, 2 stride_j, ...]
    // (length dims[j]) by nn.gather, which counts negative indices from the
    // end and reports one out of range by its value and the dimension's size.
    for (int64_t j = 0; j < k; ++j) {
      Value entry = k == 1 ? ix : make<nn::SliceOp>(
          {ix}, {named("starts", b.getDenseI64ArrayAttr({j})),
                 named("ends", b.getDenseI64ArrayAttr({j + 1})),
                 named("axes", b.getDenseI64ArrayAttr({q - 1})),
                 named("steps", b.getDenseI64ArrayAttr({1}))});
      SmallVector<int64_t> scaled;
      for (int64_t i = 0; i < dims[j]; ++i)
        scaled.push_back(i * strides[j]);
      Value term =
          make<nn::GatherOp>({i64Constant(b, loc, {dims[j]}, scaled), entry},
                             {named("axis", b.getI64IntegerAttr(0))});
      linear = j ? make<nn::AddOp>({linear, term}) : term;
    }
    linear = make<nn::SqueezeOp>(
        {linear}, {named("axes", b.getDenseI64ArrayAttr({q - 1}))});
  }
  if (batchDims > 0) {
    SmallVector<int64_t> shape(lead.size(), 1), offsets;
    for (int64_t d = 0; d < batchDims; ++d)
      shape[d] = xt.getDimSize(d);
    for (int64_t i = 0; i < batch; ++i)
      offsets.push_back(i * rowsPerBatch);
    linear = make<nn::AddOp>({linear, i64Constant(b, loc, shape, offsets)});
  }
  SmallVector<int64_t> flatShape{rows};
  for (int64_t d = batchDims + k; d < r; ++d)
    flatShape.push_back(xt.getDimSize(d));
  Value flat = makeTyped<nn::ReshapeOp>(
      RankedTensorType::get(flatShape, xt.getElementType()), {x});
  Value y = make<nn::GatherOp>({flat, linear},
                               {named("axis", b.getI64IntegerAttr(0))});
  return y ? setOutputs({y}) : failure();
}

/// ScatterElements as ScatterND: each element of `indices` becomes the full
/// index tuple (its own position, with `axis`'s coordinate replaced by the
/// index), so updates land where ScatterElements puts them and combine by
/// the same reduction. ScatterND counts negative indices from the end and
/// reports those out of range.
LogicalResult GraphImporter::importScatterElements() {
  if (failed(requireInputs(3, 3)) || failed(allowOutputs(1)))
    return failure();
  Value x = input(0), idx = input(1), upd = input(2);
  int64_t axis = attrInt("axis", 0);
  std::string reduction = attrString("reduction", "none");
  if (!x || !idx || !upd || attrFailed)
    return failure();
  if (reduction != "none" && reduction != "add" && reduction != "mul" &&
      reduction != "max" && reduction != "min")
    return fail("attribute 'reduction' must be none, add, mul, max or min, "
                "got '" + reduction + "'");
  auto xt = typeOf(x), it = typeOf(idx);
  int64_t r = xt.getRank();
  if (!it.getElementType().isSignlessInteger(64) &&
      !it.getElementType().isSignlessInteger(32))
    return fail("indices input must be int32 or int64");
  if (it.getRank() != r || typeOf(upd).getShape() != it.getShape())
    return fail("indices " + shapeString(it.getShape()) + " and updates " +
                shapeString(typeOf(upd).getShape()) +
                " must have one shape, of the data's rank " + std::to_string(r));
  if (r < 1)
    return fail("data must have rank >= 1");
  if (axis < -r || axis >= r)
    return fail("axis " + std::to_string(axis) + " is out of range for rank " +
                std::to_string(r));
  if (axis < 0)
    axis += r;
  for (int64_t d = 0; d < r; ++d)
    if (d != axis && it.getDimSize(d) > xt.getDimSize(d))
      return fail("indices " + shapeString(it.getShape()) +
                  " exceed the data " + shapeString(xt.getShape()) +
                  " in dimension " + std::to_string(d));
  Type i64 = b.getI64Type();
  SmallVector<int64_t> tupleShape(it.getShape());
  tupleShape.push_back(1);
  auto column = RankedTensorType::get(tupleShape, i64);
  SmallVector<Value> parts;
  for (int64_t d = 0; d < r; ++d) {
    if (d == axis) {
      Value ix = idx;
      if (!it.getElementType().isSignlessInteger(64))
        ix = make<nn::CastOp>({idx}, {named("to", TypeAttr::get(i64))});
      parts.push_back(make<nn::UnsqueezeOp>(
          {ix}, {named("axes", b.getDenseI64ArrayAttr({r}))}));
      continue;
    }
    // Coordinate d of each position: an iota along d, broadcast.
    SmallVector<int64_t> shape(r + 1, 1), iota;
    shape[d] = it.getDimSize(d);
    for (int64_t i = 0; i < shape[d]; ++i)
      iota.push_back(i);
    parts.push_back(
        makeTyped<nn::ExpandOp>(column, {i64Constant(b, loc, shape, iota)}));
  }
  Value tuples = make<nn::ConcatOp>(parts, {named("axis", b.getI64IntegerAttr(r))});
  Value y = make<nn::ScatterNDOp>(
      {x, tuples, upd}, {named("reduction", b.getStringAttr(reduction))});
  return y ? setOutputs({y}) : failure();
}

/// OneHot: Equal(Unsqueeze(indices, axis), a range of depth laid along
/// axis) selects values[1] (on) or values[0] (off) by Where. Negative
/// indices count from depth first; an index out of range matches nothing
/// and gives all off.
LogicalResult GraphImporter::importOneHot() {
  if (failed(requireInputs(3, 3)) || failed(allowOutputs(1)))
    return failure();
  Value idx = input(0), values = input(2);
  auto depthV = constScalar(1, "depth");
  int64_t axis = attrInt("axis", -1);
  if (!idx || !values || failed(depthV) || attrFailed)
    return failure();
  double dv = std::trunc(*depthV);
  if (!(dv >= 1) || dv > double(kMaxElements))
    return fail("depth must be a positive integer, got " +
                std::to_string(*depthV));
  int64_t depth = int64_t(dv);
  auto vt = typeOf(values);
  if (vt.getRank() != 1 || vt.getDimSize(0) != 2)
    return fail("values input must have shape [2] (off, on), got " +
                shapeString(vt.getShape()));
  int64_t rank = typeOf(idx).getRank() + 1;
  if (axis < -rank || axis >= rank)
    return fail("axis " + std::to_string(axis) + " is out of range for the "
                "output rank " + std::to_string(rank));
  if (axis < 0)
    axis += rank;
  Type i64 = b.getI64Type();
  Value ix = idx;
  if (!typeOf(idx).getElementType().isSignlessInteger(64))
    ix = make<nn::CastOp>({idx}, {named("to", TypeAttr::get(i64))});
  auto i64Scalar = [&](int64_t v) {
    return splat(RankedTensorType::get({}, i64), b.getI64IntegerAttr(v));
  };
  Value normalized =
      make<nn::WhereOp>({make<nn::LessOp>({ix, i64Scalar(0)}),
                         make<nn::AddOp>({ix, i64Scalar(depth)}), ix});
  Value expanded = make<nn::UnsqueezeOp>(
      {normalized}, {named("axes", b.getDenseI64ArrayAttr({axis}))});
  SmallVector<int64_t> shape(rank, 1), iota;
  shape[axis] = depth;
  for (int64_t i = 0; i < depth; ++i)
    iota.push_back(i);
  Value hot = make<nn::EqualOp>({expanded, i64Constant(b, loc, shape, iota)});
  auto pick = [&](int64_t i) {
    return make<nn::GatherOp>({values, i64Scalar(i)},
                              {named("axis", b.getI64IntegerAttr(0))});
  };
  Value y = make<nn::WhereOp>({hot, pick(1), pick(0)});
  return y ? setOutputs({y}) : failure();
}

/// Tile: [d0, d1, ...] is unsqueezed to [1, d0, 1, d1, ...], expanded to
/// [r0, d0, r1, d1, ...] and reshaped to [r0*d0, r1*d1, ...].
LogicalResult GraphImporter::importTile() {
  if (failed(requireInputs(2, 2)) || failed(allowOutputs(1)))
    return failure();
  Value x = input(0);
  auto repeats = constInts(1, "repeats");
  if (!x || failed(repeats))
    return failure();
  auto xt = typeOf(x);
  int64_t r = xt.getRank();
  if (int64_t(repeats->size()) != r)
    return fail("repeats " + shapeString(*repeats) + " must have one entry per "
                "dimension of the input " + shapeString(xt.getShape()));
  SmallVector<int64_t> axes, wide, out;
  int64_t total = 1;
  for (int64_t d = 0; d < r; ++d) {
    int64_t rep = (*repeats)[d], dim = xt.getDimSize(d);
    if (rep < 0)
      return fail("repeats " + shapeString(*repeats) + " has a negative entry");
    if (rep > 0 && dim > 0 && total > kMaxElements / (rep * dim))
      return fail("repeats " + shapeString(*repeats) + " give an absurdly large "
                  "result");
    total *= rep * dim;
    axes.push_back(2 * d);
    wide.append({rep, dim});
    out.push_back(rep * dim);
  }
  if (r == 0)
    return emit<nn::IdentityOp>({x});
  Value u = make<nn::UnsqueezeOp>({x}, {named("axes", b.getDenseI64ArrayAttr(axes))});
  Value e = makeTyped<nn::ExpandOp>(
      RankedTensorType::get(wide, xt.getElementType()), {u});
  Value y = makeTyped<nn::ReshapeOp>(
      RankedTensorType::get(out, xt.getElementType()), {e});
  return y ? setOutputs({y}) : failure();
}

/// NonZero's output shape is the number of non-zero elements: accepted when
/// the input folds to a constant at import (shape-derived masks once the
/// input shapes are pinned), and computed here.
LogicalResult GraphImporter::importNonZero() {
  if (failed(requireInputs(1, 1)) || failed(allowOutputs(1)))
    return failure();
  Value x = input(0);
  if (!x)
    return failure();
  DenseElementsAttr data;
  if (!matchPattern(x, m_Constant(&data))) {
    std::string msg = "the output shape depends on the data: input '" +
                      node->input(0) + "' must fold to a compile-time constant";
    SmallVector<std::string> sources = graphInputsOf(x);
    if (!sources.empty()) {
      msg += "; it derives from graph input";
      msg += sources.size() > 1 ? "s " : " ";
      for (auto [k, name] : llvm::enumerate(sources))
        msg += (k ? ", '" : "'") + name + "'";
      msg += " (pin with --input-shape or --input-value)";
    }
    return fail(msg);
  }
  auto xt = typeOf(x);
  SmallVector<int64_t> shape(xt.getShape());
  if (shape.empty())
    shape.push_back(1); // a scalar counts as a 1-element vector
  int64_t n = xt.getNumElements(), r = int64_t(shape.size());
  SmallVector<bool> nz;
  nz.reserve(n);
  Type elem = xt.getElementType();
  if (isa<FloatType>(elem)) {
    for (const APFloat &v : data.getValues<APFloat>())
      nz.push_back(!v.isZero());
  } else if (isa<IntegerType>(elem)) {
    for (const APInt &v : data.getValues<APInt>())
      nz.push_back(!v.isZero());
  } else {
    return fail("input element type is not supported");
  }
  SmallVector<int64_t> positions;
  for (int64_t i = 0; i < n; ++i)
    if (nz[i])
      positions.push_back(i);
  int64_t count = int64_t(positions.size());
  SmallVector<int64_t> out(r * count);
  for (auto [c, flat] : llvm::enumerate(positions))
    for (int64_t d = r - 1, rest = flat; d >= 0; --d) {
      out[d * count + int64_t(c)] = rest % shape[d];
      rest /= shape[d];
    }
  return setOutputs({i64Constant(b, loc, {r, count}, out)});
}

/// The negative log-likelihood of `logProb` ([N, C, d1, ...]) at `target`
/// ([N, d1, ...]), ONNX's NegativeLogLikelihoodLoss: loss = -logProb[n,
/// target, d...] * weight[target], with GatherElements along the class axis
/// (target unsqueezed at 1, then squeezed) and Gather of the weight. Targets
/// equal to ignore_index read class 0 and their loss is set to 0 by Where;
/// mean divides the sum by the sum of the weights of the targets not
/// ignored. Every float step is differentiable.
Value GraphImporter::negativeLogLikelihood(Value logProb, Value target,
                                          Value weight,
                                          std::optional<int64_t> ignore,
                                          StringRef reduction) {
  // A null operand: its error is already reported.
  if (!logProb || !target)
    return nullptr;
  auto lt = typeOf(logProb), tt = typeOf(target);
  Type elem = lt.getElementType(), i64 = b.getI64Type();
  if (lt.getRank() < 2) {
    (void)fail("input must have rank >= 2 ([N, C, ...])");
    return nullptr;
  }
  SmallVector<int64_t> expect{lt.getDimSize(0)};
  for (int64_t d = 2; d < lt.getRank(); ++d)
    expect.push_back(lt.getDimSize(d));
  if (tt.getShape() != ArrayRef<int64_t>(expect) ||
      !isa<IntegerType>(tt.getElementType())) {
    (void)fail("target must be an integer tensor of shape " +
               shapeString(expect) + ", got " + shapeString(tt.getShape()));
    return nullptr;
  }
  if (weight && (typeOf(weight).getRank() != 1 ||
                 typeOf(weight).getDimSize(0) != lt.getDimSize(1) ||
                 typeOf(weight).getElementType() != elem)) {
    (void)fail("weight must have shape [" + std::to_string(lt.getDimSize(1)) +
               "] and the input's element type");
    return nullptr;
  }
  Value t = target;
  if (!tt.getElementType().isSignlessInteger(64))
    t = make<nn::CastOp>({target}, {named("to", TypeAttr::get(i64))});
  Value ignored;
  if (ignore) {
    Value i64Zero =
        splat(RankedTensorType::get({}, i64), b.getI64IntegerAttr(0));
    ignored = make<nn::EqualOp>(
        {t, splat(RankedTensorType::get({}, i64), b.getI64IntegerAttr(*ignore))});
    t = make<nn::WhereOp>({ignored, i64Zero, t});
  }
  Value picked = make<nn::SqueezeOp>(
      {make<nn::GatherElementsOp>(
          {logProb, make<nn::UnsqueezeOp>(
                        {t}, {named("axes", b.getDenseI64ArrayAttr({1}))})},
          {named("axis", b.getI64IntegerAttr(1))})},
      {named("axes", b.getDenseI64ArrayAttr({1}))});
  Value loss = make<nn::NegOp>({picked});
  Value w;
  if (weight) {
    w = make<nn::GatherOp>({weight, t}, {named("axis", b.getI64IntegerAttr(0))});
    loss = make<nn::MulOp>({loss, w});
  }
  Value zero = scalar(elem, 0.0);
  if (ignore)
    loss = make<nn::WhereOp>({ignored, zero, loss});
  if (reduction == "none")
    return loss;
  SmallVector<int64_t> all;
  for (int64_t d = 0; d < tt.getRank(); ++d)
    all.push_back(d);
  SmallVector<NamedAttribute> sumAttrs{
      named("axes", b.getDenseI64ArrayAttr(all)),
      named("keepdims", b.getBoolAttr(false))};
  Value sum = make<nn::ReduceSumOp>({loss}, sumAttrs);
  if (reduction == "sum")
    return sum;
  // mean: the sum of the weights the targets not ignored select.
  Value denom;
  if (w || ignore) {
    Value wEff = w ? w
                   : splat(RankedTensorType::get(tt.getShape(), elem),
                           b.getFloatAttr(elem, 1.0));
    if (ignore)
      wEff = make<nn::WhereOp>({ignored, zero, wEff});
    denom = make<nn::ReduceSumOp>({wEff}, sumAttrs);
  } else {
    denom = scalar(elem, double(tt.getNumElements()));
  }
  return make<nn::DivOp>({sum, denom});
}

/// Reads reduction and ignore_index, shared by both losses.
LogicalResult GraphImporter::lossAttributes(std::string &reduction,
                                            std::optional<int64_t> &ignore) {
  reduction = attrString("reduction", "mean");
  if (hasAttr("ignore_index"))
    ignore = attrInt("ignore_index", 0);
  if (attrFailed)
    return failure();
  if (reduction != "none" && reduction != "sum" && reduction != "mean")
    return fail("attribute 'reduction' must be none, sum or mean, got '" +
                reduction + "'");
  return success();
}

LogicalResult GraphImporter::importNegativeLogLikelihoodLoss() {
  if (failed(requireInputs(2, 3)) || failed(allowOutputs(1)))
    return failure();
  Value x = input(0), target = input(1);
  Value weight = hasInput(2) ? input(2) : Value();
  std::string reduction;
  std::optional<int64_t> ignore;
  if (!x || !target || (hasInput(2) && !weight) ||
      failed(lossAttributes(reduction, ignore)))
    return failure();
  Value y = negativeLogLikelihood(x, target, weight, ignore, reduction);
  return y ? setOutputs({y}) : failure();
}

/// SoftmaxCrossEntropyLoss: LogSoftmax over the class axis 1, then the
/// negative log-likelihood above; the optional second output is the
/// LogSoftmax.
LogicalResult GraphImporter::importSoftmaxCrossEntropyLoss() {
  if (failed(requireInputs(2, 3)) || failed(allowOutputs(2)))
    return failure();
  Value x = input(0), target = input(1);
  Value weight = hasInput(2) ? input(2) : Value();
  std::string reduction;
  std::optional<int64_t> ignore;
  if (!x || !target || (hasInput(2) && !weight) ||
      failed(lossAttributes(reduction, ignore)))
    return failure();
  if (typeOf(x).getRank() < 2)
    return fail("scores must have rank >= 2 ([N, C, ...])");
  Value logProb = make<nn::LogSoftmaxOp>({x}, {named("axis", b.getI64IntegerAttr(1))});
  Value y = negativeLogLikelihood(logProb, target, weight, ignore, reduction);
  if (!y)
    return failure();
  if (wantsOutput(1))
    return setOutputs({y, logProb});
  return setOutputs({y});
}

} // namespace shardflow::onnx_import
