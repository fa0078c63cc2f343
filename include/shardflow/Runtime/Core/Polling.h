//===- Polling.h - waiting for asynchronous work under a deadline -*- C++ -*-===//
//
// The runtime waits for work it cannot block on with a limit (a GPU stream,
// NCCL's nonblocking calls, an MPI request) by polling it against a
// deadline, so that a rank that never arrives ends the job with a reason
// instead of hanging it.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDFLOW_RUNTIME_POLLING_H
#define SHARDFLOW_RUNTIME_POLLING_H

#include <functional>
#include <string>

namespace shardflow::runtime {

/// How a wait for asynchronous work ended.
enum class WaitOutcome { Finished, TimedOut };

/// Calls `finished` until it returns true or `seconds` have passed since the
/// call: the first polls follow each other at once and the next ones only
/// yield the CPU (short waits stay short), later ones sleep 100 us between
/// polls (ranks may share the CPU). `finished`
/// reports failures itself, by throwing or aborting. It is called at least
/// once, and once more after the deadline, so work that ends just as time
/// runs out counts as finished.
WaitOutcome pollUntil(const std::function<bool()> &finished, double seconds);

/// "600 s", "0.5 s": a timeout for messages.
std::string secondsText(double seconds);

} // namespace shardflow::runtime

#endif // SHARDFLOW_RUNTIME_POLLING_H
