//===- Normalization.cpp - batch, layer and RMS normalization -------------===//
//
// BatchNormalization (inference and training mode), LayerNormalization,
// RMSNormalization, and GroupNormalization and InstanceNormalization
// (compositions).
//
//===----------------------------------------------------------------------===//

#include "../GraphImporter.h"

namespace shardflow::onnx_import {

std::pair<Value, Value> GraphImporter::meanAndVariance(Value x, ArrayRef<int64_t> axes) {
  SmallVector<NamedAttribute> attrs{named("axes", b.getDenseI64ArrayAttr(axes)),
                                    named("keepdims", b.getBoolAttr(true))};
  Value mean = make<nn::ReduceMeanOp>({x}, attrs);
  Value diff = make<nn::SubOp>({x, mean});
  return {mean, make<nn::ReduceMeanOp>({make<nn::MulOp>({diff, diff})}, attrs)};
}

LogicalResult GraphImporter::importBatchNormalization() {
  if (failed(requireInputs(5, 5)))
    return failure();
  SmallVector<Value> operands;
  for (int i = 0; i < 5; ++i) {
    Value v = input(i);
    if (!v)
      return failure();
    operands.push_back(v);
  }
  float eps = attrFloat("epsilon", 1e-5f);
  float momentum = attrFloat("momentum", 0.9f);
  // training_mode is an attribute from opset 14; before that, training was
  // told by the outputs (mean, var, saved_mean, saved_var), which stay
  // refused below.
  bool training = opset >= 14 && attrInt("training_mode", 0) != 0;
  if (attrFailed)
    return failure();
  if (!training) {
    bool extraOutputs = false;
    for (int i = 1; i < node->output_size(); ++i)
      extraOutputs |= wantsOutput(i);
    if (extraOutputs && opset < 14)
      return fail("training mode (the mean, var, saved_mean and saved_var "
                  "outputs before opset 14) is not supported");
    if (extraOutputs && node->output_size() <= 3)
      return fail("running_mean and running_var are outputs of training mode "
                  "only (training_mode=1)");
    if (failed(allowOutputs(1)))
      return failure();
    return emit<nn::BatchNormalizationOp>(
        operands, {named("epsilon", b.getF32FloatAttr(eps))});
  }
  if (failed(allowOutputs(3)))
    return failure();

  // Training mode normalizes with the batch's own statistics: the mean and
  // the population (biased) variance over every axis but the channel axis 1,
  // computed in float for float16/bfloat16 inputs as the spec asks. Y is the
  // fused op given those statistics; the running statistics blend them into
  // input_mean/input_var by `momentum`.
  Value x = operands[0];
  auto xType = typeOf(x);
  if (xType.getRank() < 2)
    return fail("input must have rank >= 2 ([N, C, ...])");
  const char *names[] = {"X", "scale", "B", "input_mean", "input_var"};
  for (auto [i, name] : llvm::enumerate(names)) {
    auto t = typeOf(operands[i]);
    if (!isa<FloatType>(t.getElementType()))
      return fail(Twine(name) + " must be a floating-point tensor");
    if (i > 0 && (t.getRank() != 1 || t.getDimSize(0) != xType.getDimSize(1)))
      return fail(Twine(name) + " must have shape [" +
                  std::to_string(xType.getDimSize(1)) +
                  "] (the channel count)");
  }
  Type compute = xType.getElementType();
  if (compute.isF16() || compute.isBF16())
    compute = b.getF32Type();
  Value xs = x;
  if (compute != xType.getElementType())
    xs = make<nn::CastOp>({x}, {named("to", TypeAttr::get(compute))});
  SmallVector<int64_t> axes{0};
  for (int64_t i = 2; i < xType.getRank(); ++i)
    axes.push_back(i);
  auto [mean, var] = meanAndVariance(xs, axes);
  auto perChannel = RankedTensorType::get({xType.getDimSize(1)}, compute);
  Value mean1 = makeTyped<nn::ReshapeOp>(perChannel, {mean});
  Value var1 = makeTyped<nn::ReshapeOp>(perChannel, {var});
  Value y = make<nn::BatchNormalizationOp>(
      {x, operands[1], operands[2], mean1, var1},
      {named("epsilon", b.getF32FloatAttr(eps))});
  if (!y)
    return failure();
  // running = input * momentum + current * (1 - momentum), in the type of
  // input_mean/input_var.
  auto running = [&](Value input, Value current) -> Value {
    Type t = typeOf(input).getElementType();
    if (typeOf(current).getElementType() != t)
      current = make<nn::CastOp>({current}, {named("to", TypeAttr::get(t))});
    return make<nn::AddOp>(
        {make<nn::MulOp>({input, scalar(t, momentum)}),
         make<nn::MulOp>({current, scalar(t, 1.0 - double(momentum))})});
  };
  // A training step keeps the running statistics an initializer holds as
  // its new state (ONNXImportOptions::runningStatistics).
  bool keep[2] = {false, false};
  for (int i = 0; i < 2; ++i)
    keep[i] = options.runningStatistics && node->input_size() > 3 + i &&
              initializers.count(node->input(3 + i));
  Value runningMean =
      wantsOutput(1) || keep[0] ? running(operands[3], mean1) : Value();
  Value runningVar = wantsOutput(2) || keep[1] ? running(operands[4], var1) : Value();
  if (((wantsOutput(1) || keep[0]) && !runningMean) ||
      ((wantsOutput(2) || keep[1]) && !runningVar))
    return failure();
  if (keep[0])
    runningStatistics.emplace_back(runningMean, node->input(3));
  if (keep[1])
    runningStatistics.emplace_back(runningVar, node->input(4));
  return setOutputs({y, wantsOutput(1) ? runningMean : Value(),
                     wantsOutput(2) ? runningVar : Value()});
}

LogicalResult GraphImporter::importLayerNormalization() {
  if (failed(requireInputs(2, 3)) || failed(allowOutputs(3)))
    return failure();
  Value x = input(0), scale = input(1), bias = input(2);
  if (!x || !scale || (hasInput(2) && !bias))
    return failure();
  int64_t rank = typeOf(x).getRank();
  int64_t axis = canonicalAxis(attrInt("axis", -1), rank);
  float eps = attrFloat("epsilon", 1e-5f);
  int64_t stashType = attrInt("stash_type", 1);
  if (attrFailed)
    return failure();
  SmallVector<Value> operands{x, scale};
  if (bias)
    operands.push_back(bias);
  Value y = make<nn::LayerNormalizationOp>(
      operands, {named("axis", b.getI64IntegerAttr(axis)),
                 named("epsilon", b.getF32FloatAttr(eps))});
  if (!y)
    return failure();
  bool wantMean = wantsOutput(1), wantInvStdDev = wantsOutput(2);
  if (!wantMean && !wantInvStdDev)
    return setOutputs({y});

  // Mean and InvStdDev (the statistics a training graph saves) are
  // [d0, ..., d(axis-1), 1, ..., 1] tensors of the stash type, computed in
  // that precision as the spec's function body does; Y keeps the fused op.
  auto stash = elementType(stashType, "attribute 'stash_type'");
  if (failed(stash))
    return failure();
  if (!stash->isF32() && !stash->isBF16())
    return fail("stash_type " + std::to_string(stashType) +
                " is not float (1) or bfloat16 (16), the types Mean and "
                "InvStdDev may have");
  Value xs = x;
  if (typeOf(x).getElementType() != *stash)
    xs = make<nn::CastOp>({x}, {named("to", TypeAttr::get(*stash))});
  SmallVector<int64_t> axes;
  for (int64_t i = axis; i < rank; ++i)
    axes.push_back(i);
  auto [mean, var] = meanAndVariance(xs, axes);
  Value invStdDev = make<nn::ReciprocalOp>(
      {make<nn::SqrtOp>({make<nn::AddOp>({var, scalar(*stash, eps)})})});
  if (!invStdDev)
    return failure();
  return setOutputs({y, mean, invStdDev});
}

LogicalResult GraphImporter::importRMSNormalization() {
  if (failed(requireInputs(2, 2)) || failed(allowOutputs(1)))
    return failure();
  Value x = input(0), scale = input(1);
  int64_t axis = attrInt("axis", -1);
  float eps = attrFloat("epsilon", 1e-5f);
  attrInt("stash_type", 1);
  if (!x || !scale || attrFailed)
    return failure();
  return emit<nn::RMSNormalizationOp>(
      {x, scale}, {named("axis", b.getI64IntegerAttr(
                                     canonicalAxis(axis, typeOf(x).getRank()))),
                   named("epsilon", b.getF32FloatAttr(eps))});
}

// x [N, C, D...] as [N, G, C/G * prod(D)]: mean and biased variance over the
// last axis (in `compute`), (x - mean) / sqrt(var + eps); per-group scale and
// bias apply to that [N, G, *] form in `compute` (GroupNormalization-18), per
// channel ones to [N, C, prod(D)] after the cast back to x's type
// (GroupNormalization-21, InstanceNormalization), as ONNX's function bodies
// do.
Value GraphImporter::groupNormalize(Value x, Value scale, Value bias, int64_t groups,
                                    float eps, Type compute, bool perGroup) {
  auto xType = typeOf(x);
  Type elem = xType.getElementType();
  int64_t n = xType.getDimSize(0), c = xType.getDimSize(1);
  int64_t spatial = 1;
  for (int64_t i = 2; i < xType.getRank(); ++i)
    spatial *= xType.getDimSize(i);
  Value xs = x;
  if (compute != elem)
    xs = make<nn::CastOp>({x}, {named("to", TypeAttr::get(compute))});
  Value x3 = makeTyped<nn::ReshapeOp>(
      RankedTensorType::get({n, groups, c / groups * spatial}, compute), {xs});
  if (!x3)
    return {};
  auto [mean, var] = meanAndVariance(x3, {2});
  if (!mean || !var)
    return {};
  Value norm = make<nn::DivOp>(
      {make<nn::SubOp>({x3, mean}),
       make<nn::SqrtOp>({make<nn::AddOp>({var, scalar(compute, eps)})})});
  auto affine = [&](Value v, Type t, int64_t channels) -> Value {
    auto paramType = RankedTensorType::get({1, channels, 1}, t);
    Value s = scale, bb = bias;
    if (typeOf(s).getElementType() != t)
      s = make<nn::CastOp>({s}, {named("to", TypeAttr::get(t))});
    if (typeOf(bb).getElementType() != t)
      bb = make<nn::CastOp>({bb}, {named("to", TypeAttr::get(t))});
    return make<nn::AddOp>({make<nn::MulOp>({makeTyped<nn::ReshapeOp>(paramType, {s}), v}),
                            makeTyped<nn::ReshapeOp>(paramType, {bb})});
  };
  Value y;
  if (perGroup) {
    y = affine(norm, compute, groups);
    if (y && compute != elem)
      y = make<nn::CastOp>({y}, {named("to", TypeAttr::get(elem))});
  } else {
    Value perChannel = makeTyped<nn::ReshapeOp>(
        RankedTensorType::get({n, c, spatial}, compute), {norm});
    if (perChannel && compute != elem)
      perChannel = make<nn::CastOp>({perChannel}, {named("to", TypeAttr::get(elem))});
    y = perChannel ? affine(perChannel, elem, c) : Value();
  }
  if (!y)
    return {};
  return makeTyped<nn::ReshapeOp>(xType, {y});
}

// GroupNormalization is composed by groupNormalize: opset 18 has scale and
// bias per group and computes in the input's type; opset 21 has them per
// channel and computes the statistics in stash_type (float by default).
LogicalResult GraphImporter::importGroupNormalization() {
  if (failed(requireInputs(3, 3)) || failed(allowOutputs(1)))
    return failure();
  Value x = input(0), scale = input(1), bias = input(2);
  if (!x || !scale || !bias)
    return failure();
  if (!hasAttr("num_groups"))
    return fail("attribute 'num_groups' is required");
  int64_t groups = attrInt("num_groups", 1);
  float eps = attrFloat("epsilon", 1e-5f);
  int64_t stashType = opset >= 21 ? attrInt("stash_type", 1) : 0;
  if (attrFailed)
    return failure();
  auto xType = typeOf(x);
  if (!isa<FloatType>(xType.getElementType()))
    return fail("X must be a floating-point tensor");
  if (xType.getRank() < 2)
    return fail("X must have rank >= 2 ([N, C, ...])");
  if (!xType.hasStaticShape())
    return fail("X must have a static shape");
  int64_t c = xType.getDimSize(1);
  if (groups < 1 || c % groups != 0)
    return fail("num_groups " + std::to_string(groups) +
                " does not divide the channel count " + std::to_string(c));
  bool perGroup = opset < 21;
  int64_t params = perGroup ? groups : c;
  for (auto [v, name] : {std::pair{scale, "scale"}, std::pair{bias, "bias"}}) {
    auto t = typeOf(v);
    if (t.getRank() != 1 || t.getDimSize(0) != params)
      return fail(Twine(name) + " must have shape [" + std::to_string(params) + "] (the " +
                  (perGroup ? "group count before opset 21" : "channel count") + ")");
  }
  Type compute = xType.getElementType();
  if (!perGroup) {
    auto stash = elementType(stashType, "attribute 'stash_type'");
    if (failed(stash))
      return failure();
    if (!isa<FloatType>(*stash))
      return fail("stash_type " + std::to_string(stashType) +
                  " is not a floating-point type");
    compute = *stash;
  }
  Value y = groupNormalize(x, scale, bias, groups, eps, compute, perGroup);
  if (!y)
    return failure();
  return setOutputs({y});
}

// InstanceNormalization is GroupNormalization-21 with a group per channel:
// each (n, c) normalized over the spatial dims, then scale[c] and B[c].
// float16/bfloat16 statistics are computed in float.
LogicalResult GraphImporter::importInstanceNormalization() {
  if (failed(requireInputs(3, 3)) || failed(allowOutputs(1)))
    return failure();
  Value x = input(0), scale = input(1), bias = input(2);
  if (!x || !scale || !bias)
    return failure();
  float eps = attrFloat("epsilon", 1e-5f);
  if (attrFailed)
    return failure();
  auto xType = typeOf(x);
  if (!isa<FloatType>(xType.getElementType()))
    return fail("input must be a floating-point tensor");
  if (xType.getRank() < 3)
    return fail("input must have rank >= 3 ([N, C, D1, ...])");
  if (!xType.hasStaticShape())
    return fail("input must have a static shape");
  int64_t c = xType.getDimSize(1);
  for (auto [v, name] : {std::pair{scale, "scale"}, std::pair{bias, "B"}}) {
    auto t = typeOf(v);
    if (t.getRank() != 1 || t.getDimSize(0) != c)
      return fail(Twine(name) + " must have shape [" + std::to_string(c) +
                  "] (the channel count)");
  }
  Type compute = xType.getElementType();
  if (compute.isF16() || compute.isBF16())
    compute = b.getF32Type();
  Value y = groupNormalize(x, scale, bias, c, eps, compute, /*perGroup=*/false);
  if (!y)
    return failure();
  return setOutputs({y});
}

} // namespace shardflow::onnx_import
