// shard-opt's --raise-attention and --dtype run nn-raise-attention (before
// sharding) and nn-convert-float-type (after partitioning) on the program.
// RUN: shard-opt %s --raise-attention | FileCheck %s --check-prefix=RAISE
// RUN: shard-opt %s --dtype f16 | FileCheck %s --check-prefix=F16
// RUN: shard-opt %s --raise-attention --dtype bf16 | FileCheck %s --check-prefix=BOTH
// RUN: shard-opt %s | FileCheck %s --check-prefix=NONE
// RUN: not shard-opt %s --dtype f64 2>&1 | FileCheck %s --check-prefix=BAD

// RAISE: nn.attention %arg0, %arg1, %arg2 {scale = 5.000000e-01 : f32}
// RAISE-NOT: nn.softmax
// F16: nn.cast %arg0 {to = f16}
// F16: nn.softmax {{.*}} -> tensor<1x2x4x4xf16>
// BOTH: nn.attention {{.*}} : (tensor<1x2x4x8xbf16>, tensor<1x2x4x8xbf16>, tensor<1x2x4x8xbf16>) -> tensor<1x2x4x8xbf16>
// BOTH: nn.cast {{.*}} {to = f32} : (tensor<1x2x4x8xbf16>) -> tensor<1x2x4x8xf32>
// NONE-NOT: nn.attention
// NONE-NOT: bf16
// BAD: shard-opt: --dtype must be f32, bf16 or f16, got 'f64'
func.func @main(%q: tensor<1x2x4x8xf32>, %k: tensor<1x2x4x8xf32>, %v: tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32> {
  %c = nn.constant dense<0.5> : tensor<f32>
  %kt = nn.transpose %k {perm = array<i64: 0, 1, 3, 2>} : (tensor<1x2x4x8xf32>) -> tensor<1x2x8x4xf32>
  %s = nn.matmul %q, %kt : (tensor<1x2x4x8xf32>, tensor<1x2x8x4xf32>) -> tensor<1x2x4x4xf32>
  %d = nn.mul %s, %c : (tensor<1x2x4x4xf32>, tensor<f32>) -> tensor<1x2x4x4xf32>
  %p = nn.softmax %d {axis = 3 : i64} : (tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
  %o = nn.matmul %p, %v : (tensor<1x2x4x4xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32>
  return %o : tensor<1x2x4x8xf32>
}
