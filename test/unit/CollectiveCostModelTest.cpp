//===- CollectiveCostModelTest.cpp - the alpha-beta collective model -------===//

#include "shardflow/Planner/CollectiveCostModel.h"

#include <gtest/gtest.h>

using namespace shardflow;
using runtime::CollectiveKind;

// nccl-tests' doc/PERFORMANCE.md: busbw = algbw * factor.
TEST(CollectiveCostModel, BusBandwidthFactorsAreNcclTests) {
  EXPECT_DOUBLE_EQ(CollectiveCostModel::busBandwidthFactor(CollectiveKind::AllReduce, 8),
                   2.0 * 7 / 8);
  for (CollectiveKind kind :
       {CollectiveKind::AllGather, CollectiveKind::ReduceScatter, CollectiveKind::AllToAll})
    EXPECT_DOUBLE_EQ(CollectiveCostModel::busBandwidthFactor(kind, 4), 3.0 / 4);
  EXPECT_DOUBLE_EQ(CollectiveCostModel::busBandwidthFactor(CollectiveKind::Send, 2), 1);
  EXPECT_DOUBLE_EQ(CollectiveCostModel::busBandwidthFactor(CollectiveKind::Recv, 2), 0);
  EXPECT_DOUBLE_EQ(CollectiveCostModel::busBandwidthFactor(CollectiveKind::LocalSlice, 2), 0);
  // One rank sends nothing.
  EXPECT_DOUBLE_EQ(CollectiveCostModel::bytesSent(CollectiveKind::AllReduce, 1, 1e6), 0);
}

TEST(CollectiveCostModel, GroupsUseTheInnermostLevelThatHoldsThem) {
  CollectiveCostModel model({{"node", 4, 1e-6, 100e9}, {"network", 0, 5e-6, 10e9}});
  EXPECT_EQ(model.levelOf({0, 1, 2, 3}).name, "node");
  EXPECT_EQ(model.levelOf({4, 6}).name, "node");
  EXPECT_EQ(model.levelOf({3, 4}).name, "network");
  EXPECT_EQ(model.levelOf({0, 4, 8, 12}).name, "network");
  // alpha + factor * S / busbw: an all_reduce of 1 MB over 2 ranks in a
  // node, and over 2 nodes.
  EXPECT_DOUBLE_EQ(model.seconds(CollectiveKind::AllReduce, {0, 1}, 1e6), 1e-6 + 1e6 / 100e9);
  EXPECT_DOUBLE_EQ(model.seconds(CollectiveKind::AllReduce, {0, 4}, 1e6), 5e-6 + 1e6 / 10e9);
  // Nothing moves: no time, not even the latency.
  EXPECT_DOUBLE_EQ(model.seconds(CollectiveKind::LocalSlice, {0, 1}, 1e6), 0);
}
