//===- DeviceKernelsTest.cpp - the CUDA kernels' planner and fatbin -------===//
//
// Runs without a GPU: checks the launches planDeviceKernel builds (function
// names, grid, block, shared memory, the argument structs' contents) for
// representative shapes, its errors for unsupported cases, and, when the
// build had nvcc, that the embedded fatbin holds sm_80 and sm_90 SASS and
// compute_80 PTX with every function the planner names, and that ptxas
// compiled the attention kernels without spills. Running the kernels is
// tools/cuda-kernel-check's job, on a GPU machine.
//
//===----------------------------------------------------------------------===//

#include "shardflow/Runtime/Device/CUDA/DeviceKernels.h"

#include "DeviceKernelArgs.h"
#include "DevicePlanner.h"

#include <cstddef>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

using namespace shardflow::runtime;
using namespace shardflow::runtime::cuda;

namespace {

/// A fake device address: the planner only does arithmetic on it.
void *addr(uintptr_t a) { return reinterpret_cast<void *>(a); }

template <typename Args> Args argsOf(const DeviceLaunch &l) {
  EXPECT_EQ(l.argument.size(), sizeof(Args)) << l.function;
  Args a{};
  std::memcpy(&a, l.argument.data(), std::min(sizeof(Args), l.argument.size()));
  return a;
}

std::string errorOf(std::string_view kernel, const std::vector<Tensor> &ins,
                    const std::vector<Tensor> &outs, const Params &p, int rank = 0) {
  try {
    planDeviceKernel(kernel, ins, outs, p, rank);
  } catch (const RuntimeError &e) {
    return e.what();
  }
  return "";
}

std::string errorOfCall(const std::function<void()> &plan) {
  try {
    plan();
  } catch (const RuntimeError &e) {
    return e.what();
  }
  return "";
}

TEST(DeviceKernels, Names) {
  for (const char *k : {"attention", "attention_grad", "transpose", "slice", "concat", "split",
                        "expand", "gather", "pad", "local_slice"})
    EXPECT_TRUE(hasDeviceKernel(k)) << k;
  EXPECT_FALSE(hasDeviceKernel("matmul"));
  EXPECT_FALSE(hasDeviceKernel(""));
  EXPECT_NE(errorOf("matmul", {}, {}, Params{}).find("matmul"), std::string::npos);
}

TEST(DeviceKernels, IndexWidthCoversTheGridStrideLoop) {
  // A grid-stride loop counts up to total + the grid's threads (65536 x
  // 256 = 2^24): a u8 transpose of 2,145,588,300 elements fits int32 but
  // its loop would not, so it counts in int64; 2^31 - 2^24 - 1 still fits.
  Params p;
  p.set("perm", std::vector<int64_t>{1, 0});
  auto transposeOf = [&](int64_t rows, int64_t cols) {
    Tensor in{addr(0x10000), DType::U8, {rows, cols}}, out{addr(0x20000), DType::U8, {cols, rows}};
    return planDeviceKernel("transpose", {in}, {out}, p, 0).at(0).function;
  };
  EXPECT_EQ(transposeOf(46341, 46300), "sf_strided_copy_e1_i64");
  EXPECT_EQ(transposeOf(2130706431, 1), "sf_strided_copy_e1_i32"); // a copy, no transpose
  EXPECT_EQ(transposeOf(3, 710235477), "sf_strided_copy_e1_i32");
  EXPECT_EQ(transposeOf(3, 710235478), "sf_strided_copy_e1_i64");
}

TEST(DeviceKernels, TransposeStrides) {
  Tensor in{addr(0x10000), DType::F32, {2, 3, 4}}, out{addr(0x20000), DType::F32, {4, 2, 3}};
  Params p;
  p.set("perm", std::vector<int64_t>{2, 0, 1});
  auto ls = planDeviceKernel("transpose", {in}, {out}, p, 0);
  ASSERT_EQ(ls.size(), 1u);
  EXPECT_EQ(ls[0].function, "sf_strided_copy_e4_i32");
  EXPECT_EQ(ls[0].grid[0], 1u);
  EXPECT_EQ(ls[0].block[0], 256u);
  EXPECT_EQ(ls[0].sharedBytes, 0u);
  auto a = argsOf<StridedCopyArgs>(ls[0]);
  EXPECT_EQ(a.out, out.data);
  EXPECT_EQ(a.in, in.data);
  EXPECT_EQ(a.total, 24);
  // Output dims 0 and (1, 2) stay apart; (2, 3) of the input merge into one
  // dimension of 6 with input stride 4.
  ASSERT_EQ(a.rank, 2);
  EXPECT_EQ(a.shape[0], 4);
  EXPECT_EQ(a.shape[1], 6);
  EXPECT_EQ(a.inStride[0], 1);
  EXPECT_EQ(a.inStride[1], 4);
  EXPECT_EQ(a.outStride[0], 6);
  EXPECT_EQ(a.outStride[1], 1);
}

TEST(DeviceKernels, ContiguousRunsWiden) {
  // Rank 1 of 2 takes rows 2..3 of a 4x8 f16 tensor: one run of 32 bytes,
  // moved as two 16-byte elements.
  Tensor in{addr(0x10000), DType::F16, {4, 8}}, out{addr(0x20000), DType::F16, {2, 8}};
  Params p;
  p.set("starts", std::vector<int64_t>{0, 0, 2, 0});
  auto ls = planDeviceKernel("local_slice", {in}, {out}, p, 1);
  ASSERT_EQ(ls.size(), 1u);
  EXPECT_EQ(ls[0].function, "sf_strided_copy_e16_i32");
  auto a = argsOf<StridedCopyArgs>(ls[0]);
  EXPECT_EQ(a.in, addr(0x10000 + 2 * 8 * 2));
  ASSERT_EQ(a.rank, 1);
  EXPECT_EQ(a.shape[0], 2);
  EXPECT_EQ(a.total, 2);

  // Misaligned by 2 bytes: stays 2-byte elements.
  Tensor odd{addr(0x20002), DType::F16, {2, 8}};
  ls = planDeviceKernel("local_slice", {in}, {odd}, p, 1);
  EXPECT_EQ(ls[0].function, "sf_strided_copy_e2_i32");
  EXPECT_EQ(argsOf<StridedCopyArgs>(ls[0]).total, 16);

  // A block of columns: rows of 4 halves (8 bytes) per input row of 8.
  p.set("starts", std::vector<int64_t>{0, 0, 0, 4});
  Tensor cols{addr(0x20000), DType::F16, {4, 4}};
  ls = planDeviceKernel("local_slice", {in}, {cols}, p, 1);
  EXPECT_EQ(ls[0].function, "sf_strided_copy_e8_i32");
  auto c = argsOf<StridedCopyArgs>(ls[0]);
  EXPECT_EQ(c.in, addr(0x10000 + 4 * 2));
  ASSERT_EQ(c.rank, 1);
  EXPECT_EQ(c.inStride[0], 2);
  EXPECT_EQ(c.outStride[0], 1);

  EXPECT_NE(errorOf("local_slice", {in}, {cols}, p, 2).find("starts"), std::string::npos);
  p.set("starts", std::vector<int64_t>{0, 0, 0, 6});
  EXPECT_NE(errorOf("local_slice", {in}, {cols}, p, 1).find("leaves dimension 1"),
            std::string::npos);
}

TEST(DeviceKernels, SliceBackwards) {
  Tensor in{addr(0x10000), DType::I32, {7, 20}}, out{addr(0x20000), DType::I32, {7, 7}};
  Params p;
  p.set("starts", std::vector<int64_t>{-1});
  p.set("ends", std::vector<int64_t>{-1000});
  p.set("axes", std::vector<int64_t>{-1});
  p.set("steps", std::vector<int64_t>{-3});
  auto ls = planDeviceKernel("slice", {in}, {out}, p, 0);
  ASSERT_EQ(ls.size(), 1u);
  EXPECT_EQ(ls[0].function, "sf_strided_copy_e4_i32");
  auto a = argsOf<StridedCopyArgs>(ls[0]);
  EXPECT_EQ(a.in, addr(0x10000 + 19 * 4)); // start -1 of 20
  ASSERT_EQ(a.rank, 2);
  EXPECT_EQ(a.inStride[0], 20);
  EXPECT_EQ(a.inStride[1], -3);

  // An empty result plans nothing.
  Tensor none{addr(0x20000), DType::I32, {0, 7}};
  p.set("starts", std::vector<int64_t>{0});
  p.set("axes", std::vector<int64_t>{0});
  p.set("steps", std::vector<int64_t>{1});
  EXPECT_TRUE(planDeviceKernel("slice", {in}, {none}, p, 0).empty());
}

TEST(DeviceKernels, ConcatAndSplitPieces) {
  Tensor a{addr(0x10000), DType::F32, {4, 3, 16}}, b{addr(0x20000), DType::F32, {4, 5, 16}},
      out{addr(0x40000), DType::F32, {4, 8, 16}};
  Params p;
  p.set("axis", int64_t(1));
  auto ls = planDeviceKernel("concat", {a, b}, {out}, p, 0);
  ASSERT_EQ(ls.size(), 2u);
  auto first = argsOf<StridedCopyArgs>(ls[0]), second = argsOf<StridedCopyArgs>(ls[1]);
  EXPECT_EQ(first.out, out.data);
  EXPECT_EQ(second.out, addr(0x40000 + 3 * 16 * 4));
  // Rows of 3*16 floats (192 bytes) move as 16-byte elements: 12 per row.
  EXPECT_EQ(ls[0].function, "sf_strided_copy_e16_i32");
  ASSERT_EQ(first.rank, 2);
  EXPECT_EQ(first.shape[0], 4);
  EXPECT_EQ(first.shape[1], 12);
  EXPECT_EQ(first.outStride[0], 32);
  EXPECT_EQ(first.inStride[0], 12);

  Params s;
  s.set("axis", int64_t(-2));
  s.set("sizes", std::vector<int64_t>{3, 5});
  ls = planDeviceKernel("split", {out}, {a, b}, s, 0);
  ASSERT_EQ(ls.size(), 2u);
  EXPECT_EQ(argsOf<StridedCopyArgs>(ls[1]).in, addr(0x40000 + 3 * 16 * 4));
  EXPECT_EQ(argsOf<StridedCopyArgs>(ls[1]).out, b.data);

  Tensor wrong{addr(0x20000), DType::F32, {4, 5, 15}};
  EXPECT_NE(errorOf("concat", {a, wrong}, {out}, p).find("input 1 of shape 4x5x15"),
            std::string::npos);
  Tensor half{addr(0x20000), DType::F16, {4, 5, 16}};
  EXPECT_NE(errorOf("concat", {a, half}, {out}, p).find("element type f16"), std::string::npos);
}

TEST(DeviceKernels, ExpandBroadcasts) {
  Tensor in{addr(0x10000), DType::I64, {3, 1, 5}}, out{addr(0x20000), DType::I64, {2, 3, 4, 5}};
  auto ls = planDeviceKernel("expand", {in}, {out}, Params{}, 0);
  ASSERT_EQ(ls.size(), 1u);
  auto a = argsOf<StridedCopyArgs>(ls[0]);
  ASSERT_EQ(a.rank, 4);
  EXPECT_EQ(a.inStride[0], 0);
  EXPECT_EQ(a.inStride[1], 5);
  EXPECT_EQ(a.inStride[2], 0);
  EXPECT_EQ(a.inStride[3], 1);
  Tensor bad{addr(0x20000), DType::I64, {2, 3, 4, 6}};
  EXPECT_NE(errorOf("expand", {in}, {bad}, Params{}).find("does not broadcast"),
            std::string::npos);
}

TEST(DeviceKernels, TooManyDimensions) {
  // A 9-D reversal merges nothing.
  std::vector<int64_t> shape(9, 2), perm;
  for (int i = 8; i >= 0; --i)
    perm.push_back(i);
  Tensor in{addr(0x10000), DType::F32, shape}, out{addr(0x20000), DType::F32, shape};
  Params p;
  p.set("perm", perm);
  std::string e = errorOf("transpose", {in}, {out}, p);
  EXPECT_NE(e.find("transpose"), std::string::npos);
  EXPECT_NE(e.find("at most 8"), std::string::npos);
}

TEST(DeviceKernels, Gather) {
  Tensor in{addr(0x10000), DType::BF16, {4, 7, 24}}, idx{addr(0x30000), DType::I64, {3, 2}},
      out{addr(0x20000), DType::BF16, {4, 3, 2, 24}};
  Params p;
  p.set("axis", int64_t(-2));
  auto ls = planDeviceKernel("gather", {in, idx}, {out}, p, 0);
  ASSERT_EQ(ls.size(), 1u);
  // Rows of 24 bf16 (48 bytes) move as three 16-byte elements.
  EXPECT_EQ(ls[0].function, "sf_gather_e16_i32");
  auto a = argsOf<GatherArgs>(ls[0]);
  EXPECT_EQ(a.outer, 4);
  EXPECT_EQ(a.count, 6);
  EXPECT_EQ(a.inner, 3);
  EXPECT_EQ(a.axisSize, 7);
  EXPECT_EQ(a.index64, 1);
  EXPECT_EQ(a.indices, idx.data);
  // The executor points the status word (out-of-range indices) at its own.
  EXPECT_EQ(a.status, nullptr);
  EXPECT_EQ(ls[0].statusOffset, int(offsetof(GatherArgs, status)));
  Tensor fidx{addr(0x30000), DType::F32, {3, 2}};
  EXPECT_NE(errorOf("gather", {in, fidx}, {out}, p).find("indices must be i32 or i64"),
            std::string::npos);
  EXPECT_EQ(a.globalAxisSize, 7);
  EXPECT_EQ(a.axisStart, 0);
}

TEST(DeviceKernels, GatherVocabularyBlock) {
  // Rank 2 of 4 holds rows 16..23 of a 32-row table.
  Tensor in{addr(0x10000), DType::F32, {8, 64}}, idx{addr(0x30000), DType::I32, {5}},
      out{addr(0x20000), DType::F32, {5, 64}};
  Params p;
  p.set("axis", int64_t(0));
  p.set("axis_size", int64_t(32));
  p.set("axis_starts", std::vector<int64_t>{0, 8, 16, 24});
  auto ls = planDeviceKernel("gather", {in, idx}, {out}, p, 2);
  ASSERT_EQ(ls.size(), 1u);
  auto a = argsOf<GatherArgs>(ls[0]);
  EXPECT_EQ(a.axisSize, 8);
  EXPECT_EQ(a.globalAxisSize, 32);
  EXPECT_EQ(a.axisStart, 16);
  EXPECT_EQ(a.index64, 0);
  // A start list without this rank, and a block outside the axis.
  p.set("axis_starts", std::vector<int64_t>{0, 8});
  EXPECT_NE(errorOf("gather", {in, idx}, {out}, p, 2).find("none for rank 2"), std::string::npos);
  p.set("axis_starts", std::vector<int64_t>{0, 8, 32, 24});
  EXPECT_NE(errorOf("gather", {in, idx}, {out}, p, 2).find("lies outside the 32 indexed rows"),
            std::string::npos);
  // A zero-padded table: rank 3's block of 8 reaches past the 30 indexed
  // rows; without starts, the indexed rows must be the table's or fewer.
  p.set("axis_size", int64_t(30));
  p.set("axis_starts", std::vector<int64_t>{0, 8, 16, 24});
  EXPECT_EQ(argsOf<GatherArgs>(planDeviceKernel("gather", {in, idx}, {out}, p, 3)[0]).axisStart,
            24);
  Params q;
  q.set("axis_size", int64_t(9));
  EXPECT_NE(errorOf("gather", {in, idx}, {out}, q).find("axis_size 9 exceeds the input's 8 rows"),
            std::string::npos);
}

TEST(DeviceKernels, Pad) {
  Tensor in{addr(0x10000), DType::BF16, {5, 3, 7}}, out{addr(0x20000), DType::BF16, {8, 3, 14}};
  Params p;
  p.set("pads", std::vector<int64_t>{1, 0, 3, 2, 0, 4});
  p.set("value", 1.5);
  auto ls = planDeviceKernel("pad", {in}, {out}, p, 0);
  ASSERT_EQ(ls.size(), 1u);
  EXPECT_EQ(ls[0].function, "sf_pad_e2_i32");
  auto a = argsOf<PadArgs>(ls[0]);
  EXPECT_EQ(a.mode, kPadConstant);
  EXPECT_EQ(a.fill, 0x3FC0u); // 1.5 in bf16
  EXPECT_EQ(a.total, 8 * 3 * 14);
  EXPECT_EQ(a.before[0], 1);
  EXPECT_EQ(a.before[2], 3);
  EXPECT_EQ(a.inStride[0], 21);
  p.set("mode", std::string("reflect"));
  EXPECT_EQ(argsOf<PadArgs>(planDeviceKernel("pad", {in}, {out}, p, 0)[0]).mode, kPadReflect);
  p.set("mode", std::string("mirror"));
  EXPECT_NE(errorOf("pad", {in}, {out}, p).find("unknown mode 'mirror'"), std::string::npos);
  p.set("mode", std::string("constant"));
  p.set("pads", std::vector<int64_t>{1, 0, 3});
  EXPECT_NE(errorOf("pad", {in}, {out}, p).find("pads needs 6"), std::string::npos);
}

Tensor t4(uintptr_t a, DType t, int64_t b, int64_t h, int64_t s, int64_t d) {
  return Tensor{addr(a), t, {b, h, s, d}};
}

TEST(DeviceKernels, AttentionTensorCorePath) {
  Tensor q = t4(0x100000, DType::BF16, 2, 8, 200, 64), k = t4(0x200000, DType::BF16, 2, 2, 300, 64),
         v = t4(0x300000, DType::BF16, 2, 2, 300, 64), y = t4(0x400000, DType::BF16, 2, 8, 200, 64);
  Params p;
  p.set("is_causal", int64_t(1));
  auto ls = planDeviceKernel("attention", {q, k, v}, {y}, p, 0);
  ASSERT_EQ(ls.size(), 1u);
  // No mask, no softcap: the kernel without the general score rule.
  EXPECT_EQ(ls[0].function, "sf_attention_mma_bf16_d64_plain");
  EXPECT_EQ(ls[0].grid[0], 2u * 8u * 4u); // ceil(200 / 64) query blocks
  EXPECT_EQ(ls[0].block[0], unsigned(kMmaThreads));
  EXPECT_EQ(ls[0].sharedBytes, 5u * 64u * 72u * 2u);
  auto a = argsOf<AttentionArgs>(ls[0]);
  EXPECT_EQ(a.group, 4);
  EXPECT_EQ(a.sq, 200);
  EXPECT_EQ(a.skv, 300);
  EXPECT_EQ(a.qBlocks, 4);
  EXPECT_EQ(a.causal, 1);
  EXPECT_FLOAT_EQ(a.scale, 0.125f);
  EXPECT_EQ(a.maskKind, kMaskNone);
  EXPECT_EQ(a.kStride[0], 2 * 300 * 64);
  EXPECT_EQ(a.kStride[1], 300 * 64);
  EXPECT_EQ(a.kStride[2], 64);
  EXPECT_EQ(a.yStride[1], 200 * 64);

  // D = 128 needs more than the default 48 KiB of shared memory.
  Tensor q2 = t4(0x100000, DType::F16, 1, 4, 64, 128), y2 = t4(0x400000, DType::F16, 1, 4, 64, 128);
  ls = planDeviceKernel("attention", {q2, q2, q2}, {y2}, Params{}, 0);
  EXPECT_EQ(ls[0].function, "sf_attention_mma_f16_d128_plain");
  EXPECT_EQ(ls[0].sharedBytes, 5u * 64u * 136u * 2u);
  // A softcap, a mask or a scale that is not positive: the general kernel.
  Params capped;
  capped.set("softcap", 30.0);
  ls = planDeviceKernel("attention", {q2, q2, q2}, {y2}, capped, 0);
  EXPECT_EQ(ls[0].function, "sf_attention_mma_f16_d128");
  Tensor m = t4(0x500000, DType::I1, 1, 1, 64, 64);
  ls = planDeviceKernel("attention", {q2, q2, q2, m}, {y2}, Params{}, 0);
  EXPECT_EQ(ls[0].function, "sf_attention_mma_f16_d128");
  Params negative;
  negative.set("scale", -0.5);
  ls = planDeviceKernel("attention", {q2, q2, q2}, {y2}, negative, 0);
  EXPECT_EQ(ls[0].function, "sf_attention_mma_f16_d128");

  // Two query tiles per warp, when asked for: 128 rows per block, Q's
  // tile twice as tall; D = 64 only.
  ls = planAttention("attention", {q, k, v}, {y}, p, AttentionPath::Mma2);
  EXPECT_EQ(ls[0].function, "sf_attention_mma2_bf16_d64_plain");
  EXPECT_EQ(ls[0].grid[0], 2u * 8u * 2u); // ceil(200 / 128) query blocks
  EXPECT_EQ(argsOf<AttentionArgs>(ls[0]).qBlocks, 2);
  EXPECT_EQ(ls[0].sharedBytes, 6u * 64u * 72u * 2u);
  EXPECT_NE(errorOfCall([&] { planAttention("attention", {q2, q2, q2}, {y2}, Params{},
                                         AttentionPath::Mma2); })
                .find("takes D = 64"),
            std::string::npos);

  // A misaligned operand falls back to the SIMT kernel.
  Tensor odd = t4(0x100002, DType::F16, 1, 4, 64, 128);
  ls = planDeviceKernel("attention", {odd, q2, q2}, {y2}, Params{}, 0);
  EXPECT_EQ(ls[0].function, "sf_attention_simt_f16_dv128");
  // Forced SIMT.
  ls = planAttention("attention", {q2, q2, q2}, {y2}, Params{}, AttentionPath::Simt);
  EXPECT_EQ(ls[0].function, "sf_attention_simt_f16_dv128");
}

TEST(DeviceKernels, AttentionSimtPath) {
  // f32, 3-D layout, D = 40, Dv = 72, scale and softcap, a bool mask that
  // broadcasts over batch and heads.
  Tensor q{addr(0x100000), DType::F32, {2, 50, 6 * 40}}, k{addr(0x200000), DType::F32, {2, 70, 3 * 40}},
      v{addr(0x300000), DType::F32, {2, 70, 3 * 72}}, m{addr(0x500000), DType::I1, {50, 70}},
      y{addr(0x400000), DType::F32, {2, 50, 6 * 72}};
  Params p;
  p.set("q_num_heads", int64_t(6));
  p.set("kv_num_heads", int64_t(3));
  p.set("scale", 0.25);
  p.set("softcap", 30.0);
  auto ls = planDeviceKernel("attention", {q, k, v, m}, {y}, p, 0);
  ASSERT_EQ(ls.size(), 1u);
  EXPECT_EQ(ls[0].function, "sf_attention_simt_f32_dv128");
  EXPECT_EQ(ls[0].block[0], unsigned(kAttnThreads));
  EXPECT_EQ(ls[0].grid[0], 2u * 6u * 1u);
  EXPECT_EQ(ls[0].sharedBytes, 4u * (64u * 41u + 64u * 72u + 64u * 68u));
  auto a = argsOf<AttentionArgs>(ls[0]);
  EXPECT_EQ(a.d, 40);
  EXPECT_EQ(a.dv, 72);
  EXPECT_EQ(a.group, 2);
  EXPECT_FLOAT_EQ(a.scale, 0.25f);
  EXPECT_FLOAT_EQ(a.softcap, 30.f);
  // [B, S, H*D]: batch, head, sequence strides.
  EXPECT_EQ(a.qStride[0], 50 * 240);
  EXPECT_EQ(a.qStride[1], 40);
  EXPECT_EQ(a.qStride[2], 240);
  EXPECT_EQ(a.vStride[1], 72);
  EXPECT_EQ(a.vStride[2], 216);
  EXPECT_EQ(a.yStride[2], 432);
  EXPECT_EQ(a.maskKind, kMaskBool);
  EXPECT_EQ(a.maskStride[0], 0);
  EXPECT_EQ(a.maskStride[1], 0);
  EXPECT_EQ(a.maskStride[2], 70);
  EXPECT_EQ(a.maskStride[3], 1);
  EXPECT_EQ(a.mask, m.data);
}

TEST(DeviceKernels, AttentionGradTwoLaunches) {
  // 3-D grouped-query attention's backward: a warp per query row (dQ, and
  // the rows' rowsum(P * dP) into the workspace), then a warp per key row;
  // both read the forward's saved log-sum-exp.
  Tensor q{addr(0x100000), DType::F32, {2, 50, 6 * 40}}, k{addr(0x200000), DType::F32, {2, 70, 3 * 40}},
      v{addr(0x300000), DType::F32, {2, 70, 3 * 72}}, dy{addr(0x400000), DType::F32, {2, 50, 6 * 72}},
      lse{addr(0x4c0000), DType::F32, {2, 6, 50}},
      dq{addr(0x500000), DType::F32, {2, 50, 6 * 40}}, dk{addr(0x600000), DType::F32, {2, 70, 3 * 40}},
      dv{addr(0x700000), DType::F32, {2, 70, 3 * 72}}, work{addr(0x800000), DType::F32, {600}};
  Params p;
  p.set("q_num_heads", int64_t(6));
  p.set("kv_num_heads", int64_t(3));
  p.set("is_causal", true);
  auto ls = planDeviceKernel("attention_grad", {q, k, v, dy, lse}, {dq, dk, dv, work}, p, 0);
  ASSERT_EQ(ls.size(), 2u);
  EXPECT_EQ(ls[0].function, "sf_attention_grad_dq_f32");
  EXPECT_EQ(ls[1].function, "sf_attention_grad_dkv_f32");
  EXPECT_EQ(ls[0].block[0], unsigned(32 * kAttnGradWarps));
  EXPECT_EQ(ls[0].grid[0], unsigned((2 * 6 * 50 + kAttnGradWarps - 1) / kAttnGradWarps));
  EXPECT_EQ(ls[1].grid[0], unsigned((2 * 3 * 70 + kAttnGradWarps - 1) / kAttnGradWarps));
  auto a = argsOf<AttentionGradArgs>(ls[0]), b = argsOf<AttentionGradArgs>(ls[1]);
  EXPECT_EQ(a.rows, 600);
  EXPECT_EQ(b.rows, 420);
  EXPECT_EQ(a.group, 2);
  EXPECT_EQ(a.causal, 1);
  EXPECT_FLOAT_EQ(a.scale, 1.f / std::sqrt(40.f));
  EXPECT_EQ(a.lse, static_cast<const float *>(lse.data));
  EXPECT_EQ(a.dsum, static_cast<float *>(work.data));
  EXPECT_EQ(a.dyStride[2], 432);
  EXPECT_EQ(a.gradQ, dq.data);
  // The workspace must hold B x Hq x Sq floats; the log-sum-exp is
  // [B, Hq, Sq] f32.
  Tensor small{addr(0x800000), DType::F32, {599}};
  EXPECT_NE(errorOf("attention_grad", {q, k, v, dy, lse}, {dq, dk, dv, small}, p)
                .find("workspace"),
            std::string::npos);
  Tensor flatLse{addr(0x4c0000), DType::F32, {600}};
  EXPECT_NE(errorOf("attention_grad", {q, k, v, dy, flatLse}, {dq, dk, dv, work}, p)
                .find("log-sum-exp must be f32 [B, Hq, Sq]"),
            std::string::npos);
  EXPECT_NE(errorOf("attention_grad", {q, k, v, dy, lse}, {dq, dk, dv}, p)
                .find("cuda-attention-grad-workspace"),
            std::string::npos);
  EXPECT_NE(errorOf("attention_grad", {q, k, v, dy}, {dq, dk, dv, work}, p).find("log-sum-exp"),
            std::string::npos);
}

TEST(DeviceKernels, AttentionSavesTheLogSumExp) {
  // A second output: the kernel writes each query row's log-sum-exp there.
  Tensor q = t4(0x100000, DType::F16, 1, 2, 8, 64), y = t4(0x400000, DType::F16, 1, 2, 8, 64);
  Tensor lse{addr(0x500000), DType::F32, {1, 2, 8}};
  auto ls = planDeviceKernel("attention", {q, q, q}, {y, lse}, Params{}, 0);
  ASSERT_EQ(ls.size(), 1u);
  EXPECT_EQ(argsOf<AttentionArgs>(ls[0]).lse, static_cast<float *>(lse.data));
  EXPECT_EQ(argsOf<AttentionArgs>(planDeviceKernel("attention", {q, q, q}, {y}, Params{}, 0)[0])
                .lse,
            nullptr);
  Tensor wrong{addr(0x500000), DType::F16, {1, 2, 8}};
  EXPECT_NE(errorOf("attention", {q, q, q}, {y, wrong}, Params{}).find("log-sum-exp"),
            std::string::npos);
}

TEST(DeviceKernels, AttentionErrors) {
  Tensor q = t4(0x100000, DType::F64, 1, 2, 8, 16), y = t4(0x400000, DType::F64, 1, 2, 8, 16);
  std::string e = errorOf("attention", {q, q, q}, {y}, Params{});
  EXPECT_NE(e.find("attention"), std::string::npos);
  EXPECT_NE(e.find("f64"), std::string::npos);

  Tensor f = t4(0x100000, DType::F32, 1, 4, 8, 16), fy = t4(0x400000, DType::F32, 1, 4, 8, 16),
         k3 = t4(0x200000, DType::F32, 1, 3, 8, 16);
  EXPECT_NE(errorOf("attention", {f, k3, k3}, {fy}, Params{}).find("multiple of key heads 3"),
            std::string::npos);
  Tensor im{addr(0x500000), DType::I32, {8, 8}};
  EXPECT_NE(errorOf("attention", {f, f, f, im}, {fy}, Params{}).find("mask must be i1"),
            std::string::npos);
  Tensor wm{addr(0x500000), DType::I1, {3, 8}};
  EXPECT_NE(errorOf("attention", {f, f, f, wm}, {fy}, Params{}).find("mask dimension 0"),
            std::string::npos);
  Tensor big = t4(0x100000, DType::F32, 1, 1, 8, 512), bigy = t4(0x400000, DType::F32, 1, 1, 8, 512);
  EXPECT_NE(errorOf("attention", {big, big, big}, {bigy}, Params{}).find("head size 512"),
            std::string::npos);
  try {
    planAttention("attention", {f, f, f}, {fy}, Params{}, AttentionPath::Mma);
    ADD_FAILURE() << "forced tensor-core path accepted f32";
  } catch (const RuntimeError &err) {
    EXPECT_NE(std::string(err.what()).find("tensor-core"), std::string::npos);
  }
  // A mask is indexed in 32 bits within a (batch, head): 50000 x 50000
  // keys per head do not fit (sequence offsets of the operands do).
  Tensor lq = t4(0x100000, DType::BF16, 1, 1, 50000, 16), ly = t4(0x400000, DType::BF16, 1, 1, 50000, 16);
  Tensor lm{addr(0x500000), DType::I1, {50000, 50000}};
  EXPECT_NE(errorOf("attention", {lq, lq, lq, lm}, {ly}, Params{}).find("mask too large"),
            std::string::npos);
  Tensor rowMask{addr(0x500000), DType::I1, {1, 1, 1, 50000}};
  EXPECT_EQ(errorOf("attention", {lq, lq, lq, rowMask}, {ly}, Params{}), "");
  // An empty result plans nothing.
  Tensor e0 = t4(0x100000, DType::F32, 1, 4, 0, 16), e0y = t4(0x400000, DType::F32, 1, 4, 0, 16);
  EXPECT_TRUE(planDeviceKernel("attention", {e0, f, f}, {e0y}, Params{}, 0).empty());
}

#ifdef SHARDFLOW_HAVE_CUDA_KERNELS

/// The images in a fatbin: (kind, arch) with kind 1 = PTX, 2 = ELF (SASS).
std::set<std::pair<int, int>> fatbinImages(const unsigned char *p, size_t n) {
  std::set<std::pair<int, int>> images;
  auto u16 = [&](size_t o) { return uint32_t(p[o]) | uint32_t(p[o + 1]) << 8; };
  auto u32 = [&](size_t o) { return u16(o) | u16(o + 2) << 16; };
  auto u64 = [&](size_t o) { return uint64_t(u32(o)) | uint64_t(u32(o + 4)) << 32; };
  EXPECT_GE(n, 16u);
  EXPECT_EQ(u32(0), 0xBA55ED50u); // fatbin magic
  size_t header = u16(6), end = header + size_t(u64(8));
  EXPECT_LE(end, n);
  for (size_t off = header; off + 32 <= end;) {
    uint32_t kind = u16(off), entryHeader = u32(off + 4);
    uint64_t payload = u64(off + 8);
    images.insert({int(kind), int(u32(off + 28))});
    off += entryHeader + payload;
  }
  return images;
}

TEST(DeviceKernelsFatbin, HoldsSassAndPtx) {
  const unsigned char *p = deviceKernelsFatbin();
  size_t n = deviceKernelsFatbinSize();
  ASSERT_NE(p, nullptr);
  auto images = fatbinImages(p, n);
  EXPECT_TRUE(images.count({2, 80})) << "no sm_80 SASS";
  EXPECT_TRUE(images.count({2, 90})) << "no sm_90 SASS";
  EXPECT_TRUE(images.count({1, 80})) << "no compute_80 PTX";
  // Every function the planner can name is in the (uncompressed) cubins.
  std::string bytes(reinterpret_cast<const char *>(p), n);
  std::vector<std::string> names;
  for (const char *t : {"f32", "f16", "bf16"}) {
    for (int dv : {64, 128, 256})
      names.push_back(std::string("sf_attention_simt_") + t + "_dv" + std::to_string(dv));
    for (const char *part : {"dq_", "dkv_"})
      names.push_back(std::string("sf_attention_grad_") + part + t);
  }
  for (const char *t : {"f16", "bf16"}) {
    for (const char *variant : {"", "_plain"}) {
      for (int d : {64, 128})
        names.push_back(std::string("sf_attention_mma_") + t + "_d" + std::to_string(d) +
                        variant);
      names.push_back(std::string("sf_attention_mma2_") + t + "_d64" + variant);
    }
  }
  for (const char *k : {"sf_strided_copy_e", "sf_pad_e", "sf_gather_e"})
    for (int e : {1, 2, 4, 8, 16})
      for (const char *i : {"_i32", "_i64"})
        names.push_back(k + std::to_string(e) + i);
  for (const std::string &name : names)
    EXPECT_NE(bytes.find(name + '\0'), std::string::npos) << name;
}

TEST(DeviceKernelsFatbin, AttentionHasNoSpills) {
  std::ifstream in(SHARDFLOW_PTXAS_LOG);
  ASSERT_TRUE(in) << "cannot read " << SHARDFLOW_PTXAS_LOG;
  std::stringstream text;
  text << in.rdbuf();
  // ptxas -v: "Compiling entry function 'NAME' for 'sm_XX'", then
  // "N bytes spill stores, M bytes spill loads", then "Used R registers".
  std::regex entry("Compiling entry function '([A-Za-z0-9_]+)' for '(sm_[0-9]+)'[\\s\\S]*?"
                   "([0-9]+) bytes spill stores, ([0-9]+) bytes spill loads[\\s\\S]*?"
                   "Used ([0-9]+) registers");
  std::string log = text.str();
  int attention = 0;
  for (auto it = std::sregex_iterator(log.begin(), log.end(), entry);
       it != std::sregex_iterator(); ++it) {
    const std::smatch &m = *it;
    if (m[1].str().rfind("sf_attention", 0) != 0)
      continue;
    ++attention;
    EXPECT_EQ(m[3].str(), "0") << m[1] << " " << m[2] << " spills stores";
    EXPECT_EQ(m[4].str(), "0") << m[1] << " " << m[2] << " spills loads";
    std::printf("  %-32s %s %3s registers\n", m[1].str().c_str(), m[2].str().c_str(),
                m[5].str().c_str());
  }
  // 9 SIMT + 4 tensor-core + 2 two-tile tensor-core kernels and the last
  // 6 again without the general score rule (_plain), and the backward's
  // dq and dkv kernels for 3 types, two architectures.
  EXPECT_EQ(attention, 2 * 27);
}

#endif // SHARDFLOW_HAVE_CUDA_KERNELS

} // namespace
