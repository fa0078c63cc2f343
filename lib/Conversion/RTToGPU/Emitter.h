//===- Emitter.h - shared pieces of the rt-to-gpu code generator -*- C++ -*-===//
//
// Buffer facts and the scalar building blocks every generated kernel uses:
// flat loads and stores in the compute type, coordinates of a flat index,
// and the status word through which a kernel reports an index out of
// range (a device kernel cannot stop the program; the runtime reads the
// word after the run and names the kernel and its ONNX node).
//
//===----------------------------------------------------------------------===//

#ifndef SHARDFLOW_LIB_CONVERSION_RTTOGPU_EMITTER_H
#define SHARDFLOW_LIB_CONVERSION_RTTOGPU_EMITTER_H

#include "shardflow/Dialect/RT/IR/RTOps.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/DenseMap.h"

namespace shardflow::rtgpu {

using rt::collectReaders;
using rt::rootOf;

inline int64_t numel(mlir::Value v) {
  return mlir::cast<mlir::MemRefType>(v.getType()).getNumElements();
}
inline llvm::ArrayRef<int64_t> shapeOf(mlir::Value v) {
  return mlir::cast<mlir::MemRefType>(v.getType()).getShape();
}
inline mlir::Type elemOf(mlir::Value v) {
  return mlir::cast<mlir::MemRefType>(v.getType()).getElementType();
}
/// The type a kernel argument holds for buffer elements of type `t`:
/// generated code is signless, so an unsigned integer becomes the signless
/// integer of its width (the operations pick unsigned forms themselves).
inline mlir::Type signlessOf(mlir::Type t) {
  if (t.isUnsignedInteger())
    return mlir::IntegerType::get(t.getContext(), t.getIntOrFloatBitWidth());
  return t;
}
/// The type generated code computes in for data of type `t`: f32 for
/// f16/bf16/f32, the signless type otherwise.
inline mlir::Type computeType(mlir::Type t) {
  if (t.isF16() || t.isBF16() || t.isF32())
    return mlir::Float32Type::get(t.getContext());
  return signlessOf(t);
}
/// Element types generated code handles: floats, signless and unsigned
/// integers (standalone kernels narrow this further).
inline bool isSupportedElement(mlir::Type t) {
  return t.isF16() || t.isBF16() || t.isF32() || t.isF64() ||
         (mlir::isa<mlir::IntegerType>(t) && !t.isSignedInteger());
}

/// The status word of a kernel that checks its data: memref<2xi64>, [0]
/// what went wrong (a StatusCode in the low 8 bits; above them, which of
/// the launch's checking members reported, counted in program order from
/// 0), [1] the offending value.
inline mlir::MemRefType statusType(mlir::MLIRContext *ctx) {
  return mlir::MemRefType::get({2}, mlir::IntegerType::get(ctx, 64));
}
/// What a kernel writes to status word [0]; the runtime reads the same
/// numbers (lib/Runtime/Device/CUDA/CudaDevice.cpp).
enum StatusCode : int64_t {
  kIndexOutOfRange = 1, // [1]: the index read from the data
  kDivisionByZero = 2,  // [1]: the flat position in the result
  kModuloByZero = 3,    // [1]: the flat position in the result
};

class EmitterBase {
public:
  EmitterBase(mlir::OpBuilder &b, mlir::Location loc) : b(b), loc(loc) {}

  mlir::Value index(int64_t v) { return mlir::arith::ConstantIndexOp::create(b, loc, v); }
  mlir::Value i64(int64_t v) {
    return mlir::arith::ConstantOp::create(b, loc, b.getI64Type(), b.getI64IntegerAttr(v));
  }
  mlir::Value intConst(mlir::Type t, int64_t v) {
    return mlir::arith::ConstantOp::create(b, loc, t, b.getIntegerAttr(t, v));
  }
  mlir::Value floatConst(mlir::Type t, double v) {
    return mlir::arith::ConstantOp::create(b, loc, t, b.getFloatAttr(t, v));
  }

  /// Loads element `idx` of `buf` (flat) in its compute type.
  mlir::Value load(mlir::Value buf, mlir::Value idx) {
    return toCompute(mlir::memref::LoadOp::create(b, loc, buf, mlir::ValueRange{idx}));
  }
  mlir::Value toCompute(mlir::Value v) {
    mlir::Type t = v.getType(), c = computeType(t);
    if (t == c)
      return v;
    return mlir::arith::ExtFOp::create(b, loc, c, v);
  }
  /// Stores compute value `v` at `idx` of `buf`, rounding once.
  void store(mlir::Value v, mlir::Value buf, mlir::Value idx) {
    mlir::Type storage = mlir::cast<mlir::MemRefType>(buf.getType()).getElementType();
    if (v.getType() != storage)
      v = mlir::arith::TruncFOp::create(b, loc, storage, v);
    mlir::memref::StoreOp::create(b, loc, v, buf, mlir::ValueRange{idx});
  }

  /// The coordinates of flat index `idx` in `shape` (row-major).
  llvm::SmallVector<mlir::Value> delinearize(mlir::Value idx, llvm::ArrayRef<int64_t> shape) {
    llvm::SmallVector<mlir::Value> coords(shape.size());
    mlir::Value rest = idx;
    for (size_t d = shape.size(); d-- > 0;) {
      coords[d] = d == 0 ? rest
                         : mlir::arith::RemUIOp::create(b, loc, rest, index(shape[d])).getResult();
      if (d > 0)
        rest = mlir::arith::DivUIOp::create(b, loc, rest, index(shape[d]));
    }
    return coords;
  }

  /// An index read from data (i32 or i64), as i64.
  mlir::Value indexValue(mlir::Value v) {
    if (v.getType().isInteger(64))
      return v;
    return mlir::arith::ExtSIOp::create(b, loc, b.getI64Type(), v);
  }

  /// `i` (i64) counted from the end when negative, checked against [0,
  /// size): reports it through the status word when outside, and returns
  /// an index that is always safe to read (0 when outside).
  mlir::Value checkedIndex(mlir::Value i, int64_t size) {
    using namespace mlir;
    Value neg = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::slt, i, i64(0));
    Value j = arith::SelectOp::create(b, loc, neg, arith::AddIOp::create(b, loc, i, i64(size)), i);
    Value ok = arith::AndIOp::create(
        b, loc, arith::CmpIOp::create(b, loc, arith::CmpIPredicate::sge, j, i64(0)),
        arith::CmpIOp::create(b, loc, arith::CmpIPredicate::slt, j, i64(size)));
    reportUnless(ok, i);
    Value safe = arith::SelectOp::create(b, loc, ok, j, i64(0));
    return arith::IndexCastOp::create(b, loc, b.getIndexType(), safe);
  }

  /// Sets the status word (when the kernel has one) where `ok` is false:
  /// `code` and `value` (i64).
  void reportUnless(mlir::Value ok, mlir::Value value,
                    StatusCode code = kIndexOutOfRange) {
    using namespace mlir;
    if (!status)
      return;
    Value bad = arith::XOrIOp::create(b, loc, ok,
                                      arith::ConstantOp::create(b, loc, b.getBoolAttr(true)));
    auto ifOp = scf::IfOp::create(b, loc, bad, /*withElseRegion=*/false);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(&ifOp.getThenRegion().front());
    memref::StoreOp::create(b, loc, i64(code + (checker << 8)), status, ValueRange{index(0)});
    memref::StoreOp::create(b, loc, value, status, ValueRange{index(1)});
  }

  mlir::OpBuilder &b;
  mlir::Location loc;
  mlir::Value status; // the kernel's status word, or null
  int64_t checker = 0; // which checking member of the launch is being emitted
};

/// Reductions that are generated as row reductions where their axes are one
/// contiguous block, else as launches of their own (the kernel table's
/// CudaImpl::Reduction: reduce_sum, reduce_mean, reduce_max,
/// global_average_pool).
bool isReduction(llvm::StringRef name);

/// Kernels generated one per launch, each with its own thread mapping
/// (reductions over any axes, cumsum, gather_elements, scatter_nd_updates,
/// topk, einsum: CudaImpl::Reduction and Standalone), as opposed to fused
/// elementwise loops and row reductions.
bool isStandalone(rt::KernelOp k);

/// Whether `k`'s generated code checks its data (indices it reads, integer
/// divisors) and so reports through a status word.
bool checksData(rt::KernelOp k);

struct LaunchShape {
  int64_t grid = 0, block = 0;
};
/// Grid and block of a standalone kernel; an error naming `k` when it has
/// no generated form (element type, parameters).
mlir::FailureOr<LaunchShape> standaloneShape(rt::KernelOp k);

/// The body of standalone kernel `k`, at the start of its gpu.func;
/// `args` maps its buffers to the function's arguments.
mlir::LogicalResult emitStandalone(EmitterBase &e, rt::KernelOp k,
                                   llvm::DenseMap<mlir::Value, mlir::Value> &args);

} // namespace shardflow::rtgpu

#endif // SHARDFLOW_LIB_CONVERSION_RTTOGPU_EMITTER_H
