//===- ParallelTest.cpp - the CPU kernels' parallel-for --------------------===//
//
// The split must cover every index exactly once, stay inline where the
// kernels rely on it (one thread, small n, nested calls), follow `align`,
// and carry a body's exception back to the caller; the pool must survive
// many back-to-back jobs with changing thread counts.
//
//===----------------------------------------------------------------------===//

#include "Parallel.h"

#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <utility>
#include <vector>

using namespace shardflow::runtime::cpu;

namespace {

/// The ranges parallelFor produced, sorted, and the threads that ran them.
struct Recorded {
  std::set<std::pair<int64_t, int64_t>> ranges;
  std::set<std::thread::id> threads;
};

Recorded record(int threads, int64_t n, int64_t grain, int64_t align = 1) {
  Recorded r;
  std::mutex m;
  parallelFor(
      threads, n, grain,
      [&](int64_t begin, int64_t end) {
        std::lock_guard<std::mutex> lock(m);
        r.ranges.insert({begin, end});
        r.threads.insert(std::this_thread::get_id());
      },
      align);
  return r;
}

/// The ranges tile [0, n) without gaps or overlap.
void expectTiles(const Recorded &r, int64_t n) {
  int64_t at = 0;
  for (auto [begin, end] : r.ranges) {
    EXPECT_EQ(begin, at);
    EXPECT_LT(begin, end);
    at = end;
  }
  EXPECT_EQ(at, n);
}

TEST(ParallelFor, OneThreadRunsInlineAsOneRange) {
  Recorded r = record(1, 1000, 1);
  ASSERT_EQ(r.ranges.size(), 1u);
  EXPECT_EQ(*r.ranges.begin(), std::make_pair(int64_t(0), int64_t(1000)));
  EXPECT_EQ(*r.threads.begin(), std::this_thread::get_id());
}

TEST(ParallelFor, BelowTwoGrainsRunsInline) {
  Recorded r = record(4, 199, 100);
  ASSERT_EQ(r.ranges.size(), 1u);
  EXPECT_EQ(*r.threads.begin(), std::this_thread::get_id());
}

TEST(ParallelFor, EmptyRangeCallsNothing) {
  Recorded r = record(4, 0, 1);
  EXPECT_TRUE(r.ranges.empty());
}

TEST(ParallelFor, CoversEveryIndexOnce) {
  for (int threads : {2, 3, 4, 7})
    for (int64_t n : {2, 3, 17, 1000, 1 << 20}) {
      std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
      parallelFor(threads, n, 1, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i)
          hits[size_t(i)].fetch_add(1);
      });
      for (int64_t i = 0; i < n; ++i)
        ASSERT_EQ(hits[size_t(i)].load(), 1) << "threads " << threads << " n " << n << " i " << i;
    }
}

TEST(ParallelFor, SplitDependsOnlyOnItsArguments) {
  // Same arguments, same ranges, whichever threads happen to run them.
  for (int i = 0; i < 20; ++i) {
    Recorded a = record(3, 100000, 64, 16), b = record(3, 100000, 64, 16);
    EXPECT_EQ(a.ranges, b.ranges);
  }
}

TEST(ParallelFor, RangesRespectGrainAndAlign) {
  Recorded r = record(2, 100000, 1000, 64);
  EXPECT_GT(r.ranges.size(), 1u);
  expectTiles(r, 100000);
  for (auto [begin, end] : r.ranges) {
    EXPECT_EQ(begin % 64, 0);
    EXPECT_GE(end - begin, 1000 - 64);
  }
}

TEST(ParallelFor, UsesMoreThanOneThread) {
  // Each range waits until a second thread has joined (bounded, so that a
  // machine too busy to schedule a worker does not hang the test).
  std::atomic<int> started{0};
  std::set<std::thread::id> ids;
  std::mutex m;
  parallelFor(2, 2, 1, [&](int64_t, int64_t) {
    {
      std::lock_guard<std::mutex> lock(m);
      ids.insert(std::this_thread::get_id());
    }
    started.fetch_add(1);
    for (int i = 0; i < 2000 && started.load() < 2; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
  });
  EXPECT_EQ(ids.size(), 2u);
}

TEST(ParallelFor, NestedCallsRunInline) {
  std::atomic<int> innerRanges{0};
  parallelFor(4, 8, 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      auto self = std::this_thread::get_id();
      parallelFor(4, 1000, 1, [&](int64_t, int64_t) {
        EXPECT_EQ(std::this_thread::get_id(), self);
        innerRanges.fetch_add(1);
      });
    }
  });
  EXPECT_EQ(innerRanges.load(), 8);
}

TEST(ParallelFor, ExceptionsReachTheCaller) {
  for (int64_t bad : {int64_t(0), int64_t(999)}) {
    EXPECT_THROW(parallelFor(3, 1000, 1,
                             [&](int64_t begin, int64_t end) {
                               if (bad >= begin && bad < end)
                                 throw std::runtime_error("bad index");
                             }),
                 std::runtime_error);
  }
  // The pool still works afterwards.
  Recorded r = record(3, 1000, 1);
  expectTiles(r, 1000);
}

TEST(ParallelFor, ManyJobsWithChangingThreadCounts) {
  std::atomic<int64_t> sum{0};
  int64_t expect = 0;
  for (int job = 0; job < 5000; ++job) {
    int threads = 1 + job % 4;
    int64_t n = 1 + job % 97;
    parallelFor(threads, n, 1, [&](int64_t begin, int64_t end) {
      int64_t s = 0;
      for (int64_t i = begin; i < end; ++i)
        s += i;
      sum.fetch_add(s);
    });
    expect += n * (n - 1) / 2;
  }
  EXPECT_EQ(sum.load(), expect);
}

} // namespace
