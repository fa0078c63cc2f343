//===- StandinNcclShmTest.cpp - the stand-in NCCL's multi-rank link -------===//
//
// tools/cuda-standin/StandinNcclShm.h: the files through which the ranks of
// a stand-in NCCL communicator meet. A Link is plain files and counters, so
// two ranks can be two Links in one process: these tests drive both sides
// by hand, in the orders that matter (posting before the previous
// collective is finished everywhere, receiving before the send), and the
// misuse a real NCCL would hang or fail on.
//
//===----------------------------------------------------------------------===//

#include "StandinNcclShm.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <unistd.h>

using namespace shardflow::standin::nccl;
namespace fs = std::filesystem;

namespace {

class StandinNcclShm : public ::testing::Test {
protected:
  void SetUp() override {
    folder = fs::temp_directory_path() /
             ("shardflow-nccl-test-" + std::to_string(::getpid()) + "-" +
              ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(folder);
    ::setenv("SHARDFLOW_STANDIN_NCCL_DIR", folder.c_str(), 1);
  }
  void TearDown() override {
    ::unsetenv("SHARDFLOW_STANDIN_NCCL_DIR");
    fs::remove_all(folder);
  }
  fs::path folder;
};

constexpr int kSum = 0, kFloat32 = 7; // ncclSum, ncclFloat32

Call allReduce(uint64_t count) {
  return Call{AllReduce, kFloat32, kSum, 0, count};
}

} // namespace

TEST_F(StandinNcclShm, CollectiveWaitsForEveryRankAndLeavesNothingBehind) {
  auto a = std::make_unique<Link>("c1", 2, 0, 0);
  EXPECT_FALSE(a->joined()); // rank 1 has not joined yet
  auto b = std::make_unique<Link>("c1", 2, 1, 1);
  EXPECT_TRUE(a->joined());
  EXPECT_TRUE(b->joined());

  std::vector<float> x{1, 2, 3}, y{10, 20, 30}, got(3);
  ASSERT_TRUE(a->post(1, allReduce(3), x.data(), 12));
  EXPECT_FALSE(a->allPosted(1));
  EXPECT_EQ(a->missing(1), "1");
  ASSERT_TRUE(b->post(1, allReduce(3), y.data(), 12));
  ASSERT_TRUE(a->allPosted(1));
  a->read(1, 4, got.data(), 8); // rank 1's elements 1 and 2
  EXPECT_EQ(got[0], 20);
  EXPECT_EQ(got[1], 30);
  a->finish(1);
  // Rank 0 may not post collective 2 while rank 1 still reads collective 1.
  EXPECT_FALSE(a->post(2, allReduce(3), y.data(), 12));
  ASSERT_TRUE(b->allPosted(1));
  b->read(0, 0, got.data(), 12);
  EXPECT_EQ(got, x);
  b->finish(1);
  ASSERT_TRUE(a->post(2, allReduce(3), y.data(), 12));

  EXPECT_TRUE(fs::exists(folder / "c1"));
  a.reset();
  EXPECT_TRUE(fs::exists(folder / "c1")); // rank 1 is still a member
  b.reset();
  EXPECT_FALSE(fs::exists(folder / "c1")); // the last to leave removes it
}

TEST_F(StandinNcclShm, DifferentCallsAreNamed) {
  Link a("c2", 2, 0, 0), b("c2", 2, 1, 1);
  ASSERT_TRUE(a.joined());
  float x[4] = {};
  ASSERT_TRUE(a.post(1, allReduce(4), x, 16));
  ASSERT_TRUE(b.post(1, Call{AllGather, kFloat32, 0, 0, 2}, x, 8));
  try {
    a.allPosted(1);
    FAIL() << "no error";
  } catch (const std::runtime_error &e) {
    EXPECT_STREQ(
        e.what(),
        "collective #1 of the communicator: rank 0 called all_reduce of 4 "
        "ncclFloat32 (sum), rank 1 called all_gather of 2 ncclFloat32 "
        "(every rank must make the same calls in the same order)");
  }
}

TEST_F(StandinNcclShm, SendsQueueUntilTakenAndSizesMustMatch) {
  Link a("c3", 2, 0, 0), b("c3", 2, 1, 1);
  ASSERT_TRUE(a.joined());
  int one = 1, two = 2, got = 0;
  EXPECT_FALSE(b.receive(0, 1, &got, 4)); // nothing sent yet
  ASSERT_TRUE(a.send(1, 1, &one, 4));
  EXPECT_FALSE(a.send(1, 2, &two, 4)); // the first is not taken yet
  ASSERT_TRUE(b.receive(0, 1, &got, 4));
  EXPECT_EQ(got, 1);
  ASSERT_TRUE(a.send(1, 2, &two, 4));
  int64_t wide = 0;
  EXPECT_THROW(b.receive(0, 2, &wide, 8), std::runtime_error);
  ASSERT_TRUE(b.receive(0, 2, &got, 4));
  EXPECT_EQ(got, 2);
  // To oneself, as all_to_all's own piece goes.
  ASSERT_TRUE(a.send(0, 1, &two, 4));
  ASSERT_TRUE(a.receive(0, 1, &got, 4));
  EXPECT_EQ(got, 2);
}

TEST_F(StandinNcclShm, MisuseIsRefused) {
  Link a("c4", 2, 0, 0);
  // Another size, or a rank that joins twice.
  EXPECT_THROW(Link("c4", 3, 1, 1), std::runtime_error);
  EXPECT_THROW(Link("c4", 2, 0, 1), std::runtime_error);
  {
    // Two ranks on one device of one host: NCCL's "Duplicate GPU".
    Link b("c4", 2, 1, 0);
    EXPECT_THROW(a.joined(), std::runtime_error);
  }
  Link c("c5", 2, 0, 0), d("c5", 2, 1, 1);
  EXPECT_EQ(d.abortedPeer(), -1);
  c.abort();
  EXPECT_EQ(d.abortedPeer(), 0);
}
