//===- StandinPtxTest.cpp - the stand-in driver's PTX interpreter ---------===//
//
// Hand-written PTX kernels run through tools/cuda-standin/StandinPtx.h on
// host buffers: a warp-shuffle and shared-memory reduction against a
// float64 sum, conversions, comparisons and packed f16x2/bf16x2
// arithmetic against the PTX ISA's stated results, an inlined function call,
// and the faults a GPU would have (out-of-bounds and misaligned accesses, a
// shuffle waiting on an exited lane, shared-memory races) and instructions it
// does not know, each named.
//
//===----------------------------------------------------------------------===//

#include "StandinPtx.h"

#include "shardflow/Runtime/Format/FloatConversion.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <vector>

using namespace shardflow::standin::ptx;

namespace {

const char *kHeader = ".version 8.0\n.target sm_80\n.address_size 64\n";

/// Parses `body` as a module and returns its kernel `name` (failing the
/// test on a problem).
const Kernel &kernelOf(const Module &m, const std::string &name) {
  EXPECT_EQ(m.problem, "");
  auto it = m.kernels.find(name);
  EXPECT_NE(it, m.kernels.end());
  EXPECT_EQ(it->second.problem, "");
  return it->second;
}

/// A launch whose parameters are the given pointers, in order.
Launch launchWith(const Kernel &k, std::vector<const void *> pointers,
                  unsigned blocks, unsigned threads) {
  Launch l;
  l.grid[0] = blocks;
  l.block[0] = threads;
  l.parameters.assign(k.parameterBytes, 0);
  EXPECT_EQ(k.parameters.size(), pointers.size());
  for (size_t i = 0; i < pointers.size(); ++i) {
    uint64_t address = reinterpret_cast<uintptr_t>(pointers[i]);
    std::memcpy(l.parameters.data() + k.parameters[i].offset, &address, 8);
  }
  return l;
}

/// Accesses must fall inside one of `buffers` (pointer, bytes).
RangeCheck within(std::vector<std::pair<const void *, size_t>> buffers) {
  return [buffers](uint64_t address, size_t bytes) {
    for (auto [p, n] : buffers) {
      uint64_t base = reinterpret_cast<uintptr_t>(p);
      if (address >= base && address + bytes <= base + n)
        return true;
    }
    return false;
  };
}

// Each block sums its 64 floats: a butterfly shuffle within each warp, the
// two warp sums through shared memory after a barrier.
const char *kBlockSum = R"(
.shared .align 4 .b8 partial[8];
.visible .entry block_sum(
	.param .u64 .ptr .align 1 block_sum_param_0,
	.param .u64 .ptr .align 1 block_sum_param_1
)
.maxntid 64, 1, 1
{
	.reg .pred 	%p<2>;
	.reg .b32 	%r<16>;
	.reg .b64 	%rd<8>;

	ld.param.b64 	%rd1, [block_sum_param_0];
	ld.param.b64 	%rd2, [block_sum_param_1];
	cvta.to.global.u64 	%rd1, %rd1;
	mov.u32 	%r1, %tid.x;
	mov.u32 	%r2, %ctaid.x;
	shl.b32 	%r3, %r2, 6;
	add.s32 	%r3, %r3, %r1;
	mul.wide.u32 	%rd3, %r3, 4;
	add.s64 	%rd4, %rd1, %rd3;
	ld.global.b32 	%r4, [%rd4];
	shfl.sync.bfly.b32 	%r5, %r4, 16, 31, -1;
	add.rn.f32 	%r4, %r4, %r5;
	shfl.sync.bfly.b32 	%r5, %r4, 8, 31, -1;
	add.rn.f32 	%r4, %r4, %r5;
	shfl.sync.bfly.b32 	%r5, %r4, 4, 31, -1;
	add.rn.f32 	%r4, %r4, %r5;
	shfl.sync.bfly.b32 	%r5, %r4, 2, 31, -1;
	add.rn.f32 	%r4, %r4, %r5;
	shfl.sync.bfly.b32 	%r5, %r4, 1, 31, -1;
	add.rn.f32 	%r4, %r4, %r5;
	and.b32 	%r6, %r1, 31;
	setp.ne.b32 	%p1, %r6, 0;
	shr.u32 	%r7, %r1, 5;
	mul.wide.u32 	%rd5, %r7, 4;
	mov.b64 	%rd6, partial;
	add.s64 	%rd6, %rd6, %rd5;
	@!%p1 st.shared.b32 	[%rd6], %r4;
	bar.sync 	0;
	setp.ne.b32 	%p1, %r1, 0;
	@%p1 bra 	$L__done;
	ld.shared.b32 	%r8, [partial];
	ld.shared.b32 	%r9, [partial+4];
	add.rn.f32 	%r10, %r8, %r9;
	cvta.to.global.u64 	%rd2, %rd2;
	mul.wide.u32 	%rd7, %r2, 4;
	add.s64 	%rd7, %rd2, %rd7;
	st.global.b32 	[%rd7], %r10;
$L__done:
	ret;
}
)";

TEST(StandinPtx, WarpShufflesAndABarrierSumEachBlock) {
  auto m = parse(std::string(kHeader) + kBlockSum);
  const Kernel &k = kernelOf(*m, "block_sum");
  EXPECT_EQ(k.staticShared, 8u);
  EXPECT_EQ(k.maxThreads[0], 64u);
  std::vector<float> in(3 * 64), out(3, -1.0f);
  for (size_t i = 0; i < in.size(); ++i)
    in[i] = std::sin(float(i)) * 3.0f;
  run(k, launchWith(k, {in.data(), out.data()}, 3, 64),
      within({{in.data(), in.size() * 4}, {out.data(), out.size() * 4}}));
  for (int b = 0; b < 3; ++b) {
    double want =
        std::accumulate(in.begin() + 64 * b, in.begin() + 64 * (b + 1), 0.0);
    EXPECT_NEAR(out[b], want, 1e-5 * 64 * 3) << "block " << b;
  }
}

/// What run() throws ("" when it runs).
std::string failureOf(const Kernel &k, const Launch &l, const RangeCheck &g) {
  try {
    run(k, l, g);
  } catch (const std::runtime_error &e) {
    return e.what();
  }
  return "";
}

/// The kind of the Fault run() throws (the test fails when it runs).
Fault::Kind faultKindOf(const Kernel &k, const Launch &l, const RangeCheck &g) {
  try {
    run(k, l, g);
  } catch (const Fault &e) {
    return e.kind;
  }
  ADD_FAILURE() << "kernel " << k.name << " ran without a fault";
  return Fault::Kind::Other;
}

TEST(StandinPtx, SharedMemoryRacesAreNamed) {
  // Without its barrier the block sum races: thread 0 reads the second
  // warp's partial before thread 32 writes it.
  std::string racy = std::string(kHeader) + kBlockSum;
  racy.erase(racy.find("bar.sync \t0;"), std::strlen("bar.sync \t0;"));
  auto m = parse(racy);
  const Kernel &k = kernelOf(*m, "block_sum");
  std::vector<float> in(64, 1.0f), out(1);
  auto check = within({{in.data(), in.size() * 4}, {out.data(), 4}});
  std::string why =
      failureOf(k, launchWith(k, {in.data(), out.data()}, 1, 64), check);
  EXPECT_NE(why.find("thread (32,0,0), PTX line"), std::string::npos) << why;
  EXPECT_NE(
      why.find("shared memory race: this thread writes shared byte 4, which "
               "thread (0,0,0) read since the last bar.sync"),
      std::string::npos)
      << why;
  // A race is no GPU error code of its own: the launch fails.
  EXPECT_EQ(
      faultKindOf(k, launchWith(k, {in.data(), out.data()}, 1, 64), check),
      Fault::Kind::Other);

  // The all-reduce's ending (MLIR's gpu.all_reduce lowering): lanes read
  // their slot, meet at a shuffle, then all write the result to slot 0.
  // The shuffle orders the reads before the writes, and writes of one
  // value are no race; writes of different values are.
  const char *ending = R"(
.shared .align 4 .b8 slots[32];
.visible .entry ending(
	.param .u64 .ptr .align 1 ending_param_0
)
{
	.reg .b32 	%r<8>;
	.reg .b64 	%rd<4>;
	mov.u32 	%r1, %tid.x;
	mov.b64 	%rd1, slots;
	mul.wide.u32 	%rd2, %r1, 4;
	add.s64 	%rd2, %rd1, %rd2;
	st.shared.b32 	[%rd2], %r1;
	bar.sync 	0;
	ld.shared.b32 	%r2, [%rd2];
	shfl.sync.bfly.b32 	%r3, %r2, 1, 31, 255;
	add.s32 	%r4, %r2, %r3;
	VALUE
	st.shared.b32 	[slots], %r5;
	bar.sync 	0;
	ld.param.b64 	%rd3, [ending_param_0];
	cvta.to.global.u64 	%rd3, %rd3;
	ld.shared.b32 	%r6, [slots];
	st.global.b32 	[%rd3], %r6;
	ret;
}
)";
  auto endingWith = [&](const std::string &value) {
    std::string text = std::string(kHeader) + ending;
    text.replace(text.find("VALUE"), 5, value);
    return parse(text);
  };
  uint32_t result = 0;
  auto same = endingWith("mov.b32 \t%r5, 7;");
  const Kernel &ks = kernelOf(*same, "ending");
  EXPECT_EQ(
      failureOf(ks, launchWith(ks, {&result}, 1, 8), within({{&result, 4}})),
      "");
  EXPECT_EQ(result, 7u);
  auto different = endingWith("mov.b32 \t%r5, %r4;");
  const Kernel &kd = kernelOf(*different, "ending");
  why = failureOf(kd, launchWith(kd, {&result}, 1, 8), within({{&result, 4}}));
  // Lanes 0 and 1 both write 0 + 1; lane 2 writes 2 + 3.
  EXPECT_NE(why.find("thread (2,0,0), PTX line"), std::string::npos) << why;
  EXPECT_NE(
      why.find("this thread writes shared byte 0, which thread (1,0,0) wrote "
               "since the last bar.sync"),
      std::string::npos)
      << why;
}

TEST(StandinPtx, AGlobalAccessOutsideMemoryIsNamed) {
  auto m = parse(std::string(kHeader) + kBlockSum);
  const Kernel &k = kernelOf(*m, "block_sum");
  std::vector<float> in(64, 1.0f), out(1);
  // Two blocks read 128 floats of a 64-float buffer.
  try {
    run(k, launchWith(k, {in.data(), out.data()}, 2, 64),
        within({{in.data(), in.size() * 4}, {out.data(), out.size() * 4}}));
    FAIL() << "the read past the buffer was not caught";
  } catch (const Fault &e) {
    EXPECT_EQ(e.kind, Fault::Kind::IllegalAddress);
    std::string what = e.what();
    EXPECT_NE(what.find("kernel block_sum, block (1,0,0) thread (0,0,0)"),
              std::string::npos)
        << what;
    EXPECT_NE(what.find("'ld.global.b32 %r4, [%rd4]'"), std::string::npos)
        << what;
    EXPECT_NE(what.find("global load of 4 bytes"), std::string::npos) << what;
    EXPECT_NE(what.find("outside every device allocation"), std::string::npos)
        << what;
  }
}

/// One thread computes `instruction` on a 32-bit input and stores the
/// 32-bit result: the instruction reads %r1 and writes %r2.
uint32_t unary(const std::string &instruction, uint32_t input) {
  std::string text = std::string(kHeader) + R"(
.visible .entry one(
	.param .u64 .ptr .align 1 one_param_0
)
{
	.reg .pred 	%p<4>;
	.reg .b16 	%rs<4>;
	.reg .b32 	%r<4>;
	.reg .b64 	%rd<4>;
	ld.param.b64 	%rd1, [one_param_0];
	ld.global.b32 	%r1, [%rd1];
	)" + instruction +
                     R"(;
	st.global.b32 	[%rd1], %r2;
	ret;
}
)";
  auto m = parse(text);
  const Kernel &k = kernelOf(*m, "one");
  uint32_t word = input;
  run(k, launchWith(k, {&word}, 1, 1), within({{&word, 4}}));
  return word;
}

uint32_t bits(float f) { return shardflow::runtime::floatToBits(f); }
float value(uint32_t u) { return shardflow::runtime::bitsToFloat(u); }

TEST(StandinPtx, ConversionsRoundAndSaturateAsThePtxIsaSays) {
  // bf16: round to nearest even (0x3f808000 is halfway between 0x3f80 and
  // 0x3f81, and goes to the even 0x3f80; 0x3f818000 goes up to 0x3f82).
  EXPECT_EQ(
      unary("cvt.rn.bf16.f32 %rs1, %r1; cvt.u32.u16 %r2, %rs1", 0x3f808000u),
      0x3f80u);
  EXPECT_EQ(
      unary("cvt.rn.bf16.f32 %rs1, %r1; cvt.u32.u16 %r2, %rs1", 0x3f818000u),
      0x3f82u);
  // f32 to s32 truncates, saturates and gives 0 for NaN.
  EXPECT_EQ(int32_t(unary("cvt.rzi.s32.f32 %r2, %r1", bits(-2.75f))), -2);
  EXPECT_EQ(int32_t(unary("cvt.rzi.s32.f32 %r2, %r1", bits(3e9f))), INT32_MAX);
  EXPECT_EQ(unary("cvt.rzi.s32.f32 %r2, %r1", 0x7fc00000u), 0u);
  EXPECT_EQ(unary("cvt.rmi.f32.f32 %r2, %r1", bits(-1.5f)), bits(-2.0f));
  EXPECT_EQ(unary("cvt.rni.f32.f32 %r2, %r1", bits(2.5f)), bits(2.0f));
  EXPECT_EQ(unary("cvt.sat.f32.f32 %r2, %r1", bits(1.5f)), bits(1.0f));
  // fma.rm rounds toward minus infinity: 1 + 2^-30 is not an f32.
  EXPECT_EQ(unary("fma.rm.f32 %r2, %r1, 0f30800000, 0f3F800000", bits(1.0f)),
            bits(1.0f));
  EXPECT_EQ(unary("fma.rp.f32 %r2, %r1, 0f30800000, 0f3F800000", bits(1.0f)),
            bits(std::nextafter(1.0f, 2.0f)));
  // Integer division by zero does not trap (the result is unspecified).
  unary("div.s32 %r2, %r1, 0", 7);
  EXPECT_EQ(int32_t(unary("div.s32 %r2, %r1, -1", 0x80000000u)), INT32_MIN);
  EXPECT_EQ(unary("bfe.u32 %r2, %r1, 4, 8", 0xabcdu), 0xbcu);
  EXPECT_EQ(unary("bfe.s32 %r2, %r1, 4, 8", 0xf80u), 0xfffffff8u);
  // A narrower signed result is sign-extended to its register: an s16
  // instruction then reads -5, not 251.
  EXPECT_EQ(unary("cvt.s8.s32 %rs1, %r1; min.s16 %rs2, %rs1, 0; "
                  "cvt.s32.s16 %r2, %rs2",
                  0xfbu),
            0xfffffffbu);
  // Immediates in a vector operand.
  EXPECT_EQ(
      unary("st.global.v2.b16 [%rd1], {7, -1}; ld.global.b32 %r2, [%rd1]", 0),
      0xffff0007u);
  EXPECT_EQ(unary("shl.b32 %r2, %r1, 40", 1),
            0u); // shifts past the width clamp
  EXPECT_EQ(unary("shr.s32 %r2, %r1, 40", 0x80000000u), 0xffffffffu);
}

TEST(StandinPtx, MinMaxAndComparisonsHandleNaNAsThePtxIsaSays) {
  uint32_t nan = 0x7fc00000u;
  EXPECT_EQ(unary("max.f32 %r2, %r1, 0f3F800000", nan), bits(1.0f));
  EXPECT_TRUE(
      std::isnan(value(unary("max.NaN.f32 %r2, %r1, 0f3F800000", nan))));
  EXPECT_EQ(unary("min.f32 %r2, %r1, 0f00000000", bits(-0.0f)), bits(-0.0f));
  EXPECT_EQ(
      unary("setp.lt.f32 %p1, %r1, 0f3F800000; selp.b32 %r2, 1, 0, %p1", nan),
      0u);
  EXPECT_EQ(
      unary("setp.ltu.f32 %p1, %r1, 0f3F800000; selp.b32 %r2, 1, 0, %p1", nan),
      1u);
  EXPECT_EQ(unary("setp.ne.f32 %p1, %r1, %r1; selp.b32 %r2, 1, 0, %p1", nan),
            0u);
  EXPECT_EQ(
      unary("setp.lt.u32 %p1, %r1, 1; selp.b32 %r2, 1, 0, %p1", 0xffffffffu),
      0u);
  EXPECT_EQ(
      unary("setp.lt.s32 %p1, %r1, 1; selp.b32 %r2, 1, 0, %p1", 0xffffffffu),
      1u);
  EXPECT_EQ(unary("copysign.f32 %r2, %r1, 0f40000000", bits(-1.0f)),
            bits(-2.0f));
}

TEST(StandinPtx, PackedHalfArithmeticRoundsEachHalf) {
  // bf16x2 of (high, low): 2^-8 added to 1 + 2^-7 is halfway between two
  // bf16 values and goes to the even one (0x3f82); added to 1 it goes
  // back to 1 (0x3f80).
  EXPECT_EQ(unary("mov.b32 %r3, 0x3B803B80; add.rn.bf16x2 %r2, %r1, %r3",
                  0x3f813f80u),
            0x3f823f80u);
  // x * x + x on (2.5, -1): (8.75, 0).
  EXPECT_EQ(unary("fma.rn.bf16x2 %r2, %r1, %r1, %r1", 0x4020bf80u),
            0x410c0000u);
  EXPECT_EQ(unary("sub.rn.bf16x2 %r2, %r1, %r1", 0x4020bf80u), 0u);
  // f16x2: (2, 1) squared is (4, 1).
  EXPECT_EQ(unary("mul.rn.f16x2 %r2, %r1, %r1", 0x40003c00u), 0x44003c00u);
  // max ignores a NaN half unless .NaN, which gives the canonical NaN.
  EXPECT_EQ(
      unary("mov.b32 %r3, 0x40003F00; max.bf16x2 %r2, %r1, %r3", 0x7fc03f80u),
      0x40003f80u);
  EXPECT_EQ(unary("mov.b32 %r3, 0x40003F00; max.NaN.bf16x2 %r2, %r1, %r3",
                  0x7fc03f80u),
            0x7fff3f80u);
  EXPECT_EQ(
      unary("mov.b32 %r3, 0x40003F00; min.bf16x2 %r2, %r1, %r3", 0x7fc03f80u),
      0x40003f00u);
  EXPECT_EQ(unary("neg.bf16x2 %r2, %r1", 0x4020bf80u), 0xc0203f80u);
  EXPECT_EQ(unary("abs.f16x2 %r2, %r1", 0xc000bc00u), 0x40003c00u);
}

TEST(StandinPtx, CallsAreInlinedWithTheirArgumentsAndResults) {
  std::string text = std::string(kHeader) + R"(
.func  (.param .b32 func_retval0) twice_plus(
	.param .b32 twice_plus_param_0,
	.param .b32 twice_plus_param_1
)
;
.visible .entry caller(
	.param .u64 .ptr .align 1 caller_param_0
)
{
	.reg .b32 	%r<4>;
	.reg .b64 	%rd<2>;
	ld.param.b64 	%rd1, [caller_param_0];
	ld.global.b32 	%r1, [%rd1];
	{ // callseq 0, 0
	.param .b32 	param0;
	.param .b32 	param1;
	.param .b32 	retval0;
	st.param.b32 	[param0], %r1;
	st.param.b32 	[param1], 5;
	call.uni (retval0), twice_plus, (param0, param1);
	ld.param.b32 	%r2, [retval0];
	}
	{ // callseq 1, 0: the same names declared again, stored in another order
	.param .b32 	param0;
	.param .b32 	param1;
	.param .b32 	retval0;
	st.param.b32 	[param1], %r2;
	st.param.b32 	[param0], 1;
	call.uni (retval0), twice_plus, (param0, param1);
	ld.param.b32 	%r3, [retval0];
	}
	st.global.b32 	[%rd1], %r2;
	st.global.b32 	[%rd1+4], %r3;
	ret;
}
.func  (.param .b32 func_retval0) twice_plus(
	.param .b32 twice_plus_param_0,
	.param .b32 twice_plus_param_1
)
{
	.reg .pred 	%p<2>;
	.reg .b32 	%r<4>;
	ld.param.b32 	%r1, [twice_plus_param_0];
	ld.param.b32 	%r2, [twice_plus_param_1];
	setp.lt.s32 	%p1, %r1, 0;
	@%p1 bra 	$L__negative;
	shl.b32 	%r3, %r1, 1;
	add.s32 	%r3, %r3, %r2;
	st.param.b32 	[func_retval0], %r3;
	ret;
$L__negative:
	st.param.b32 	[func_retval0], -1;
	ret;
}
)";
  auto m = parse(text);
  const Kernel &k = kernelOf(*m, "caller");
  // twice_plus(x, 5), then twice_plus(1, that): 2 + 2x + 5.
  for (auto [input, want] : {std::pair<int32_t, int32_t>{20, 45}, {-3, -1}}) {
    int32_t words[2] = {input, 0};
    run(k, launchWith(k, {words}, 1, 1), within({{words, 8}}));
    EXPECT_EQ(words[0], want) << "input " << input;
    EXPECT_EQ(words[1], 2 + want) << "input " << input;
  }
}

TEST(StandinPtx, AShuffleWaitingOnAnExitedLaneIsNamed) {
  std::string text = std::string(kHeader) + R"(
.visible .entry early_exit()
{
	.reg .pred 	%p<2>;
	.reg .b32 	%r<4>;
	mov.u32 	%r1, %tid.x;
	setp.gt.u32 	%p1, %r1, 15;
	@%p1 bra 	$L__out;
	shfl.sync.bfly.b32 	%r2, %r1, 1, 31, -1;
$L__out:
	ret;
}
)";
  auto m = parse(text);
  const Kernel &k = kernelOf(*m, "early_exit");
  try {
    run(k, launchWith(k, {}, 1, 32), within({}));
    FAIL() << "the shuffle on exited lanes was not caught";
  } catch (const std::runtime_error &e) {
    EXPECT_NE(
        std::string(e.what()).find("mask names lane 16, which has exited"),
        std::string::npos)
        << e.what();
  }
}

TEST(StandinPtx, MisalignedAndSharedOverrunsAreNamed) {
  std::string text = std::string(kHeader) + R"(
.extern .shared .align 16 .b8 dynamic[];
.visible .entry overrun(
	.param .u64 .ptr .align 1 overrun_param_0,
	.param .u32 overrun_param_1
)
{
	.reg .b32 	%r<4>;
	.reg .b64 	%rd<4>;
	ld.param.b64 	%rd1, [overrun_param_0];
	ld.param.b32 	%r1, [overrun_param_1];
	cvt.u64.u32 	%rd2, %r1;
	add.s64 	%rd3, %rd1, %rd2;
	ld.global.b32 	%r2, [%rd3];
	mov.b64 	%rd1, dynamic;
	st.shared.b32 	[%rd1+%r1], %r2;
	ret;
}
)";
  auto m = parse(text);
  // [%rd1+%r1] is not PTX: the register-plus-register address is refused.
  ASSERT_EQ(m->kernels.count("overrun"), 1u);
  EXPECT_NE(m->kernels.at("overrun").problem.find("malformed address"),
            std::string::npos)
      << m->kernels.at("overrun").problem;

  std::string fixed = text;
  fixed.replace(fixed.find("[%rd1+%r1]"), 10, "[%rd1+64]");
  m = parse(fixed);
  const Kernel &k = kernelOf(*m, "overrun");
  alignas(16) uint32_t words[4] = {1, 2, 3, 4};
  auto launch = [&](uint32_t offset, size_t dynamicShared) {
    Launch l;
    l.parameters.assign(k.parameterBytes, 0);
    uint64_t address = reinterpret_cast<uintptr_t>(words);
    std::memcpy(l.parameters.data() + k.parameters[0].offset, &address, 8);
    std::memcpy(l.parameters.data() + k.parameters[1].offset, &offset, 4);
    l.dynamicShared = dynamicShared;
    return l;
  };
  auto failure = [&](uint32_t offset, size_t dynamicShared) {
    return failureOf(k, launch(offset, dynamicShared),
                     within({{words, sizeof(words)}}));
  };
  EXPECT_EQ(failure(4, 68), "");
  EXPECT_NE(failure(2, 68).find("global load of 4 bytes at 0x"),
            std::string::npos);
  EXPECT_NE(failure(2, 68).find("is misaligned"), std::string::npos);
  EXPECT_NE(
      failure(4, 64).find("outside the block's 64 bytes of shared memory"),
      std::string::npos)
      << failure(4, 64);
}

// Four floats a thread: ld.global.v4 and st.shared.v2 at OFFSET bytes past
// an aligned base. A vector access must be aligned to its whole size (16
// and 8 bytes), not only to its elements', or a GPU faults with
// "misaligned address".
const char *kVectorCopy = R"(
.shared .align 16 .b8 staging[128];
.visible .entry vector_copy(
	.param .u64 .ptr .align 1 vector_copy_param_0,
	.param .u64 .ptr .align 1 vector_copy_param_1
)
{
	.reg .b32 	%r<8>;
	.reg .b64 	%rd<8>;
	ld.param.b64 	%rd1, [vector_copy_param_0];
	ld.param.b64 	%rd2, [vector_copy_param_1];
	cvta.to.global.u64 	%rd1, %rd1;
	cvta.to.global.u64 	%rd2, %rd2;
	mov.u32 	%r1, %tid.x;
	mul.wide.u32 	%rd3, %r1, 16;
	add.s64 	%rd4, %rd1, %rd3;
	ld.global.v4.b32 	{%r2, %r3, %r4, %r5}, [%rd4+GLOBAL];
	mov.b64 	%rd5, staging;
	add.s64 	%rd5, %rd5, %rd3;
	st.shared.v2.b32 	[%rd5+SHARED], {%r2, %r3};
	st.shared.v2.b32 	[%rd5+8], {%r4, %r5};
	ld.shared.v4.b32 	{%r2, %r3, %r4, %r5}, [%rd5];
	add.s64 	%rd6, %rd2, %rd3;
	st.global.v4.b32 	[%rd6], {%r2, %r3, %r4, %r5};
	ret;
}
)";

TEST(StandinPtx, MisalignedVectorAccessesFaultAsOnAGpu) {
  auto copyWith = [](int global, int shared) {
    std::string text = std::string(kHeader) + kVectorCopy;
    text.replace(text.find("GLOBAL"), 6, std::to_string(global));
    text.replace(text.find("SHARED"), 6, std::to_string(shared));
    return parse(text);
  };
  alignas(16) float in[40], out[32];
  for (int i = 0; i < 40; ++i)
    in[i] = float(i);
  auto check = within({{in, sizeof(in)}, {out, sizeof(out)}});

  // Aligned: thread i copies floats 4i..4i+3 (at a base 16 bytes on, 4i+4..).
  auto aligned = copyWith(16, 0);
  const Kernel &ka = kernelOf(*aligned, "vector_copy");
  EXPECT_EQ(failureOf(ka, launchWith(ka, {in, out}, 1, 8), check), "");
  for (int i = 0; i < 32; ++i)
    EXPECT_EQ(out[i], float(i + 4)) << i;

  // 4 bytes on: each float is aligned, the 16-byte vector is not.
  auto global = copyWith(4, 0);
  const Kernel &kg = kernelOf(*global, "vector_copy");
  std::string why = failureOf(kg, launchWith(kg, {in, out}, 1, 8), check);
  EXPECT_NE(why.find("kernel vector_copy, block (0,0,0) thread (0,0,0), PTX "
                     "line 20 'ld.global.v4.b32 {%r2, %r3, %r4, %r5}, "
                     "[%rd4+4]': global load of 16 bytes at 0x"),
            std::string::npos)
      << why;
  EXPECT_NE(why.find(" is misaligned"), std::string::npos) << why;
  EXPECT_EQ(faultKindOf(kg, launchWith(kg, {in, out}, 1, 8), check),
            Fault::Kind::Misaligned);

  // A v2 store of 8 bytes at 4 bytes past a 16-byte boundary.
  auto shared = copyWith(0, 4);
  const Kernel &ks = kernelOf(*shared, "vector_copy");
  why = failureOf(ks, launchWith(ks, {in, out}, 1, 8), check);
  EXPECT_NE(why.find("'st.shared.v2.b32 [%rd5+4], {%r2, %r3}': shared store "
                     "of 8 bytes at 0x4 is misaligned"),
            std::string::npos)
      << why;
  EXPECT_EQ(faultKindOf(ks, launchWith(ks, {in, out}, 1, 8), check),
            Fault::Kind::Misaligned);
}

TEST(StandinPtx, AShuffleThatPartOfAWarpSkipsIsNamed) {
  // One warp per row: a guard on the row (uniform over the warp) lets the
  // whole warp skip the shuffle; a guard on the lane sends part of the warp
  // to the barrier while the rest waits at the shuffle for it.
  std::string text = std::string(kHeader) + R"(
.visible .entry guarded(
	.param .u64 .ptr .align 1 guarded_param_0
)
{
	.reg .pred 	%p<2>;
	.reg .b32 	%r<8>;
	.reg .b64 	%rd<4>;
	mov.u32 	%r1, %tid.x;
	shr.u32 	%r2, %r1, 5;
	setp.gt.u32 	%p1, GUARD, ROWS;
	@%p1 bra 	$L__skip;
	shfl.sync.bfly.b32 	%r3, %r1, 1, 31, -1;
	ld.param.b64 	%rd1, [guarded_param_0];
	cvta.to.global.u64 	%rd1, %rd1;
	mul.wide.u32 	%rd2, %r1, 4;
	add.s64 	%rd3, %rd1, %rd2;
	st.global.b32 	[%rd3], %r3;
$L__skip:
	bar.sync 	0;
	ret;
}
)";
  auto guardedBy = [&](const std::string &guard, int rows) {
    std::string t = text;
    t.replace(t.find("GUARD"), 5, guard);
    t.replace(t.find("ROWS"), 4, std::to_string(rows - 1));
    return parse(t);
  };
  std::vector<uint32_t> out(64, 0);
  auto check = within({{out.data(), out.size() * 4}});
  auto byRow = guardedBy("%r2", 1); // warp 0 shuffles, warp 1 skips
  const Kernel &kr = kernelOf(*byRow, "guarded");
  EXPECT_EQ(failureOf(kr, launchWith(kr, {out.data()}, 1, 64), check), "");
  for (uint32_t lane = 0; lane < 32; ++lane)
    EXPECT_EQ(out[lane], lane ^ 1) << lane;
  auto byLane = guardedBy("%r1", 12); // lanes 12.. of warp 0 skip
  const Kernel &kl = kernelOf(*byLane, "guarded");
  std::string why = failureOf(kl, launchWith(kl, {out.data()}, 1, 64), check);
  EXPECT_NE(why.find("the lanes named in shfl.sync's mask never all reach it"),
            std::string::npos)
      << why;
  EXPECT_NE(why.find("'shfl.sync.bfly.b32 %r3, %r1, 1, 31, -1'"),
            std::string::npos)
      << why;
}

TEST(StandinPtx, WhatItDoesNotInterpretMakesTheKernelUnrunnable) {
  std::string text = std::string(kHeader) + R"(
.visible .entry ballot()
{
	.reg .b32 	%r<4>;
	.reg .pred 	%p<2>;
	setp.eq.u32 	%p1, %r1, 0;
	vote.sync.ballot.b32 	%r2, %p1, -1;
	ret;
}
.visible .entry fine()
{
	ret;
}
)";
  auto m = parse(text);
  EXPECT_EQ(m->problem, "");
  const Kernel &bad = m->kernels.at("ballot");
  EXPECT_NE(bad.problem.find("line 10"), std::string::npos) << bad.problem;
  EXPECT_NE(bad.problem.find("does not interpret 'vote'"), std::string::npos)
      << bad.problem;
  EXPECT_THROW(run(bad, Launch{}, within({})), std::runtime_error);
  EXPECT_EQ(m->kernels.at("fine").problem, "");
}

} // namespace
