//===- Parallel.h - a parallel-for for the CPU kernels --------*- C++ -*-===//
//
// `parallelFor(ctx, n, grain, fn)` calls fn(begin, end) on disjoint
// contiguous ranges that cover [0, n), on up to ctx.threads threads: the
// calling thread and the workers of one process-wide pool, started on first
// use and kept for the life of the process (shard-run makes thousands of
// kernel calls; a thread per call would cost more than most kernels).
//
// The split depends only on n, grain, align and the thread count, and each
// range is computed by exactly one thread. A body that computes every index
// from its inputs alone (an element, a row, a (batch, head) pair) therefore
// gives the same bits for any thread count; a body must never combine
// partial results across ranges.
//
// With one thread, or fewer than 2 * grain indices, fn(0, n) runs inline on
// the caller: no pool, no atomics. A parallelFor inside another one's body
// also runs inline. An exception thrown by fn on any thread is rethrown on
// the caller once every range has finished.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDFLOW_RUNTIME_KERNELS_CPU_PARALLEL_H
#define SHARDFLOW_RUNTIME_KERNELS_CPU_PARALLEL_H

#include "shardflow/Runtime/Format/Kernel.h"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <type_traits>
#include <utility>

namespace shardflow::runtime::cpu {

namespace detail {
/// A range body without its type: body(closure, begin, end).
using RangeBody = void (*)(void *closure, int64_t begin, int64_t end);

/// Splits [0, n) and runs the ranges on the pool; false when the pool
/// cannot take the job (called from inside a parallel body, or another
/// thread holds the pool), and the caller should run it inline.
bool runOnPool(int threads, int64_t n, int64_t grain, int64_t align, void *closure,
               RangeBody body);
} // namespace detail

/// Elementwise kernels run inline below this many elements: a tensor of a
/// few thousand floats is done before a sleeping worker wakes up.
constexpr int64_t kElementwiseGrain = 16384;

/// Calls fn(begin, end) over [0, n) in ranges of at least `grain` indices
/// (at least 1) whose interior bounds are multiples of `align`, on up to
/// `threads` threads.
template <typename Fn>
void parallelFor(int threads, int64_t n, int64_t grain, Fn &&fn, int64_t align = 1) {
  if (n <= 0)
    return;
  if (grain < 1)
    grain = 1;
  if (threads > 1 && n >= 2 * grain) {
    using F = std::remove_reference_t<Fn>;
    auto body = [](void *closure, int64_t begin, int64_t end) {
      (*static_cast<F *>(closure))(begin, end);
    };
    void *closure = const_cast<void *>(static_cast<const void *>(std::addressof(fn)));
    if (detail::runOnPool(threads, n, grain, align, closure, body))
      return;
  }
  fn(int64_t(0), n);
}

/// The same with the thread count of `shard-run --threads`.
template <typename Fn>
void parallelFor(const KernelContext &ctx, int64_t n, int64_t grain, Fn &&fn,
                 int64_t align = 1) {
  parallelFor(ctx.threads, n, grain, std::forward<Fn>(fn), align);
}

/// parallelFor over `rows` rows (or blocks, planes, ...) of `rowSize`
/// elements each: a row is the unit of work, and ranges hold at least
/// kElementwiseGrain elements.
template <typename Fn>
void parallelForRows(const KernelContext &ctx, int64_t rows, int64_t rowSize, Fn &&fn) {
  int64_t grain = std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(rowSize, 1));
  parallelFor(ctx.threads, rows, grain, std::forward<Fn>(fn));
}

} // namespace shardflow::runtime::cpu

#endif // SHARDFLOW_RUNTIME_KERNELS_CPU_PARALLEL_H
