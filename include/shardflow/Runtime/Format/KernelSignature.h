//===- KernelSignature.h - the kernels an artifact may call ----*- C++ -*-===//
//
// The kernel signature table: every kernel an rt program may call, its
// parameters' names and types, whether the CPU runtime has it and how the
// CUDA target runs it. The table (KernelSignatures.inc) is generated from
// the nn ODS and RTKernels.td by shardflow-tblgen -gen-kernel-signatures
// and checked in, so the runtime-only build needs no tblgen; a test fails
// when the checked-in copy differs from what the .td files generate.
//
// One table, read by everyone who names a kernel or a parameter: the
// rt.kernel verifier refuses a kernel or parameter it lacks; shard-run
// checks every kernel instruction's parameters against it when it loads an
// artifact, and a kernel that reads a parameter its signature lacks fails
// (Params::bind); a unit test compares the CPU kernel registry and the CUDA
// runtime's kernels with it both ways. Renaming an attribute in the ODS
// changes the table, and whatever still uses the old name fails.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDFLOW_RUNTIME_FORMAT_KERNELSIGNATURE_H
#define SHARDFLOW_RUNTIME_FORMAT_KERNELSIGNATURE_H

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace shardflow::runtime {

class Params;

/// A parameter's type as an artifact writes it. Bool is written as an
/// integer; Number is an integer or a float (constant_of_shape's value).
enum class ParamType : uint8_t { Int, Bool, Float, Number, String, Ints, Floats, DType };

/// How the CUDA target runs a kernel.
enum class CudaImpl : uint8_t {
  Runtime,     ///< shard-run's CUDA device: cuBLASLt or a hand-written kernel
  Elementwise, ///< generated, fused with its elementwise neighbours
  Neighbours,  ///< generated, elementwise output reading other input positions
  Row,         ///< generated row reduction (softmax, norms)
  Reduction,   ///< generated: a row reduction, or a launch of its own
  Standalone,  ///< generated as a launch of its own
  Rewritten,   ///< a CUDA rt rewrite (cudaRewrite) turns it into other kernels
  None,        ///< no CUDA implementation
};

struct ParamSignature {
  const char *name;
  ParamType type;
  /// No default: the op cannot be written without it.
  bool required;
};

struct KernelSignature {
  const char *name;
  /// The nn op the kernel is named after ("nn.softmax"), or "" for a
  /// kernel a pass creates.
  const char *nnOp;
  /// Whether the CPU runtime implements it.
  bool cpu;
  CudaImpl cuda;
  /// With CudaImpl::Rewritten: the pass.
  const char *cudaRewrite;
  const ParamSignature *params;
  size_t numParams;

  const ParamSignature *begin() const { return params; }
  const ParamSignature *end() const { return params + numParams; }
  /// The parameter called `name`, or nullptr.
  const ParamSignature *findParam(std::string_view name) const;
};

/// The kernel called `name`, or nullptr.
const KernelSignature *findKernelSignature(std::string_view name);

/// Every kernel, sorted by name.
struct KernelSignatureRange {
  const KernelSignature *first, *last;
  const KernelSignature *begin() const { return first; }
  const KernelSignature *end() const { return last; }
};
KernelSignatureRange allKernelSignatures();

/// "int", "bool", "float", "number", "string", "ints", "floats", "dtype".
const char *paramTypeName(ParamType type);
/// "runtime", "elementwise", ...
const char *cudaImplName(CudaImpl impl);

/// Parameters any kernel instruction may carry beyond its signature: the
/// ONNX node it comes from ("node"), for messages.
bool isInstructionParam(std::string_view name);

/// What is wrong with `params` for `kernel`: a parameter its signature
/// lacks, or one of the wrong type; "" when nothing is. (A required
/// parameter left out is the kernel's to refuse, when it reads it: a kernel
/// may find what it needs elsewhere, as a cast finds its type in its
/// output buffer.)
std::string checkParams(const KernelSignature &kernel, const Params &params);

} // namespace shardflow::runtime

#endif // SHARDFLOW_RUNTIME_FORMAT_KERNELSIGNATURE_H
