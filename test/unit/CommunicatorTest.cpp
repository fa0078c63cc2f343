//===- CommunicatorTest.cpp - the communicators, in real processes --------===//
//
// shardflow-comm-tests: gtest cases for the communicators (Communicator.h),
// run by python/tests/test_communicators.py alone (a single rank, and NCCL
// over it) and under `mpirun -np 2` (MPI, and NCCL over MPI), where every
// rank runs every case in the same order, since the cases are collective
// calls. NCCL runs on the CUDA stand-ins (tools/cuda-standin: one stand-in
// GPU per rank, device memory in host memory); its cases are skipped when
// the stand-ins (or a GPU) are not on LD_LIBRARY_PATH, or in a build
// without CUDA.
//
// Each operation is checked in both forms (start* then wait, and the
// blocking call), and the requests themselves: a request of a peer that
// has not joined yet stays in flight (test() false, waitWithin times out)
// and completes once it does; several requests in flight complete whatever
// order they are waited in; NCCL's requests are events on the stream.
//
//===----------------------------------------------------------------------===//

#include "shardflow/Runtime/Comm/Communicator.h"

#ifdef SHARDFLOW_TEST_NCCL
#include "shardflow/Runtime/Comm/NCCL/NcclCommunicator.h"
#include "shardflow/Runtime/Device/CUDA/CudaLibraries.h"
#endif

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <numeric>
#include <thread>
#include <vector>

using namespace shardflow::runtime;

namespace {

Communicator *world = nullptr;

Tensor view(std::vector<float> &v) { return Tensor{v.data(), DType::F32, {int64_t(v.size())}}; }

/// Memory a communicator's collectives work on: host memory for the
/// single rank and MPI, device memory for NCCL (copied in and out).
class Memory {
public:
  virtual ~Memory() = default;
  virtual void *allocate(size_t bytes) = 0;
  virtual void upload(void *to, const void *from, size_t bytes) = 0;
  virtual void download(void *to, const void *from, size_t bytes) = 0;
};

class HostMemory final : public Memory {
public:
  void *allocate(size_t bytes) override { return blocks.emplace_back(bytes).data(); }
  void upload(void *to, const void *from, size_t bytes) override { std::memcpy(to, from, bytes); }
  void download(void *to, const void *from, size_t bytes) override { std::memcpy(to, from, bytes); }

private:
  std::vector<std::vector<uint8_t>> blocks;
};

/// A communicator under test and its memory.
struct Subject {
  Communicator *comm = nullptr;
  Memory *memory = nullptr;
};

/// floats in the subject's memory.
struct Buffer {
  Subject s;
  void *data;
  size_t count;
  Buffer(Subject s, size_t count)
      : s(s), data(s.memory->allocate(count * sizeof(float))), count(count) {}
  Tensor tensor() const { return Tensor{data, DType::F32, {int64_t(count)}}; }
  void set(const std::vector<float> &v) { s.memory->upload(data, v.data(), v.size() * 4); }
  std::vector<float> get() const {
    std::vector<float> v(count);
    s.memory->download(v.data(), data, count * 4);
    return v;
  }
};

/// Each member's value of element i: distinct per member and element.
float valueOf(int member, size_t i) { return float(member * 100 + int(i)); }

std::vector<float> valuesOf(int member, size_t count) {
  std::vector<float> v(count);
  for (size_t i = 0; i < count; ++i)
    v[i] = valueOf(member, i);
  return v;
}

/// The collectives every communicator must get right, with their requests
/// waited for (`blocking` false) or the blocking calls.
void checkCollectives(Subject s, bool blocking) {
  Communicator &c = *s.comm;
  int n = c.size(), me = c.rank();
  const size_t count = 6 * size_t(n);
  auto finish = [&](Request r) {
    r.wait();
    EXPECT_TRUE(r.done());
  };

  // all_reduce, out of place and in place.
  Buffer in(s, count), out(s, count);
  in.set(valuesOf(me, count));
  if (blocking)
    c.allReduce(in.tensor(), out.tensor(), Reduction::Sum);
  else
    finish(c.startAllReduce(in.tensor(), out.tensor(), Reduction::Sum));
  std::vector<float> got = out.get();
  for (size_t i = 0; i < count; ++i) {
    float want = 0;
    for (int m = 0; m < n; ++m)
      want += valueOf(m, i);
    EXPECT_EQ(got[i], want) << "all_reduce element " << i;
  }
  in.set(valuesOf(me, count));
  if (blocking)
    c.allReduce(in.tensor(), in.tensor(), Reduction::Max);
  else
    finish(c.startAllReduce(in.tensor(), in.tensor(), Reduction::Max));
  got = in.get();
  for (size_t i = 0; i < count; ++i)
    EXPECT_EQ(got[i], valueOf(n - 1, i)) << "in-place all_reduce (max) element " << i;

  // all_gather: member m's part at m * part.
  const size_t part = 3;
  Buffer mine(s, part), all(s, part * size_t(n));
  mine.set(valuesOf(me, part));
  if (blocking)
    c.allGather(mine.tensor(), all.tensor());
  else
    finish(c.startAllGather(mine.tensor(), all.tensor()));
  got = all.get();
  for (int m = 0; m < n; ++m)
    for (size_t i = 0; i < part; ++i)
      EXPECT_EQ(got[size_t(m) * part + i], valueOf(m, i)) << "all_gather from " << m;

  // reduce_scatter: chunk `me` of the sum.
  Buffer whole(s, part * size_t(n)), chunk(s, part);
  whole.set(valuesOf(me, part * size_t(n)));
  if (blocking)
    c.reduceScatter(whole.tensor(), chunk.tensor(), Reduction::Sum);
  else
    finish(c.startReduceScatter(whole.tensor(), chunk.tensor(), Reduction::Sum));
  got = chunk.get();
  for (size_t i = 0; i < part; ++i) {
    float want = 0;
    for (int m = 0; m < n; ++m)
      want += valueOf(m, size_t(me) * part + i);
    EXPECT_EQ(got[i], want) << "reduce_scatter element " << i;
  }

  // all_to_all: chunk j of member m lands in member j's chunk m.
  Buffer send(s, part * size_t(n)), recv(s, part * size_t(n));
  send.set(valuesOf(me, part * size_t(n)));
  if (blocking)
    c.allToAll(send.tensor(), recv.tensor());
  else
    finish(c.startAllToAll(send.tensor(), recv.tensor()));
  got = recv.get();
  for (int m = 0; m < n; ++m)
    for (size_t i = 0; i < part; ++i)
      EXPECT_EQ(got[size_t(m) * part + i], valueOf(m, size_t(me) * part + i))
          << "all_to_all from " << m;

  // A ring of sends and receives: each member gets its left neighbour's.
  Buffer ringOut(s, part), ringIn(s, part);
  ringOut.set(valuesOf(me, part));
  int right = (me + 1) % n, left = (me + n - 1) % n;
  Tensor ro = ringOut.tensor(), ri = ringIn.tensor();
  if (blocking)
    c.sendRecv(&ro, right, &ri, left);
  else
    finish(c.startSendRecv(&ro, right, &ri, left));
  EXPECT_EQ(ringIn.get(), valuesOf(left, part)) << "send/recv from " << left;

  // broadcast from the last member.
  Buffer b(s, part);
  b.set(valuesOf(me, part));
  if (blocking)
    c.broadcast(b.tensor(), n - 1);
  else
    finish(c.startBroadcast(b.tensor(), n - 1));
  EXPECT_EQ(b.get(), valuesOf(n - 1, part)) << "broadcast";
}

/// Several operations in flight at once, waited for last to first: each
/// completes with its own result.
void checkRequestsInFlight(Subject s) {
  Communicator &c = *s.comm;
  int n = c.size(), me = c.rank();
  Buffer a(s, 4), b(s, 4), gathered(s, 4 * size_t(n));
  a.set(valuesOf(me, 4));
  b.set(valuesOf(me, 4));
  std::vector<Request> requests;
  requests.push_back(c.startAllReduce(a.tensor(), a.tensor(), Reduction::Sum));
  requests.push_back(c.startAllGather(b.tensor(), gathered.tensor()));
  for (auto r = requests.rbegin(); r != requests.rend(); ++r)
    r->wait();
  for (Request &r : requests)
    EXPECT_TRUE(r.done());
  std::vector<float> sum = a.get(), all = gathered.get();
  for (size_t i = 0; i < 4; ++i) {
    float want = 0;
    for (int m = 0; m < n; ++m)
      want += valueOf(m, i);
    EXPECT_EQ(sum[i], want);
    for (int m = 0; m < n; ++m)
      EXPECT_EQ(all[size_t(m) * 4 + i], valueOf(m, i));
  }
}

/// Member 0 waits while member 1 joins late: its request stays in flight
/// (test() false, waitWithin times out) and completes once member 1 has
/// joined.
void checkLateJoiner(Subject s) {
  Communicator &c = *s.comm;
  if (c.size() < 2)
    GTEST_SKIP() << "needs two ranks";
  Buffer x(s, 4);
  x.set(valuesOf(c.rank(), 4));
  if (c.rank() == 1)
    std::this_thread::sleep_for(std::chrono::milliseconds(700));
  Request r = c.startAllReduce(x.tensor(), x.tensor(), Reduction::Sum);
  if (c.rank() == 0) {
    EXPECT_FALSE(r.test());
    auto start = std::chrono::steady_clock::now();
    EXPECT_EQ(r.waitWithin(0.1), WaitOutcome::TimedOut);
    double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_GE(waited, 0.1);
    EXPECT_LT(waited, 0.6);
    EXPECT_FALSE(r.done());
  }
  EXPECT_EQ(r.waitWithin(30), WaitOutcome::Finished);
  EXPECT_TRUE(r.done());
  std::vector<float> got = x.get();
  for (size_t i = 0; i < 4; ++i)
    EXPECT_EQ(got[i], valueOf(0, i) + valueOf(1, i));
}

/// Groups of one member each (split by rank): every collective is that
/// member's own data; the members and their world ranks are right.
void checkSplit(Subject s) {
  Communicator &c = *s.comm;
  std::unique_ptr<Communicator> alone = c.split(c.rank(), 0);
  ASSERT_TRUE(alone);
  EXPECT_EQ(alone->size(), 1);
  EXPECT_EQ(alone->rank(), 0);
  EXPECT_EQ(alone->worldRanks(), std::vector<int>{world->rank()});
  Buffer x(Subject{alone.get(), s.memory}, 4), y(Subject{alone.get(), s.memory}, 4);
  x.set(valuesOf(c.rank(), 4));
  alone->allReduce(x.tensor(), y.tensor(), Reduction::Sum);
  EXPECT_EQ(y.get(), valuesOf(c.rank(), 4));
  EXPECT_EQ(c.split(-1, 0), nullptr);
  std::unique_ptr<Communicator> everyone = c.split(0, c.size() - 1 - c.rank());
  ASSERT_TRUE(everyone);
  EXPECT_EQ(everyone->rank(), c.size() - 1 - c.rank()); // ranked by key
  std::vector<int> reversed(size_t(c.size()));
  std::iota(reversed.rbegin(), reversed.rend(), 0);
  EXPECT_EQ(everyone->worldRanks(), reversed);
}

HostMemory hostMemory;

//===----------------------------------------------------------------------===//
// The world: a single rank alone, MPI under mpirun
//===----------------------------------------------------------------------===//

TEST(WorldCommunicator, Collectives) { checkCollectives({world, &hostMemory}, false); }
TEST(WorldCommunicator, BlockingCollectives) { checkCollectives({world, &hostMemory}, true); }
TEST(WorldCommunicator, RequestsInFlight) { checkRequestsInFlight({world, &hostMemory}); }
TEST(WorldCommunicator, LateJoiner) { checkLateJoiner({world, &hostMemory}); }
TEST(WorldCommunicator, Split) { checkSplit({world, &hostMemory}); }

TEST(WorldCommunicator, HostRequestsHaveNoEvent) {
  std::vector<float> v = valuesOf(world->rank(), 4);
  Request r = world->startAllReduce(view(v), view(v), Reduction::Sum);
  EXPECT_EQ(r.event(), nullptr);
  r.wait();
  EXPECT_EQ(std::string(world->kind()), world->size() > 1 ? "MPI" : "single rank");
}

TEST(WorldCommunicator, HalfPrecisionReduces) {
  // Member r brings (r + 1) / 2 in bf16: 0.5 (0x3f00), 1.0 (0x3f80); their
  // sums 0.5 and 1.5 (0x3fc0) are exact.
  std::vector<uint16_t> v(4, world->rank() == 0 ? 0x3f00 : 0x3f80);
  Tensor t{v.data(), DType::BF16, {4}};
  world->allReduce(t, t, Reduction::Sum);
  uint16_t want = world->size() == 1 ? 0x3f00 : world->size() == 2 ? 0x3fc0 : v[0];
  for (uint16_t x : v)
    EXPECT_EQ(x, want);
}

TEST(SingleRank, EveryRequestIsDoneAtOnce) {
  std::unique_ptr<Communicator> one = createSingleRankCommunicator();
  std::vector<float> a = valuesOf(0, 4), b(4);
  EXPECT_TRUE(one->startAllReduce(view(a), view(b), Reduction::Sum).done());
  EXPECT_EQ(b, a);
  EXPECT_TRUE(one->startBroadcast(view(a), 0).done());
  EXPECT_TRUE(one->broadcastWithin(view(a), 0, 0.0));
  Tensor ta = view(a);
  EXPECT_THROW(one->startSendRecv(nullptr, -1, &ta, 1), RuntimeError); // no rank 1
  EXPECT_THROW(one->startSendRecv(&ta, 0, nullptr, -1), RuntimeError); // unmatched
}

//===----------------------------------------------------------------------===//
// NCCL over the world, on the stand-in GPUs
//===----------------------------------------------------------------------===//

#ifdef SHARDFLOW_TEST_NCCL
using namespace shardflow::runtime::cuda;

class DeviceMemory final : public Memory {
public:
  explicit DeviceMemory(CUstream stream) : stream(stream) {}
  ~DeviceMemory() override {
    for (CUdeviceptr p : blocks)
      driver().cuMemFree(p);
  }
  void *allocate(size_t bytes) override {
    CUdeviceptr p = 0;
    EXPECT_EQ(driver().cuMemAlloc(&p, bytes), CUDA_SUCCESS);
    blocks.push_back(p);
    return reinterpret_cast<void *>(p);
  }
  // Copies on the communicators' stream, so that they are ordered with
  // the collectives; the download waits for the stream.
  void upload(void *to, const void *from, size_t bytes) override {
    EXPECT_EQ(driver().cuMemcpyHtoDAsync(CUdeviceptr(to), from, bytes, stream), CUDA_SUCCESS);
    EXPECT_EQ(driver().cuStreamSynchronize(stream), CUDA_SUCCESS);
  }
  void download(void *to, const void *from, size_t bytes) override {
    EXPECT_EQ(driver().cuStreamSynchronize(stream), CUDA_SUCCESS);
    EXPECT_EQ(driver().cuMemcpyDtoH(to, CUdeviceptr(from), bytes), CUDA_SUCCESS);
  }

private:
  CUstream stream;
  std::vector<CUdeviceptr> blocks;
};

/// A GPU per rank (the stand-in's device `rank`), its stream, and the NCCL
/// world over `world`, made once for every case.
struct NcclWorld {
  std::string unavailable; // why the cases are skipped
  CUcontext context = nullptr;
  CUstream stream = nullptr;
  std::unique_ptr<DeviceMemory> memory;
  std::unique_ptr<Communicator> comm;

  NcclWorld() {
    try {
      driver();
      nccl();
    } catch (const std::exception &e) {
      unavailable = e.what();
    }
    // Every rank must agree, or the others would wait in NCCL's creation.
    int missing = unavailable.empty() ? 0 : 1, anyMissing = 0;
    Tensor m{&missing, DType::I32, {1}}, any{&anyMissing, DType::I32, {1}};
    world->allReduce(m, any, Reduction::Max);
    if (anyMissing) {
      if (unavailable.empty())
        unavailable = "another rank has no CUDA stand-in";
      return;
    }
    CUdevice device = 0;
    int count = 0;
    driver().cuDeviceGetCount(&count);
    driver().cuDeviceGet(&device, world->rank() % std::max(count, 1));
    driver().cuDevicePrimaryCtxRetain(&context, device);
    driver().cuCtxSetCurrent(context);
    driver().cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING);
    memory = std::make_unique<DeviceMemory>(stream);
    comm = createNcclWorld(*world, stream, NcclSettings{30, "--timeout"});
  }
};

NcclWorld &ncclWorld() {
  static NcclWorld w;
  return w;
}

#define NEED_NCCL()                                                                                \
  if (!ncclWorld().unavailable.empty())                                                            \
  GTEST_SKIP() << "no NCCL: " << ncclWorld().unavailable

TEST(NcclCommunicator, Collectives) {
  NEED_NCCL();
  checkCollectives({ncclWorld().comm.get(), ncclWorld().memory.get()}, false);
}
TEST(NcclCommunicator, BlockingCollectives) {
  NEED_NCCL();
  checkCollectives({ncclWorld().comm.get(), ncclWorld().memory.get()}, true);
}
TEST(NcclCommunicator, RequestsInFlight) {
  NEED_NCCL();
  checkRequestsInFlight({ncclWorld().comm.get(), ncclWorld().memory.get()});
}
TEST(NcclCommunicator, LateJoiner) {
  NEED_NCCL();
  checkLateJoiner({ncclWorld().comm.get(), ncclWorld().memory.get()});
}
TEST(NcclCommunicator, Split) {
  NEED_NCCL();
  checkSplit({ncclWorld().comm.get(), ncclWorld().memory.get()});
}

TEST(NcclCommunicator, RequestsAreStreamEvents) {
  NEED_NCCL();
  Communicator &c = *ncclWorld().comm;
  EXPECT_EQ(std::string(c.kind()), "NCCL");
  Buffer x({&c, ncclWorld().memory.get()}, 4);
  x.set(valuesOf(c.rank(), 4));
  Request r = c.startAllReduce(x.tensor(), x.tensor(), Reduction::Sum);
  // Enqueued on the stream, its handle an event there: the stream holds it
  // until the host waits (the stand-in runs stream work only then).
  ASSERT_NE(r.event(), nullptr);
  EXPECT_EQ(driver().cuStreamWaitEvent(ncclWorld().stream, CUevent(r.event()), 0), CUDA_SUCCESS);
  EXPECT_EQ(r.waitWithin(30), WaitOutcome::Finished);
  EXPECT_EQ(r.event(), nullptr);
  std::vector<float> got = x.get();
  for (size_t i = 0; i < 4; ++i) {
    float want = 0;
    for (int m = 0; m < c.size(); ++m)
      want += valueOf(m, i);
    EXPECT_EQ(got[i], want);
  }
}
#endif

} // namespace

int main(int argc, char **argv) {
  std::unique_ptr<Communicator> comm = createWorldCommunicator(&argc, &argv);
  world = comm.get();
  ::testing::InitGoogleTest(&argc, argv);
  int failed = RUN_ALL_TESTS();
  int any = 0;
  Tensor f{&failed, DType::I32, {1}}, a{&any, DType::I32, {1}};
  world->allReduce(f, a, Reduction::Max);
  if (world->rank() == 0)
    std::printf("shardflow-comm-tests: %d rank(s), %s\n", world->size(),
                any ? "FAILED on some rank" : "passed on every rank");
#ifdef SHARDFLOW_TEST_NCCL
  // The NCCL world goes before MPI is finalized.
  if (ncclWorld().comm)
    ncclWorld().comm.reset();
#endif
  return any ? 1 : 0;
}
