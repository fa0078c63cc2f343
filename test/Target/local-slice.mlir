// rt.local_slice exports as a `collective local_slice` line with every
// rank's start flattened in rank order; a partitioned nn + dist program,
// lowered by convert-nn-to-rt (which drops its dist.mesh), compiles to an
// artifact for the mesh's world.
// RUN: split-file %s %t
// RUN: shard-opt %t/rt.mlir | shard-opt | FileCheck %s --check-prefix=IR
// RUN: shard-opt %t/rt.mlir --target cpu -o - | FileCheck %s --check-prefix=RT
// RUN: shard-opt %t/dist.mlir --convert-nn-to-rt | shard-opt --target cpu -o - | FileCheck %s --check-prefix=DIST

// IR: rt.local_slice ins(%{{.*}} : memref<4x6xf32>) outs(%{{.*}} : memref<2x3xf32>) {starts = [array<i64: 0, 0>, array<i64: 0, 3>, array<i64: 2, 0>, array<i64: 2, 3>]}

// RT: world-size 4
// RT: buffer 0 input f32 4x6 name=x
// RT: buffer 1 arena f32 2x3 offset=0
// RT: collective local_slice in=0 out=1 starts=is:0,0,0,3,2,0,2,3
// RT: output y 1

// DIST: world-size 2
// DIST: buffer 0 input f32 4x3 name=x
// DIST: collective local_slice in=0 out=[[S:[0-9]+]] starts=is:0,0,2,0
// DIST: kernel relu in=[[S]] out=[[R:[0-9]+]]
// DIST: collective all_gather in=[[R]] out=[[G:[0-9]+]] dim=i:0 group_size=i:2 groups=is:0,1
// DIST: output y [[G]]

//--- rt.mlir
func.func @main(%x: memref<4x6xf32> {nn.name = "x"}) -> (memref<2x3xf32> {nn.name = "y"}) attributes {rt.world_size = 4 : i64} {
  %y = rt.alloc : memref<2x3xf32>
  rt.local_slice ins(%x : memref<4x6xf32>) outs(%y : memref<2x3xf32>) {starts = [array<i64: 0, 0>, array<i64: 0, 3>, array<i64: 2, 0>, array<i64: 2, 3>]}
  return %y : memref<2x3xf32>
}

//--- dist.mlir
dist.mesh @mesh ["dp"=2]
func.func @main(%x: tensor<4x3xf32> {nn.name = "x"}) -> (tensor<4x3xf32> {nn.name = "y"}) {
  %s = dist.all_slice %x on @mesh ["dp"] {dim = 0 : i64} : tensor<4x3xf32> -> tensor<2x3xf32>
  %r = nn.relu %s : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %g = dist.all_gather %r on @mesh ["dp"] {dim = 0 : i64} : tensor<2x3xf32> -> tensor<4x3xf32>
  return %g : tensor<4x3xf32>
}
