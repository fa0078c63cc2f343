//===- Contrib.cpp - onnxruntime's com.microsoft contrib ops --------------===//
//
// The contrib ops that onnxruntime's transformer optimizer and
// onnxruntime-genai's model builder write, each composed of nn ops with the
// semantics of onnxruntime's CPU kernels: the fused normalizations become
// nn.layer_normalization / nn.rms_normalization after the skip sum, the
// Gelu family nn.gelu, RotaryEmbedding nn.rotary_embedding, and the three
// attentions projections, heads-first [B, H, S, D] reshapes and
// nn.attention, so that they shard like the plain exports they replace.
// Quantized contrib ops are not imported.
//
//===----------------------------------------------------------------------===//

#include "../GraphImporter.h"

namespace shardflow::onnx_import {

//===----------------------------------------------------------------------===//
// Normalizations
//===----------------------------------------------------------------------===//

LogicalResult GraphImporter::importSkipLayerNormalization() {
  return skipNormalization(/*simplified=*/false);
}

LogicalResult GraphImporter::importSkipSimplifiedLayerNormalization() {
  return skipNormalization(/*simplified=*/true);
}

/// (Skip)(Simplified)LayerNormalization: sum = input + skip (+ bias), then
/// layer normalization (gamma, beta) or RMS normalization (gamma) over the
/// last axis. Outputs: the normalized sum; mean and inv_std_var, the
/// statistics ([..., 1], float) as the kernels compute them; the sum.
LogicalResult GraphImporter::skipNormalization(bool simplified) {
  if (failed(requireInputs(3, simplified ? 4 : 5)) || failed(allowOutputs(4)))
    return failure();
  int biasIndex = simplified ? 3 : 4;
  Value x = input(0), skip = input(1), gamma = input(2);
  Value beta = simplified ? Value() : input(3), bias = input(biasIndex);
  if (!x || !skip || !gamma || (!simplified && hasInput(3) && !beta) ||
      (hasInput(biasIndex) && !bias))
    return failure();
  float eps = attrFloat("epsilon", 1e-12f);
  if (attrFailed)
    return failure();
  auto xt = typeOf(x);
  if (xt.getRank() < 2)
    return fail("input must have rank >= 2 ([..., hidden]), got shape " +
                shapeString(xt.getShape()));
  if (simplified && wantsOutput(1))
    return fail("output 'mean' is not computed by "
                "SkipSimplifiedLayerNormalization");
  // skip is [B, S, H], [1, S, H] or [S, H]; bias is [H].
  auto dims = xt.getShape(), skipDims = typeOf(skip).getShape();
  SmallVector<int64_t> batchOne(dims);
  batchOne[0] = 1;
  if (skipDims != dims && skipDims != ArrayRef<int64_t>(batchOne) &&
      skipDims != dims.drop_front())
    return fail("skip has shape " + shapeString(skipDims) +
                "; it must be the input's " + shapeString(dims) +
                ", or that with a batch of 1 or none");
  Value sum = make<nn::AddOp>({x, skip});
  if (bias) {
    auto bt = typeOf(bias);
    if (bt.getRank() != 1 || bt.getDimSize(0) != xt.getShape().back())
      return fail("bias must have shape [" +
                  std::to_string(xt.getShape().back()) + "] (the hidden size)");
    sum = make<nn::AddOp>({sum, bias});
  }
  if (!sum)
    return failure();
  int64_t axis = xt.getRank() - 1;
  auto normAttrs =
      SmallVector<NamedAttribute>{named("axis", b.getI64IntegerAttr(axis)),
                                  named("epsilon", b.getF32FloatAttr(eps))};
  Value y;
  if (simplified) {
    y = make<nn::RMSNormalizationOp>({sum, gamma}, normAttrs);
  } else {
    SmallVector<Value> operands{sum, gamma};
    if (beta)
      operands.push_back(beta);
    y = make<nn::LayerNormalizationOp>(operands, normAttrs);
  }
  if (!y)
    return failure();
  Value mean, invStd;
  if (wantsOutput(1) || wantsOutput(2)) {
    // Statistics in float, as the kernels keep them.
    Type f32 = b.getF32Type();
    Value xs = sum;
    if (xt.getElementType() != f32)
      xs = make<nn::CastOp>({sum}, {named("to", TypeAttr::get(f32))});
    Value var;
    if (simplified) {
      var =
          make<nn::ReduceMeanOp>({make<nn::MulOp>({xs, xs})},
                                 {named("axes", b.getDenseI64ArrayAttr({axis})),
                                  named("keepdims", b.getBoolAttr(true))});
    } else {
      std::tie(mean, var) = meanAndVariance(xs, {axis});
    }
    invStd = make<nn::ReciprocalOp>(
        {make<nn::SqrtOp>({make<nn::AddOp>({var, scalar(f32, eps)})})});
    if (!invStd || (wantsOutput(1) && !mean))
      return failure();
  }
  return setOutputs({y, mean, invStd, sum});
}

/// SimplifiedLayerNormalization (onnxruntime, default domain and
/// com.microsoft): ONNX's RMSNormalization over [axis, rank), with the
/// inverse RMS ([d0, ..., d(axis-1), 1, ..., 1], stash type) as a second
/// output.
LogicalResult GraphImporter::importSimplifiedLayerNormalization() {
  if (failed(requireInputs(2, 2)) || failed(allowOutputs(2)))
    return failure();
  Value x = input(0), scale = input(1);
  int64_t axis = attrInt("axis", -1);
  float eps = attrFloat("epsilon", 1e-5f);
  int64_t stashType = attrInt("stash_type", 1);
  if (!x || !scale || attrFailed)
    return failure();
  int64_t rank = typeOf(x).getRank();
  axis = canonicalAxis(axis, rank);
  if (axis < 0 || axis >= rank)
    return fail("axis " + std::to_string(attrInt("axis", -1)) +
                " is out of range for rank " + std::to_string(rank));
  Value y = make<nn::RMSNormalizationOp>(
      {x, scale}, {named("axis", b.getI64IntegerAttr(axis)),
                   named("epsilon", b.getF32FloatAttr(eps))});
  if (!y)
    return failure();
  if (!wantsOutput(1))
    return setOutputs({y});
  auto stash = elementType(stashType, "attribute 'stash_type'");
  if (failed(stash))
    return failure();
  if (!isa<FloatType>(*stash))
    return fail("stash_type must name a floating-point type");
  Value xs = x;
  if (typeOf(x).getElementType() != *stash)
    xs = make<nn::CastOp>({x}, {named("to", TypeAttr::get(*stash))});
  SmallVector<int64_t> axes;
  for (int64_t i = axis; i < rank; ++i)
    axes.push_back(i);
  Value meanSquare = make<nn::ReduceMeanOp>(
      {make<nn::MulOp>({xs, xs})}, {named("axes", b.getDenseI64ArrayAttr(axes)),
                                    named("keepdims", b.getBoolAttr(true))});
  Value invStd = make<nn::ReciprocalOp>(
      {make<nn::SqrtOp>({make<nn::AddOp>({meanSquare, scalar(*stash, eps)})})});
  if (!invStd)
    return failure();
  return setOutputs({y, invStd});
}

//===----------------------------------------------------------------------===//
// The Gelu family
//===----------------------------------------------------------------------===//

/// Gelu (com.microsoft): nn.gelu, exact (erf).
LogicalResult GraphImporter::importContribGelu() {
  if (failed(requireInputs(1, 1)) || failed(allowOutputs(1)))
    return failure();
  Value x = input(0);
  if (!x)
    return failure();
  return emit<nn::GeluOp>({x}, {named("approximate", b.getStringAttr("none"))});
}

/// BiasGelu: exact nn.gelu of A + B (B is [hidden]).
LogicalResult GraphImporter::importBiasGelu() {
  if (failed(requireInputs(2, 2)) || failed(allowOutputs(1)))
    return failure();
  Value a = input(0), bias = input(1);
  if (!a || !bias)
    return failure();
  Value sum = make<nn::AddOp>({a, bias});
  if (sum && typeOf(sum) != typeOf(a))
    return fail("B has shape " + shapeString(typeOf(bias).getShape()) +
                ", which does not broadcast to A's " +
                shapeString(typeOf(a).getShape()));
  if (!sum)
    return failure();
  return emit<nn::GeluOp>({sum},
                          {named("approximate", b.getStringAttr("none"))});
}

/// FastGelu: the tanh approximation, nn.gelu "tanh", of X (+ bias).
LogicalResult GraphImporter::importFastGelu() {
  if (failed(requireInputs(1, 2)) || failed(allowOutputs(1)))
    return failure();
  Value x = input(0), bias = input(1);
  if (!x || (hasInput(1) && !bias))
    return failure();
  if (bias) {
    Value sum = make<nn::AddOp>({x, bias});
    if (sum && typeOf(sum) != typeOf(x))
      return fail("bias has shape " + shapeString(typeOf(bias).getShape()) +
                  ", which does not broadcast to X's " +
                  shapeString(typeOf(x).getShape()));
    if (!(x = sum))
      return failure();
  }
  return emit<nn::GeluOp>({x}, {named("approximate", b.getStringAttr("tanh"))});
}

/// QuickGelu: x * sigmoid(alpha * x), as nn.mul / nn.sigmoid.
LogicalResult GraphImporter::importQuickGelu() {
  if (failed(requireInputs(1, 1)) || failed(allowOutputs(1)))
    return failure();
  Value x = input(0);
  float alpha = attrFloat("alpha", 1.702f);
  if (!x || attrFailed)
    return failure();
  Type elem = typeOf(x).getElementType();
  if (!isa<FloatType>(elem))
    return fail("X must be a floating-point tensor");
  Value y = make<nn::MulOp>(
      {x, make<nn::SigmoidOp>({make<nn::MulOp>({x, scalar(elem, alpha)})})});
  if (!y)
    return failure();
  return setOutputs({y});
}

//===----------------------------------------------------------------------===//
// RotaryEmbedding
//===----------------------------------------------------------------------===//

/// RotaryEmbedding (com.microsoft): nn.rotary_embedding. Inputs come in
/// another order than ONNX's (input, position_ids, cos_cache, sin_cache) and
/// position_ids is required: [B, S], or [1], an offset for positions
/// offset + 0 ... offset + S - 1 in every batch.
LogicalResult GraphImporter::importContribRotaryEmbedding() {
  if (failed(requireInputs(4, 4)) || failed(allowOutputs(1)))
    return failure();
  Value x = input(0), pos = input(1), cosC = input(2), sinC = input(3);
  if (!x || !pos || !cosC || !sinC)
    return failure();
  int64_t interleaved = attrInt("interleaved", 0);
  int64_t heads = attrInt("num_heads", 0);
  int64_t rotaryDim = attrInt("rotary_embedding_dim", 0);
  int64_t packed = attrInt("is_packed_batching", 0);
  float scale = attrFloat("scale", 1.0f);
  if (attrFailed)
    return failure();
  if (packed != 0)
    return fail("is_packed_batching is not supported");
  if (scale != 1.0f)
    return fail("attribute 'scale' other than 1.0 is not supported");
  auto xt = typeOf(x), pt = typeOf(pos);
  if (xt.getRank() != 3 && xt.getRank() != 4)
    return fail("input must be [batch, seq, hidden] or [batch, heads, seq, "
                "head_size], got shape " +
                shapeString(xt.getShape()));
  int64_t batch = xt.getDimSize(0),
          seq = xt.getDimSize(xt.getRank() == 3 ? 1 : 2);
  if (pt.getRank() == 1 && pt.getDimSize(0) == 1) {
    // [1]: an offset. positions[b, s] = offset + s.
    Type i64 = b.getI64Type();
    Value offset = pos;
    if (pt.getElementType() != i64)
      offset = make<nn::CastOp>({pos}, {named("to", TypeAttr::get(i64))});
    Value steps =
        makeTyped<nn::RangeOp>(RankedTensorType::get({seq}, i64), {},
                               {named("start", b.getF64FloatAttr(0.0)),
                                named("limit", b.getF64FloatAttr(double(seq))),
                                named("delta", b.getF64FloatAttr(1.0))});
    pos = make<nn::AddOp>({splat(RankedTensorType::get({batch, seq}, i64),
                                 b.getI64IntegerAttr(0)),
                           make<nn::AddOp>({steps, offset})});
    if (!pos)
      return failure();
  } else if (pt.getRank() != 2) {
    return fail("position_ids must be [batch, seq] or [1] (an offset), got "
                "shape " +
                shapeString(pt.getShape()));
  }
  return emit<nn::RotaryEmbeddingOp>(
      {x, cosC, sinC, pos},
      {named("interleaved", b.getBoolAttr(interleaved != 0)),
       named("num_heads", b.getI64IntegerAttr(heads)),
       named("rotary_embedding_dim", b.getI64IntegerAttr(rotaryDim))});
}

//===----------------------------------------------------------------------===//
// Attention, MultiHeadAttention, GroupQueryAttention
//===----------------------------------------------------------------------===//

Value GraphImporter::contribKeyMask(Value mask, StringRef name, int64_t batch,
                                    int64_t qSeq, int64_t totalSeq) {
  auto mt = typeOf(mask);
  Type elem = mt.getElementType();
  if (!elem.isInteger(32) && !elem.isInteger(64) && !elem.isInteger(1)) {
    (void)fail(name + " must be an int32 tensor");
    return nullptr;
  }
  auto dims = mt.getShape();
  Type i1 = b.getI1Type();
  if (mt.getRank() == 1 && (dims[0] == batch || dims[0] == 2 * batch)) {
    // [B]: the end of each batch's keys (right padding): keep j < end[b].
    // [2B]: the ends, then the starts (left padding): start[b] <= j too.
    Type i64 = b.getI64Type();
    Value positions = makeTyped<nn::ReshapeOp>(
        RankedTensorType::get({dims[0], 1}, i64),
        {make<nn::CastOp>({mask}, {named("to", TypeAttr::get(i64))})});
    auto half = [&](int64_t begin) {
      return make<nn::SliceOp>(
          {positions}, {named("starts", b.getDenseI64ArrayAttr({begin})),
                        named("ends", b.getDenseI64ArrayAttr({begin + batch})),
                        named("axes", b.getDenseI64ArrayAttr({0})),
                        named("steps", b.getDenseI64ArrayAttr({1}))});
    };
    Value keys = makeTyped<nn::RangeOp>(
        RankedTensorType::get({totalSeq}, i64), {},
        {named("start", b.getF64FloatAttr(0.0)),
         named("limit", b.getF64FloatAttr(double(totalSeq))),
         named("delta", b.getF64FloatAttr(1.0))});
    Value keep = make<nn::LessOp>({keys, half(0)});
    if (dims[0] == 2 * batch)
      keep = make<nn::AndOp>(
          {keep, make<nn::NotOp>({make<nn::LessOp>({keys, half(batch)})})});
    return makeTyped<nn::ReshapeOp>(
        RankedTensorType::get({batch, 1, 1, totalSeq}, i1), {keep});
  }
  if (mt.getRank() == 1) {
    (void)fail(name + " of shape " + shapeString(dims) +
               " is not supported: only [batch] end positions, [2 * batch] "
               "end and start positions, a raw [batch, total_seq] or "
               "[batch, seq, total_seq] 0/1 mask");
    return nullptr;
  }
  SmallVector<int64_t> shape;
  if (mt.getRank() == 2 && dims[0] == batch && dims[1] == totalSeq)
    shape = {batch, 1, 1, totalSeq};
  else if (mt.getRank() == 3 && dims[0] == batch && dims[1] == qSeq &&
           dims[2] == totalSeq)
    shape = {batch, 1, qSeq, totalSeq};
  else {
    (void)fail(name + " of shape " + shapeString(dims) +
               " is not supported: only [batch] end positions, [2 * batch] "
               "end and start positions, a raw [batch, total_seq] = [" +
               std::to_string(batch) + "," + std::to_string(totalSeq) +
               "] or [batch, seq, total_seq] 0/1 mask");
    return nullptr;
  }
  // A raw mask keeps the keys where it is > 0.
  Value keep = mask;
  if (!elem.isInteger(1))
    keep = make<nn::GreaterOp>({mask, splat(RankedTensorType::get({}, elem),
                                            b.getIntegerAttr(elem, 0))});
  return makeTyped<nn::ReshapeOp>(RankedTensorType::get(shape, i1), {keep});
}

Value GraphImporter::contribAttention(Value q, Value k, Value v, int64_t heads,
                                      int64_t kvHeads, Value keep, bool causal,
                                      float filter, Value extraBias,
                                      std::optional<float> scale) {
  if (!q || !k || !v)
    return nullptr;
  auto qt = typeOf(q), kt = typeOf(k), vt = typeOf(v);
  if (qt.getRank() != 3 || kt.getRank() != 3 || vt.getRank() != 3) {
    (void)fail("query, key and value must be [batch, seq, hidden]");
    return nullptr;
  }
  if (heads <= 0 || kvHeads <= 0 || qt.getDimSize(2) % heads ||
      kt.getDimSize(2) % kvHeads || vt.getDimSize(2) % kvHeads) {
    (void)fail("hidden sizes " + std::to_string(qt.getDimSize(2)) + ", " +
               std::to_string(kt.getDimSize(2)) + ", " +
               std::to_string(vt.getDimSize(2)) +
               " must divide by the head counts");
    return nullptr;
  }
  Type elem = qt.getElementType();
  // onnxruntime's contrib kernels add a finite filter value (-10000 by
  // default) to the scores of masked keys: bias = keep ? 0 : filter, so a
  // row whose keys are all masked is a softmax over its scores shifted by
  // the filter, not zeros. The causal mask (unidirectional) excludes the
  // keys after the query outright, as nn.attention's is_causal does.
  Value bias;
  if (keep)
    bias = make<nn::WhereOp>(
        {keep, scalar(elem, 0.0), scalar(elem, double(filter))});
  if (extraBias)
    bias = bias ? make<nn::AddOp>({bias, extraBias}) : extraBias;
  SmallVector<Value> operands{attentionHeadsFirst(q, heads),
                              attentionHeadsFirst(k, kvHeads),
                              attentionHeadsFirst(v, kvHeads)};
  if ((keep || extraBias) && !bias)
    return nullptr;
  if (bias)
    operands.push_back(bias);
  SmallVector<NamedAttribute> attrs{
      named("is_causal", b.getBoolAttr(causal)),
      named("q_num_heads", b.getI64IntegerAttr(0)),
      named("kv_num_heads", b.getI64IntegerAttr(0)),
      named("softcap", b.getF32FloatAttr(0.0f))};
  if (scale)
    attrs.push_back(named("scale", b.getF32FloatAttr(*scale)));
  Value y = make<nn::AttentionOp>(operands, attrs);
  if (!y)
    return nullptr;
  // [B, H, S, Dv] back to [B, S, H * Dv].
  auto yt = typeOf(y);
  return makeTyped<nn::ReshapeOp>(
      RankedTensorType::get({yt.getDimSize(0), yt.getDimSize(2),
                             yt.getDimSize(1) * yt.getDimSize(3)},
                            elem),
      {make<nn::TransposeOp>(
          {y}, {named("perm", b.getDenseI64ArrayAttr({0, 2, 1, 3}))})});
}

/// Attention (com.microsoft): input [B, S, Din] projected by the packed
/// weights [Din, Hq + Hk + Hv] (qkv_hidden_sizes; equal thirds by default)
/// and bias, split into Q, K and V, then nn.attention heads-first: the
/// graph of the plain export the optimizer fused. mask_index: none, [B] end
/// positions, raw [B, T] or [B, S, T]; unidirectional is the causal mask;
/// attention_bias is added.
LogicalResult GraphImporter::importContribAttention() {
  if (failed(requireInputs(2, 7)) || failed(allowOutputs(2)))
    return failure();
  if (hasInput(4))
    return fail("input 'past' (the KV cache) is not supported");
  if (hasInput(6))
    return fail("input 'past_sequence_length' is not supported");
  if (wantsOutput(1))
    return fail("output 'present' (the KV cache) is not supported");
  Value x = input(0), w = input(1), bias = input(2), mask = input(3),
        attnBias = input(5);
  if (!x || !w || (hasInput(2) && !bias) || (hasInput(3) && !mask) ||
      (hasInput(5) && !attnBias))
    return failure();
  int64_t heads = attrInt("num_heads", 0);
  bool causal = attrInt("unidirectional", 0) != 0;
  float filter = attrFloat("mask_filter_value", -10000.0f);
  float scaleAttr = attrFloat("scale", 0.0f);
  SmallVector<int64_t> sizes = attrInts("qkv_hidden_sizes");
  int64_t rotary = attrInt("do_rotary", 0);
  if (attrFailed)
    return failure();
  if (!hasAttr("num_heads") || heads <= 0)
    return fail("attribute 'num_heads' must be given and positive");
  if (rotary != 0)
    return fail("do_rotary is not supported");
  auto xt = typeOf(x), wt = typeOf(w);
  if (xt.getRank() != 3)
    return fail("input must be [batch, seq, input_hidden], got shape " +
                shapeString(xt.getShape()));
  if (wt.getRank() != 2 || wt.getDimSize(0) != xt.getDimSize(2))
    return fail("weights must be [input_hidden, q + k + v hidden] with "
                "input_hidden " +
                std::to_string(xt.getDimSize(2)) + ", got shape " +
                shapeString(wt.getShape()));
  int64_t packed = wt.getDimSize(1);
  if (sizes.empty()) {
    if (packed % 3)
      return fail("weights' second dimension " + std::to_string(packed) +
                  " is not three equal hidden sizes");
    sizes.assign(3, packed / 3);
  }
  if (sizes.size() != 3 || sizes[0] != sizes[1] ||
      sizes[0] + sizes[1] + sizes[2] != packed)
    return fail("qkv_hidden_sizes " + shapeString(sizes) +
                " must be three sizes (q and k equal) adding up to the "
                "weights' " +
                std::to_string(packed));
  if (bias &&
      (typeOf(bias).getRank() != 1 || typeOf(bias).getDimSize(0) != packed))
    return fail("bias must have shape [" + std::to_string(packed) + "]");
  // One projection of the packed width, split into Q, K and V: the form of
  // GPT-2's and BERT's exports, whose fused weight the megatron presets
  // shard by heads and nn-split-fused-projections splits when it pays.
  Value qkv = make<nn::MatMulOp>({x, w});
  if (bias)
    qkv = make<nn::AddOp>({qkv, bias});
  if (!qkv)
    return failure();
  auto split = build<nn::SplitOp>(
      {qkv}, {named("axis", b.getI64IntegerAttr(2)),
              named("sizes", b.getDenseI64ArrayAttr(sizes))});
  if (failed(split))
    return failure();
  auto pieces = finish(*split);
  if (failed(pieces))
    return failure();
  Value q = (*pieces)[0], k = (*pieces)[1], v = (*pieces)[2];
  int64_t batch = xt.getDimSize(0), seq = xt.getDimSize(1);
  Value keep;
  if (mask && !(keep = contribKeyMask(mask, "mask_index", batch, seq, seq)))
    return failure();
  std::optional<float> scale;
  if (scaleAttr != 0.0f)
    scale = scaleAttr;
  Value y = contribAttention(q, k, v, heads, heads, keep, causal, filter,
                             attnBias, scale);
  if (!y)
    return failure();
  return setOutputs({y});
}

/// MultiHeadAttention (com.microsoft): separate [B, S, H] query and
/// [B, L, H] key / value (each plus its third of the optional bias), or
/// key / value already heads-first [B, N, L, D] (cross attention, no bias),
/// then nn.attention. key_padding_mask: [B] end positions or raw [B, L];
/// attention_bias [B|1, N|1, S, L] is added; unidirectional is causal.
LogicalResult GraphImporter::importMultiHeadAttention() {
  if (failed(requireInputs(1, 10)) || failed(allowOutputs(4)))
    return failure();
  const char *names[] = {"query",
                         "key",
                         "value",
                         "bias",
                         "key_padding_mask",
                         "attention_bias",
                         "past_key",
                         "past_value",
                         "past_sequence_length",
                         "cache_indirection"};
  for (int i : {6, 7, 8, 9})
    if (hasInput(i))
      return fail(Twine("input '") + names[i] + "' is not supported");
  if (!hasInput(1) || !hasInput(2))
    return fail("packed QKV or KV (query or key carrying several "
                "projections) is not supported: key and value must be given");
  const char *outputs[] = {"present_key", "present_value", "qk"};
  for (int i = 0; i < 3; ++i)
    if (wantsOutput(i + 1))
      return fail(Twine("output '") + outputs[i] + "' is not supported");
  Value q = input(0), k = input(1), v = input(2), bias = input(3),
        mask = input(4), attnBias = input(5);
  if (!q || !k || !v || (hasInput(3) && !bias) || (hasInput(4) && !mask) ||
      (hasInput(5) && !attnBias))
    return failure();
  int64_t heads = attrInt("num_heads", 0);
  bool causal = attrInt("unidirectional", 0) != 0;
  float filter = attrFloat("mask_filter_value", -10000.0f);
  float scaleAttr = attrFloat("scale", 0.0f);
  if (attrFailed)
    return failure();
  if (!hasAttr("num_heads") || heads <= 0)
    return fail("attribute 'num_heads' must be given and positive");
  auto qt = typeOf(q), kt = typeOf(k), vt = typeOf(v);
  if (qt.getRank() != 3)
    return fail("query must be [batch, seq, hidden] (packed forms are not "
                "supported), got shape " +
                shapeString(qt.getShape()));
  if (kt.getRank() == 4 && vt.getRank() == 4) {
    // Heads-first key and value: merge the heads back for the common path.
    if (bias)
      return fail("bias with heads-first [batch, heads, kv_seq, head_size] "
                  "key and value is not supported");
    auto merge = [&](Value t) {
      auto tt = typeOf(t);
      return makeTyped<nn::ReshapeOp>(
          RankedTensorType::get({tt.getDimSize(0), tt.getDimSize(2),
                                 tt.getDimSize(1) * tt.getDimSize(3)},
                                tt.getElementType()),
          {make<nn::TransposeOp>(
              {t}, {named("perm", b.getDenseI64ArrayAttr({0, 2, 1, 3}))})});
    };
    if (kt.getDimSize(1) != heads || vt.getDimSize(1) != heads)
      return fail("heads-first key and value must have num_heads = " +
                  std::to_string(heads) + " heads");
    k = merge(k);
    v = merge(v);
  } else if (kt.getRank() != 3 || vt.getRank() != 3) {
    return fail("key and value must be [batch, kv_seq, hidden] or [batch, "
                "heads, kv_seq, head_size] (packed forms are not supported)");
  }
  if (!k || !v)
    return failure();
  if (bias) {
    int64_t hq = qt.getDimSize(2), hk = typeOf(k).getDimSize(2),
            hv = typeOf(v).getDimSize(2);
    auto bt = typeOf(bias);
    if (bt.getRank() != 1 || bt.getDimSize(0) != hq + hk + hv)
      return fail("bias must have shape [" + std::to_string(hq + hk + hv) +
                  "] (query, key and value hidden sizes)");
    auto part = [&](Value t, int64_t begin, int64_t size) {
      return make<nn::AddOp>(
          {t,
           make<nn::SliceOp>(
               {bias}, {named("starts", b.getDenseI64ArrayAttr({begin})),
                        named("ends", b.getDenseI64ArrayAttr({begin + size})),
                        named("axes", b.getDenseI64ArrayAttr({0})),
                        named("steps", b.getDenseI64ArrayAttr({1}))})});
    };
    q = part(q, 0, hq);
    k = part(k, hq, hk);
    v = part(v, hq + hk, hv);
    if (!q || !k || !v)
      return failure();
  }
  int64_t batch = qt.getDimSize(0), seq = qt.getDimSize(1),
          kvSeq = typeOf(k).getDimSize(1);
  // Start positions ([2 * batch]) are Attention's mask_index format, not
  // key_padding_mask's.
  if (mask && typeOf(mask).getRank() == 1 &&
      typeOf(mask).getDimSize(0) != batch)
    return fail("key_padding_mask of shape " +
                shapeString(typeOf(mask).getShape()) +
                " is not supported: only [batch] end positions, a raw [batch, "
                "kv_seq] or [batch, seq, kv_seq] 0/1 mask");
  Value keep;
  if (mask &&
      !(keep = contribKeyMask(mask, "key_padding_mask", batch, seq, kvSeq)))
    return failure();
  std::optional<float> scale;
  if (scaleAttr != 0.0f)
    scale = scaleAttr;
  Value y = contribAttention(q, k, v, heads, heads, keep, causal, filter,
                             attnBias, scale);
  if (!y)
    return failure();
  return setOutputs({y});
}

/// GroupQueryAttention (com.microsoft), the prefill of onnxruntime-genai's
/// decoders: an empty past, total_sequence_length a constant equal to the
/// sequence length (pin it with --input-value), seqlens_k[b] the index of
/// batch b's last key. Query [B, S, N * D] and key / value
/// [B, S, Nkv * D] (or one packed query), rotated by nn.rotary_embedding at
/// positions 0 ... S - 1 with do_rotary (a position_ids input is refused), then
/// nn.attention with Nkv key / value heads, causal, keys after seqlens_k
/// masked. present_key / present_value are the (rotated) keys and values
/// heads-first.
LogicalResult GraphImporter::importGroupQueryAttention() {
  // key and value are absent when the query is packed: only query,
  // seqlens_k and total_sequence_length are required.
  if (failed(requireInputs(1, 17)) || failed(allowOutputs(4)))
    return failure();
  if (!hasInput(5) || !hasInput(6))
    return fail("inputs 'seqlens_k' and 'total_sequence_length' are required");
  const char *names[] = {"query",
                         "key",
                         "value",
                         "past_key",
                         "past_value",
                         "seqlens_k",
                         "total_sequence_length",
                         "cos_cache",
                         "sin_cache",
                         "position_ids",
                         "attention_bias",
                         "head_sink",
                         "k_scale",
                         "v_scale",
                         "q_norm_weight",
                         "k_norm_weight",
                         "query_seqlens"};
  for (int i = 9; i < numInputs(); ++i)
    if (hasInput(i))
      return fail(Twine("input '") + names[i] + "' is not supported");
  if (node->output_size() > 3 && !node->output(3).empty())
    return fail("output 'output_qk' is not supported");
  int64_t heads = attrInt("num_heads", 0), kvHeads = attrInt("kv_num_heads", 0);
  float scaleAttr = attrFloat("scale", 0.0f);
  float softcap = attrFloat("softcap", 0.0f);
  int64_t window = attrInt("local_window_size", -1);
  int64_t rotary = attrInt("do_rotary", 0);
  int64_t interleaved = attrInt("rotary_interleaved", 0);
  int64_t causalAttr = attrInt("causal", 1);
  int64_t smooth = attrInt("smooth_softmax", -1);
  int64_t qkOutput = attrInt("qk_output", 0);
  int64_t slidingCache = attrInt("sliding_window_cache", 0);
  std::string kQuant = attrString("k_quant_type", "NONE"),
              vQuant = attrString("v_quant_type", "NONE");
  if (attrFailed)
    return failure();
  if (heads <= 0 || kvHeads <= 0)
    return fail("attributes 'num_heads' and 'kv_num_heads' must be given and "
                "positive");
  if (window != -1)
    return fail("local_window_size " + std::to_string(window) +
                " (sliding-window attention) is not supported");
  if (causalAttr != 1)
    return fail("causal = 0 is not supported");
  if (smooth > 0)
    return fail("smooth_softmax is not supported");
  if (qkOutput != 0)
    return fail("qk_output is not supported");
  if (slidingCache != 0)
    return fail("sliding_window_cache is not supported");
  if (kQuant != "NONE" || vQuant != "NONE")
    return fail("a quantized KV cache (k_quant_type / v_quant_type) is not "
                "supported");
  Value q = input(0);
  if (!q)
    return failure();
  auto qt0 = typeOf(q);
  if (qt0.getRank() != 3)
    return fail("query must be [batch, seq, hidden], got shape " +
                shapeString(qt0.getShape()));
  int64_t batch = qt0.getDimSize(0), seq = qt0.getDimSize(1);
  Value k, v;
  if (hasInput(1) != hasInput(2))
    return fail("key and value must be given together");
  if (hasInput(1)) {
    k = input(1);
    v = input(2);
    if (!k || !v)
      return failure();
  } else {
    // Packed: query holds [Q | K | V] along the hidden axis.
    int64_t packed = qt0.getDimSize(2);
    if (packed % (heads + 2 * kvHeads))
      return fail("packed query's hidden size " + std::to_string(packed) +
                  " is not (num_heads + 2 * kv_num_heads) * head_size");
    int64_t d = packed / (heads + 2 * kvHeads);
    auto part = [&](int64_t begin, int64_t size) {
      return make<nn::SliceOp>(
          {q}, {named("starts", b.getDenseI64ArrayAttr({begin})),
                named("ends", b.getDenseI64ArrayAttr({begin + size})),
                named("axes", b.getDenseI64ArrayAttr({2})),
                named("steps", b.getDenseI64ArrayAttr({1}))});
    };
    k = part(heads * d, kvHeads * d);
    v = part((heads + kvHeads) * d, kvHeads * d);
    q = part(0, heads * d);
    if (!q || !k || !v)
      return failure();
  }
  for (int i : {3, 4}) {
    if (!hasInput(i))
      continue;
    Value past = input(i);
    if (!past)
      return failure();
    auto pt = typeOf(past);
    if (pt.getRank() != 4 || pt.getDimSize(2) != 0)
      return fail(Twine("input '") + names[i] + "' has shape " +
                  shapeString(pt.getShape()) +
                  "; only the prefill (an empty past, [batch, kv_heads, 0, "
                  "head_size]) is supported");
  }
  auto total = constScalar(6, "total_sequence_length");
  if (failed(total))
    return failure();
  if (int64_t(*total) != seq)
    return fail("total_sequence_length " + std::to_string(int64_t(*total)) +
                " differs from the sequence length " + std::to_string(seq) +
                "; only the prefill is supported");
  Value seqlens = input(5);
  if (!seqlens)
    return failure();
  auto st = typeOf(seqlens);
  if (st.getRank() != 1 || st.getDimSize(0) != batch ||
      !isa<IntegerType>(st.getElementType()))
    return fail("seqlens_k must be an int32 tensor of shape [" +
                std::to_string(batch) + "]");
  if (rotary != 0) {
    if (!hasInput(7) || !hasInput(8))
      return fail("do_rotary needs cos_cache and sin_cache");
    Value cosC = input(7), sinC = input(8);
    if (!cosC || !sinC)
      return failure();
    // The prefill's positions: 0 ... S - 1 in every batch.
    Type i64 = b.getI64Type();
    Value steps =
        makeTyped<nn::RangeOp>(RankedTensorType::get({seq}, i64), {},
                               {named("start", b.getF64FloatAttr(0.0)),
                                named("limit", b.getF64FloatAttr(double(seq))),
                                named("delta", b.getF64FloatAttr(1.0))});
    Value pos = make<nn::AddOp>({splat(RankedTensorType::get({batch, seq}, i64),
                                       b.getI64IntegerAttr(0)),
                                 steps});
    auto ct = typeOf(cosC);
    if (ct.getRank() != 2)
      return fail("cos_cache must be [max_position, rotary_dim / 2]");
    auto rope = [&](Value t, int64_t n) {
      return make<nn::RotaryEmbeddingOp>(
          {t, cosC, sinC, pos},
          {named("interleaved", b.getBoolAttr(interleaved != 0)),
           named("num_heads", b.getI64IntegerAttr(n)),
           named("rotary_embedding_dim",
                 b.getI64IntegerAttr(2 * ct.getDimSize(1)))});
    };
    q = rope(q, heads);
    k = rope(k, kvHeads);
    if (!q || !k)
      return failure();
  } else if (hasInput(7) || hasInput(8)) {
    return fail("cos_cache and sin_cache need do_rotary = 1");
  }
  // Key j of batch b is kept iff j <= seqlens_k[b]; causal on top.
  Type i64 = b.getI64Type();
  Value keys =
      makeTyped<nn::RangeOp>(RankedTensorType::get({seq}, i64), {},
                             {named("start", b.getF64FloatAttr(0.0)),
                              named("limit", b.getF64FloatAttr(double(seq))),
                              named("delta", b.getF64FloatAttr(1.0))});
  Value last = makeTyped<nn::ReshapeOp>(
      RankedTensorType::get({batch, 1}, i64),
      {make<nn::CastOp>({seqlens}, {named("to", TypeAttr::get(i64))})});
  Value keep = makeTyped<nn::ReshapeOp>(
      RankedTensorType::get({batch, 1, 1, seq}, b.getI1Type()),
      {make<nn::LessOp>(
          {keys, make<nn::AddOp>({last, splat(RankedTensorType::get({}, i64),
                                              b.getI64IntegerAttr(1))})})});
  if (!keep)
    return failure();
  auto kt = typeOf(k), vt = typeOf(v);
  if (kt.getRank() != 3 || vt.getRank() != 3 || kt.getDimSize(1) != seq ||
      vt.getDimSize(1) != seq)
    return fail("key and value must be [batch, seq, kv_hidden] with seq " +
                std::to_string(seq));
  if (typeOf(q).getDimSize(2) % heads || kt.getDimSize(2) % kvHeads ||
      vt.getDimSize(2) % kvHeads)
    return fail("hidden sizes must divide by num_heads and kv_num_heads");
  Value qh = attentionHeadsFirst(q, heads),
        kh = attentionHeadsFirst(k, kvHeads),
        vh = attentionHeadsFirst(v, kvHeads);
  if (!qh || !kh || !vh)
    return failure();
  SmallVector<NamedAttribute> attrs{
      named("is_causal", b.getBoolAttr(true)),
      named("q_num_heads", b.getI64IntegerAttr(0)),
      named("kv_num_heads", b.getI64IntegerAttr(0)),
      named("softcap", b.getF32FloatAttr(softcap))};
  if (scaleAttr != 0.0f)
    attrs.push_back(named("scale", b.getF32FloatAttr(scaleAttr)));
  Value y = make<nn::AttentionOp>({qh, kh, vh, keep}, attrs);
  if (!y)
    return failure();
  auto yt = typeOf(y);
  y = makeTyped<nn::ReshapeOp>(
      RankedTensorType::get({batch, seq, yt.getDimSize(1) * yt.getDimSize(3)},
                            yt.getElementType()),
      {make<nn::TransposeOp>(
          {y}, {named("perm", b.getDenseI64ArrayAttr({0, 2, 1, 3}))})});
  if (!y)
    return failure();
  return setOutputs({y, kh, vh});
}

} // namespace shardflow::onnx_import
