// shard-opt --report prints the layers that the nn phase finds: here an
// encoder of two layers whose output every decoder layer reads (shared),
// and a decoder of two layers, each stack carrying one value from block
// to block.
// RUN: shard-opt %s --target cpu --compile-to nn --report -o /dev/null 2>&1 | FileCheck %s

// CHECK: layers: 2 blocks of 4 ops (weights enc.layer.0.* .. enc.layer.1.*; 1 carried value, 0 shared), then 2 blocks of 7 ops (weights dec.layer.0.* .. dec.layer.1.*; 1 carried value, 1 shared), prologue 0 ops, 1 op between, epilogue 0 ops
func.func @main(%x: tensor<4x8xf32>, %y: tensor<4x16xf32>) -> tensor<4x16xf32> {
  %we0 = nn.weight "model.enc.layer.0.w" {storage = "external", file = "m.data", offset = 0 : i64, size = 256 : i64} : tensor<8x8xf32>
  %me0 = nn.matmul %x, %we0 : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %re0 = nn.relu %me0 : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %he1 = nn.add %x, %re0 : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %we1 = nn.weight "model.enc.layer.1.w" {storage = "external", file = "m.data", offset = 256 : i64, size = 256 : i64} : tensor<8x8xf32>
  %me1 = nn.matmul %he1, %we1 : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %re1 = nn.relu %me1 : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %he2 = nn.add %he1, %re1 : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %e = nn.relu %he2 : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %wd0 = nn.weight "model.dec.layer.0.w" {storage = "external", file = "m.data", offset = 512 : i64, size = 1024 : i64} : tensor<16x16xf32>
  %md0 = nn.matmul %y, %wd0 : (tensor<4x16xf32>, tensor<16x16xf32>) -> tensor<4x16xf32>
  %rd0 = nn.relu %md0 : (tensor<4x16xf32>) -> tensor<4x16xf32>
  %sd0 = nn.add %y, %rd0 : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  %wc0 = nn.weight "model.dec.layer.0.cross" {storage = "external", file = "m.data", offset = 1536 : i64, size = 512 : i64} : tensor<8x16xf32>
  %cd0 = nn.matmul %e, %wc0 : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
  %hd1 = nn.add %sd0, %cd0 : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  %wd1 = nn.weight "model.dec.layer.1.w" {storage = "external", file = "m.data", offset = 2048 : i64, size = 1024 : i64} : tensor<16x16xf32>
  %md1 = nn.matmul %hd1, %wd1 : (tensor<4x16xf32>, tensor<16x16xf32>) -> tensor<4x16xf32>
  %rd1 = nn.relu %md1 : (tensor<4x16xf32>) -> tensor<4x16xf32>
  %sd1 = nn.add %hd1, %rd1 : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  %wc1 = nn.weight "model.dec.layer.1.cross" {storage = "external", file = "m.data", offset = 3072 : i64, size = 512 : i64} : tensor<8x16xf32>
  %cd1 = nn.matmul %e, %wc1 : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
  %hd2 = nn.add %sd1, %cd1 : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  return %hd2 : tensor<4x16xf32>
}
