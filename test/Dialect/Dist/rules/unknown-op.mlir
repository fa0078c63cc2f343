// An nn op the registry does not know keeps getShardingRule's error and
// fails the pass. The nn dialect rejects unknown ops, so the test skips the
// verifier to get one into the IR.
// RUN: shard-opt %s -test-dist-sharding-rules -verify-diagnostics -allow-unregistered-dialect -mlir-very-unsafe-disable-verifier-on-parsing
// RUN: not shard-opt %s -test-dist-sharding-rules -allow-unregistered-dialect -mlir-very-unsafe-disable-verifier-on-parsing 2>&1 | FileCheck %s

// CHECK: error: 'nn.no_such_op' op has no sharding rule
func.func @unknown(%x: tensor<2xf32>) {
  // expected-error @below {{'nn.no_such_op' op has no sharding rule}}
  %0 = "nn.no_such_op"(%x) : (tensor<2xf32>) -> tensor<2xf32>
  // expected-remark @below {{([i]) -> ([i]) {i=2}}}
  %1 = nn.exp %x : (tensor<2xf32>) -> tensor<2xf32>
  return
}
