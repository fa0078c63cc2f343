//===- NNDialectTest.cpp - nn dialect helpers ------------------------------===//

#include "shardflow/Dialect/NN/IR/NNOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/MLIRContext.h"
#include <gtest/gtest.h>

using namespace mlir;
using namespace shardflow;

TEST(NNDialect, ElementStorageBytes) {
  MLIRContext ctx;
  Builder b(&ctx);
  EXPECT_EQ(nn::getElementStorageBytes(b.getI1Type()), 1);
  EXPECT_EQ(nn::getElementStorageBytes(b.getBF16Type()), 2);
  EXPECT_EQ(nn::getElementStorageBytes(b.getF32Type()), 4);
  EXPECT_EQ(nn::getElementStorageBytes(b.getI64Type()), 8);
  auto t = RankedTensorType::get({3, 5}, b.getF16Type());
  EXPECT_EQ(nn::getTensorStorageBytes(t), 30);
}

TEST(NNDialect, EinsumExplicitOutput) {
  std::string why;
  auto eq = nn::parseEinsumEquation("bhid, bhjd -> bhij", 2, why);
  ASSERT_TRUE(succeeded(eq)) << why;
  EXPECT_EQ(eq->inputs[0], "bhid");
  EXPECT_EQ(eq->inputs[1], "bhjd");
  EXPECT_EQ(eq->output, "bhij");
}

TEST(NNDialect, EinsumImplicitOutputIsSortedSingletons) {
  std::string why;
  auto eq = nn::parseEinsumEquation("kj,ji", 2, why);
  ASSERT_TRUE(succeeded(eq)) << why;
  // j repeats and is summed; k and i appear once and come out sorted.
  EXPECT_EQ(eq->output, "ik");
}

TEST(NNDialect, EinsumEllipsis) {
  std::string why;
  auto eq = nn::parseEinsumEquation("...ij,...jk->...ik", 2, why);
  ASSERT_TRUE(succeeded(eq)) << why;
  EXPECT_EQ(eq->inputs[0], ".ij");
  EXPECT_EQ(eq->output, ".ik");
}

TEST(NNDialect, EinsumRejectsMalformed) {
  std::string why;
  EXPECT_TRUE(failed(nn::parseEinsumEquation("ij,jk->ik", 1, why)));
  EXPECT_NE(why.find("2 input terms"), std::string::npos);
  EXPECT_TRUE(failed(nn::parseEinsumEquation("i1,jk", 2, why)));
  EXPECT_TRUE(failed(nn::parseEinsumEquation("...i...,j", 2, why)));
}
