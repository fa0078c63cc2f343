//===- RTToGPU.cpp - fuse rt kernels into generated GPU kernels -------------===//
//
// For the CUDA target, every rt.kernel that is elementwise (arithmetic,
// comparisons, select, unary math, activations, casts, fills) or a row
// reduction (softmax, log-softmax, layer and RMS normalization) becomes
// code the compiler generates, in one `gpu.module @shardflow_kernels`, and
// is called by rt.launch. Contractions and attention stay rt.kernel calls:
// the runtime runs them with cuBLASLt and its attention kernel, as it runs
// data movement (transpose, slice, concat, split, expand, gather, pad).
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
// Reductions that are not row reductions, cumsum, gather_elements,
// scatter_nd and topk are generated as launches of their own
// (StandaloneKernels.cpp); kernels that read indices from data report an
// out-of-range one through a status word (Emitter.h).
//
// Generated code computes in f32 for f16/bf16/f32 data (f64 stays f64) and
// rounds once when it stores. Every argument is a flat memref of its
// buffer's element count (the launch ABI passes bare pointers), so indexing
// is linear and views cost nothing.
//
//===----------------------------------------------------------------------===//

#include "FusionGroups.h"
#include "GroupEmitter.h"

#include "shardflow/Conversion/Passes.h"
#include "shardflow/Dialect/RT/IR/RTOps.h"
#include "shardflow/Dialect/RT/Transforms/Passes.h"
#include "shardflow/Runtime/NumpyRandom.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/IR/Builders.h"

namespace shardflow {
#define GEN_PASS_DEF_CONVERTRTTOGPU
#include "shardflow/Conversion/Passes.h.inc"
} // namespace shardflow

using namespace mlir;
using namespace shardflow;
using namespace shardflow::rtgpu;

namespace {

struct ConvertRTToGPU : shardflow::impl::ConvertRTToGPUBase<ConvertRTToGPU> {
  using ConvertRTToGPUBase::ConvertRTToGPUBase;
  void runOnOperation() override;
};

/// The calls of runtime kernel `name` in `fn`, in program order (a copy:
/// the caller may rewrite them).
SmallVector<rt::KernelOp> kernelsNamed(func::FuncOp fn, StringRef name) {
  SmallVector<rt::KernelOp> found;
  fn.walk([&](rt::KernelOp k) {
    if (k.getKernel() == name)
      found.push_back(k);
  });
  return found;
}

/// A split along the last dimension of a [B, S, W] buffer whose three
/// pieces only one attention reads, as its query, key and value
/// (nn-split-fused-projections leaves GPT-2's fused QKV so): the attention
/// reads the pieces where they are, the buffer passed three times with
/// `packed_qkv` giving the pieces' widths (the runtime offsets the
/// pointers and steps rows by W), and the split's copy disappears.
void readAttentionInputsInPlace(func::FuncOp fn) {
  for (rt::KernelOp split : kernelsNamed(fn, "split")) {
    if (split.getInputs().size() != 1 || split.getOutputs().size() != 3)
      continue;
    Value fused = split.getInputs()[0];
    ArrayRef<int64_t> shape = shapeOf(fused);
    auto axis = dyn_cast_or_null<IntegerAttr>(split.getParams().get("axis"));
    if (shape.size() != 3 || !axis || (axis.getInt() != 2 && axis.getInt() != -1))
      continue;
    rt::KernelOp attention;
    bool ok = true;
    for (auto [i, piece] : llvm::enumerate(split.getOutputs())) {
      // Used twice: written by the split, read by the attention (no view).
      Operation *other = nullptr;
      int uses = 0;
      for (Operation *user : piece.getUsers())
        if (user != split)
          other = user, ++uses;
      auto reader = uses == 1 ? dyn_cast<rt::KernelOp>(other) : rt::KernelOp();
      ok = ok && piece.getDefiningOp<rt::AllocOp>() && reader &&
           reader.getKernel() == "attention" && (!attention || reader == attention) &&
           reader.getInputs().size() > i && reader.getInputs()[i] == piece;
      attention = reader;
    }
    if (!ok)
      continue;
    SmallVector<int64_t> widths;
    for (Value piece : split.getOutputs())
      widths.push_back(shapeOf(piece)[2]);
    SmallVector<Value> inputs(attention.getInputs());
    for (int i = 0; i < 3; ++i)
      inputs[i] = fused;
    OpBuilder b(attention);
    NamedAttrList params(attention.getParams());
    params.set("packed_qkv", b.getDenseI64ArrayAttr(widths));
    attention.getInputsMutable().assign(inputs);
    attention.setParamsAttr(params.getDictionary(b.getContext()));
    SmallVector<Value> pieces(split.getOutputs());
    split.erase();
    for (Value piece : pieces)
      piece.getDefiningOp()->erase();
  }
}

/// Training dropout: the mask depends only on the seed and the shape (the
/// CPU kernel reseeds numpy's generator on every call), so it is drawn here,
/// once, into a constant: the mask output is a copy of it and the result a
/// `masked_scale` of the input, both elementwise.
LogicalResult precomputeDropoutMasks(func::FuncOp fn) {
  SmallVector<rt::KernelOp> dropouts;
  fn.walk([&](rt::KernelOp k) {
    if (k.getKernel() == "training_dropout" && k.getInputs().size() == 1 &&
        k.getOutputs().size() == 2)
      dropouts.push_back(k);
  });
  // A mask is one byte per element in the artifact (two hex digits).
  constexpr int64_t kMaxMask = int64_t(1) << 24;
  for (rt::KernelOp k : dropouts) {
    Value x = k.getInputs()[0], y = k.getOutputs()[0], mask = k.getOutputs()[1];
    auto ratioAttr = dyn_cast_or_null<FloatAttr>(k.getParams().get("ratio"));
    auto seedAttr = dyn_cast_or_null<IntegerAttr>(k.getParams().get("seed"));
    Type t = elemOf(x);
    if (!ratioAttr || !isa<FloatType>(t) || shapeOf(mask) != shapeOf(x) ||
        !elemOf(mask).isInteger(1))
      continue; // left for the error that names it
    double ratio = ratioAttr.getValueAsDouble();
    if (!(ratio >= 0.0 && ratio < 1.0))
      return k.emitOpError("training_dropout ratio ") << ratio << " is outside [0, 1)";
    if (numel(x) > kMaxMask)
      return k.emitOpError("training_dropout of ")
             << numel(x) << " elements: the CUDA target draws the mask at compile time, "
             << "for at most " << kMaxMask << " elements; compile with --target cpu";
    std::mt19937 gen = runtime::numpyGenerator(seedAttr ? seedAttr.getInt() : 0);
    SmallVector<bool> keep(numel(x));
    for (auto &&bit : keep)
      bit = runtime::numpyUniform(gen) >= ratio;
    // The scale as the CPU kernel computes it, in the element type:
    // 1 / (1 - ratio), ratio first rounded to f32, then to the type.
    const llvm::fltSemantics &sem = cast<FloatType>(t).getFloatSemantics();
    bool lost;
    APFloat r{float(ratio)}, one{1.0};
    r.convert(sem, APFloat::rmNearestTiesToEven, &lost);
    one.convert(sem, APFloat::rmNearestTiesToEven, &lost);
    APFloat denominator = one;
    denominator.subtract(r, APFloat::rmNearestTiesToEven);
    APFloat scale = one;
    scale.divide(denominator, APFloat::rmNearestTiesToEven);
    OpBuilder b(k);
    auto maskType = RankedTensorType::get(shapeOf(mask), b.getI1Type());
    Value bits = rt::ConstantOp::create(b, k.getLoc(), cast<MemRefType>(mask.getType()),
                                        DenseElementsAttr::get(maskType, ArrayRef<bool>(keep)));
    rt::KernelOp::create(b, k.getLoc(), b.getStringAttr("identity"), ValueRange{bits},
                         ValueRange{mask}, b.getDictionaryAttr({}));
    rt::KernelOp::create(
        b, k.getLoc(), b.getStringAttr("masked_scale"), ValueRange{x, bits}, ValueRange{y},
        b.getDictionaryAttr(
            {b.getNamedAttr("scale", b.getF64FloatAttr(scale.convertToDouble()))}));
    k.erase();
  }
  return success();
}

/// Element types cuBLASLt multiplies for the runtime.
bool isGemmType(Type t) { return t.isF32() || t.isF16() || t.isBF16(); }

/// A matmul of another element type (integers, f64) becomes the einsum it
/// is, which is generated as loops.
void lowerNonGemmMatmuls(func::FuncOp fn) {
  SmallVector<rt::KernelOp> matmuls;
  fn.walk([&](rt::KernelOp k) {
    if (k.getKernel() == "matmul" && k.getInputs().size() == 2 && k.getOutputs().size() == 1 &&
        !isGemmType(elemOf(k.getOutputs()[0])))
      matmuls.push_back(k);
  });
  for (rt::KernelOp k : matmuls) {
    bool vecA = shapeOf(k.getInputs()[0]).size() == 1,
         vecB = shapeOf(k.getInputs()[1]).size() == 1;
    std::string eq = std::string(vecA ? "j" : "...ij") + "," + (vecB ? "j" : "...jk") + "->" +
                     (vecA && vecB ? "" : "...") + (vecA ? "" : "i") + (vecB ? "" : "k");
    if (vecA && vecB)
      eq = "j,j->";
    OpBuilder b(k);
    rt::KernelOp::create(b, k.getLoc(), b.getStringAttr("einsum"), k.getInputs(),
                         k.getOutputs(),
                         b.getDictionaryAttr({b.getNamedAttr("equation", b.getStringAttr(eq))}));
    k.erase();
  }
}

/// The one operation that reads `buffer` (through views), or null.
Operation *soleReader(Value buffer) {
  SmallVector<Operation *> readers, views;
  collectReaders(buffer, readers, views);
  return readers.size() == 1 && views.empty() ? readers.front() : nullptr;
}

/// Whether an op strictly between `from` and `to` may write one of the
/// buffers `operands` belong to: a kernel writes its outputs; any other op
/// but allocations, views, weights and constants (a collective, which may
/// reduce in place, a receive) is taken to write every buffer it names.
/// A fusion that moves `from`'s work to `to` needs none to.
bool writtenBetween(Operation *from, Operation *to, ValueRange operands) {
  llvm::SmallPtrSet<Value, 4> roots;
  for (Value v : operands)
    roots.insert(rootOf(v));
  for (Operation *op = from->getNextNode(); op && op != to; op = op->getNextNode()) {
    if (isa<rt::AllocOp, rt::ViewOp, rt::WeightOp, rt::ConstantOp>(op))
      continue;
    auto k = dyn_cast<rt::KernelOp>(op);
    ValueRange written = k ? ValueRange(k.getOutputs()) : ValueRange(op->getOperands());
    if (llvm::any_of(written, [&](Value v) {
          return isa<MemRefType>(v.getType()) && roots.contains(rootOf(v));
        }))
      return true;
  }
  return false;
}

/// The matmuls of `fn` without an epilogue: two operands, one result, its
/// own buffer; the product's element type is that of both operands.
SmallVector<rt::KernelOp> plainMatmuls(func::FuncOp fn) {
  SmallVector<rt::KernelOp> matmuls;
  fn.walk([&](rt::KernelOp k) {
    if (k.getKernel() == "matmul" && k.getInputs().size() == 2 && k.getOutputs().size() == 1 &&
        k.getOutputs()[0].getDefiningOp<rt::AllocOp>() &&
        elemOf(k.getInputs()[0]) == elemOf(k.getOutputs()[0]) &&
        elemOf(k.getInputs()[1]) == elemOf(k.getOutputs()[0]))
      matmuls.push_back(k);
  });
  return matmuls;
}

/// A matmul whose result only a bias add reads ([N], the result's last
/// dimension), and that add's result only a tanh gelu or a relu, becomes one
/// matmul with cuBLASLt's epilogue (`bias`, `gelu_bias`, `relu_bias`): the
/// product is written once, with the bias (and activation) applied. The
/// matmul moves to the last op it absorbs, unless something in between may
/// write one of its operands.
void fuseGemmEpilogues(func::FuncOp fn) {
  for (rt::KernelOp mm : plainMatmuls(fn)) {
    Value product = mm.getOutputs()[0];
    Type elem = elemOf(product);
    if (!isGemmType(elem) || shapeOf(product).size() < 2)
      continue;
    auto add = dyn_cast_or_null<rt::KernelOp>(soleReader(product));
    if (!add || add.getKernel() != "add" || add.getInputs().size() != 2)
      continue;
    Value bias = add.getInputs()[0] == product ? add.getInputs()[1] : add.getInputs()[0];
    if (bias == product || shapeOf(bias).size() != 1 ||
        shapeOf(bias)[0] != shapeOf(product).back() || elemOf(bias) != elem ||
        shapeOf(add.getOutputs()[0]) != shapeOf(product) ||
        !add.getOutputs()[0].getDefiningOp<rt::AllocOp>())
      continue;
    StringRef epilogue = "bias";
    rt::KernelOp last = add;
    if (auto act = dyn_cast_or_null<rt::KernelOp>(soleReader(add.getOutputs()[0]));
        act && act.getInputs().size() == 1 && act.getInputs()[0] == add.getOutputs()[0] &&
        act.getOutputs()[0].getDefiningOp<rt::AllocOp>()) {
      auto approx = dyn_cast_or_null<StringAttr>(act.getParams().get("approximate"));
      if (act.getKernel() == "gelu" && approx && approx.getValue() == "tanh") {
        epilogue = "gelu_bias"; // cuBLASLt's GELU is the tanh form
        last = act;
      } else if (act.getKernel() == "relu") {
        epilogue = "relu_bias";
        last = act;
      }
    }
    Value result = last.getOutputs()[0];
    // The matmul moves to `last`, where the bias is ready.
    if (writtenBetween(mm, last, mm.getInputs()))
      continue;
    OpBuilder b(last);
    rt::KernelOp::create(
        b, last.getLoc(), b.getStringAttr("matmul"),
        ValueRange{mm.getInputs()[0], mm.getInputs()[1], bias}, ValueRange{result},
        b.getDictionaryAttr({b.getNamedAttr("epilogue", b.getStringAttr(epilogue))}));
    SmallVector<Operation *> dead = {last.getOperation()};
    if (last != add) {
      dead.push_back(add);
      dead.push_back(add.getOutputs()[0].getDefiningOp());
    }
    dead.push_back(mm);
    dead.push_back(product.getDefiningOp());
    for (Operation *op : dead)
      op->erase();
  }
}

/// A matmul of a 2-D B (one GEMM: A's batch folds into M), plain or with
/// the bias epilogue, whose result only an add of another buffer of its
/// shape reads (a transformer's residual stream, `x + attn(x)`), takes that
/// buffer as cuBLASLt's C (`residual`: the last input, added with beta 1
/// before the bias) and writes the sum itself: the product is neither
/// written nor read again. The matmul moves to the add, where the residual
/// is ready, unless something in between may write one of its operands.
void fuseGemmResiduals(func::FuncOp fn) {
  for (rt::KernelOp mm : kernelsNamed(fn, "matmul")) {
    auto epilogue = dyn_cast_or_null<StringAttr>(mm.getParams().get("epilogue"));
    bool bias = epilogue && epilogue.getValue() == "bias";
    if ((epilogue && !bias) || mm.getParams().size() != (epilogue ? 1 : 0) ||
        mm.getInputs().size() != (bias ? 3u : 2u) || mm.getOutputs().size() != 1)
      continue;
    Value product = mm.getOutputs()[0];
    Type elem = elemOf(product);
    if (!isGemmType(elem) || elemOf(mm.getInputs()[0]) != elem ||
        shapeOf(mm.getInputs()[1]).size() != 2 || !product.getDefiningOp<rt::AllocOp>())
      continue;
    auto add = dyn_cast_or_null<rt::KernelOp>(soleReader(product));
    if (!add || add.getKernel() != "add" || add.getInputs().size() != 2 ||
        add.getOutputs().size() != 1)
      continue;
    Value residual = add.getInputs()[0] == product ? add.getInputs()[1] : add.getInputs()[0];
    Value result = add.getOutputs()[0];
    if (residual == product || shapeOf(residual) != shapeOf(product) ||
        elemOf(residual) != elem || shapeOf(result) != shapeOf(product) ||
        elemOf(result) != elem || !result.getDefiningOp<rt::AllocOp>())
      continue;
    // Nothing between the two may write what the matmul reads.
    if (writtenBetween(mm, add, mm.getInputs()))
      continue;
    SmallVector<Value> inputs(mm.getInputs());
    inputs.push_back(residual);
    NamedAttrList params(mm.getParams());
    OpBuilder b(add);
    params.set("residual", b.getBoolAttr(true));
    rt::KernelOp::create(b, add.getLoc(), b.getStringAttr("matmul"), inputs, ValueRange{result},
                         params.getDictionary(b.getContext()));
    add.erase();
    mm.erase();
    product.getDefiningOp()->erase();
  }
}

/// A plain f16 or bf16 matmul whose result only a cast to f32 reads, where
/// no kernel reads the cast's result (it is returned, or only collectives
/// read it: the logits of a `--dtype bf16` program), writes f32 directly:
/// cuBLASLt accumulates in f32 and rounds once to the output type, so the
/// half-precision product is neither written nor read again, and the
/// result is rounded once instead of twice. A cast that a generated kernel
/// reads is left alone: it fuses into that kernel, which then reads the
/// narrower product.
void fuseGemmOutputCasts(func::FuncOp fn) {
  for (rt::KernelOp mm : plainMatmuls(fn)) {
    Value product = mm.getOutputs()[0];
    Type elem = elemOf(product);
    if (!(elem.isBF16() || elem.isF16()))
      continue;
    auto cast = dyn_cast_or_null<rt::KernelOp>(soleReader(product));
    if (!cast || cast.getKernel() != "cast" || cast.getInputs().size() != 1 ||
        cast.getInputs()[0] != product || cast.getOutputs().size() != 1)
      continue;
    Value result = cast.getOutputs()[0];
    auto resultAlloc = result.getDefiningOp<rt::AllocOp>();
    if (!resultAlloc || !elemOf(result).isF32() || shapeOf(result) != shapeOf(product))
      continue;
    SmallVector<Operation *> readers, views;
    collectReaders(result, readers, views);
    if (llvm::any_of(readers, [](Operation *op) { return isa<rt::KernelOp>(op); }))
      continue;
    // The matmul stays where it was (an in-place collective between it and
    // the cast may write one of its operands); the result's buffer is
    // allocated before it.
    if (mm->isBeforeInBlock(resultAlloc))
      resultAlloc->moveBefore(mm);
    OpBuilder b(mm);
    rt::KernelOp::create(b, mm.getLoc(), b.getStringAttr("matmul"), mm.getInputs(),
                         ValueRange{result}, mm.getParamsAttr());
    Operation *alloc = product.getDefiningOp();
    cast.erase();
    mm.erase();
    alloc->erase();
  }
}

/// A 2-D weight [K, N] that only matmuls read, as their B, whose rows
/// are not 16-byte aligned (N elements of its type are not a multiple of
/// 16 bytes: GPT-2's [768, 50257] vocabulary projection) while its columns
/// would be, is stored transposed ([N, K], `permutation = [1, 0]`, applied
/// once at load) and read with `trans_b`. cuBLASLt's fastest kernels
/// (TMA on sm_90, 16-byte asynchronous copies on sm_80) need 16-byte
/// aligned leading dimensions; the transposed operand has them, and the
/// GEMM is the same "TN" form as a framework's [out, in] linear weight.
/// A weight already loaded transposed (an ONNX Transpose of an
/// initializer) is then loaded as stored.
void transposeMisalignedGemmWeights(func::FuncOp fn) {
  SmallVector<rt::WeightOp> weights(fn.getOps<rt::WeightOp>());
  for (rt::WeightOp w : weights) {
    auto type = cast<MemRefType>(w.getType());
    Type elem = type.getElementType();
    if (type.getRank() != 2 || !isGemmType(elem) || w->use_empty())
      continue;
    int64_t bytes = elem.getIntOrFloatBitWidth() / 8, k = type.getDimSize(0),
            n = type.getDimSize(1);
    if ((n * bytes) % 16 == 0 || (k * bytes) % 16 != 0)
      continue;
    bool onlyGemmB = llvm::all_of(w->getUses(), [](OpOperand &use) {
      auto mm = dyn_cast<rt::KernelOp>(use.getOwner());
      return mm && mm.getKernel() == "matmul" && use.getOperandNumber() == 1 &&
             mm.getInputs().size() >= 2 && mm.getInputs()[0] != mm.getInputs()[1] &&
             !mm.getParams().get("trans_b");
    });
    if (!onlyGemmB)
      continue;
    OpBuilder b(w);
    auto perm = w.getPermutationAttr();
    if (perm && perm.asArrayRef()[0] == 1)
      w.removePermutationAttr(); // [1, 0] twice
    else
      w.setPermutationAttr(b.getDenseI64ArrayAttr({1, 0}));
    w.getResult().setType(MemRefType::get({n, k}, elem));
    SmallVector<Operation *> users(w->getUsers());
    for (Operation *user : users) {
      auto mm = cast<rt::KernelOp>(user);
      SmallVector<NamedAttribute> params(mm.getParams().getValue());
      params.push_back(b.getNamedAttr("trans_b", b.getBoolAttr(true)));
      mm.setParamsAttr(b.getDictionaryAttr(params));
    }
  }
}

/// A plain matmul of a 2-D weight of N >= 64 columns whose result rows are
/// not 16-byte aligned (GPT-2's [tokens, 50257] logits, in f32 or bf16)
/// writes a result padded to a multiple of 64 columns (8 below 1024)
/// instead, whose rows are, and a `slice` copies the N real columns into
/// the result. cuBLASLt's fast kernels need every leading dimension
/// aligned, the result's too: on an H200 the 8192 x 50257 x 768 bf16
/// projection ran at about 95 TFLOP/s, against 480 to 730 for the aligned
/// GEMMs of the same program (2026-11-26). The
/// weight grows to the padded width at load: a slice of the stored tensor
/// with `zero_padded` (what lies past the tensor reads as zeros). Its
/// extra columns only make the result columns the slice leaves out, so
/// a sharded weight's slice may read its neighbour's columns there.
///
/// A result that only the function returns needs no slice: the padded
/// buffer is returned, its result attribute `rt.columns` saying how many
/// leading elements of each row are the output (the runtime downloads them
/// with one 2-D copy), so neither the copy nor a second buffer of the
/// result's size is needed.
void padMisalignedGemmResults(func::FuncOp fn) {
  auto worldAttr = fn->getAttrOfType<IntegerAttr>("rt.world_size");
  int64_t world = worldAttr ? worldAttr.getInt() : 1;
  for (rt::KernelOp mm : kernelsNamed(fn, "matmul")) {
    if (mm.getInputs().size() != 2 || mm.getOutputs().size() != 1)
      continue;
    auto transB = dyn_cast_or_null<BoolAttr>(mm.getParams().get("trans_b"));
    if (mm.getParams().size() != (transB ? 1u : 0u))
      continue;
    auto w = mm.getInputs()[1].getDefiningOp<rt::WeightOp>();
    Value y = mm.getOutputs()[0];
    if (!w || !w->hasOneUse() || mm.getInputs()[0] == mm.getInputs()[1] ||
        !y.getDefiningOp<rt::AllocOp>())
      continue;
    auto wType = cast<MemRefType>(w.getType());
    ArrayRef<int64_t> ys = shapeOf(y);
    if (wType.getRank() != 2 || ys.empty() || !isGemmType(wType.getElementType()) ||
        !isGemmType(elemOf(y)))
      continue;
    int64_t nDim = transB && transB.getValue() ? 0 : 1, n = ys.back();
    int64_t outBytes = elemOf(y).getIntOrFloatBitWidth() / 8;
    if (wType.getDimSize(nDim) != n || n < 64 || (n * outBytes) % 16 == 0)
      continue;
    int64_t padded = llvm::alignTo(n, n >= 1024 ? 64 : 8);
    // The stored tensor's shape and the weight's start on each rank: its
    // own slice when sharded, else the whole tensor from the origin.
    SmallVector<int64_t> stored(wType.getShape());
    if (auto perm = w.getPermutationAttr())
      for (auto [i, d] : llvm::enumerate(perm.asArrayRef()))
        stored[d] = wType.getDimSize(int64_t(i));
    OpBuilder b(w);
    if (!w.getGlobalShapeAttr()) {
      w.setGlobalShapeAttr(b.getDenseI64ArrayAttr(stored));
      SmallVector<Attribute> starts(size_t(world),
                                    b.getDenseI64ArrayAttr(SmallVector<int64_t>(2, 0)));
      w.setStartsAttr(b.getArrayAttr(starts));
    }
    w.setZeroPadded(true);
    SmallVector<int64_t> wShape(wType.getShape());
    wShape[size_t(nDim)] = padded;
    w.getResult().setType(MemRefType::get(wShape, wType.getElementType()));

    b.setInsertionPoint(mm);
    SmallVector<int64_t> pShape(ys);
    pShape.back() = padded;
    Value product = rt::AllocOp::create(b, mm.getLoc(), MemRefType::get(pShape, elemOf(y)),
                                        IntegerAttr());
    mm.getOutputsMutable().assign(product);
    if (y.hasOneUse() && isa<func::ReturnOp>(*y.getUsers().begin())) {
      OpOperand &use = *y.getUses().begin();
      unsigned result = use.getOperandNumber();
      use.set(product);
      y.getDefiningOp()->erase();
      SmallVector<Type> results(fn.getFunctionType().getResults());
      results[result] = product.getType();
      fn.setType(FunctionType::get(fn.getContext(), fn.getFunctionType().getInputs(), results));
      fn.setResultAttr(result, "rt.columns", b.getI64IntegerAttr(n));
      continue;
    }
    b.setInsertionPointAfter(mm);
    int64_t axis = int64_t(ys.size()) - 1;
    NamedAttribute params[] = {
        b.getNamedAttr("starts", b.getDenseI64ArrayAttr({0})),
        b.getNamedAttr("ends", b.getDenseI64ArrayAttr({n})),
        b.getNamedAttr("axes", b.getDenseI64ArrayAttr({axis})),
        b.getNamedAttr("steps", b.getDenseI64ArrayAttr({1}))};
    rt::KernelOp::create(b, mm.getLoc(), b.getStringAttr("slice"), ValueRange{product},
                         ValueRange{y}, b.getDictionaryAttr(params));
  }
}

/// Whether convolution `k` with window `kernel` reads each input position
/// once, in place: every window dimension 1, every stride 1, no padding
/// (the dilations then do not matter).
bool isPointwise(rt::KernelOp k, ArrayRef<int64_t> kernel) {
  auto all = [&](StringRef name, int64_t value) {
    auto a = dyn_cast_or_null<DenseI64ArrayAttr>(k.getParams().get(name));
    return !a || llvm::all_of(a.asArrayRef(), [&](int64_t v) { return v == value; });
  };
  return llvm::all_of(kernel, [](int64_t d) { return d == 1; }) && all("strides", 1) &&
         all("pads", 0);
}

/// Convolution as im2col and a GEMM: `im2col` (generated) writes, per
/// image and group, the [(C/G) * window, output positions] patch matrix,
/// and a matmul of the [G, M/G, (C/G) * window] weight view with it gives
/// [N, G, M/G, positions], which is the NCHW result's layout. The bias is
/// an elementwise add over the channel dimension.
void lowerConvolutions(func::FuncOp fn) {
  SmallVector<rt::KernelOp> convs;
  fn.walk([&](rt::KernelOp k) {
    if (k.getKernel() == "conv" && k.getOutputs().size() == 1 &&
        (k.getInputs().size() == 2 || k.getInputs().size() == 3))
      convs.push_back(k);
  });
  for (rt::KernelOp k : convs) {
    Value x = k.getInputs()[0], w = k.getInputs()[1], y = k.getOutputs()[0];
    Value bias = k.getInputs().size() > 2 ? k.getInputs()[2] : Value();
    ArrayRef<int64_t> xs = shapeOf(x), ws = shapeOf(w), ys = shapeOf(y);
    auto groupAttr = dyn_cast_or_null<IntegerAttr>(k.getParams().get("group"));
    int64_t group = groupAttr ? groupAttr.getInt() : 1;
    Type elem = elemOf(y);
    if (xs.size() < 3 || ws.size() != xs.size() || ys.size() != xs.size() || group < 1 ||
        xs[1] % group || ws[0] % group || elemOf(x) != elem || elemOf(w) != elem ||
        !isa<FloatType>(elem) || !y.getDefiningOp<rt::AllocOp>())
      continue; // left for the error that names it
    int64_t window = 1, positions = 1;
    for (int64_t d : ws.drop_front(2))
      window *= d;
    for (int64_t d : ys.drop_front(2))
      positions *= d;
    int64_t patch = (xs[1] / group) * window, n = xs[0], m = ws[0];
    OpBuilder b(k);
    Location loc = k.getLoc();
    auto colType = MemRefType::get({n, group, patch, positions}, elem);
    Value col;
    if (isPointwise(k, ws.drop_front(2))) {
      // A 1x1 window at stride 1 without padding: the patch matrix of an
      // image and group is its [C/G, positions] block of the input itself.
      col = rt::ViewOp::create(b, loc, colType, x);
    } else {
      col = rt::AllocOp::create(b, loc, colType, IntegerAttr());
      SmallVector<NamedAttribute> params(k.getParams().getValue());
      params.push_back(b.getNamedAttr("kernel_shape", b.getDenseI64ArrayAttr(ws.drop_front(2))));
      params.push_back(b.getNamedAttr("out_spatial", b.getDenseI64ArrayAttr(ys.drop_front(2))));
      if (!groupAttr)
        params.push_back(b.getNamedAttr("group", b.getI64IntegerAttr(1)));
      rt::KernelOp::create(b, loc, b.getStringAttr("im2col"), ValueRange{x}, ValueRange{col},
                           b.getDictionaryAttr(params));
    }
    Value wv = rt::ViewOp::create(b, loc, MemRefType::get({group, m / group, patch}, elem), w);
    auto product = rt::AllocOp::create(
        b, loc, MemRefType::get({n, group, m / group, positions}, elem), IntegerAttr());
    rt::KernelOp::create(b, loc, b.getStringAttr("matmul"), ValueRange{wv, col},
                         ValueRange{product}, b.getDictionaryAttr({}));
    Value result = rt::ViewOp::create(b, loc, cast<MemRefType>(y.getType()), product);
    if (bias) {
      SmallVector<int64_t> biasShape(ys.size() - 1, 1);
      biasShape[0] = m;
      Value bv = rt::ViewOp::create(b, loc, MemRefType::get(biasShape, elemOf(bias)), bias);
      rt::KernelOp::create(b, loc, b.getStringAttr("add"), ValueRange{result, bv}, ValueRange{y},
                           b.getDictionaryAttr({}));
      k.erase();
      continue;
    }
    Operation *alloc = y.getDefiningOp();
    y.replaceAllUsesWith(result);
    k.erase();
    if (alloc->use_empty())
      alloc->erase();
  }
}

void ConvertRTToGPU::runOnOperation() {
  ModuleOp module = getOperation();
  for (func::FuncOp fn : module.getOps<func::FuncOp>())
    if (!fn.isExternal()) {
      rt::rewriteEinsumsAsMatmuls(fn);
      readAttentionInputsInPlace(fn);
      lowerConvolutions(fn);
      lowerNonGemmMatmuls(fn);
      splitScatters(fn);
      if (failed(precomputeDropoutMasks(fn)))
        return signalPassFailure();
      if (gemmEpilogues)
        fuseGemmEpilogues(fn);
      if (gemmResiduals)
        fuseGemmResiduals(fn);
      fuseGemmOutputCasts(fn);
      transposeMisalignedGemmWeights(fn);
      if (gemmPadding)
        padMisalignedGemmResults(fn);
    }
  SmallVector<func::FuncOp> fns(module.getOps<func::FuncOp>());
  gpu::GPUModuleOp kernels;
  GroupEmitter emitter(vectorize);
  int id = 0;
  for (func::FuncOp fn : fns) {
    if (fn.isExternal())
      continue;
    SmallVector<std::unique_ptr<Group>> groups;
    if (failed(formGroups(fn, groups)))
      return signalPassFailure();
    if (groups.empty())
      continue;
    if (!kernels) {
      module->setAttr(gpu::GPUDialect::getContainerModuleAttrName(),
                      UnitAttr::get(module.getContext()));
      OpBuilder b = OpBuilder::atBlockEnd(module.getBody());
      kernels = gpu::GPUModuleOp::create(b, module.getLoc(), kModuleName);
    }
    if (siblingFusion)
      fuseSiblings(groups);
    for (auto &g : groups)
      if (!g->absorbed && failed(emitter.emitGroup(*g, kernels, id++)))
        return signalPassFailure();
  }
}

} // namespace

