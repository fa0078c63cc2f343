// RUN: shard-opt %s -split-input-file -dist-split-stages="ranks=4 microbatches=4 schedule=zbv" -verify-diagnostics
// RUN: not shard-opt %s -split-input-file -dist-split-stages="ranks=2 microbatches=2 split=layers:1,2" 2>&1 | FileCheck %s --check-prefix=SPLIT
// RUN: not shard-opt %s -split-input-file -dist-split-stages="ranks=4 microbatches=6 schedule=interleaved-1f1b" 2>&1 | FileCheck %s --check-prefix=INTER

// zbv on four ranks makes eight stages; three layers cannot fill them.
// expected-error @+1 {{the pipeline has 8 stages but the model has 3 layers to cut between (a stage holds one layer or more)}}
func.func @main(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %w0 = nn.weight "l0.w" {storage = "external", file = "m.data", offset = 0 : i64, size = 256 : i64} : tensor<8x8xf32>
  %m0 = nn.matmul %x, %w0 : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %r0 = nn.relu %m0 : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %w1 = nn.weight "l1.w" {storage = "external", file = "m.data", offset = 256 : i64, size = 256 : i64} : tensor<8x8xf32>
  %m1 = nn.matmul %r0, %w1 : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %r1 = nn.relu %m1 : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %w2 = nn.weight "l2.w" {storage = "external", file = "m.data", offset = 512 : i64, size = 256 : i64} : tensor<8x8xf32>
  %m2 = nn.matmul %r1, %w2 : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %r2 = nn.relu %m2 : (tensor<4x8xf32>) -> tensor<4x8xf32>
  return %r2 : tensor<4x8xf32>
}

// -----

// No two consecutive layers alike: nothing to cut between.
// expected-error @+1 {{pipeline stages are cut between the model's repeated layers, and nn-find-layers finds none in this program}}
func.func @main(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %w0 = nn.weight "l0.w" {storage = "external", file = "m.data", offset = 0 : i64, size = 512 : i64} : tensor<8x16xf32>
  %m0 = nn.matmul %x, %w0 : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
  %r0 = nn.relu %m0 : (tensor<4x16xf32>) -> tensor<4x16xf32>
  %w1 = nn.weight "l1.w" {storage = "external", file = "m.data", offset = 512 : i64, size = 512 : i64} : tensor<16x8xf32>
  %m1 = nn.matmul %r0, %w1 : (tensor<4x16xf32>, tensor<16x8xf32>) -> tensor<4x8xf32>
  %r1 = nn.relu %m1 : (tensor<4x8xf32>) -> tensor<4x8xf32>
  return %r1 : tensor<4x8xf32>
}

// SPLIT: error: --pipeline-split layers:1,2: 2 cuts for 2 stages (one fewer than the stages)
// INTER: error: interleaved-1f1b: --microbatches 6 must be a multiple of pp (4): micro-batches go round the ranks in groups of pp
