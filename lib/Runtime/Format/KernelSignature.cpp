//===- KernelSignature.cpp - the kernels an artifact may call --------------===//

#include "shardflow/Runtime/Format/KernelSignature.h"
#include "shardflow/Runtime/Format/Kernel.h"

#include <algorithm>
#include <iterator>

namespace shardflow::runtime {
namespace {
#include "shardflow/Runtime/Format/KernelSignatures.inc"
} // namespace

const ParamSignature *KernelSignature::findParam(std::string_view name) const {
  for (const ParamSignature &p : *this)
    if (name == p.name)
      return &p;
  return nullptr;
}

KernelSignatureRange allKernelSignatures() {
  return {std::begin(kKernelSignatures), std::end(kKernelSignatures)};
}

const KernelSignature *findKernelSignature(std::string_view name) {
  KernelSignatureRange all = allKernelSignatures();
  auto it = std::lower_bound(all.begin(), all.end(), name,
                             [](const KernelSignature &k, std::string_view n) {
                               return std::string_view(k.name) < n;
                             });
  return it != all.end() && name == it->name ? it : nullptr;
}

const char *paramTypeName(ParamType type) {
  switch (type) {
  case ParamType::Int:
    return "int";
  case ParamType::Bool:
    return "bool";
  case ParamType::Float:
    return "float";
  case ParamType::Number:
    return "number";
  case ParamType::String:
    return "string";
  case ParamType::Ints:
    return "ints";
  case ParamType::Floats:
    return "floats";
  case ParamType::DType:
    return "dtype";
  }
  return "?";
}

const char *cudaImplName(CudaImpl impl) {
  switch (impl) {
  case CudaImpl::Runtime:
    return "runtime";
  case CudaImpl::Elementwise:
    return "elementwise";
  case CudaImpl::Neighbours:
    return "neighbours";
  case CudaImpl::Row:
    return "row";
  case CudaImpl::Reduction:
    return "reduction";
  case CudaImpl::Standalone:
    return "standalone";
  case CudaImpl::Rewritten:
    return "rewritten";
  case CudaImpl::None:
    return "none";
  }
  return "?";
}

bool isInstructionParam(std::string_view name) { return name == "node"; }

/// Whether an artifact's value fits a parameter of type `type`.
static bool fits(const ParamValue &value, ParamType type) {
  switch (type) {
  case ParamType::Int:
  case ParamType::Bool:
    return std::holds_alternative<int64_t>(value);
  case ParamType::Float:
    return std::holds_alternative<double>(value);
  case ParamType::Number:
    return std::holds_alternative<double>(value) || std::holds_alternative<int64_t>(value);
  case ParamType::String:
    return std::holds_alternative<std::string>(value);
  case ParamType::Ints:
  case ParamType::Floats: {
    // An empty list reads as either (the text cannot tell them apart).
    if (auto *ints = std::get_if<std::vector<int64_t>>(&value))
      return type == ParamType::Ints || ints->empty();
    if (auto *floats = std::get_if<std::vector<double>>(&value))
      return type == ParamType::Floats || floats->empty();
    return false;
  }
  case ParamType::DType:
    return std::holds_alternative<DType>(value);
  }
  return false;
}

std::string checkParams(const KernelSignature &kernel, const Params &params) {
  std::string name = kernel.name;
  for (const auto &[param, value] : params.all()) {
    if (isInstructionParam(param))
      continue;
    const ParamSignature *p = kernel.findParam(param);
    if (!p)
      return "kernel '" + name + "' has no parameter '" + param + "'";
    if (!fits(value, p->type))
      return "parameter '" + param + "' of kernel '" + name + "' must be " +
             paramTypeName(p->type);
  }
  return "";
}

} // namespace shardflow::runtime
