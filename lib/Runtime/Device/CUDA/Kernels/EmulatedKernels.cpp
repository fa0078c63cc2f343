//===- EmulatedKernels.cpp - the CUDA kernels as host code, by name -------===//

#define SHARDFLOW_CUDA_HOST_EMULATION 1
#include "AllKernels.cu"

#include "EmulatedKernels.h"

#include <cstring>
#include <map>
#include <string>

namespace shardflow::runtime::cuda {
namespace {

struct Entry {
  void (*run)(const uint8_t *argument); // runs in an emulated thread: no throwing
  size_t argumentBytes;
};

/// The kernel `fn` with its argument struct copied out of the bytes.
template <typename Args, void (*fn)(Args)> void call(const uint8_t *argument) {
  Args a;
  std::memcpy(&a, argument, sizeof(Args));
  fn(a);
}

const std::map<std::string, Entry> &kernels() {
  static const std::map<std::string, Entry> table = [] {
    std::map<std::string, Entry> t;
#define SF_ENTRY(NAME, ARGS) t[#NAME] = Entry{call<ARGS, NAME>, sizeof(ARGS)};
#define SF_ENTRIES_OF_SIZE(SIZE)                                                                  \
  SF_ENTRY(sf_strided_copy_e##SIZE##_i32, StridedCopyArgs)                                        \
  SF_ENTRY(sf_strided_copy_e##SIZE##_i64, StridedCopyArgs)                                        \
  SF_ENTRY(sf_pad_e##SIZE##_i32, PadArgs)                                                         \
  SF_ENTRY(sf_pad_e##SIZE##_i64, PadArgs)                                                         \
  SF_ENTRY(sf_gather_e##SIZE##_i32, GatherArgs)                                                   \
  SF_ENTRY(sf_gather_e##SIZE##_i64, GatherArgs)
    SF_ENTRIES_OF_SIZE(1)
    SF_ENTRIES_OF_SIZE(2)
    SF_ENTRIES_OF_SIZE(4)
    SF_ENTRIES_OF_SIZE(8)
    SF_ENTRIES_OF_SIZE(16)
    SF_ENTRY(sf_attention_simt_f32_dv64, AttentionArgs)
    SF_ENTRY(sf_attention_simt_f32_dv128, AttentionArgs)
    SF_ENTRY(sf_attention_simt_f32_dv256, AttentionArgs)
    SF_ENTRY(sf_attention_simt_f16_dv64, AttentionArgs)
    SF_ENTRY(sf_attention_simt_f16_dv128, AttentionArgs)
    SF_ENTRY(sf_attention_simt_f16_dv256, AttentionArgs)
    SF_ENTRY(sf_attention_simt_bf16_dv64, AttentionArgs)
    SF_ENTRY(sf_attention_simt_bf16_dv128, AttentionArgs)
    SF_ENTRY(sf_attention_simt_bf16_dv256, AttentionArgs)
    SF_ENTRY(sf_attention_mma_f16_d64, AttentionArgs)
    SF_ENTRY(sf_attention_mma_f16_d128, AttentionArgs)
    SF_ENTRY(sf_attention_mma_bf16_d64, AttentionArgs)
    SF_ENTRY(sf_attention_mma_bf16_d128, AttentionArgs)
    SF_ENTRY(sf_attention_mma2_f16_d64, AttentionArgs)
    SF_ENTRY(sf_attention_mma2_bf16_d64, AttentionArgs)
    SF_ENTRY(sf_attention_mma_f16_d64_plain, AttentionArgs)
    SF_ENTRY(sf_attention_mma_f16_d128_plain, AttentionArgs)
    SF_ENTRY(sf_attention_mma_bf16_d64_plain, AttentionArgs)
    SF_ENTRY(sf_attention_mma_bf16_d128_plain, AttentionArgs)
    SF_ENTRY(sf_attention_mma2_f16_d64_plain, AttentionArgs)
    SF_ENTRY(sf_attention_mma2_bf16_d64_plain, AttentionArgs)
    SF_ENTRY(sf_attention_grad_dq_f32, AttentionGradArgs)
    SF_ENTRY(sf_attention_grad_dkv_f32, AttentionGradArgs)
    SF_ENTRY(sf_attention_grad_dq_f16, AttentionGradArgs)
    SF_ENTRY(sf_attention_grad_dkv_f16, AttentionGradArgs)
    SF_ENTRY(sf_attention_grad_dq_bf16, AttentionGradArgs)
    SF_ENTRY(sf_attention_grad_dkv_bf16, AttentionGradArgs)
#undef SF_ENTRIES_OF_SIZE
#undef SF_ENTRY
    return t;
  }();
  return table;
}

} // namespace

void runEmulated(const DeviceLaunch &l) {
  auto it = kernels().find(l.function);
  if (it == kernels().end())
    throw RuntimeError("no emulated kernel '" + l.function + "'");
  if (l.grid[1] != 1 || l.grid[2] != 1 || l.block[1] != 1 || l.block[2] != 1)
    throw RuntimeError(l.function + ": the emulation takes x extents only");
  Entry entry = it->second;
  if (l.argument.size() != entry.argumentBytes)
    throw RuntimeError(l.function + ": an argument of " + std::to_string(l.argument.size()) +
                       " bytes, the kernel takes " + std::to_string(entry.argumentBytes));
  const uint8_t *argument = l.argument.data();
  try {
    emulation::launch(l.grid[0], l.block[0], l.sharedBytes, [&] { entry.run(argument); });
  } catch (const std::runtime_error &e) {
    throw RuntimeError(l.function + ": " + e.what());
  }
}

size_t emulatedArgumentBytes(const std::string &function) {
  auto it = kernels().find(function);
  return it == kernels().end() ? 0 : it->second.argumentBytes;
}

} // namespace shardflow::runtime::cuda
