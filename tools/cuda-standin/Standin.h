//===- Standin.h - what the CUDA stand-ins share -----------------*- C++ -*-===//
//
// The stand-in driver (libcuda.so.1 of this folder) owns "device" memory
// (host allocations), streams and events; the stand-in cuBLASLt and NCCL
// enqueue their work on its streams and check their pointers against its
// allocations through these functions. See README.md.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDFLOW_TOOLS_CUDA_STANDIN_STANDIN_H
#define SHARDFLOW_TOOLS_CUDA_STANDIN_STANDIN_H

#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

namespace shardflow::standin {

/// Whether [pointer, pointer + bytes) lies inside one live cuMemAlloc
/// allocation (an empty range always does).
bool inAllocation(uintptr_t pointer, size_t bytes);

/// Like inAllocation, but says what is wrong ("[0x.., +n) is outside every
/// allocation"), or returns "" when the range is fine.
std::string checkRange(uintptr_t pointer, size_t bytes, const char *what);

/// Appends `work` to `stream` (null: the legacy stream). It runs when the
/// stream reaches it, in the order the scheduler picks among the streams
/// (SHARDFLOW_STANDIN_ORDER); `what` names it in the trace and in errors.
/// A `work` that throws std::exception leaves the context failed, as a
/// faulting kernel does: every later call returns CUDA_ERROR_LAUNCH_FAILED
/// (CUDA_ERROR_MISALIGNED_ADDRESS or CUDA_ERROR_ILLEGAL_ADDRESS after a
/// generated kernel's misaligned or illegal access, as on a GPU).
/// Returns false (and enqueues nothing) when the context has failed.
bool enqueue(CUstream stream, std::string what, std::function<void()> work);

/// A polled operation: its name in the trace and its step.
struct Polled {
  std::string what;
  std::function<bool()> step;
};

/// Appends a polled operation to `stream`: when the stream reaches it,
/// `step` is called each time the scheduler comes by, and the stream moves
/// on once it returns true (other streams go on meanwhile). For work that
/// waits on other processes, such as a collective's peers; `step` must end
/// its own wait (throw) if they never come. Throwing fails the context, as
/// for enqueue. `make` builds the operation when it is queued: here, or,
/// when `stream` is being captured, at each launch of the graph (so that
/// each run of a collective numbers itself and keeps its own progress).
bool enqueuePolled(CUstream stream, std::function<Polled()> make);

/// The device whose primary context this process retained (-1: none yet).
int currentDevice();

/// A line on stderr, "cuda stand-in: MESSAGE", for errors whose status
/// code alone would not say what went wrong.
void note(const std::string &message);

} // namespace shardflow::standin

#endif // SHARDFLOW_TOOLS_CUDA_STANDIN_STANDIN_H
