//===- HostEmulation.cpp - CUDA blocks as fibers on the CPU, for tests -----===//
//
// See HostEmulation.h. A block's threads are ucontext fibers; a fiber runs
// until it waits at a barrier (a block barrier, or a warp's, which every
// warp-collective operation uses to exchange registers), then the next one
// runs. A barrier opens when every thread that has not exited arrived. A
// whole round of the block in which no barrier opened and no thread
// exited means that the threads wait at different barriers: an error.
//
//===----------------------------------------------------------------------===//

#include "HostEmulation.h"

#include <array>
#include <cstring>
#include <deque>
#include <memory>
#include <ucontext.h>
#include <vector>

namespace shardflow::emulation {

Dim3 threadIdx, blockIdx, blockDim, gridDim;

namespace {

constexpr size_t kStackBytes = 256 * 1024;

struct PendingCopy {
  void *dst;
  const void *src;
  bool valid;
};

struct Barrier {
  unsigned arrived = 0;
  uint64_t generation = 0;
};

struct Fiber {
  ucontext_t context{};
  std::unique_ptr<char[]> stack;
  bool done = false;
  // The barrier this thread waits at and its generation then: the
  // scheduler leaves the thread alone until that generation has passed.
  const Barrier *waitingAt = nullptr;
  uint64_t waitingFor = 0;
  std::vector<PendingCopy> open;                 // cp.async since the last commit
  std::deque<std::vector<PendingCopy>> committed; // oldest first
};

struct Block {
  std::vector<Fiber> fibers;
  ucontext_t scheduler{};
  unsigned current = 0;
  const Kernel *body = nullptr;
  Barrier block;
  std::vector<Barrier> warps;
  std::vector<unsigned> exitedInWarp;
  unsigned exited = 0;
  uint64_t progress = 0; // barriers opened and threads exited
  // Per thread: what it shows its warp (registers, an address).
  std::vector<std::array<uint32_t, 8>> words;
  std::vector<const void *> addresses;
  std::unique_ptr<unsigned char[]> sharedStorage;
  unsigned char *shared = nullptr;
  std::string error; // the first misuse a thread made (reported after the block)
};

Block *active = nullptr;

unsigned self() { return active->current; }

/// Records a misuse; launch() throws it after the block (a fiber cannot).
void misuse(const std::string &what) {
  if (active->error.empty())
    active->error = "thread " + std::to_string(self()) + " of block " +
                    std::to_string(blockIdx.x) + ": " + what;
}

void checkAligned(const void *p, size_t alignment, const char *what) {
  if (reinterpret_cast<uintptr_t>(p) % alignment)
    misuse(std::string(what) + " is not " + std::to_string(alignment) + "-byte aligned");
}
unsigned laneOf(unsigned t) { return t % 32; }
unsigned warpOf(unsigned t) { return t / 32; }

void yieldToScheduler() {
  Fiber &f = active->fibers[self()];
  swapcontext(&f.context, &active->scheduler);
  threadIdx.x = active->current; // resumed: the scheduler set current to us
}

/// Waits until `participants` threads (less those exited) have arrived.
void wait(Barrier &b, unsigned participants, unsigned exited) {
  uint64_t generation = b.generation;
  if (++b.arrived + exited >= participants) {
    b.arrived = 0;
    ++b.generation;
    ++active->progress;
    return;
  }
  Fiber &f = active->fibers[self()];
  f.waitingAt = &b;
  f.waitingFor = generation;
  while (b.generation == generation)
    yieldToScheduler();
  f.waitingAt = nullptr;
}

void warpBarrier() {
  unsigned w = warpOf(self());
  wait(active->warps[w], 32, active->exitedInWarp[w]);
}

void fiberEntry() {
  Block &b = *active;
  (*b.body)();
  unsigned t = self();
  b.fibers[t].done = true;
  ++b.exited;
  ++b.exitedInWarp[warpOf(t)];
  ++b.progress;
  // Barriers the exited thread completes.
  if (b.block.arrived > 0 && b.block.arrived + b.exited >= b.fibers.size()) {
    b.block.arrived = 0;
    ++b.block.generation;
  }
  Barrier &w = b.warps[warpOf(t)];
  if (w.arrived > 0 && w.arrived + b.exitedInWarp[warpOf(t)] >= 32) {
    w.arrived = 0;
    ++w.generation;
  }
  setcontext(&b.scheduler);
}

uint32_t bitsOf(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float floatOf(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

/// A 16-bit float's value: bf16 (the top half of an f32) or IEEE half.
float decode16(uint32_t h, bool bf16) {
  h &= 0xffff;
  if (bf16)
    return floatOf(h << 16);
  uint32_t sign = (h >> 15) & 1, exponent = (h >> 10) & 31, mantissa = h & 1023;
  float value;
  if (exponent == 0)
    value = std::ldexp(float(mantissa), -24);
  else if (exponent == 31)
    value = mantissa ? NAN : INFINITY;
  else
    value = std::ldexp(float(mantissa | 1024), int(exponent) - 25);
  return sign ? -value : value;
}

uint32_t load32(const void *p) {
  uint32_t u;
  std::memcpy(&u, p, 4);
  return u;
}
uint16_t load16(const void *p) {
  uint16_t u;
  std::memcpy(&u, p, 2);
  return u;
}

/// A fresh fiber that starts in fiberEntry (getcontext returns twice: kept
/// out of launch's frame).
[[gnu::noinline]] void prepare(Fiber &f) {
  f.done = false;
  f.open.clear();
  f.committed.clear();
  getcontext(&f.context);
  f.context.uc_stack.ss_sp = f.stack.get();
  f.context.uc_stack.ss_size = kStackBytes;
  f.context.uc_link = nullptr;
  makecontext(&f.context, fiberEntry, 0);
}

} // namespace

void launch(unsigned grid, unsigned block, size_t sharedBytes, const Kernel &body) {
  if (block == 0 || block % 32 != 0)
    throw std::runtime_error("emulated launches take whole warps, got " + std::to_string(block) +
                             " threads per block");
  Block b;
  b.body = &body;
  b.fibers.resize(block);
  for (Fiber &f : b.fibers)
    f.stack.reset(new char[kStackBytes]);
  b.words.resize(block);
  b.addresses.resize(block);
  b.sharedStorage.reset(new unsigned char[sharedBytes + 128]);
  b.shared = b.sharedStorage.get() +
             (128 - reinterpret_cast<uintptr_t>(b.sharedStorage.get()) % 128) % 128;
  gridDim = Dim3{grid, 1, 1};
  blockDim = Dim3{block, 1, 1};
  active = &b;
  struct Reset {
    ~Reset() { active = nullptr; }
  } reset;
  for (unsigned g = 0; g < grid; ++g) {
    blockIdx = Dim3{g, 0, 0};
    std::memset(b.shared, 0xa5, sharedBytes);
    b.block = Barrier{};
    b.warps.assign(block / 32, Barrier{});
    b.exitedInWarp.assign(block / 32, 0);
    b.exited = 0;
    b.error.clear();
    for (Fiber &f : b.fibers) {
      f.waitingAt = nullptr;
      prepare(f);
    }
    while (b.exited < block) {
      uint64_t before = b.progress;
      for (unsigned t = 0; t < block; ++t) {
        const Fiber &f = b.fibers[t];
        if (f.done || (f.waitingAt && f.waitingAt->generation == f.waitingFor))
          continue;
        b.current = t;
        threadIdx = Dim3{t, 0, 0};
        swapcontext(&b.scheduler, &b.fibers[t].context);
      }
      if (!b.error.empty())
        throw std::runtime_error(b.error);
      if (b.progress == before && b.exited < block)
        throw std::runtime_error(
            "block " + std::to_string(g) +
            ": threads wait at different barriers (a __syncthreads or a warp-collective "
            "operation that not every thread reaches)");
    }
  }
}

void *dynamicShared() { return active->shared; }

void syncThreads() {
  Block &b = *active;
  wait(b.block, unsigned(b.fibers.size()), b.exited);
}

float shuffleXor(float value, int laneMask) {
  Block &b = *active;
  unsigned t = self();
  b.words[t][0] = bitsOf(value);
  warpBarrier();
  float result = floatOf(b.words[warpOf(t) * 32 + (laneOf(t) ^ unsigned(laneMask & 31))][0]);
  warpBarrier();
  return result;
}

void ldmatrixX4(uint32_t (&r)[4], const void *rowAddress, bool transpose) {
  Block &b = *active;
  unsigned t = self(), base = warpOf(t) * 32, lane = laneOf(t);
  checkAligned(rowAddress, 16, "an ldmatrix row address");
  b.addresses[t] = rowAddress;
  warpBarrier();
  unsigned g = lane / 4, tig = lane % 4;
  for (unsigned i = 0; i < 4; ++i) {
    auto row = [&](unsigned k) {
      return static_cast<const unsigned char *>(b.addresses[base + 8 * i + k]);
    };
    if (!transpose) {
      // Row g of matrix i, columns 2 tig and 2 tig + 1.
      r[i] = load32(row(g) + 4 * tig);
    } else {
      // The transposed matrix's row g: rows 2 tig and 2 tig + 1, column g.
      r[i] = uint32_t(load16(row(2 * tig) + 2 * g)) |
             (uint32_t(load16(row(2 * tig + 1) + 2 * g)) << 16);
    }
  }
  warpBarrier();
}

void mmaM16N8K16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1, bool bf16) {
  Block &blk = *active;
  unsigned t = self(), base = warpOf(t) * 32, lane = laneOf(t);
  auto &w = blk.words[t];
  for (int i = 0; i < 4; ++i)
    w[i] = a[i];
  w[4] = b0;
  w[5] = b1;
  warpBarrier();
  // A (16 x 16, row): lane 4 g + tig holds rows g and g + 8, columns
  // 2 tig, 2 tig + 1 (registers 0, 1) and those + 8 (registers 2, 3).
  auto A = [&](unsigned row, unsigned k) {
    unsigned owner = base + (row % 8) * 4 + (k % 8) / 2;
    unsigned reg = (k < 8 ? 0 : 2) + (row < 8 ? 0 : 1);
    return decode16(blk.words[owner][reg] >> (16 * (k % 2)), bf16);
  };
  // B (16 x 8, column): lane 4 g + tig holds column g, rows 2 tig, 2 tig + 1
  // (b0) and those + 8 (b1).
  auto B = [&](unsigned k, unsigned n) {
    unsigned owner = base + n * 4 + (k % 8) / 2;
    return decode16(blk.words[owner][k < 8 ? 4 : 5] >> (16 * (k % 2)), bf16);
  };
  unsigned g = lane / 4, tig = lane % 4;
  float d[4];
  for (unsigned e = 0; e < 4; ++e) {
    unsigned row = g + 8 * (e / 2), col = 2 * tig + e % 2;
    float sum = c[e];
    for (unsigned k = 0; k < 16; ++k)
      sum += A(row, k) * B(k, col);
    d[e] = sum;
  }
  warpBarrier();
  for (int e = 0; e < 4; ++e)
    c[e] = d[e];
}

void cpAsync16(void *dst, const void *src, bool valid) {
  checkAligned(dst, 16, "a cp.async destination");
  checkAligned(src, 16, "a cp.async source");
  active->fibers[self()].open.push_back({dst, src, valid});
}

void cpAsyncCommit() {
  Fiber &f = active->fibers[self()];
  f.committed.push_back(std::move(f.open));
  f.open.clear();
}

void cpAsyncWait(int pending) {
  Fiber &f = active->fibers[self()];
  while (f.committed.size() > size_t(std::max(pending, 0))) {
    for (const PendingCopy &c : f.committed.front()) {
      if (c.valid)
        std::memcpy(c.dst, c.src, 16);
      else
        std::memset(c.dst, 0, 16);
    }
    f.committed.pop_front();
  }
}

} // namespace shardflow::emulation
