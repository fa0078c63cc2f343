// Mixed precision in the artifact: a weight whose buffer type differs from
// its file's records `source-dtype` (sizes, offsets and slices refer to the
// f32 bytes in the file); the graph's input and output keep their f32 type.
// RUN: shard-opt %s --target cpu -o - | FileCheck %s

// CHECK: world-size 2
// CHECK: buffer 0 input f32 2x8 name=x
// CHECK-NOT: weight f32
// CHECK: buffer {{[0-9]+}} weight bf16 8x4 name=fc.w storage=external file=m.data offset=0 size=128 source-dtype=f32
// CHECK-NOT: weight f32
// CHECK: buffer {{[0-9]+}} weight bf16 2x4 name=s storage=external file=m.data offset=128 size=32 source-dtype=f32 global=4x4 starts=0,0;2,0
// The input is cast; the weights are not (no cast kernel reads them).
// CHECK: kernel cast in=0 out=1 to=t:bf16
// CHECK-NEXT: kernel matmul in=1,2 out=3
// CHECK-NEXT: kernel cast in=3 out=4 to=t:f32
// CHECK: output y 4
dist.mesh @mesh ["tp"=2]
func.func @main(%x: tensor<2x8xf32> {nn.name = "x"}) -> (tensor<2x4xf32> {nn.name = "y"}, tensor<2x4xbf16> {nn.name = "s"}) {
  %xl = nn.cast %x {to = bf16} : (tensor<2x8xf32>) -> tensor<2x8xbf16>
  %w = nn.weight "fc.w" {storage = "external", file = "m.data", offset = 0 : i64, size = 128 : i64} : tensor<8x4xf32>
  %wl = nn.cast %w {to = bf16} : (tensor<8x4xf32>) -> tensor<8x4xbf16>
  %mm = nn.matmul %xl, %wl : (tensor<2x8xbf16>, tensor<8x4xbf16>) -> tensor<2x4xbf16>
  %y = nn.cast %mm {to = f32} : (tensor<2x4xbf16>) -> tensor<2x4xf32>
  %s = nn.weight "s" {storage = "external", file = "m.data", offset = 128 : i64, size = 64 : i64, global_shape = array<i64: 4, 4>, starts = [array<i64: 0, 0>, array<i64: 2, 0>]} : tensor<2x4xf32>
  %sl = nn.cast %s {to = bf16} : (tensor<2x4xf32>) -> tensor<2x4xbf16>
  return %y, %sl : tensor<2x4xf32>, tensor<2x4xbf16>
}
