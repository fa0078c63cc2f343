//===- KernelTableTest.cpp - the registries against the kernel table -------===//
//
// The kernel signature table (KernelSignatures.inc, generated from the nn
// ODS and RTKernels.td) against the kernels each runtime registers, both
// ways: every kernel the CPU registry has is in the table and marked as
// the CPU's, every one the table gives the CPU is registered; the same for
// the CUDA device's own kernels (CudaImpl::Runtime). Parameter names and
// types are checked where they are used: shard-run binds every kernel
// instruction's parameters to its signature (checked here), so a kernel
// reading a parameter the table lacks, or as another type, fails.
//
//===----------------------------------------------------------------------===//

#include "shardflow/Runtime/Device/CUDA/CudaDevice.h"
#include "shardflow/Runtime/Format/Kernel.h"
#include "shardflow/Runtime/Format/KernelSignature.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

using namespace shardflow::runtime;

TEST(KernelTable, IsSortedAndItsParametersAreUnique) {
  std::string previous;
  int kernels = 0;
  for (const KernelSignature &k : allKernelSignatures()) {
    EXPECT_LT(previous, std::string(k.name));
    previous = k.name;
    std::set<std::string> params;
    for (const ParamSignature &p : k)
      EXPECT_TRUE(params.insert(p.name).second) << k.name << " " << p.name;
    EXPECT_EQ(findKernelSignature(k.name), &k);
    if (k.cuda == CudaImpl::Rewritten) {
      EXPECT_NE(std::string(k.cudaRewrite), "") << k.name;
    }
    ++kernels;
  }
  EXPECT_GE(kernels, 60); // guards against a table that lost its entries
  EXPECT_EQ(findKernelSignature("no_such_kernel"), nullptr);
}

TEST(KernelTable, CpuRegistryMatchesBothWays) {
  std::set<std::string> registered;
  for (const std::string &name : kernelNames()) {
    registered.insert(name);
    const KernelSignature *k = findKernelSignature(name);
    ASSERT_NE(k, nullptr) << "the CPU runtime registers '" << name
                          << "', which the kernel table lacks (RTKernels.td)";
    EXPECT_TRUE(k->cpu) << "the CPU runtime registers '" << name
                        << "', which the kernel table says it lacks";
  }
  for (const KernelSignature &k : allKernelSignatures()) {
    if (k.cpu) {
      EXPECT_TRUE(registered.count(k.name))
          << "the kernel table gives '" << k.name << "' to the CPU, which registers no kernel";
    }
  }
}

TEST(KernelTable, CudaDeviceKernelsMatchBothWays) {
  if (!cudaSupportBuiltIn())
    GTEST_SKIP() << "built without the CUDA device";
  std::set<std::string> device;
  for (const std::string &name : cudaDeviceKernelNames()) {
    device.insert(name);
    const KernelSignature *k = findKernelSignature(name);
    ASSERT_NE(k, nullptr) << "the CUDA device runs '" << name << "', which the table lacks";
    EXPECT_EQ(k->cuda, CudaImpl::Runtime)
        << "the CUDA device runs '" << name << "', which the table says is "
        << cudaImplName(k->cuda);
  }
  for (const KernelSignature &k : allKernelSignatures()) {
    if (k.cuda == CudaImpl::Runtime) {
      EXPECT_TRUE(device.count(k.name))
          << "the kernel table says the CUDA device runs '" << k.name << "'; it does not";
    }
  }
}

TEST(KernelTable, BoundParametersAreReadOnlyAsTheirSignatureSays) {
  const KernelSignature *softmax = findKernelSignature("softmax");
  ASSERT_NE(softmax, nullptr);
  Params params;
  params.set("axis", int64_t(1));
  params.set("node", std::string("/h.0/Softmax"));
  EXPECT_EQ(checkParams(*softmax, params), "");
  params.bind(softmax);
  EXPECT_EQ(params.getInt("axis"), 1);
  EXPECT_EQ(params.getString("node", ""), "/h.0/Softmax");
  // A name the signature lacks, even to ask whether it is there.
  EXPECT_THROW(params.getInt("axes", 0), RuntimeError);
  EXPECT_THROW(params.has("axes"), RuntimeError);
  // Its own parameter as another type.
  EXPECT_THROW(params.getString("axis", ""), RuntimeError);
  try {
    params.getInts("dims", {});
    FAIL() << "reading a parameter the signature lacks";
  } catch (const RuntimeError &e) {
    EXPECT_NE(std::string(e.what()).find("kernel 'softmax' reads parameter 'dims'"),
              std::string::npos)
        << e.what();
  }
}

TEST(KernelTable, ArtifactParametersAreCheckedAgainstTheSignature) {
  const KernelSignature *gemm = findKernelSignature("gemm");
  ASSERT_NE(gemm, nullptr);
  Params good;
  good.set("alpha", 2.0);
  good.set("trans_b", int64_t(1));
  good.set("epilogue", std::string("bias"));
  EXPECT_EQ(checkParams(*gemm, good), "");
  Params unknown = good;
  unknown.set("transB", int64_t(1));
  EXPECT_EQ(checkParams(*gemm, unknown), "kernel 'gemm' has no parameter 'transB'");
  Params wrongType = good;
  wrongType.set("alpha", std::string("2"));
  EXPECT_EQ(checkParams(*gemm, wrongType), "parameter 'alpha' of kernel 'gemm' must be float");
}
