//===- ElementwiseLoops.h - loops of the elementwise kernels --*- C++ -*-===//
//
// Private to lib/Runtime/Device/CPU/Kernels, in namespace
// shardflow::runtime::cpu::ew: the broadcasting binary loop, the unary loop
// and their thread split, shared by the elementwise kernels
// (Elementwise.cpp, DivisionPower.cpp, Comparison.cpp, UnaryMath.cpp and
// Cast.cpp: one file per family, so that a build compiles their many type
// instantiations in parallel; as one file they took 81 s, a GPU machine's
// whole runtime build waiting on it). Tensors of kElementwiseGrain elements or more are split
// across the kernel's threads in ranges of whole 64-element blocks; every
// element is computed the same way on any thread, so results do not depend
// on the thread count.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDFLOW_RUNTIME_KERNELS_CPU_ELEMENTWISELOOPS_H
#define SHARDFLOW_RUNTIME_KERNELS_CPU_ELEMENTWISELOOPS_H

#include "ElementwiseSupport.h"
#include "Parallel.h"

#include <array>
#include <type_traits>

namespace shardflow::runtime::cpu::ew {

/// Range bounds are multiples of this many elements: whole cache lines for
/// every element type, so threads never write to the same line.
constexpr int64_t kBlock = 64;

/// fn(begin, end) over [0, n), split across threads for large n.
template <typename Fn> void elementwiseFor(const KernelContext &ctx, int64_t n, Fn &&fn) {
  parallelFor(ctx, n, kElementwiseGrain, fn, kBlock);
}

//===----------------------------------------------------------------------===//
// Binary ops
//===----------------------------------------------------------------------===//

/// One contiguous run of `n` results; operand strides are 1 or 0. Four
/// specialized loops that vectorize; `flatten` inlines `op` into them.
template <typename A, typename B, typename O, typename Op>
SHARDFLOW_CPU_FLATTEN void binaryRun(const A *pa, const B *pb, O *po, int64_t n, int64_t sa,
                                     int64_t sb, Op op) {
  if (sa == 1 && sb == 1) {
    for (int64_t i = 0; i < n; ++i)
      po[i] = store<O>(op(load(pa[i]), load(pb[i])));
  } else if (sa == 1) {
    auto vb = load(pb[0]);
    for (int64_t i = 0; i < n; ++i)
      po[i] = store<O>(op(load(pa[i]), vb));
  } else if (sb == 1) {
    auto va = load(pa[0]);
    for (int64_t i = 0; i < n; ++i)
      po[i] = store<O>(op(va, load(pb[i])));
  } else {
    O v = store<O>(op(load(pa[0]), load(pb[0])));
    for (int64_t i = 0; i < n; ++i)
      po[i] = v;
  }
}

/// Runs `op(a, b)` over broadcast operands. A and B are storage types; `op`
/// takes and returns compute types; the result is stored as O.
template <typename A, typename B, typename O, typename Op>
void binaryLoop(const KernelContext &ctx, const Tensor &lhs, const Tensor &rhs, Op op) {
  const Tensor &out = ctx.outputs[0];
  auto shape = broadcastShapes(ctx.kernel, lhs.shape, rhs.shape);
  if (shape != out.shape)
    throw kernelError(ctx.kernel, "result shape " + shapeList(out.shape) +
                                      " is not the broadcast shape " + shapeList(shape));
  const A *a = lhs.as<A>();
  const B *b = rhs.as<B>();
  O *o = out.as<O>();
  BroadcastLoop<2> loop(shape, {lhs.shape, rhs.shape});
  const int64_t sa = loop.innerStride[0], sb = loop.innerStride[1];
  elementwiseFor(ctx, loop.size(), [&](int64_t begin, int64_t end) {
    loop.forEachIn(begin, end, [&](int64_t oo, const std::array<int64_t, 2> &in, int64_t n) {
      binaryRun<A, B, O>(a + in[0], b + in[1], o + oo, n, sa, sb, op);
    });
  });
}
template <typename A, typename B, typename O, typename Op>
void binaryLoop(const KernelContext &ctx, Op op) {
  binaryLoop<A, B, O>(ctx, ctx.inputs[0], ctx.inputs[1], op);
}

/// Wrapping integer arithmetic (signed overflow is not undefined here).
template <typename C> struct Wrap {
  // Unsigned and at least as wide as int, so that narrow types do not
  // promote to (overflowing) signed int.
  using U = std::conditional_t<(sizeof(C) < sizeof(unsigned)), unsigned, std::make_unsigned_t<C>>;
  static C add(C a, C b) { return C(U(a) + U(b)); }
  static C sub(C a, C b) { return C(U(a) - U(b)); }
  static C mul(C a, C b) { return C(U(a) * U(b)); }
  static C neg(C a) { return C(U(0) - U(a)); }
};

/// A binary arithmetic kernel's element type: two operands and a result,
/// all of one type.
inline DType binaryOperandType(const KernelContext &ctx) {
  expectArity(ctx, 2, 1);
  DType t = ctx.inputs[0].dtype;
  if (ctx.inputs[1].dtype != t || ctx.outputs[0].dtype != t)
    throw kernelError(ctx.kernel, "operand and result element types differ");
  return t;
}

inline void expectSameShape(const KernelContext &ctx) {
  if (ctx.inputs[0].shape != ctx.outputs[0].shape)
    throw kernelError(ctx.kernel, "result shape " + shapeList(ctx.outputs[0].shape) +
                                      " differs from the input shape " +
                                      shapeList(ctx.inputs[0].shape));
  if (ctx.inputs[0].dtype != ctx.outputs[0].dtype)
    throw kernelError(ctx.kernel, "result element type differs from the input's");
}

template <typename T, typename Op>
SHARDFLOW_CPU_FLATTEN void unaryRun(const T *in, T *out, int64_t n, Op op) {
  for (int64_t i = 0; i < n; ++i)
    out[i] = store<T>(op(load(in[i])));
}
template <typename T, typename Op> void unaryLoop(const KernelContext &ctx, Op op) {
  const T *in = ctx.inputs[0].as<T>();
  T *out = ctx.outputs[0].as<T>();
  elementwiseFor(ctx, ctx.inputs[0].numel(), [&](int64_t begin, int64_t end) {
    unaryRun<T>(in + begin, out + begin, end - begin, op);
  });
}

} // namespace shardflow::runtime::cpu::ew

#endif // SHARDFLOW_RUNTIME_KERNELS_CPU_ELEMENTWISELOOPS_H
