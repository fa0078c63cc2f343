//===- Attention.cpp - Attention and RotaryEmbedding (opset 23) -----------===//
//
// ONNX's Attention as nn.attention, or step by step when its scores are
// wanted, with the KV cache, masks and the causal frontier; RotaryEmbedding.
//
//===----------------------------------------------------------------------===//

#include "../GraphImporter.h"

namespace shardflow::onnx_import {

/// Attention's 3-D [B, S, H * D] operands as [B, H, S, D]: the layout of the
/// KV cache (past_* and present_* are 4-D whatever the rank of Q, K and V)
/// and of the decomposition.
Value GraphImporter::attentionHeadsFirst(Value x, int64_t heads) {
  auto t = typeOf(x);
  auto split = RankedTensorType::get(
      {t.getDimSize(0), t.getDimSize(1), heads, t.getDimSize(2) / heads},
      t.getElementType());
  return make<nn::TransposeOp>(
      {makeTyped<nn::ReshapeOp>(split, {x})},
      {named("perm", b.getDenseI64ArrayAttr({0, 2, 1, 3}))});
}

/// ONNX pads a mask shorter than the keys (past and current) with masked
/// entries at the end: -inf, or false for a boolean mask. A last dimension
/// of 1 broadcasts instead, as the spec's broadcasting rule for the mask
/// says (the reference would pad it too).
Value GraphImporter::attentionPadMask(Value mask, int64_t totalSeq) {
  auto t = typeOf(mask);
  if (t.getRank() < 1)
    return mask;
  int64_t last = t.getDimSize(t.getRank() - 1);
  Type elem = t.getElementType();
  if (last <= 1 || last >= totalSeq ||
      (!elem.isInteger(1) && !isa<FloatType>(elem)))
    return mask; // Anything else is the fused op's verifier's to report.
  SmallVector<int64_t> shape(t.getShape());
  shape.back() = totalSeq - last;
  Attribute fill = elem.isInteger(1) ? Attribute(b.getBoolAttr(false))
                                     : b.getFloatAttr(elem, -INFINITY);
  return make<nn::ConcatOp>(
      {mask, splat(RankedTensorType::get(shape, elem), fill)},
      {named("axis", b.getI64IntegerAttr(t.getRank() - 1))});
}

/// Folds is_causal into the mask (null: none). ONNX aligns the causal
/// frontier after the cached keys: query i sees key j iff j <= i + pastSeq,
/// where nn.attention's own is_causal has no offset. The frontier is
/// computed from two ranges rather than stored, so that a long cache puts
/// no [q_seq, total_seq] constant in the IR.
Value GraphImporter::attentionCausalMask(Value mask, int64_t qSeq,
                                         int64_t totalSeq, int64_t pastSeq) {
  auto range = [&](int64_t start, int64_t count) {
    return makeTyped<nn::RangeOp>(
        RankedTensorType::get({count}, b.getI64Type()), {},
        {named("start", b.getF64FloatAttr(double(start))),
         named("limit", b.getF64FloatAttr(double(start + count))),
         named("delta", b.getF64FloatAttr(1.0))});
  };
  // j < i + pastSeq + 1, as a [q_seq, total_seq] i1 tensor.
  Value frontier = make<nn::UnsqueezeOp>(
      {range(pastSeq + 1, qSeq)}, {named("axes", b.getDenseI64ArrayAttr({1}))});
  Value allowed = make<nn::LessOp>({range(0, totalSeq), frontier});
  if (!mask || !allowed)
    return allowed;
  Type elem = typeOf(mask).getElementType();
  if (elem.isInteger(1))
    return make<nn::AndOp>({mask, allowed});
  if (!isa<FloatType>(elem)) {
    (void)fail("mask must be i1 or have the query's element type");
    return nullptr;
  }
  // A float mask is added to the scores; the frontier adds 0 or -inf.
  return make<nn::AddOp>({mask, make<nn::WhereOp>({allowed, scalar(elem, 0.0),
                                                   scalar(elem, -INFINITY)})});
}

/// Attention as nn ops, step by step as ONNX defines it, for when the
/// scores (qk_matmul_output) are wanted: nn.attention keeps them to itself.
/// q is [B, Hq, Sq, D]; key and value are [B, Hkv, T, D] and [B, Hkv, T, Dv]
/// (the cache included); mask (i1 or float, causal frontier folded in)
/// broadcasts to [B, Hq, Sq, T]. The fused op's verifier has checked all
/// that. y is [B, Hq, Sq, Dv].
LogicalResult
GraphImporter::attentionDecomposed(Value q, Value key, Value value, Value mask,
                                   std::optional<float> scale, float softcap,
                                   int64_t softmaxPrecision, int64_t qkMode,
                                   Value &y, Value &qk) {
  auto qt = typeOf(q);
  Type elem = qt.getElementType();
  int64_t batch = qt.getDimSize(0), qHeads = qt.getDimSize(1),
          qSeq = qt.getDimSize(2), kvHeads = typeOf(key).getDimSize(1);
  int64_t group = qHeads / kvHeads;
  Type softmaxType = elem;
  if (softmaxPrecision != 0) {
    auto t = elementType(softmaxPrecision, "attribute 'softmax_precision'");
    if (failed(t))
      return failure();
    if (!isa<FloatType>(*t))
      return fail("softmax_precision must name a floating-point type");
    softmaxType = *t;
  }
  // [B, Hq, Sq, K] x [B, Hkv, K, N] -> [B, Hq, Sq, N]. Query head h uses
  // key/value head h / group (grouped-query attention): splitting the query
  // heads into [Hkv, group] lets matmul's batch broadcasting share each
  // key/value head with its group without repeating it.
  auto headMatMul = [&](Value lhs, Value rhs) -> Value {
    if (!lhs || !rhs)
      return nullptr;
    if (group == 1)
      return make<nn::MatMulOp>({lhs, rhs});
    auto lt = typeOf(lhs), rt = typeOf(rhs);
    int64_t inner = lt.getDimSize(3), n = rt.getDimSize(3);
    Value l = makeTyped<nn::ReshapeOp>(
        RankedTensorType::get({batch, kvHeads, group, qSeq, inner}, elem),
        {lhs});
    Value r = makeTyped<nn::ReshapeOp>(
        RankedTensorType::get({batch, kvHeads, 1, inner, n}, elem), {rhs});
    return makeTyped<nn::ReshapeOp>(
        RankedTensorType::get({batch, qHeads, qSeq, n}, elem),
        {make<nn::MatMulOp>({l, r})});
  };
  // Q and K are each scaled by sqrt(scale) before the product, as the spec
  // does to keep it from overflowing; a negative scale keeps its sign on
  // the Q side, so that the product is still scale * Q K^T.
  double s = scale ? double(*scale) : 1.0 / std::sqrt(double(qt.getDimSize(3)));
  double root = std::sqrt(std::abs(s));
  Value keyT = make<nn::TransposeOp>(
      {make<nn::MulOp>({key, scalar(elem, root)})},
      {named("perm", b.getDenseI64ArrayAttr({0, 1, 3, 2}))});
  Value raw = headMatMul(
      make<nn::MulOp>({q, scalar(elem, s < 0 ? -root : root)}), keyT);
  Value capped = raw;
  if (softcap > 0) {
    Value cap = scalar(elem, softcap);
    capped =
        make<nn::MulOp>({make<nn::TanhOp>({make<nn::DivOp>({raw, cap})}), cap});
  }
  // The mask as an additive bias: a boolean one adds 0 or -inf.
  Value bias = mask;
  if (mask && typeOf(mask).getElementType().isInteger(1))
    bias =
        make<nn::WhereOp>({mask, scalar(elem, 0.0), scalar(elem, -INFINITY)});
  if (mask && !bias)
    return failure();
  Value withBias = bias ? make<nn::AddOp>({capped, bias}) : capped;
  Value logits = withBias;
  if (softmaxType != elem)
    logits =
        make<nn::CastOp>({logits}, {named("to", TypeAttr::get(softmaxType))});
  Value probs =
      make<nn::SoftmaxOp>({logits}, {named("axis", b.getI64IntegerAttr(3))});
  if (bias) {
    // A query row whose keys are all masked (its bias is -inf throughout)
    // has zero probabilities, and so a zero output row, where softmax would
    // give NaN.
    int64_t last = typeOf(bias).getRank() - 1;
    Value rowMax = make<nn::ReduceMaxOp>(
        {bias}, {named("axes", b.getDenseI64ArrayAttr({last})),
                 named("keepdims", b.getBoolAttr(true))});
    Value blocked = make<nn::EqualOp>({rowMax, scalar(elem, -INFINITY)});
    probs = make<nn::WhereOp>({blocked, scalar(softmaxType, 0.0), probs});
  }
  if (softmaxType != elem)
    probs = make<nn::CastOp>({probs}, {named("to", TypeAttr::get(elem))});
  y = headMatMul(probs, value);
  // Mode 0: the product; 1: after softcap; 2: after the mask too; 3: the
  // probabilities, at the output precision. (onnx's reference returns the
  // softcapped product for mode 0 as well; the spec says the product.)
  qk = qkMode == 0   ? raw
       : qkMode == 1 ? capped
       : qkMode == 2 ? withBias
                     : probs;
  return success(y && qk);
}

LogicalResult GraphImporter::importAttention() {
  if (failed(requireInputs(3, 6)) || failed(allowOutputs(4)))
    return failure();
  Value q = input(0), k = input(1), v = input(2), mask = input(3),
        pastKey = input(4), pastValue = input(5);
  if (!q || !k || !v || (hasInput(3) && !mask) || (hasInput(4) && !pastKey) ||
      (hasInput(5) && !pastValue))
    return failure();
  bool causal = attrInt("is_causal", 0) != 0;
  int64_t qHeads = attrInt("q_num_heads", 0),
          kvHeads = attrInt("kv_num_heads", 0);
  float softcap = attrFloat("softcap", 0.0f);
  std::optional<float> scale;
  if (hasAttr("scale"))
    scale = attrFloat("scale", 1.0f);
  int64_t qkMode = attrInt("qk_matmul_output_mode", 0);
  int64_t softmaxPrecision = attrInt("softmax_precision", 0);
  if (attrFailed)
    return failure();
  if (!pastKey != !pastValue)
    return fail("past_key and past_value must be given together");
  bool wantPresent = wantsOutput(1) || wantsOutput(2), wantQK = wantsOutput(3);
  if (wantQK && (qkMode < 0 || qkMode > 3))
    return fail("qk_matmul_output_mode " + std::to_string(qkMode) +
                " is not 0, 1, 2 or 3");
  auto attrsFor = [&](bool isCausal) {
    SmallVector<NamedAttribute> attrs{
        named("is_causal", b.getBoolAttr(isCausal)),
        named("q_num_heads", b.getI64IntegerAttr(qHeads)),
        named("kv_num_heads", b.getI64IntegerAttr(kvHeads)),
        named("softcap", b.getF32FloatAttr(softcap))};
    if (scale)
      attrs.push_back(named("scale", b.getF32FloatAttr(*scale)));
    return attrs;
  };
  auto qt = typeOf(q), kt = typeOf(k), vt = typeOf(v);
  int64_t rank = qt.getRank();
  bool ranksAgree =
      (rank == 3 || rank == 4) && kt.getRank() == rank && vt.getRank() == rank;

  // Without a cache or the scores, the fused op takes the inputs as they are.
  if (!pastKey && !wantPresent && !wantQK) {
    SmallVector<Value> operands{q, k, v};
    if (mask) {
      if (ranksAgree)
        mask = attentionPadMask(mask, kt.getDimSize(rank == 3 ? 1 : 2));
      if (!mask)
        return failure();
      operands.push_back(mask);
    }
    return emit<nn::AttentionOp>(operands, attrsFor(causal));
  }

  // The cache is [B, kv_heads, seq, head_size]: 3-D inputs are split into
  // heads first and the result merged back at the end.
  if (!ranksAgree)
    return fail("query, key and value must all be 3-D or all 4-D");
  if (rank == 3) {
    if (qHeads <= 0 || kvHeads <= 0)
      return fail("3-D inputs need q_num_heads and kv_num_heads");
    if (qt.getDimSize(2) % qHeads || kt.getDimSize(2) % kvHeads ||
        vt.getDimSize(2) % kvHeads)
      return fail("hidden sizes must divide by the head counts");
    q = attentionHeadsFirst(q, qHeads);
    k = attentionHeadsFirst(k, kvHeads);
    v = attentionHeadsFirst(v, kvHeads);
    if (!q || !k || !v)
      return failure();
  }
  Value presentKey = k, presentValue = v;
  int64_t pastSeq = 0;
  if (pastKey) {
    auto checkPast = [&](Value past, Value current, StringRef name) {
      auto p = typeOf(past), c = typeOf(current);
      if (p.getElementType() != c.getElementType())
        return fail(name + " must have the element type of Q, K and V");
      if (p.getRank() != 4 || p.getDimSize(0) != c.getDimSize(0) ||
          p.getDimSize(1) != c.getDimSize(1) ||
          p.getDimSize(3) != c.getDimSize(3))
        return fail(name + " has shape " + shapeString(p.getShape()) +
                    "; it must be [batch, kv_heads, past_seq, head_size] = [" +
                    std::to_string(c.getDimSize(0)) + "," +
                    std::to_string(c.getDimSize(1)) + ",*," +
                    std::to_string(c.getDimSize(3)) + "]");
      return success();
    };
    if (failed(checkPast(pastKey, k, "past_key")) ||
        failed(checkPast(pastValue, v, "past_value")))
      return failure();
    pastSeq = typeOf(pastKey).getDimSize(2);
    if (typeOf(pastValue).getDimSize(2) != pastSeq)
      return fail("past_key and past_value hold " + std::to_string(pastSeq) +
                  " and " + std::to_string(typeOf(pastValue).getDimSize(2)) +
                  " positions");
    auto seqAxis = named("axis", b.getI64IntegerAttr(2));
    presentKey = make<nn::ConcatOp>({pastKey, k}, {seqAxis});
    presentValue = make<nn::ConcatOp>({pastValue, v}, {seqAxis});
    if (!presentKey || !presentValue)
      return failure();
  }
  int64_t qSeq = typeOf(q).getDimSize(2);
  int64_t totalSeq = typeOf(presentKey).getDimSize(2);
  if (mask) {
    Type maskElem = typeOf(mask).getElementType();
    if (!maskElem.isInteger(1) && maskElem != qt.getElementType())
      return fail("mask must be i1 or have the query's element type");
    if (!(mask = attentionPadMask(mask, totalSeq)))
      return failure();
  }
  // nn.attention's causal frontier has no offset: with cached keys, or when
  // the scores are built here, the frontier becomes part of the mask.
  bool fusedCausal = causal;
  if (causal && (pastSeq > 0 || wantQK)) {
    if (!(mask = attentionCausalMask(mask, qSeq, totalSeq, pastSeq)))
      return failure();
    fusedCausal = false;
  }

  // The fused op checks heads, head sizes and the mask's shape for both
  // ways, and computes Y when the scores are not wanted.
  SmallVector<Value> operands{q, presentKey, presentValue};
  if (mask)
    operands.push_back(mask);
  auto fused = build<nn::AttentionOp>(operands, attrsFor(fusedCausal));
  if (failed(fused))
    return failure();
  Value y, qk;
  if (!wantQK) {
    auto results = finish(*fused);
    if (failed(results))
      return failure();
    y = (*results)[0];
  } else {
    (*fused)->erase();
    if (failed(attentionDecomposed(q, presentKey, presentValue, mask, scale,
                                   softcap, softmaxPrecision, qkMode, y, qk)))
      return failure();
  }
  if (rank == 3) {
    // [B, Hq, Sq, Dv] back to [B, Sq, Hq * Dv].
    auto yt = typeOf(y);
    y = makeTyped<nn::ReshapeOp>(
        RankedTensorType::get({yt.getDimSize(0), yt.getDimSize(2),
                               yt.getDimSize(1) * yt.getDimSize(3)},
                              yt.getElementType()),
        {make<nn::TransposeOp>(
            {y}, {named("perm", b.getDenseI64ArrayAttr({0, 2, 1, 3}))})});
    if (!y)
      return failure();
  }
  return setOutputs({y, presentKey, presentValue, qk});
}

LogicalResult GraphImporter::importRotaryEmbedding() {
  if (failed(requireInputs(3, 4)) || failed(allowOutputs(1)))
    return failure();
  Value x = input(0), cosC = input(1), sinC = input(2), pos = input(3);
  if (!x || !cosC || !sinC || (hasInput(3) && !pos))
    return failure();
  SmallVector<NamedAttribute> attrs{
      named("interleaved", b.getBoolAttr(attrInt("interleaved", 0) != 0)),
      named("num_heads", b.getI64IntegerAttr(attrInt("num_heads", 0))),
      named("rotary_embedding_dim",
            b.getI64IntegerAttr(attrInt("rotary_embedding_dim", 0)))};
  if (attrFailed)
    return failure();
  SmallVector<Value> operands{x, cosC, sinC};
  if (pos)
    operands.push_back(pos);
  return emit<nn::RotaryEmbeddingOp>(operands, attrs);
}

} // namespace shardflow::onnx_import
