//===- Polling.cpp - waiting for asynchronous work under a deadline -------===//

#include "shardflow/Runtime/Core/Polling.h"

#include <chrono>
#include <cstdio>
#include <thread>

using namespace shardflow::runtime;

WaitOutcome shardflow::runtime::pollUntil(const std::function<bool()> &finished,
                                          double seconds) {
  using Clock = std::chrono::steady_clock;
  auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                     std::chrono::duration<double>(seconds));
  for (int polls = 0;; ++polls) {
    bool late = Clock::now() > deadline;
    if (finished())
      return WaitOutcome::Finished;
    if (late)
      return WaitOutcome::TimedOut;
    // A collective of small messages completes within microseconds of the
    // last member's arrival: the first polls only spin (a yield lets other
    // ranks on the core run first, and costs a run of GPT-2 sharded over
    // four CPU ranks a third more time in MPI_Test round trips).
    if (polls < 1000)
      continue;
    if (polls < 2000)
      std::this_thread::yield();
    else
      std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
}

std::string shardflow::runtime::secondsText(double seconds) {
  char text[32];
  std::snprintf(text, sizeof(text), "%g s", seconds);
  return text;
}
