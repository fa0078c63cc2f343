//===- Parallel.cpp - the CPU kernels' thread pool -------------------------===//
//
// One job at a time, published in a single 64-bit word:
//
//   generation (32 bits) | workers taking part (8) | next range (12) | ranges (12)
//
// A thread claims a range with a compare-exchange that advances `next`
// within the same generation. So a claim never lands on a job that has
// finished or been replaced, and the job's other fields, which a thread
// reads only after a successful claim, cannot change under it: the caller
// publishes the next job only after every range of this one has run.
//
// The caller claims ranges too, so a job never waits for a worker to wake
// up: a late worker finds nothing left. Ranges are therefore smaller than
// n / threads (up to kRangesPerThread per thread), which also evens out
// threads that the OS schedules unevenly.
//
// An idle worker polls for the next job, then sleeps on a condition
// variable once kSpin has passed without one. Kernels follow each other
// within microseconds, so a worker that slept between them would have to
// be woken (tens of microseconds) for every kernel. It polls a few hundred
// times with `pause`, then with sched_yield, so that another process (or,
// when the GEMMs ran on OpenBLAS's own threads, one of those) sharing its
// core gets the core: a busy-wait without the yield slowed gpt2 at 2
// threads by 1.7x on a 2-core machine. GEMMs now run on this pool too
// (Gemm.cpp: fixed tiles of C, one single-threaded OpenBLAS call each).
//
//===----------------------------------------------------------------------===//

#include "Parallel.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace shardflow::runtime::cpu::detail {
namespace {

constexpr int64_t kRangesPerThread = 4;
constexpr int64_t kMaxRanges = (1 << 12) - 1;
constexpr int kMaxWorkers = (1 << 8) - 1;
constexpr int kPauseSpins = 200;
constexpr std::chrono::microseconds kSpin(2000);

inline void cpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

/// The job word's fields.
struct JobWord {
  uint32_t generation;
  int workers;
  int64_t next, ranges;

  static JobWord unpack(uint64_t w) {
    return {uint32_t(w >> 32), int((w >> 24) & 0xff), int64_t((w >> 12) & 0xfff),
            int64_t(w & 0xfff)};
  }
  uint64_t pack() const {
    return uint64_t(generation) << 32 | uint64_t(workers) << 24 | uint64_t(next) << 12 |
           uint64_t(ranges);
  }
};

/// Set on every pool thread, and on a caller while it runs a job: a
/// parallelFor called from a body runs inline.
thread_local bool inParallelBody = false;

class ThreadPool {
public:
  static ThreadPool &get() {
    static ThreadPool pool;
    return pool;
  }

  ~ThreadPool() {
    {
      std::lock_guard<std::mutex> lock(sleepMutex);
      stopping.store(true);
    }
    wake.notify_all();
    for (std::thread &t : workers)
      t.join();
  }

  bool run(int threads, int64_t n, int64_t grain, int64_t align, void *closure,
           RangeBody body) {
    if (inParallelBody)
      return false;
    // Another thread's job (two executors in one process): run inline
    // rather than queue behind it.
    std::unique_lock<std::mutex> caller(callerMutex, std::try_to_lock);
    if (!caller.owns_lock())
      return false;
    int numWorkers = std::min(threads - 1, kMaxWorkers);
    int64_t ranges = std::min({n / grain, int64_t(numWorkers + 1) * kRangesPerThread,
                               kMaxRanges});
    if (ranges < 2)
      return false;
    startWorkers(numWorkers);

    jobN = n;
    jobRanges = ranges;
    jobAlign = std::max<int64_t>(align, 1);
    jobClosure = closure;
    jobBody = body;
    error = nullptr;
    done.store(0, std::memory_order_relaxed);
    JobWord w{++generation, numWorkers, 0, ranges};
    // seq_cst, paired with the sleepers count: either a worker about to
    // sleep sees the new job, or we see it and wake it.
    state.store(w.pack(), std::memory_order_seq_cst);
    if (sleepers.load(std::memory_order_seq_cst) > 0) {
      { std::lock_guard<std::mutex> lock(sleepMutex); }
      wake.notify_all();
    }

    inParallelBody = true;
    while (runOneRange(0, w.generation)) {
    }
    inParallelBody = false;
    // Ranges claimed by workers are running now: wait for them briefly.
    for (int spins = 0; done.load(std::memory_order_acquire) < ranges; ++spins) {
      if (spins < 4096)
        cpuRelax();
      else
        std::this_thread::yield();
    }
    if (error)
      std::rethrow_exception(error);
    return true;
  }

private:
  ThreadPool() = default;

  void startWorkers(int count) {
    while (int(workers.size()) < count) {
      int index = int(workers.size()) + 1; // 0 is the caller
      workers.emplace_back([this, index] { workerLoop(index); });
    }
  }

  /// Claims and runs one range of job `generation`; false when there is
  /// none for thread `index`.
  bool runOneRange(int index, uint32_t generation) {
    uint64_t s = state.load(std::memory_order_acquire);
    JobWord w;
    for (;;) {
      w = JobWord::unpack(s);
      if (w.generation != generation || index > w.workers || w.next >= w.ranges)
        return false;
      JobWord claimed = w;
      ++claimed.next;
      if (state.compare_exchange_weak(s, claimed.pack(), std::memory_order_acq_rel,
                                      std::memory_order_acquire))
        break;
    }
    int64_t begin = bound(w.next), end = bound(w.next + 1);
    if (begin < end) {
      try {
        jobBody(jobClosure, begin, end);
      } catch (...) {
        std::lock_guard<std::mutex> lock(errorMutex);
        if (!error)
          error = std::current_exception();
      }
    }
    done.fetch_add(1, std::memory_order_acq_rel);
    return true;
  }

  /// The start of range r: an even split of [0, n), rounded down to the
  /// alignment inside the range.
  int64_t bound(int64_t r) const {
    if (r >= jobRanges)
      return jobN;
    return r * jobN / jobRanges / jobAlign * jobAlign;
  }

  void workerLoop(int index) {
    inParallelBody = true;
    uint32_t seen = 0;
    for (;;) {
      JobWord w = JobWord::unpack(state.load(std::memory_order_acquire));
      if (w.generation != seen) {
        seen = w.generation;
        while (runOneRange(index, seen)) {
        }
        continue;
      }
      if (!waitForJob(seen))
        return;
    }
  }

  /// Waits until the generation moves past `seen`; false when the pool is
  /// shutting down.
  bool waitForJob(uint32_t seen) {
    auto changed = [&] {
      return JobWord::unpack(state.load(std::memory_order_seq_cst)).generation != seen;
    };
    auto start = std::chrono::steady_clock::now();
    for (int spins = 1;; ++spins) {
      if (changed())
        return true;
      if (stopping.load(std::memory_order_relaxed))
        return false;
      if (spins < kPauseSpins) {
        cpuRelax();
        continue;
      }
      std::this_thread::yield();
      if (spins % 16 == 0 && std::chrono::steady_clock::now() - start > kSpin)
        break;
    }
    std::unique_lock<std::mutex> lock(sleepMutex);
    sleepers.fetch_add(1, std::memory_order_seq_cst);
    wake.wait(lock, [&] { return changed() || stopping.load(); });
    sleepers.fetch_sub(1, std::memory_order_relaxed);
    return !stopping.load();
  }

  std::mutex callerMutex;
  std::vector<std::thread> workers;

  std::atomic<uint64_t> state{0};
  uint32_t generation = 0; // the caller's copy, under callerMutex
  std::atomic<int64_t> done{0};

  // The current job; written before `state` publishes it.
  int64_t jobN = 0, jobRanges = 1, jobAlign = 1;
  void *jobClosure = nullptr;
  RangeBody jobBody = nullptr;

  std::mutex errorMutex;
  std::exception_ptr error;

  std::mutex sleepMutex;
  std::condition_variable wake;
  std::atomic<int> sleepers{0};
  std::atomic<bool> stopping{false};
};

} // namespace

bool runOnPool(int threads, int64_t n, int64_t grain, int64_t align, void *closure,
               RangeBody body) {
  return ThreadPool::get().run(threads, n, grain, align, closure, body);
}

} // namespace shardflow::runtime::cpu::detail
