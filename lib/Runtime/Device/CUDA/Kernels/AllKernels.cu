//===- AllKernels.cu - every device kernel in one translation unit ---------===//
//
// nvcc makes one fatbin from one translation unit, and the runtime embeds a
// single fatbin (one cuModuleLoadData), so the build compiles this file,
// which includes each kernel file. The files keep their helpers in
// anonymous namespaces under distinct names.
//
//===----------------------------------------------------------------------===//

#include "Attention.cu"
#include "AttentionMma.cu"
#include "AttentionGrad.cu"
#include "DataMovement.cu"
