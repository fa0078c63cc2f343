//===- CudaStreams.cpp - the two-stream schedule ---------------------------===//
//
// Kernels run on the compute stream and collectives on the communication
// stream; an instruction waits for the latest one on the other stream only
// where their byte ranges overlap and one of them writes (HazardTracker in
// CudaPlanning.h), through an event recorded after that one. Weights and
// constants are never written, so they order nothing.
//
//===----------------------------------------------------------------------===//

#include "CudaDeviceImpl.h"

using namespace shardflow::runtime;
using namespace shardflow::runtime::cuda;

bool CudaDevice::rangeOf(int buffer, ByteRange &range) const {
  size_t root = size_t(buffer);
  while (art->buffers[root].kind == BufferDesc::Kind::View)
    root = size_t(art->buffers[root].source);
  const BufferDesc &r = art->buffers[root];
  int64_t bytes = int64_t(art->buffers[size_t(buffer)].bytes());
  switch (r.kind) {
  case BufferDesc::Kind::Arena:
    range = {0, r.offset, r.offset + bytes};
    return true;
  case BufferDesc::Kind::Input:
    range = {1 + int(root), 0, bytes};
    return true;
  default:
    return false; // weights and constants are never written
  }
}

bool CudaDevice::rangesOverlap(int a, int b) const {
  ByteRange ra, rb;
  return rangeOf(a, ra) && rangeOf(b, rb) && ra.overlaps(rb);
}

std::vector<Access> CudaDevice::accessesOf(const Instruction &inst) const {
  std::vector<Access> accesses;
  ByteRange r;
  for (int i : inst.inputs)
    if (rangeOf(i, r))
      accesses.push_back({r, false});
  for (int o : inst.outputs)
    if (rangeOf(o, r))
      accesses.push_back({r, true});
  return accesses;
}

void CudaDevice::planStreams() {
  HazardTracker tracker(2);
  for (size_t n = 0; n < steps.size(); ++n)
    steps[n].waits = tracker.add(int(n), steps[n].stream, accessesOf(art->program[n]));
  for (size_t n = 0; n < steps.size(); ++n)
    for (int w : steps[n].waits)
      if (!steps[size_t(w)].done)
        CU_CALL(cuEventCreate, &steps[size_t(w)].done, CU_EVENT_DISABLE_TIMING);
}
