//===- PipelineScheduleTest.cpp - action lists, files and the simulation --===//
//
// The notation (torch.distributed.pipelining's), the schedule file, the
// sends and receives added to a compute-only list, and the simulation's
// verdicts: deadlocks, reads before writes, missing and duplicated
// actions, each named; and its timing on hand-checked cases.
//
//===----------------------------------------------------------------------===//

#include "shardflow/Runtime/Format/PipelineSchedule.h"

#include <gtest/gtest.h>

using namespace shardflow::runtime;

namespace {

PipelineSchedule parse(const std::string &text, int ranks, int mbs, bool forwardOnly = false) {
  std::string error;
  auto s = parsePipelineSchedule(text, "sched.csv", ranks, mbs, forwardOnly, error);
  EXPECT_TRUE(s.has_value()) << error;
  return s ? *s : PipelineSchedule();
}

std::string parseError(const std::string &text, int ranks, int mbs, bool forwardOnly = false) {
  std::string error;
  auto s = parsePipelineSchedule(text, "sched.csv", ranks, mbs, forwardOnly, error);
  EXPECT_FALSE(s.has_value());
  return error;
}

} // namespace

TEST(PipelineSchedule, ActionsRoundTrip) {
  for (const char *text : {"0F1", "12B3", "1I0", "1W0", "0SEND_F1", "1RECV_F1", "1SEND_B0",
                           "0RECV_B0", "3F10"}) {
    std::string error;
    auto a = parsePipelineAction(text, error);
    ASSERT_TRUE(a.has_value()) << text << ": " << error;
    EXPECT_EQ(a->str(), text);
  }
  std::string error;
  auto a = parsePipelineAction(" 2RECV_B13 ", error);
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(a->stage, 2);
  EXPECT_EQ(a->op, PipelineOp::RecvB);
  EXPECT_EQ(a->microbatch, 13);
}

TEST(PipelineSchedule, BadActionsAreNamed) {
  std::string error;
  EXPECT_FALSE(parsePipelineAction("F1", error));
  EXPECT_NE(error.find("'F1' is not an action: it must start with the stage's number"),
            std::string::npos)
      << error;
  EXPECT_FALSE(parsePipelineAction("0X1", error));
  EXPECT_NE(error.find("'0X1': unknown action"), std::string::npos) << error;
  EXPECT_FALSE(parsePipelineAction("0F", error));
  EXPECT_NE(error.find("'0F': the micro-batch's number must follow F"), std::string::npos)
      << error;
  EXPECT_FALSE(parsePipelineAction("0UNSHARD", error));
  EXPECT_NE(error.find("UNSHARD, RESHARD and REDUCE_GRAD actions are not supported"),
            std::string::npos)
      << error;
}

TEST(PipelineSchedule, FileWithBlankCellsAndComments) {
  // As torch's _dump_csv writes a 1F1B over two ranks: idle slots blank.
  PipelineSchedule s = parse("# 1f1b, pp=2, 2 micro-batches\n"
                             "0F0,0F1,,0B0,,0B1\n"
                             ",1F0,1B0,1F1,1B1\n",
                             2, 2);
  ASSERT_EQ(s.actions.size(), 2u);
  EXPECT_EQ(s.stages(), 2);
  EXPECT_EQ(s.stageRank, (std::vector<int>{0, 1}));
  EXPECT_FALSE(s.hasCommunication());
  EXPECT_EQ(s.str(), "0F0,0F1,0B0,0B1\n1F0,1B0,1F1,1B1\n");
  PipelineSchedule c = withCommunication(s);
  EXPECT_EQ(c.str(), "0F0,0SEND_F0,0F1,0SEND_F1,0RECV_B0,0B0,0RECV_B1,0B1\n"
                     "1RECV_F0,1F0,1B0,1SEND_B0,1RECV_F1,1F1,1B1,1SEND_B1\n");
  PipelineSimulation sim = simulatePipeline(c);
  ASSERT_TRUE(sim.ok()) << sim.error;
  // F = 1, B = 2: rank 1 starts at 1 and runs 6; rank 0 waits for 1B0
  // (ends at 4), then 0B0 (4-6), waits for 1B1 (ends at 7), 0B1 (7-9).
  EXPECT_DOUBLE_EQ(sim.makespan, 9.0);
  EXPECT_DOUBLE_EQ(sim.bubbleFraction, 1.0 - 12.0 / 18.0);
  EXPECT_EQ(sim.peakLive, (std::vector<int>{2, 1}));
}

TEST(PipelineSchedule, FileErrorsNameTheLineAndCell) {
  EXPECT_NE(parseError("0F0,0Q0\n1F0\n", 2, 1).find("sched.csv:1: cell 2: '0Q0': unknown action"),
            std::string::npos);
  EXPECT_NE(parseError("0F0,0F3\n1F0\n", 2, 2).find(
                "sched.csv:1: cell 2: 0F3: micro-batch 3 of 2 (--microbatches)"),
            std::string::npos);
  EXPECT_NE(parseError("0F0,1F0\n1F1\n", 2, 2).find(
                "sched.csv:2: cell 1: 1F1: stage 1 already computes on rank 0 (line 1)"),
            std::string::npos);
  EXPECT_NE(parseError("0F0\n", 2, 1).find("sched.csv: 1 lines of actions for 2 pp ranks"),
            std::string::npos);
  EXPECT_NE(parseError("0F0\n1F0\n2F0\n", 2, 1).find("sched.csv:3: more lines than the 2 pp"),
            std::string::npos);
  EXPECT_NE(parseError("0F0\n2F0\n", 2, 1).find("sched.csv: stage 1 never computes"),
            std::string::npos);
  EXPECT_NE(parseError("0F0,0B0\n1F0\n", 2, 1, /*forwardOnly=*/true)
                .find("0B0: a forward-only program has no backward"),
            std::string::npos);
}

TEST(PipelineSchedule, DeadlockNamesTheFirstStuckReceive) {
  // Rank 0 waits for stage 1's gradient before sending stage 1 its input.
  PipelineSchedule s = parse("0F0,0RECV_B0,0SEND_F0,0B0\n"
                             "1RECV_F0,1F0,1B0,1SEND_B0\n",
                             2, 1);
  PipelineSimulation sim = simulatePipeline(s);
  EXPECT_EQ(sim.error, "deadlock: rank 0, action 2 (0RECV_B0) waits for 1SEND_B0, action 4 of "
                       "rank 1; rank 1, action 1 (1RECV_F0) waits for 0SEND_F0, action 3 of "
                       "rank 0");
}

TEST(PipelineSchedule, ReadsBeforeWritesAreRefused) {
  auto error = [](const std::string &text, int mbs = 1) {
    std::string why;
    auto s = parsePipelineSchedule(text, "f", 2, mbs, false, why);
    EXPECT_TRUE(s) << why;
    return simulatePipeline(*s).error;
  };
  EXPECT_EQ(error("0F0,0SEND_F0,0RECV_B0,0B0\n1F0,1RECV_F0,1B0,1SEND_B0\n"),
            "rank 1, action 1 (1F0): reads its input before 1RECV_F0 receives it");
  EXPECT_EQ(error("0F0,0SEND_F0,0B0,0RECV_B0\n1RECV_F0,1F0,1B0,1SEND_B0\n"),
            "rank 0, action 3 (0B0): reads the gradient of its result before 0RECV_B0 "
            "receives it");
  EXPECT_EQ(error("0SEND_F0,0F0,0RECV_B0,0B0\n1RECV_F0,1F0,1B0,1SEND_B0\n"),
            "rank 0, action 1 (0SEND_F0): reads the result it sends before 0F0 computes it");
  EXPECT_EQ(error("0F0,0SEND_F0,0RECV_B0,0I0,0W0\n1RECV_F0,1F0,1W0,1I0,1SEND_B0\n"),
            "rank 1, action 3 (1W0): reads the gradient it needs before 1I0 computes it");
  EXPECT_EQ(error("0B0,0F0,0SEND_F0,0RECV_B0\n1RECV_F0,1F0,1B0,1SEND_B0\n"),
            "rank 0, action 1 (0B0): runs before its forward 0F0");
}

TEST(PipelineSchedule, MissingDuplicatedAndMisplacedActions) {
  auto error = [](const std::string &text, int mbs = 1, bool forwardOnly = false) {
    std::string why;
    auto s = parsePipelineSchedule(text, "f", 2, mbs, forwardOnly, why);
    EXPECT_TRUE(s) << why;
    return simulatePipeline(*s).error;
  };
  EXPECT_EQ(error("0F0,0SEND_F0,0RECV_B0\n1RECV_F0,1F0,1B0,1SEND_B0\n"),
            "stage 0, micro-batch 0: no backward (0B0, or 0I0 and 0W0)");
  EXPECT_EQ(error("0F0,0SEND_F0,0RECV_B0,0B0\n1RECV_F0,1F0,1B0\n"),
            "rank 0, action 3 (0RECV_B0): no rank runs its send 1SEND_B0 (on rank 1)");
  EXPECT_EQ(error("0F0,0SEND_F0,0F0\n1RECV_F0,1F0\n", 1, true),
            "rank 0, action 3 (0F0): runs twice (also rank 0, action 1 (0F0))");
  EXPECT_EQ(error("0F0,0SEND_F0,0RECV_B0,0B0,0W0\n1RECV_F0,1F0,1B0,1SEND_B0\n"),
            "stage 0, micro-batch 0: both a whole backward (B) and a split one (I, W)");
  EXPECT_EQ(error("0F0,0SEND_F0,0RECV_B0,0I0\n1RECV_F0,1F0,1B0,1SEND_B0\n"),
            "stage 0, micro-batch 0: 0I0 without 0W0");
  EXPECT_EQ(error("0F0,0SEND_F0,1SEND_B0\n1RECV_F0,1F0\n", 1, false),
            "rank 0, action 3 (1SEND_B0): stage 1 runs on rank 1");
  EXPECT_EQ(error("0F0,0SEND_F0\n1RECV_F0,1F0,1SEND_F0\n", 1, true),
            "rank 1, action 3 (1SEND_F0): stage 1 has no next stage");
}

TEST(PipelineSchedule, SameRankStagesNeedNoMessages) {
  // A V: stages 0 and 3 on rank 0, 1 and 2 on rank 1.
  std::string error;
  PipelineSchedule s;
  s.ranks = 2;
  s.microbatches = 1;
  s.stageRank = {0, 1, 1, 0};
  s.actions = {{{0, PipelineOp::Forward, 0}, {3, PipelineOp::Forward, 0},
                {3, PipelineOp::Backward, 0}, {0, PipelineOp::Backward, 0}},
               {{1, PipelineOp::Forward, 0}, {2, PipelineOp::Forward, 0},
                {2, PipelineOp::Backward, 0}, {1, PipelineOp::Backward, 0}}};
  PipelineSchedule c = withCommunication(s);
  EXPECT_EQ(c.str(), "0F0,0SEND_F0,3RECV_F0,3F0,3B0,3SEND_B0,0RECV_B0,0B0\n"
                     "1RECV_F0,1F0,2F0,2SEND_F0,2RECV_B0,2B0,1B0,1SEND_B0\n");
  PipelineSimulation sim = simulatePipeline(c);
  ASSERT_TRUE(sim.ok()) << sim.error;
  // F 1, B 2, in a chain: 4 forwards and 4 backwards.
  EXPECT_DOUBLE_EQ(sim.makespan, 12.0);
  // A message between stages of one rank is refused.
  PipelineSchedule bad = c;
  bad.actions[1].insert(bad.actions[1].begin() + 2, {1, PipelineOp::SendF, 0});
  EXPECT_EQ(simulatePipeline(bad).error,
            "rank 1, action 3 (1SEND_F0): stages 1 and 2 are both on this rank: nothing is "
            "sent between them");
}

TEST(PipelineSchedule, TransferTimeDelaysReceives) {
  PipelineSchedule s = withCommunication(parse("0F0\n1F0\n", 2, 1, true));
  PipelineCosts costs;
  costs.transfer = 0.5;
  PipelineSimulation sim = simulatePipeline(s, costs);
  ASSERT_TRUE(sim.ok()) << sim.error;
  EXPECT_DOUBLE_EQ(sim.makespan, 2.5);
  EXPECT_EQ(sim.peakLive, (std::vector<int>{1, 1}));
  ASSERT_EQ(sim.spans[1].size(), 2u);
  EXPECT_DOUBLE_EQ(sim.spans[1][1].first, 1.5);
}
