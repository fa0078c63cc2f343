//===- Comparison.cpp - CPU kernels for comparisons and where -------------===//
//
// equal, less and greater (an i1 result), and, and where, with ONNX
// multidirectional broadcasting.
//
//===----------------------------------------------------------------------===//

#include "ElementwiseLoops.h"

#include <algorithm>
#include <cstring>

using namespace shardflow::runtime;
using namespace shardflow::runtime::cpu::ew;

namespace {

template <typename C> struct EqualOp {
  bool operator()(C a, C b) const { return a == b; }
};
template <typename C> struct LessOp {
  bool operator()(C a, C b) const { return a < b; }
};
template <typename C> struct GreaterOp {
  bool operator()(C a, C b) const { return a > b; }
};

template <template <typename> class Op> void compare(const KernelContext &ctx) {
  expectArity(ctx, 2, 1);
  DType t = ctx.inputs[0].dtype;
  if (ctx.inputs[1].dtype != t)
    throw kernelError(ctx.kernel, "operand element types differ");
  if (ctx.outputs[0].dtype != DType::I1)
    throw kernelError(ctx.kernel, "result must be i1");
  dispatchAny(t, ctx.kernel, [&](auto tag) {
    using T = typename decltype(tag)::type;
    binaryLoop<T, T, Bool>(ctx, Op<Compute<T>>{});
  });
}

void equalKernel(const KernelContext &ctx) { compare<EqualOp>(ctx); }
void lessKernel(const KernelContext &ctx) { compare<LessOp>(ctx); }
void greaterKernel(const KernelContext &ctx) { compare<GreaterOp>(ctx); }

void andKernel(const KernelContext &ctx) {
  expectArity(ctx, 2, 1);
  for (const Tensor *t : {&ctx.inputs[0], &ctx.inputs[1], &ctx.outputs[0]})
    if (t->dtype != DType::I1)
      throw kernelError(ctx.kernel, "operands and result must be i1");
  binaryLoop<Bool, Bool, Bool>(ctx, [](bool a, bool b) { return a && b; });
}

//===----------------------------------------------------------------------===//
// where
//===----------------------------------------------------------------------===//

template <typename U> void whereLoop(const KernelContext &ctx, const std::vector<int64_t> &shape) {
  const Tensor &c = ctx.inputs[0], &x = ctx.inputs[1], &y = ctx.inputs[2];
  const uint8_t *pc = c.as<uint8_t>();
  const U *px = x.as<U>(), *py = y.as<U>();
  U *po = ctx.outputs[0].as<U>();
  BroadcastLoop<3> loop(shape, {c.shape, x.shape, y.shape});
  const auto s = loop.innerStride;
  auto run = [&](int64_t oo, const std::array<int64_t, 3> &in, int64_t n) {
    const uint8_t *cc = pc + in[0];
    const U *xx = px + in[1], *yy = py + in[2];
    U *out = po + oo;
    if (s[0] == 1 && s[1] == 1 && s[2] == 1) {
      // Branch-free select (random conditions would mispredict); vectorizes.
      for (int64_t i = 0; i < n; ++i) {
        U m = U(U(0) - U(cc[i] != 0));
        out[i] = U((xx[i] & m) | (yy[i] & U(~m)));
      }
    } else if (s[0] == 0) {
      const U *src = cc[0] ? xx : yy;
      int64_t st = cc[0] ? s[1] : s[2];
      if (st == 1)
        std::memcpy(out, src, size_t(n) * sizeof(U));
      else
        std::fill(out, out + n, src[0]);
    } else {
      for (int64_t i = 0; i < n; ++i)
        out[i] = cc[i] ? xx[i * s[1]] : yy[i * s[2]];
    }
  };
  elementwiseFor(ctx, loop.size(),
                 [&](int64_t begin, int64_t end) { loop.forEachIn(begin, end, run); });
}

void whereKernel(const KernelContext &ctx) {
  expectArity(ctx, 3, 1);
  const Tensor &c = ctx.inputs[0], &x = ctx.inputs[1], &y = ctx.inputs[2];
  const Tensor &out = ctx.outputs[0];
  if (c.dtype != DType::I1)
    throw kernelError(ctx.kernel, "condition must be i1");
  if (x.dtype != y.dtype || out.dtype != x.dtype)
    throw kernelError(ctx.kernel, "x, y and result element types differ");
  auto shape = broadcastShapes(ctx.kernel, broadcastShapes(ctx.kernel, c.shape, x.shape), y.shape);
  if (shape != out.shape)
    throw kernelError(ctx.kernel, "result shape " + shapeList(out.shape) +
                                      " is not the broadcast shape " + shapeList(shape));
  // Selection moves bytes: dispatch on the element size only.
  switch (dtypeSize(x.dtype)) {
  case 1: whereLoop<uint8_t>(ctx, shape); break;
  case 2: whereLoop<uint16_t>(ctx, shape); break;
  case 4: whereLoop<uint32_t>(ctx, shape); break;
  case 8: whereLoop<uint64_t>(ctx, shape); break;
  default: throw unsupportedType(ctx.kernel, x.dtype);
  }
}

} // namespace

SHARDFLOW_REGISTER_KERNEL("equal", equalKernel);
SHARDFLOW_REGISTER_KERNEL("less", lessKernel);
SHARDFLOW_REGISTER_KERNEL("greater", greaterKernel);
SHARDFLOW_REGISTER_KERNEL("and", andKernel);
SHARDFLOW_REGISTER_KERNEL("where", whereKernel);
