//===- CudaGraph.cpp - the program as one CUDA graph -----------------------===//
//
// CudaOptions::cudaGraph: the runner's enqueue of the whole program is
// captured into a CUDA graph (the communication stream joined through a
// fork event and back), instantiated once and launched at every later run:
// one launch instead of one per operation.
//
//===----------------------------------------------------------------------===//

#include "CudaDeviceImpl.h"

#include <algorithm>
#include <cstdio>

using namespace shardflow::runtime;
using namespace shardflow::runtime::cuda;

bool CudaDevice::wantsGraph() const {
  using Graph = CudaOptions::CudaGraph;
  if (options.cudaGraph == Graph::Always)
    return true;
  if (options.cudaGraph == Graph::Never || settings.timing || graphRefused || runs < 2)
    return false;
  // Collectives inside a graph (NCCL's capture support) are not yet
  // checked on GPUs: Auto leaves such programs as they are.
  return std::none_of(art->program.begin(), art->program.end(), [](const Instruction &inst) {
    return inst.collective && inst.collectiveKind != CollectiveKind::LocalSlice;
  });
}

void CudaDevice::captureProgram(const std::function<void()> &enqueue) {
  const CudaDriver &d = driver();
  CUstream compute = streams[ComputeStream], communication = streams[CommStream];
  // Global mode: a call that would synchronize during the capture (from
  // any thread) fails instead of breaking it silently.
  CU_CALL(cuStreamBeginCapture, compute, CU_STREAM_CAPTURE_MODE_GLOBAL);
  CUgraph captured = nullptr;
  try {
    CU_CALL(cuEventRecord, fork, compute);
    CU_CALL(cuStreamWaitEvent, communication, fork, 0);
    enqueue();
    CU_CALL(cuEventRecord, join, communication);
    CU_CALL(cuStreamWaitEvent, compute, join, 0);
  } catch (...) {
    // The streams leave the capture whatever went wrong in it.
    if (d.cuStreamEndCapture(compute, &captured) == CUDA_SUCCESS && captured)
      d.cuGraphDestroy(captured);
    throw;
  }
  CUresult r = d.cuStreamEndCapture(compute, &captured);
  if (r != CUDA_SUCCESS)
    throw RuntimeError("capturing the program into a CUDA graph failed: " + describe(r) +
                       " (run without --cuda-graph)");
  r = d.cuGraphInstantiate(&graph, captured, 0);
  d.cuGraphDestroy(captured);
  if (r != CUDA_SUCCESS) {
    graph = nullptr;
    throw RuntimeError("instantiating the program's CUDA graph failed: " + describe(r) +
                       " (run without --cuda-graph)");
  }
  if (settings.verbose)
    std::fprintf(stderr, "shard-run: rank %d captured %zu operations into a CUDA graph\n", rank,
                 art->program.size());
}

/// The ONNX node of checking operation `ordinal` of an instruction: line
/// `ordinal` of its `checking_nodes`, else its `node`.
