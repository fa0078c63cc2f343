// Every nn op parses, verifies and prints back in its custom form, and the
// generic form round-trips too.
// RUN: shard-opt %s | shard-opt | FileCheck %s
// RUN: shard-opt %s --mlir-print-op-generic | shard-opt | FileCheck %s

// CHECK-LABEL: func.func @sources
func.func @sources() -> (tensor<2xi64>, tensor<4x4xf32>, tensor<5xi64>, tensor<2x3xf32>) {
  // CHECK: nn.constant dense<[1, 2]> : tensor<2xi64>
  %0 = nn.constant dense<[1, 2]> : tensor<2xi64>
  // CHECK: nn.weight "layer.w" {file = "m.data", offset = 64 : i64, size = 64 : i64, storage = "external"} : tensor<4x4xf32>
  %1 = nn.weight "layer.w" {storage = "external", file = "m.data", offset = 64 : i64, size = 64 : i64} : tensor<4x4xf32>
  // CHECK: nn.range {delta = 2.000000e+00 : f64, limit = 1.000000e+01 : f64, start = 0.000000e+00 : f64} : tensor<5xi64>
  %2 = nn.range {start = 0.0 : f64, limit = 10.0 : f64, delta = 2.0 : f64} : tensor<5xi64>
  // CHECK: nn.constant_of_shape 1.500000e+00 : f32 : tensor<2x3xf32>
  %3 = nn.constant_of_shape 1.5 : f32 : tensor<2x3xf32>
  return %0, %1, %2, %3 : tensor<2xi64>, tensor<4x4xf32>, tensor<5xi64>, tensor<2x3xf32>
}

// CHECK-LABEL: func.func @elementwise
func.func @elementwise(%a: tensor<2x3xf32>, %b: tensor<3xf32>, %c: tensor<2x3xi1>) {
  // CHECK: nn.add %{{.*}}, %{{.*}} : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  %0 = nn.add %a, %b : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  // CHECK: nn.sub
  %1 = nn.sub %a, %b : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  // CHECK: nn.mul
  %2 = nn.mul %a, %b : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  // CHECK: nn.div
  %3 = nn.div %a, %b : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  // CHECK: nn.pow
  %4 = nn.pow %a, %b : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  // CHECK: nn.min
  %5 = nn.min %a, %b : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  // CHECK: nn.max
  %6 = nn.max %a, %b : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  // CHECK: nn.equal {{.*}} -> tensor<2x3xi1>
  %7 = nn.equal %a, %b : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xi1>
  // CHECK: nn.less
  %8 = nn.less %a, %b : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xi1>
  // CHECK: nn.greater
  %9 = nn.greater %a, %b : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xi1>
  // CHECK: nn.and
  %10 = nn.and %7, %c : (tensor<2x3xi1>, tensor<2x3xi1>) -> tensor<2x3xi1>
  // CHECK: nn.not
  %11 = nn.not %10 : (tensor<2x3xi1>) -> tensor<2x3xi1>
  // CHECK: nn.where {{.*}} : (tensor<2x3xi1>, tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  %12 = nn.where %11, %a, %b : (tensor<2x3xi1>, tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  // CHECK: nn.sqrt
  %13 = nn.sqrt %a : (tensor<2x3xf32>) -> tensor<2x3xf32>
  // CHECK: nn.exp
  %14 = nn.exp %a : (tensor<2x3xf32>) -> tensor<2x3xf32>
  // CHECK: nn.log
  %15 = nn.log %a : (tensor<2x3xf32>) -> tensor<2x3xf32>
  // CHECK: nn.tanh
  %16 = nn.tanh %a : (tensor<2x3xf32>) -> tensor<2x3xf32>
  // CHECK: nn.sigmoid
  %17 = nn.sigmoid %a : (tensor<2x3xf32>) -> tensor<2x3xf32>
  // CHECK: nn.erf
  %18 = nn.erf %a : (tensor<2x3xf32>) -> tensor<2x3xf32>
  // CHECK: nn.reciprocal
  %19 = nn.reciprocal %a : (tensor<2x3xf32>) -> tensor<2x3xf32>
  // CHECK: nn.relu
  %20 = nn.relu %a : (tensor<2x3xf32>) -> tensor<2x3xf32>
  // CHECK: nn.neg
  %21 = nn.neg %a : (tensor<2x3xf32>) -> tensor<2x3xf32>
  // CHECK: nn.abs
  %22 = nn.abs %a : (tensor<2x3xf32>) -> tensor<2x3xf32>
  // CHECK: nn.identity
  %23 = nn.identity %a : (tensor<2x3xf32>) -> tensor<2x3xf32>
  // CHECK: nn.leaky_relu %{{.*}} {alpha = 2.000000e-01 : f32}
  %24 = nn.leaky_relu %a {alpha = 0.2 : f32} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  // CHECK: nn.gelu %{{.*}} {approximate = "tanh"}
  %25 = nn.gelu %a {approximate = "tanh"} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  // CHECK: nn.clip %{{.*}} {max = 6.000000e+00 : f64, min = 0.000000e+00 : f64}
  %26 = nn.clip %a {min = 0.0 : f64, max = 6.0 : f64} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  // CHECK: nn.dropout %{{.*}} {ratio = 1.000000e-01 : f32}
  %27 = nn.dropout %a {ratio = 0.1 : f32} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  // CHECK: nn.cast %{{.*}} {to = bf16} : (tensor<2x3xf32>) -> tensor<2x3xbf16>
  %28 = nn.cast %a {to = bf16} : (tensor<2x3xf32>) -> tensor<2x3xbf16>
  return
}

// CHECK-LABEL: func.func @normalizations
func.func @normalizations(%x: tensor<2x4x8xf32>, %s: tensor<8xf32>, %img: tensor<1x3x4x4xf32>, %c: tensor<3xf32>) {
  // CHECK: nn.softmax %{{.*}} {axis = 1 : i64}
  %0 = nn.softmax %x {axis = 1 : i64} : (tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  // CHECK: nn.log_softmax
  %1 = nn.log_softmax %x : (tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  // CHECK: nn.layer_normalization %{{.*}}, %{{.*}}, %{{.*}} {epsilon = 9.99999997E-7 : f32}
  %2 = nn.layer_normalization %x, %s, %s {epsilon = 1.0e-6 : f32} : (tensor<2x4x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<2x4x8xf32>
  // CHECK: nn.layer_normalization %{{.*}}, %{{.*}} :
  %3 = nn.layer_normalization %x, %s : (tensor<2x4x8xf32>, tensor<8xf32>) -> tensor<2x4x8xf32>
  // CHECK: nn.rms_normalization
  %4 = nn.rms_normalization %x, %s : (tensor<2x4x8xf32>, tensor<8xf32>) -> tensor<2x4x8xf32>
  // CHECK: nn.batch_normalization
  %5 = nn.batch_normalization %img, %c, %c, %c, %c : (tensor<1x3x4x4xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>) -> tensor<1x3x4x4xf32>
  return
}

// CHECK-LABEL: func.func @contractions
func.func @contractions(%a: tensor<2x4xf32>, %b: tensor<4x3xf32>, %v: tensor<4xf32>, %q: tensor<2x4x8x16xf32>, %kv: tensor<2x2x8x16xf32>, %mask: tensor<8x8xi1>, %cos: tensor<32x8xf32>, %pos: tensor<2x8xi64>) {
  // CHECK: nn.matmul {{.*}} -> tensor<2x3xf32>
  %0 = nn.matmul %a, %b : (tensor<2x4xf32>, tensor<4x3xf32>) -> tensor<2x3xf32>
  // CHECK: nn.matmul {{.*}} -> tensor<2xf32>
  %1 = nn.matmul %a, %v : (tensor<2x4xf32>, tensor<4xf32>) -> tensor<2xf32>
  // CHECK: nn.gemm {{.*}} {alpha = 5.000000e-01 : f32, trans_b = true}
  %2 = nn.gemm %a, %a {alpha = 0.5 : f32, trans_b = true} : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x2xf32>
  // CHECK: nn.einsum {{.*}} {equation = "bhid,bhjd->bhij"}
  %3 = nn.einsum %q, %q {equation = "bhid,bhjd->bhij"} : (tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>) -> tensor<2x4x8x8xf32>
  // CHECK: nn.attention {{.*}} {is_causal = true} : {{.*}} -> tensor<2x4x8x16xf32>
  %4 = nn.attention %q, %kv, %kv {is_causal = true} : (tensor<2x4x8x16xf32>, tensor<2x2x8x16xf32>, tensor<2x2x8x16xf32>) -> tensor<2x4x8x16xf32>
  // CHECK: nn.attention {{.*}}, %{{.*}} {scale = 2.500000e-01 : f32}
  %5 = nn.attention %q, %q, %q, %mask {scale = 0.25 : f32} : (tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<8x8xi1>) -> tensor<2x4x8x16xf32>
  // CHECK: nn.rotary_embedding
  %6 = nn.rotary_embedding %q, %cos, %cos, %pos : (tensor<2x4x8x16xf32>, tensor<32x8xf32>, tensor<32x8xf32>, tensor<2x8xi64>) -> tensor<2x4x8x16xf32>
  return
}

// CHECK-LABEL: func.func @windows
func.func @windows(%x: tensor<1x4x8x8xf32>, %w: tensor<8x2x3x3xf32>, %bias: tensor<8xf32>) {
  // CHECK: nn.conv {{.*}} -> tensor<1x8x4x4xf32>
  %0 = nn.conv %x, %w, %bias {strides = array<i64: 2, 2>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, group = 2 : i64} : (tensor<1x4x8x8xf32>, tensor<8x2x3x3xf32>, tensor<8xf32>) -> tensor<1x8x4x4xf32>
  // CHECK: nn.max_pool {{.*}} -> tensor<1x4x4x4xf32>
  %1 = nn.max_pool %x {kernel_shape = array<i64: 2, 2>, strides = array<i64: 2, 2>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>} : (tensor<1x4x8x8xf32>) -> tensor<1x4x4x4xf32>
  // CHECK: nn.average_pool {{.*}} -> tensor<1x4x3x3xf32>
  %2 = nn.average_pool %x {kernel_shape = array<i64: 3, 3>, strides = array<i64: 3, 3>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, ceil_mode = true} : (tensor<1x4x8x8xf32>) -> tensor<1x4x3x3xf32>
  // CHECK: nn.global_average_pool {{.*}} -> tensor<1x4x1x1xf32>
  %3 = nn.global_average_pool %x : (tensor<1x4x8x8xf32>) -> tensor<1x4x1x1xf32>
  // CHECK: nn.max_pool_with_indices {{.*}} -> (tensor<1x4x4x4xf32>, tensor<1x4x4x4xi64>)
  %4:2 = nn.max_pool_with_indices %x {kernel_shape = array<i64: 2, 2>, strides = array<i64: 2, 2>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, storage_order = 1 : i64} : (tensor<1x4x8x8xf32>) -> (tensor<1x4x4x4xf32>, tensor<1x4x4x4xi64>)
  return
}

// CHECK-LABEL: func.func @windows_3d
func.func @windows_3d(%x: tensor<1x2x5x6x7xf32>, %w: tensor<4x2x2x3x3xf32>) {
  // CHECK: nn.conv {{.*}} -> tensor<1x4x4x2x3xf32>
  %0 = nn.conv %x, %w {strides = array<i64: 1, 2, 2>, pads = array<i64: 0, 0, 0, 0, 0, 0>, dilations = array<i64: 1, 1, 1>} : (tensor<1x2x5x6x7xf32>, tensor<4x2x2x3x3xf32>) -> tensor<1x4x4x2x3xf32>
  // CHECK: nn.average_pool {{.*}} -> tensor<1x2x5x3x4xf32>
  %1 = nn.average_pool %x {kernel_shape = array<i64: 1, 2, 2>, strides = array<i64: 1, 2, 2>, pads = array<i64: 0, 0, 0, 0, 0, 1>, dilations = array<i64: 1, 1, 1>} : (tensor<1x2x5x6x7xf32>) -> tensor<1x2x5x3x4xf32>
  return
}

// CHECK-LABEL: func.func @training_dropout
func.func @training_dropout(%x: tensor<2x3xbf16>) {
  // CHECK: nn.training_dropout %{{.*}} {ratio = 2.500000e-01 : f32, seed = 3 : i64} : (tensor<2x3xbf16>) -> (tensor<2x3xbf16>, tensor<2x3xi1>)
  %0:2 = nn.training_dropout %x {ratio = 0.25 : f32, seed = 3 : i64} : (tensor<2x3xbf16>) -> (tensor<2x3xbf16>, tensor<2x3xi1>)
  return
}

// CHECK-LABEL: func.func @data_movement
func.func @data_movement(%x: tensor<2x3x4xf32>, %i: tensor<5xi64>, %i2: tensor<2x3x4xi64>, %idx: tensor<2x1xi64>, %upd: tensor<2x3x4xf32>) {
  // CHECK: nn.reduce_mean {{.*}} {axes = array<i64: 1>} {{.*}} -> tensor<2x1x4xf32>
  %0 = nn.reduce_mean %x {axes = array<i64: 1>} : (tensor<2x3x4xf32>) -> tensor<2x1x4xf32>
  // CHECK: nn.reduce_sum {{.*}} -> tensor<2xf32>
  %1 = nn.reduce_sum %x {axes = array<i64: 1, 2>, keepdims = false} : (tensor<2x3x4xf32>) -> tensor<2xf32>
  // CHECK: nn.reduce_max
  %2 = nn.reduce_max %x {axes = array<i64: 0>} : (tensor<2x3x4xf32>) -> tensor<1x3x4xf32>
  // CHECK: nn.cumsum
  %3 = nn.cumsum %x {axis = 2 : i64, exclusive = true} : (tensor<2x3x4xf32>) -> tensor<2x3x4xf32>
  // CHECK: nn.topk {{.*}} -> (tensor<2x3x2xf32>, tensor<2x3x2xi64>)
  %4:2 = nn.topk %x {k = 2 : i64} : (tensor<2x3x4xf32>) -> (tensor<2x3x2xf32>, tensor<2x3x2xi64>)
  // CHECK: nn.reshape {{.*}} -> tensor<6x4xf32>
  %5 = nn.reshape %x : (tensor<2x3x4xf32>) -> tensor<6x4xf32>
  // CHECK: nn.transpose {{.*}} -> tensor<4x2x3xf32>
  %6 = nn.transpose %x {perm = array<i64: 2, 0, 1>} : (tensor<2x3x4xf32>) -> tensor<4x2x3xf32>
  // CHECK: nn.flatten {{.*}} -> tensor<6x4xf32>
  %7 = nn.flatten %x {axis = 2 : i64} : (tensor<2x3x4xf32>) -> tensor<6x4xf32>
  // CHECK: nn.unsqueeze {{.*}} -> tensor<2x1x3x4xf32>
  %8 = nn.unsqueeze %x {axes = array<i64: 1>} : (tensor<2x3x4xf32>) -> tensor<2x1x3x4xf32>
  // CHECK: nn.squeeze {{.*}} -> tensor<2x3x4xf32>
  %9 = nn.squeeze %8 {axes = array<i64: 1>} : (tensor<2x1x3x4xf32>) -> tensor<2x3x4xf32>
  // CHECK: nn.concat {{.*}} -> tensor<2x6x4xf32>
  %10 = nn.concat %x, %x {axis = 1 : i64} : (tensor<2x3x4xf32>, tensor<2x3x4xf32>) -> tensor<2x6x4xf32>
  // CHECK: nn.split {{.*}} -> (tensor<2x3x1xf32>, tensor<2x3x3xf32>)
  %11:2 = nn.split %x {axis = 2 : i64, sizes = array<i64: 1, 3>} : (tensor<2x3x4xf32>) -> (tensor<2x3x1xf32>, tensor<2x3x3xf32>)
  // CHECK: nn.slice {{.*}} -> tensor<2x3x2xf32>
  %12 = nn.slice %x {starts = array<i64: -1>, ends = array<i64: -9223372036854775807>, axes = array<i64: 2>, steps = array<i64: -2>} : (tensor<2x3x4xf32>) -> tensor<2x3x2xf32>
  // CHECK: nn.pad {{.*}} -> tensor<2x5x4xf32>
  %13 = nn.pad %x {pads = array<i64: 0, 1, 0, 0, 1, 0>, mode = "reflect"} : (tensor<2x3x4xf32>) -> tensor<2x5x4xf32>
  // CHECK: nn.gather {{.*}} -> tensor<2x5x4xf32>
  %14 = nn.gather %x, %i {axis = 1 : i64} : (tensor<2x3x4xf32>, tensor<5xi64>) -> tensor<2x5x4xf32>
  // CHECK: nn.gather_elements
  %15 = nn.gather_elements %x, %i2 {axis = 1 : i64} : (tensor<2x3x4xf32>, tensor<2x3x4xi64>) -> tensor<2x3x4xf32>
  // CHECK: nn.scatter_nd {{.*}} {reduction = "add"}
  %16 = nn.scatter_nd %x, %idx, %upd {reduction = "add"} : (tensor<2x3x4xf32>, tensor<2x1xi64>, tensor<2x3x4xf32>) -> tensor<2x3x4xf32>
  // CHECK: nn.expand {{.*}} -> tensor<5x2x3x4xf32>
  %17 = nn.expand %x : (tensor<2x3x4xf32>) -> tensor<5x2x3x4xf32>
  // CHECK: nn.trilu {{.*}} {k = 1 : i64, upper = false}
  %18 = nn.trilu %x {upper = false, k = 1 : i64} : (tensor<2x3x4xf32>) -> tensor<2x3x4xf32>
  // CHECK: nn.shape {{.*}} {start = 1 : i64} {{.*}} -> tensor<2xi64>
  %19 = nn.shape %x {start = 1 : i64} : (tensor<2x3x4xf32>) -> tensor<2xi64>
  return
}
