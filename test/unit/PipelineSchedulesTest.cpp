//===- PipelineSchedulesTest.cpp - the schedules against their theory ----===//
//
// Every schedule, over pp ranks 1 to 4 and 1 to 8 micro-batches, training
// and forward-only, passes the simulation (no deadlock, nothing read
// before it is written, every action once); and against the theory, with
// a forward of cost 1 and a backward of 2 (I and W 1 each):
//   - gpipe and 1f1b take (M + p - 1)(F + B): a bubble of (p - 1)/(M + p - 1);
//   - gpipe holds M micro-batches on every rank, 1f1b min(M, p - r) on rank r;
//   - zb-h1 holds no more than 1f1b and idles less; interleaved-1f1b and
//     zbv idle less than 1f1b once there are p micro-batches or more.
//
//===----------------------------------------------------------------------===//

#include "shardflow/Planner/PipelineSchedules.h"

#include <gtest/gtest.h>

using namespace shardflow;
using runtime::PipelineCosts;
using runtime::PipelineOp;
using runtime::PipelineSchedule;
using runtime::PipelineSimulation;

namespace {

constexpr PipelineScheduleKind kAll[] = {
    PipelineScheduleKind::GPipe, PipelineScheduleKind::OneFOneB,
    PipelineScheduleKind::Interleaved1F1B, PipelineScheduleKind::ZBH1,
    PipelineScheduleKind::ZBV};

int virtualStages(PipelineScheduleKind kind) {
  return kind == PipelineScheduleKind::Interleaved1F1B || kind == PipelineScheduleKind::ZBV ? 2
                                                                                          : 1;
}

// Simulated with the sends and receives added; fails the test when the
// simulation refuses it.
PipelineSimulation run(PipelineScheduleKind kind, int p, int m, bool forwardOnly = false,
                       int v = 0) {
  std::string error;
  auto s = buildPipelineSchedule(kind, p, m, v ? v : virtualStages(kind), forwardOnly, error);
  EXPECT_TRUE(s.has_value()) << pipelineScheduleName(kind) << " p=" << p << " m=" << m << ": "
                             << error;
  if (!s)
    return PipelineSimulation();
  PipelineCosts costs;
  // A rank's work per micro-batch is the same in every schedule: its
  // stages split the rank's layers.
  double share = 1.0 / s->stages() * p;
  costs.forward = {share};
  costs.backward = {2 * share};
  costs.backwardInput = {share};
  costs.backwardWeight = {share};
  PipelineSimulation sim = simulatePipeline(withCommunication(*s), costs);
  EXPECT_TRUE(sim.ok()) << pipelineScheduleName(kind) << " p=" << p << " m=" << m
                        << (forwardOnly ? " forward-only" : "") << ": " << sim.error << "\n"
                        << withCommunication(*s).str();
  return sim;
}

} // namespace

TEST(PipelineSchedules, NamesRoundTrip) {
  for (PipelineScheduleKind kind : kAll)
    EXPECT_EQ(parsePipelineScheduleKind(pipelineScheduleName(kind)), kind);
  EXPECT_FALSE(parsePipelineScheduleKind("pipedream"));
  EXPECT_EQ(pipelineScheduleNames(), "gpipe, 1f1b, interleaved-1f1b, zb-h1, zbv");
}

TEST(PipelineSchedules, EveryScheduleSimulates) {
  for (PipelineScheduleKind kind : kAll)
    for (int p : {1, 2, 3, 4})
      for (int m : {1, 2, 3, 4, 8}) {
        if (kind == PipelineScheduleKind::Interleaved1F1B && m % p != 0)
          continue;
        for (bool forwardOnly : {false, true})
          run(kind, p, m, forwardOnly);
      }
}

TEST(PipelineSchedules, GPipeAnd1F1BMatchTheirTheory) {
  for (int p : {1, 2, 4})
    for (int m : {1, 2, 4, 8}) {
      double theory = double(p - 1) / double(m + p - 1);
      PipelineSimulation gpipe = run(PipelineScheduleKind::GPipe, p, m);
      PipelineSimulation ofob = run(PipelineScheduleKind::OneFOneB, p, m);
      EXPECT_NEAR(gpipe.bubbleFraction, theory, 1e-12) << "gpipe p=" << p << " m=" << m;
      EXPECT_NEAR(ofob.bubbleFraction, theory, 1e-12) << "1f1b p=" << p << " m=" << m;
      EXPECT_DOUBLE_EQ(ofob.makespan, 3.0 * (m + p - 1));
      for (int r = 0; r < p; ++r) {
        EXPECT_EQ(gpipe.peakLive[r], m) << "gpipe rank " << r;
        EXPECT_EQ(ofob.peakLive[r], std::min(m, p - r)) << "1f1b rank " << r;
      }
      // Forward-only: a forward each step along the pipe.
      EXPECT_DOUBLE_EQ(run(PipelineScheduleKind::OneFOneB, p, m, true).makespan, m + p - 1);
    }
}

TEST(PipelineSchedules, ZeroBubbleAndInterleavedIdleLess) {
  for (int p : {2, 4})
    for (int m : {4, 8}) {
      PipelineSimulation ofob = run(PipelineScheduleKind::OneFOneB, p, m);
      PipelineSimulation zbh1 = run(PipelineScheduleKind::ZBH1, p, m);
      PipelineSimulation inter = run(PipelineScheduleKind::Interleaved1F1B, p, m);
      PipelineSimulation zbv = run(PipelineScheduleKind::ZBV, p, m);
      EXPECT_LT(zbh1.bubbleFraction, ofob.bubbleFraction) << "p=" << p << " m=" << m;
      EXPECT_LT(inter.bubbleFraction, ofob.bubbleFraction) << "p=" << p << " m=" << m;
      EXPECT_LT(zbv.bubbleFraction, ofob.bubbleFraction) << "p=" << p << " m=" << m;
      for (int r = 0; r < p; ++r) {
        EXPECT_LE(zbh1.peakLive[r], ofob.peakLive[r]) << "zb-h1 rank " << r;
        EXPECT_LE(zbv.peakLive[r], 2 * p) << "zbv rank " << r;
      }
    }
}

TEST(PipelineSchedules, LayoutsOfStages) {
  std::string error;
  auto inter = buildPipelineSchedule(PipelineScheduleKind::Interleaved1F1B, 2, 4, 3, false, error);
  ASSERT_TRUE(inter) << error;
  EXPECT_EQ(inter->stageRank, (std::vector<int>{0, 1, 0, 1, 0, 1}));
  auto zbv = buildPipelineSchedule(PipelineScheduleKind::ZBV, 3, 3, 2, false, error);
  ASSERT_TRUE(zbv) << error;
  EXPECT_EQ(zbv->stageRank, (std::vector<int>{0, 1, 2, 2, 1, 0}));
  // 1f1b on two ranks, as in the textbook.
  auto ofob = buildPipelineSchedule(PipelineScheduleKind::OneFOneB, 2, 3, 1, false, error);
  ASSERT_TRUE(ofob) << error;
  EXPECT_EQ(ofob->str(), "0F0,0F1,0B0,0F2,0B1,0B2\n1F0,1B0,1F1,1B1,1F2,1B2\n");
}

TEST(PipelineSchedules, RefusedCombinationsSayWhy) {
  std::string error;
  EXPECT_FALSE(buildPipelineSchedule(PipelineScheduleKind::Interleaved1F1B, 4, 6, 2, false, error));
  EXPECT_EQ(error, "interleaved-1f1b: --microbatches 6 must be a multiple of pp (4): "
                   "micro-batches go round the ranks in groups of pp");
  EXPECT_FALSE(buildPipelineSchedule(PipelineScheduleKind::Interleaved1F1B, 4, 8, 1, false, error));
  EXPECT_EQ(error, "interleaved-1f1b needs --virtual-stages 2 or more (got 1); with one stage "
                   "per rank it is 1f1b");
  EXPECT_FALSE(buildPipelineSchedule(PipelineScheduleKind::OneFOneB, 4, 8, 2, false, error));
  EXPECT_EQ(error, "1f1b runs one stage per rank (--virtual-stages 2 is for interleaved-1f1b)");
  EXPECT_FALSE(buildPipelineSchedule(PipelineScheduleKind::ZBV, 4, 8, 3, false, error));
  EXPECT_EQ(error, "zbv runs two stages per rank (--virtual-stages 3)");
  EXPECT_FALSE(buildPipelineSchedule(PipelineScheduleKind::GPipe, 0, 8, 1, false, error));
  EXPECT_EQ(error, "gpipe: 0 pp ranks and 8 micro-batches (both must be at least 1)");
}
