//===- DeviceCode.h - generated GPU kernels into cubin and PTX -*- C++ -*-===//
//
// The last compiler step of the CUDA target: the `gpu.module`s that
// convert-rt-to-gpu generated are lowered through the NVVM dialect to LLVM
// IR, linked with libdevice (math functions), compiled by LLVM's NVPTX
// backend to PTX and assembled by ptxas into one cubin per architecture.
// The artifact stores the cubins and the PTX of the oldest architecture,
// which newer GPUs compile at load time.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDFLOW_TARGET_DEVICECODE_H
#define SHARDFLOW_TARGET_DEVICECODE_H

#include "shardflow/Runtime/Format/Artifact.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/Pass/PassManager.h"

#include <string>
#include <vector>

namespace shardflow {

struct DeviceCodeOptions {
  /// GPU architectures to build cubins for, oldest first ("sm_80").
  std::vector<std::string> chips = {"sm_80", "sm_90"};
  /// The CUDA toolkit (bin/ptxas, nvvm/libdevice); empty: $CUDA_PATH,
  /// $CUDA_HOME, then /usr/local/cuda.
  std::string cudaPath;
};

/// Dialects, interfaces and translations the device-code pipeline needs.
void registerDeviceCodeDialects(mlir::DialectRegistry &registry);

/// Adds the passes that lower generated gpu.module kernels to NVVM, ready
/// for gpu-module-to-binary: canonicalization, scf to cf, gpu to nvvm (bare
/// pointers; 32-bit index arithmetic with `index32`), math to llvm.
void buildKernelLoweringPipeline(mlir::OpPassManager &pm, bool index32);

/// Registers buildKernelLoweringPipeline as `shardflow-lower-gpu-kernels`,
/// so lit tests can check the NVVM the artifact phase compiles.
void registerDeviceCodePipelines();

/// Compiles every gpu.module of `module` (left unchanged): for each module
/// one cubin per chip and the PTX of the first chip (arch "compute_XY").
/// Emits a diagnostic and fails when the toolkit is missing or a step fails.
mlir::FailureOr<std::vector<runtime::DeviceModule>>
compileDeviceCode(mlir::ModuleOp module, const DeviceCodeOptions &options);

} // namespace shardflow

#endif // SHARDFLOW_TARGET_DEVICECODE_H
