//===- CpuDevice.h - the CPU as a device -------------------------*- C++ -*-===//
//
// Host memory and the CPU kernels (Format/Kernel.h's registry, in
// Device/CPU/Kernels): one 64-byte aligned arena of the planned size; this
// rank's weights (or weight slices) mapped read-only from their files at
// the recorded offsets and checked against their CRC-32C (the runtime
// never parses protobuf; WeightLoader.h), copied only where a slice is not
// contiguous or the weight is converted; inputs bound in place, outputs
// handed back as views. Work runs as it is dispatched, on the calling
// thread (kernels spread over `threads` themselves): one lane.
// local_slice is a strided copy, one memcpy per contiguous run, spread
// over the threads. Collectives go through the world (MPI) on host memory.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDFLOW_RUNTIME_DEVICE_CPU_CPUDEVICE_H
#define SHARDFLOW_RUNTIME_DEVICE_CPU_CPUDEVICE_H

#include "shardflow/Runtime/Comm/Communicator.h"
#include "shardflow/Runtime/Core/Device.h"

#include <memory>
#include <string>

namespace shardflow::runtime {

/// The CPU device of rank `world.rank()` (`world` outlives it).
std::unique_ptr<Device> createCpuDevice(const DeviceSettings &settings, Communicator &world);

/// The OPENBLAS_CORETYPE that would run the CPU kernels' GEMMs faster on
/// this CPU, or "" when OpenBLAS's own choice stands: "SkylakeX" or
/// "Haswell" where OpenBLAS, not knowing the CPU's model, fell back to its
/// SSE kernels although the CPU has AVX-512 or AVX2. The kernels OpenBLAS
/// runs now go to `running` ("" without OpenBLAS). OpenBLAS reads the
/// variable only when it loads: shard-run sets it and starts again.
std::string preferredBlasCore(std::string *running = nullptr);

} // namespace shardflow::runtime

#endif // SHARDFLOW_RUNTIME_DEVICE_CPU_CPUDEVICE_H
