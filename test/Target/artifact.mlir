// The artifact lists inputs, weights, constants, planned arena buffers and
// views, one kernel line per rt.kernel with typed parameters, and the named
// outputs.
// RUN: shard-opt %s --target cpu -o - | FileCheck %s
// RUN: not shard-opt %s --target gpu -o - 2>&1 | FileCheck %s --check-prefix=TARGET
// The pass-manager flags apply to the compile pipeline:
// RUN: shard-opt %s --target cpu -o - --mlir-print-ir-after=convert-nn-to-rt 2>&1 >/dev/null | FileCheck %s --check-prefix=DUMP
// DUMP: IR Dump After ConvertNNToRT
// DUMP: rt.kernel

// CHECK: shardflow-artifact 4
// CHECK-NEXT: target cpu
// CHECK-NEXT: world-size 1
// CHECK-NEXT: model-dir {{.*}}Target
// CHECK-NEXT: arena 192
// CHECK-NEXT: buffer 0 input f32 2x8 name=x
// CHECK-NEXT: buffer 1 weight f32 8x4 name=fc.w storage=external file=m.data offset=0 size=128
// CHECK-NEXT: buffer 2 constant f32 4 data=0000803f000000400000404000008040
// CHECK-NEXT: buffer 3 constant i1 2 data=0100
// CHECK-NEXT: buffer 4 arena f32 2x4 offset=0
// CHECK-NEXT: buffer 5 arena f32 2x4 offset=64
// CHECK-NEXT: buffer 6 arena f32 2x4 offset=0
// CHECK-NEXT: buffer 7 view f32 2x2x2 source=6
// CHECK-NEXT: buffer 8 arena f32 2x4 offset=64
// CHECK-NEXT: buffer 9 arena bf16 2x4 offset=128
// CHECK-NEXT: kernel matmul in=0,1 out=4
// CHECK-NEXT: kernel add in=4,2 out=5
// CHECK-NEXT: kernel softmax in=5 out=6 axis=i:1
// CHECK-NEXT: kernel gelu in=6 out=8 approximate=s:tanh
// CHECK-NEXT: kernel cast in=8 out=9 to=t:bf16
// CHECK-NEXT: output y 6
// CHECK-NEXT: output z 7
// CHECK-NEXT: output c 9
// CHECK-NEXT: output m 3
// CHECK-NEXT: end

// TARGET: shard-opt: --target must be cpu or cuda, got 'gpu'

func.func @main(%x: tensor<2x8xf32> {nn.name = "x"}) -> (tensor<2x4xf32> {nn.name = "y"}, tensor<2x2x2xf32> {nn.name = "z"}, tensor<2x4xbf16> {nn.name = "c"}, tensor<2xi1> {nn.name = "m"}) {
  %w = nn.weight "fc.w" {storage = "external", file = "m.data", offset = 0 : i64, size = 128 : i64} : tensor<8x4xf32>
  %b = nn.constant dense<[1.0, 2.0, 3.0, 4.0]> : tensor<4xf32>
  %m = nn.constant dense<[true, false]> : tensor<2xi1>
  %mm = nn.matmul %x, %w : (tensor<2x8xf32>, tensor<8x4xf32>) -> tensor<2x4xf32>
  %add = nn.add %mm, %b : (tensor<2x4xf32>, tensor<4xf32>) -> tensor<2x4xf32>
  %sm = nn.softmax %add {axis = 1 : i64} : (tensor<2x4xf32>) -> tensor<2x4xf32>
  %v = nn.reshape %sm : (tensor<2x4xf32>) -> tensor<2x2x2xf32>
  %g = nn.gelu %sm {approximate = "tanh"} : (tensor<2x4xf32>) -> tensor<2x4xf32>
  %c = nn.cast %g {to = bf16} : (tensor<2x4xf32>) -> tensor<2x4xbf16>
  return %sm, %v, %c, %m : tensor<2x4xf32>, tensor<2x2x2xf32>, tensor<2x4xbf16>, tensor<2xi1>
}
