// RUN: shard-opt %s -split-input-file -nn-convert-float-type=type=bf16 | FileCheck %s
// RUN: shard-opt %s -split-input-file -nn-convert-float-type=type=f16 | FileCheck %s --check-prefix=F16
// RUN: not shard-opt %s -split-input-file -nn-convert-float-type=type=f64 -o /dev/null 2>&1 | FileCheck %s --check-prefix=BAD
// RUN: shard-opt %s -split-input-file -nn-convert-float-type="type=bf16 keep-output-types=false" | FileCheck %s --check-prefix=LOW
// BAD: nn-convert-float-type: type must be bf16 or f16, got 'f64'

// Weights keep their f32 type and are cast right after; the input is cast
// at entry, the result back to f32 at the exit; everything between is bf16.
// CHECK-LABEL: func.func @mlp(%arg0: tensor<2x8xf32> {nn.name = "x"}) -> (tensor<2x4xf32> {nn.name = "y"})
// CHECK: %[[X:.*]] = nn.cast %arg0 {to = bf16} : (tensor<2x8xf32>) -> tensor<2x8xbf16>
// CHECK: %[[W:.*]] = nn.weight "fc.w" {{.*}} : tensor<8x4xf32>
// CHECK: %[[WL:.*]] = nn.cast %[[W]] {to = bf16} : (tensor<8x4xf32>) -> tensor<8x4xbf16>
// CHECK: %[[B:.*]] = nn.constant dense<[1.000000e+00, 2.000000e+00, 3.000000e+00, 3.140630e+00]> : tensor<4xbf16>
// CHECK: %[[MM:.*]] = nn.matmul %[[X]], %[[WL]] : (tensor<2x8xbf16>, tensor<8x4xbf16>) -> tensor<2x4xbf16>
// CHECK: %[[ADD:.*]] = nn.add %[[MM]], %[[B]] : (tensor<2x4xbf16>, tensor<4xbf16>) -> tensor<2x4xbf16>
// CHECK: %[[SM:.*]] = nn.softmax %[[ADD]] {axis = 1 : i64} : (tensor<2x4xbf16>) -> tensor<2x4xbf16>
// CHECK: %[[Y:.*]] = nn.cast %[[SM]] {to = f32} : (tensor<2x4xbf16>) -> tensor<2x4xf32>
// CHECK: return %[[Y]] : tensor<2x4xf32>
// F16-LABEL: func.func @mlp
// F16: nn.cast %arg0 {to = f16} : (tensor<2x8xf32>) -> tensor<2x8xf16>
// F16: nn.constant dense<[1.000000e+00, 2.000000e+00, 3.000000e+00, 3.140630e+00]> : tensor<4xf16>
// F16: nn.softmax {{.*}} : (tensor<2x4xf16>) -> tensor<2x4xf16>
func.func @mlp(%x: tensor<2x8xf32> {nn.name = "x"}) -> (tensor<2x4xf32> {nn.name = "y"}) {
  %w = nn.weight "fc.w" {storage = "external", file = "m.data", offset = 0 : i64, size = 128 : i64} : tensor<8x4xf32>
  %b = nn.constant dense<[1.0, 2.0, 3.0, 3.14159]> : tensor<4xf32>
  %mm = nn.matmul %x, %w : (tensor<2x8xf32>, tensor<8x4xf32>) -> tensor<2x4xf32>
  %add = nn.add %mm, %b : (tensor<2x4xf32>, tensor<4xf32>) -> tensor<2x4xf32>
  %sm = nn.softmax %add {axis = 1 : i64} : (tensor<2x4xf32>) -> tensor<2x4xf32>
  return %sm : tensor<2x4xf32>
}

// -----

// Integer inputs and the ops on them stay; a cast to f32 casts to the low
// type; ops whose result type is given (reshape, expand, constant_of_shape)
// take the low type; comparisons keep i1.
// CHECK-LABEL: func.func @mixed(%arg0: tensor<2x4xi64>, %arg1: tensor<2x4xf32>) -> (tensor<2x4xf32>, tensor<8xf32>, tensor<2x4xi1>, tensor<2x4xi64>)
// CHECK: %[[X:.*]] = nn.cast %arg1 {to = bf16} : (tensor<2x4xf32>) -> tensor<2x4xbf16>
// CHECK: %[[I:.*]] = nn.add %arg0, %arg0 : (tensor<2x4xi64>, tensor<2x4xi64>) -> tensor<2x4xi64>
// CHECK: %[[F:.*]] = nn.cast %arg0 {to = bf16} : (tensor<2x4xi64>) -> tensor<2x4xbf16>
// CHECK: %[[Z:.*]] = nn.constant_of_shape 5.000000e-01 : bf16 : tensor<2x4xbf16>
// CHECK: %[[S:.*]] = nn.mul %[[F]], %[[Z]] : (tensor<2x4xbf16>, tensor<2x4xbf16>) -> tensor<2x4xbf16>
// CHECK: %[[E:.*]] = nn.expand %[[X]] : (tensor<2x4xbf16>) -> tensor<2x2x4xbf16>
// CHECK: %[[R:.*]] = nn.reshape %[[E]] : (tensor<2x2x4xbf16>) -> tensor<16xbf16>
// CHECK: %[[SL:.*]] = nn.slice %[[R]] {{.*}} : (tensor<16xbf16>) -> tensor<8xbf16>
// CHECK: %[[C:.*]] = nn.less %[[S]], %[[X]] : (tensor<2x4xbf16>, tensor<2x4xbf16>) -> tensor<2x4xi1>
// CHECK-DAG: %[[SO:.*]] = nn.cast %[[S]] {to = f32} : (tensor<2x4xbf16>) -> tensor<2x4xf32>
// CHECK-DAG: %[[SLO:.*]] = nn.cast %[[SL]] {to = f32} : (tensor<8xbf16>) -> tensor<8xf32>
// CHECK: return %[[SO]], %[[SLO]], %[[C]], %[[I]]
func.func @mixed(%ids: tensor<2x4xi64>, %x: tensor<2x4xf32>) -> (tensor<2x4xf32>, tensor<8xf32>, tensor<2x4xi1>, tensor<2x4xi64>) {
  %i = nn.add %ids, %ids : (tensor<2x4xi64>, tensor<2x4xi64>) -> tensor<2x4xi64>
  %f = nn.cast %ids {to = f32} : (tensor<2x4xi64>) -> tensor<2x4xf32>
  %z = nn.constant_of_shape 0.5 : f32 : tensor<2x4xf32>
  %s = nn.mul %f, %z : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
  %e = nn.expand %x : (tensor<2x4xf32>) -> tensor<2x2x4xf32>
  %r = nn.reshape %e : (tensor<2x2x4xf32>) -> tensor<16xf32>
  %sl = nn.slice %r {starts = array<i64: 0>, ends = array<i64: 8>, axes = array<i64: 0>, steps = array<i64: 1>} : (tensor<16xf32>) -> tensor<8xf32>
  %c = nn.less %s, %x : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xi1>
  return %s, %sl, %c, %i : tensor<2x4xf32>, tensor<8xf32>, tensor<2x4xi1>, tensor<2x4xi64>
}

// -----

// A cast of the input to f32 that becomes bf16 -> bf16 disappears; an f64
// computation is left alone.
// CHECK-LABEL: func.func @identity_cast_and_f64
// CHECK-NOT: to = bf16} : (tensor<4xbf16>) -> tensor<4xbf16>
// CHECK: nn.exp %{{.*}} : (tensor<4xf64>) -> tensor<4xf64>
func.func @identity_cast_and_f64(%x: tensor<4xf32>, %y: tensor<4xf64>) -> (tensor<4xf32>, tensor<4xf64>) {
  %c = nn.cast %x {to = f32} : (tensor<4xf32>) -> tensor<4xf32>
  %t = nn.tanh %c : (tensor<4xf32>) -> tensor<4xf32>
  %e = nn.exp %y : (tensor<4xf64>) -> tensor<4xf64>
  return %t, %e : tensor<4xf32>, tensor<4xf64>
}

// -----

// A partitioned program: the sliced weight keeps its slice table and f32
// type, the cast follows it, and the collective moves bf16.
dist.mesh @mesh ["tp"=2]
// CHECK-LABEL: func.func @sharded
// CHECK: %[[W:.*]] = nn.weight "w" {{.*}}global_shape = array<i64: 8, 4>{{.*}} : tensor<4x4xf32>
// CHECK: %[[WL:.*]] = nn.cast %[[W]] {to = bf16} : (tensor<4x4xf32>) -> tensor<4x4xbf16>
// CHECK: %[[MM:.*]] = nn.matmul %{{.*}}, %[[WL]] : (tensor<2x4xbf16>, tensor<4x4xbf16>) -> tensor<2x4xbf16>
// CHECK: %[[AR:.*]] = dist.all_reduce %[[MM]] {{.*}} : tensor<2x4xbf16> -> tensor<2x4xbf16>
// CHECK: nn.cast %[[AR]] {to = f32}
func.func @sharded(%x: tensor<2x4xf32>) -> tensor<2x4xf32> {
  %w = nn.weight "w" {storage = "external", file = "m.data", offset = 0 : i64, size = 128 : i64, global_shape = array<i64: 8, 4>, starts = [array<i64: 0, 0>, array<i64: 4, 0>]} : tensor<4x4xf32>
  %mm = nn.matmul %x, %w : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  %ar = dist.all_reduce %mm on @mesh ["tp"] : tensor<2x4xf32> -> tensor<2x4xf32>
  return %ar : tensor<2x4xf32>
}

// -----

// keep-output-types=false: the f32 results are returned in bf16 (the
// function's type changes, result names kept); an f32 argument returned as
// it is comes back cast down; an integer result is untouched.
// LOW-LABEL: func.func @low_outputs(%arg0: tensor<4xf32> {nn.name = "x"}, %arg1: tensor<4xi64>) -> (tensor<4xbf16> {nn.name = "y"}, tensor<4xbf16>, tensor<4xi64>)
// LOW: %[[X:.*]] = nn.cast %arg0 {to = bf16} : (tensor<4xf32>) -> tensor<4xbf16>
// LOW-NOT: {to = f32}
// LOW: return %{{.*}}, %[[X]], %arg1 : tensor<4xbf16>, tensor<4xbf16>, tensor<4xi64>
// CHECK-LABEL: func.func @low_outputs(%arg0: tensor<4xf32> {nn.name = "x"}, %arg1: tensor<4xi64>) -> (tensor<4xf32> {nn.name = "y"}, tensor<4xf32>, tensor<4xi64>)
func.func @low_outputs(%x: tensor<4xf32> {nn.name = "x"}, %i: tensor<4xi64>) -> (tensor<4xf32> {nn.name = "y"}, tensor<4xf32>, tensor<4xi64>) {
  %y = nn.relu %x : (tensor<4xf32>) -> tensor<4xf32>
  return %y, %x, %i : tensor<4xf32>, tensor<4xf32>, tensor<4xi64>
}

// -----

// A finite constant stays finite: f32's lowest (PyTorch's mask fill) and a
// value beyond f16's range become the low type's largest finite value of
// their sign; infinities stay infinities.
// CHECK-LABEL: func.func @saturate
// CHECK: nn.constant dense<[-3.389530e+38, 9.969200e+37, 0xFF80, 1.000000e+00]> : tensor<4xbf16>
// CHECK: nn.constant_of_shape -3.389530e+38 : bf16
// F16-LABEL: func.func @saturate
// F16: nn.constant dense<[-6.550400e+04, 6.550400e+04, 0xFC00, 1.000000e+00]> : tensor<4xf16>
// F16: nn.constant_of_shape -6.550400e+04 : f16
func.func @saturate(%x: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
  %c = nn.constant dense<[-3.40282347E+38, 1.0e+38, 0xFF800000, 1.0]> : tensor<4xf32>
  %f = nn.constant_of_shape -3.40282347E+38 : f32 : tensor<4xf32>
  %a = nn.add %x, %c : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %b = nn.add %x, %f : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %a, %b : tensor<4xf32>, tensor<4xf32>
}
