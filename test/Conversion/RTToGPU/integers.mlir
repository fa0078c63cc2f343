// Integer code: unsigned buffers are signless kernel arguments and the
// operations pick unsigned forms; an integer division reports a zero
// divisor through the status word; float-to-integer casts convert only
// in-range values (out of range they give what the CPU kernels give);
// integer powers square once per exponent bit. Standalone kernels widen
// unsigned data with extui and compare and divide it unsigned; topk keys
// for ui64 flip the top bit, so that signed order is unsigned order.
// RUN: shard-opt %s -split-input-file -convert-nn-to-rt -convert-rt-to-gpu | FileCheck %s

// CHECK-LABEL: func.func @main
// (The comparison and the division are independent: one launch, a block
// each, with the division's status word.)
// CHECK: rt.launch @shardflow_kernels::@k0_less_div {{.*}} ins(%{{.*}}, %{{.*}} : memref<8xui16>, memref<8xui16>) outs(%{{.*}}, %{{.*}} : memref<8xi1>, memref<8xui16>) {checks}
// CHECK: gpu.func @k0_less_div(%{{.*}}: memref<8xi16>, %{{.*}}: memref<8xi16>, %{{.*}}: memref<8xi1>, %{{.*}}: memref<8xi16>, %[[S:.*]]: memref<2xi64>)
// CHECK: arith.cmpi ult, %{{.*}}, %{{.*}} : i16
// CHECK: %[[OK:.*]] = arith.cmpi ne, %[[Y:.*]], %{{.*}} : i16
// CHECK: scf.if
// CHECK: %[[CODE:.*]] = arith.constant 2 : i64
// CHECK: memref.store %[[CODE]], %[[S]]
// CHECK: %[[SAFE:.*]] = arith.select %{{.*}}, %{{.*}}, %[[Y]] : i16
// CHECK: arith.divui %{{.*}}, %[[SAFE]] : i16
func.func @main(%x: tensor<8xui16> {nn.name = "x"}, %y: tensor<8xui16> {nn.name = "y"}) -> (tensor<8xi1> {nn.name = "lt"}, tensor<8xui16> {nn.name = "q"}) {
  %l = nn.less %x, %y : (tensor<8xui16>, tensor<8xui16>) -> tensor<8xi1>
  %q = nn.div %x, %y : (tensor<8xui16>, tensor<8xui16>) -> tensor<8xui16>
  return %l, %q : tensor<8xi1>, tensor<8xui16>
}

// -----

// Signed division: INT_MIN / -1 wraps (a negation), never a trapping divide.
// CHECK-LABEL: func.func @main
// CHECK: gpu.func @k0_div
// CHECK: %[[M1:.*]] = arith.cmpi eq, %[[Y:.*]], %c-1_i32 : i32
// CHECK: %[[SAFE:.*]] = arith.select %{{.*}}, %{{.*}}, %[[Y]] : i32
// CHECK: %[[Q:.*]] = arith.divsi %{{.*}}, %[[SAFE]] : i32
// CHECK: %[[NEG:.*]] = arith.subi
// CHECK: arith.select %[[M1]], %[[NEG]], %[[Q]] : i32
func.func @main(%x: tensor<8xi32> {nn.name = "x"}, %y: tensor<8xi32> {nn.name = "y"}) -> (tensor<8xi32> {nn.name = "q"}) {
  %q = nn.div %x, %y : (tensor<8xi32>, tensor<8xi32>) -> tensor<8xi32>
  return %q : tensor<8xi32>
}

// -----

// f32 to i8: through i32, in (-2^31 - 1, 2^31) only, INT32_MIN otherwise
// (NaN fails both comparisons), then wrapped to 8 bits.
// CHECK-LABEL: func.func @main
// CHECK: gpu.func @k0_cast
// CHECK: %[[D:.*]] = arith.extf %{{.*}} : f32 to f64
// CHECK-DAG: arith.cmpf olt, %[[D]], %{{.*}} : f64
// CHECK-DAG: arith.cmpf ogt, %[[D]], %{{.*}} : f64
// CHECK: %[[IN:.*]] = arith.select %[[OK:.*]], %[[D]], %{{.*}} : f64
// CHECK: %[[I:.*]] = arith.fptosi %[[IN]] : f64 to i32
// CHECK: %[[R:.*]] = arith.select %[[OK]], %[[I]], %c-2147483648_i32 : i32
// CHECK: arith.trunci %[[R]] : i32 to i8
func.func @main(%x: tensor<8xf32> {nn.name = "x"}) -> (tensor<8xi8> {nn.name = "y"}) {
  %c = nn.cast %x {to = i8} : (tensor<8xf32>) -> tensor<8xi8>
  return %c : tensor<8xi8>
}

// -----

// One round per exponent bit (32 for an i32 exponent); a negative exponent
// selects 1, -1 or 0 by the base.
// CHECK-LABEL: func.func @main
// CHECK: gpu.func @k0_pow
// CHECK: %[[E:.*]] = arith.extsi %{{.*}} : i32 to i64
// CHECK: scf.for %{{.*}} = %c0 to %c32 step %c1 iter_args(%{{.*}} = %c1_i32, %{{.*}} = %{{.*}}) -> (i32, i32)
// CHECK: arith.shrui %[[E]]
// CHECK: %[[NEG:.*]] = arith.cmpi slt, %[[E]], %c0_i64 : i64
// CHECK: arith.select %[[NEG]]
func.func @main(%x: tensor<8xi32> {nn.name = "x"}, %e: tensor<8xi32> {nn.name = "e"}) -> (tensor<8xi32> {nn.name = "y"}) {
  %c = nn.pow %x, %e : (tensor<8xi32>, tensor<8xi32>) -> tensor<8xi32>
  return %c : tensor<8xi32>
}

// -----

// CHECK-LABEL: func.func @main
// CHECK: gpu.func @k0_reduce_max(%{{.*}}: memref<24xi8>, %{{.*}}: memref<6xi8>)
// CHECK: %[[ZERO:.*]] = arith.constant 0 : i64
// CHECK: scf.for {{.*}} iter_args(%[[ACC:.*]] = %[[ZERO]]) -> (i64)
// CHECK: %[[W:.*]] = arith.extui %{{.*}} : i8 to i64
// CHECK: arith.maxui %[[ACC]], %[[W]] : i64
// CHECK: arith.trunci %{{.*}} : i64 to i8
// CHECK: gpu.func @k1_reduce_mean(%{{.*}}: memref<24xi64>, %{{.*}}: memref<4xi64>)
// CHECK: arith.divui %{{.*}}, %c6_i64 : i64
// CHECK: gpu.func @k2_topk(%{{.*}}: memref<24xi64>, %{{.*}}: memref<8xi64>, %{{.*}}: memref<8xi64>)
// CHECK: %[[V:.*]] = memref.load %{{.*}} : memref<24xi64>
// CHECK: %[[TOP:.*]] = arith.constant -9223372036854775808 : i64
// CHECK: arith.xori %[[V]], %[[TOP]] : i64
func.func @main(%x: tensor<4x6xui8> {nn.name = "x"}, %y: tensor<4x6xui64> {nn.name = "y"}) -> (tensor<6xui8> {nn.name = "m"}, tensor<4xui64> {nn.name = "a"}, tensor<4x2xui64> {nn.name = "t"}, tensor<4x2xi64> {nn.name = "ti"}) {
  %m = nn.reduce_max %x {axes = array<i64: 0>, keepdims = false} : (tensor<4x6xui8>) -> tensor<6xui8>
  %a = nn.reduce_mean %y {axes = array<i64: 1>, keepdims = false} : (tensor<4x6xui64>) -> tensor<4xui64>
  %t, %ti = nn.topk %y {axis = -1 : i64, k = 2 : i64, largest = true} : (tensor<4x6xui64>) -> (tensor<4x2xui64>, tensor<4x2xi64>)
  return %m, %a, %t, %ti : tensor<6xui8>, tensor<4xui64>, tensor<4x2xui64>, tensor<4x2xi64>
}
