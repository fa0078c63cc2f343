// Vector accesses: each thread of an elementwise kernel takes as many
// consecutive elements as fit in 16 bytes of the kernel's narrowest type
// (8 bf16, 4 f32; halved until they divide the element count), loads each
// operand with one vector load when its elements are consecutive, one
// scalar load when they are all the same element, and stores one vector.
// Row reductions over contiguous rows step through the row the same way.
// (Each kernel's lanes are checked on its own launch: sibling-fusion, which
// would launch independent neighbours together, is off; siblings.mlir.)
// RUN: shard-opt %s -split-input-file -convert-nn-to-rt -convert-rt-to-gpu=sibling-fusion=false | FileCheck %s
// RUN: shard-opt %s -split-input-file -convert-nn-to-rt -convert-rt-to-gpu="vectorize=false sibling-fusion=false" | FileCheck %s --check-prefix=SCALAR

// bf16: 8 lanes a thread, 64 elements in 8 threads. The bias [16] is read
// 8 consecutive elements at a time as well.
// CHECK-LABEL: func.func @bias_add
// CHECK: rt.launch @shardflow_kernels::@k0_add_sigmoid grid [1, 1, 1] block [256, 1, 1]
// CHECK: gpu.func @k0_add_sigmoid
// CHECK: %[[T:.*]] = arith.addi
// CHECK: arith.cmpi ult, %[[T]], %c8
// CHECK: %[[BASE:.*]] = arith.muli %[[T]], %c8
// CHECK: vector.load %arg0[%[[BASE]]] {alignment = 16 : i64} : memref<64xbf16>, vector<8xbf16>
// CHECK: vector.load %arg1[%{{.*}}] {alignment = 16 : i64} : memref<16xbf16>, vector<8xbf16>
// CHECK-COUNT-8: arith.truncf %{{.*}} : f32 to bf16
// CHECK: vector.from_elements {{.*}} : vector<8xbf16>
// CHECK: vector.store %{{.*}}, %arg2[%[[BASE]]] {alignment = 16 : i64} : memref<64xbf16>, vector<8xbf16>
// CHECK-NOT: memref.load
// CHECK: gpu.return
// SCALAR-LABEL: func.func @bias_add
// SCALAR: grid [1, 1, 1] block [256, 1, 1]
// SCALAR-NOT: vector.
// SCALAR: memref.store
func.func @bias_add(%x: tensor<4x16xbf16>, %b: tensor<16xbf16>) -> tensor<4x16xbf16> {
  %a = nn.add %x, %b : (tensor<4x16xbf16>, tensor<16xbf16>) -> tensor<4x16xbf16>
  %s = nn.sigmoid %a : (tensor<4x16xbf16>) -> tensor<4x16xbf16>
  return %s : tensor<4x16xbf16>
}

// -----

// f32: 4 lanes. A [4, 1] operand is the same element for all 4 lanes (one
// scalar load); a [6] operand under [4, 6] is not 4 consecutive elements
// at every multiple of 4, so each lane loads its own; 24 / 4 = 6 threads.
// CHECK-LABEL: func.func @broadcasts
// CHECK: rt.launch @shardflow_kernels::@k0_mul grid [1, 1, 1] block [256, 1, 1]
// CHECK: rt.launch @shardflow_kernels::@k1_add grid [1, 1, 1] block [256, 1, 1]
// CHECK: gpu.func @k0_mul(%{{.*}}: memref<32xf32>, %{{.*}}: memref<4xf32>, %{{.*}}: memref<32xf32>)
// CHECK: arith.cmpi ult, %{{.*}}, %c8
// CHECK: vector.load %arg0[%{{.*}}] {alignment = 16 : i64} : memref<32xf32>, vector<4xf32>
// CHECK-NEXT: vector.extract
// CHECK: %[[S:.*]] = memref.load %arg1[%{{.*}}] : memref<4xf32>
// CHECK-NOT: memref.load
// CHECK-COUNT-4: arith.mulf %{{.*}}, %[[S]] : f32
// CHECK: vector.store %{{.*}}, %arg2[%{{.*}}] {alignment = 16 : i64} : memref<32xf32>, vector<4xf32>
// CHECK: gpu.func @k1_add(%{{.*}}: memref<24xf32>, %{{.*}}: memref<6xf32>, %{{.*}}: memref<24xf32>)
// CHECK: arith.cmpi ult, %{{.*}}, %c6
// CHECK: vector.load %arg0[%{{.*}}] {{.*}} vector<4xf32>
// CHECK-COUNT-4: memref.load %arg1[%{{.*}}] : memref<6xf32>
// CHECK: vector.store
func.func @broadcasts(%x: tensor<4x8xf32>, %c: tensor<4x1xf32>, %y: tensor<4x6xf32>, %r: tensor<6xf32>) -> (tensor<4x8xf32>, tensor<4x6xf32>) {
  %m = nn.mul %x, %c : (tensor<4x8xf32>, tensor<4x1xf32>) -> tensor<4x8xf32>
  %a = nn.add %y, %r : (tensor<4x6xf32>, tensor<6xf32>) -> tensor<4x6xf32>
  return %m, %a : tensor<4x8xf32>, tensor<4x6xf32>
}

// -----

// 15 elements: no width above 1 divides them, so one element a thread;
// 6 f32 elements: 2 lanes (8 bytes, aligned to 8).
// CHECK-LABEL: func.func @odd
// CHECK: gpu.func @k0_exp(%{{.*}}: memref<15xf32>, %{{.*}}: memref<15xf32>)
// CHECK-NOT: vector.
// CHECK: memref.store
// CHECK: gpu.func @k1_exp
// CHECK: arith.cmpi ult, %{{.*}}, %c3
// CHECK: vector.load {{.*}} {alignment = 8 : i64} : memref<6xf32>, vector<2xf32>
// CHECK: vector.store {{.*}} {alignment = 8 : i64} : memref<6xf32>, vector<2xf32>
func.func @odd(%x: tensor<3x5xf32>, %y: tensor<2x3xf32>) -> (tensor<3x5xf32>, tensor<2x3xf32>) {
  %e = nn.exp %x : (tensor<3x5xf32>) -> tensor<3x5xf32>
  %f = nn.exp %y : (tensor<2x3xf32>) -> tensor<2x3xf32>
  return %e, %f : tensor<3x5xf32>, tensor<2x3xf32>
}

// -----

// Booleans (i1 in memory, one byte each) are never loaded as vectors.
// CHECK-LABEL: func.func @booleans
// CHECK: gpu.func @k0_less_where
// CHECK-NOT: vector.
// CHECK: gpu.return
func.func @booleans(%x: tensor<4x8xf32>, %y: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %c = nn.less %x, %y : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xi1>
  %w = nn.where %c, %x, %y : (tensor<4x8xi1>, tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  return %w : tensor<4x8xf32>
}

// -----

// A bf16 cast to f32: the narrowest type (bf16) sets 8 lanes; the f32
// result is stored as one vector of 8 (32 bytes, aligned to 16).
// CHECK-LABEL: func.func @widen
// CHECK: gpu.func @k0_cast
// CHECK: vector.load {{.*}} {alignment = 16 : i64} : memref<32xbf16>, vector<8xbf16>
// CHECK: vector.store {{.*}} {alignment = 16 : i64} : memref<32xf32>, vector<8xf32>
func.func @widen(%x: tensor<4x8xbf16>) -> tensor<4x8xf32> {
  %c = nn.cast %x {to = f32} : (tensor<4x8xbf16>) -> tensor<4x8xf32>
  return %c : tensor<4x8xf32>
}

// -----

// The residual add and layer norm of a transformer in bf16 (rows of 64): a
// warp per row, each lane 8 consecutive elements a step (64 = 8 lanes of
// the warp busy, one step). The first pass loads x and the residual as
// vectors, stores the sum (a kernel output) as a vector, and keeps it in
// the warp's stretch of shared memory (aligned to 16) as vectors of f32;
// the later passes read it back as vectors. Scale and bias are loaded as
// vectors in the last pass, which stores the result as one vector.
// CHECK-LABEL: func.func @residual_norm
// CHECK: rt.launch @shardflow_kernels::@k0_add_layer_normalization grid [1, 1, 1] block [128, 1, 1]
// CHECK: gpu.func @k0_add_layer_normalization
// CHECK-SAME: workgroup(%[[ROW:.*]] : memref<256xf32, #gpu.address_space<workgroup>> {llvm.align = 16 : i64})
// CHECK: %[[LANE:.*]] = arith.remui
// CHECK: %[[FROM:.*]] = arith.muli %[[LANE]], %c8
// CHECK: scf.for %{{.*}} = %[[FROM]] to %c64{{.*}} step %c256
// CHECK: vector.load %arg0{{.*}} : memref<256xbf16>, vector<8xbf16>
// CHECK: vector.load %arg1{{.*}} : memref<256xbf16>, vector<8xbf16>
// CHECK: vector.store {{.*}} : memref<256xbf16>, vector<8xbf16>
// CHECK: vector.store {{.*}}, %[[ROW]][{{.*}}] {alignment = 16 : i64} : memref<256xf32, #gpu.address_space<workgroup>>, vector<8xf32>
// CHECK-COUNT-5: gpu.shuffle xor
// CHECK: vector.load %[[ROW]]
// CHECK-COUNT-5: gpu.shuffle xor
// CHECK: vector.load %[[ROW]]
// CHECK: vector.load %arg2{{.*}} : memref<64xbf16>, vector<8xbf16>
// CHECK: vector.load %arg3{{.*}} : memref<64xbf16>, vector<8xbf16>
// CHECK: vector.store {{.*}} : memref<256xbf16>, vector<8xbf16>
// CHECK-NOT: memref.load
// CHECK: gpu.return
func.func @residual_norm(%x: tensor<4x64xbf16>, %r: tensor<4x64xbf16>, %s: tensor<64xbf16>, %b: tensor<64xbf16>) -> (tensor<4x64xbf16>, tensor<4x64xbf16>) {
  %a = nn.add %x, %r : (tensor<4x64xbf16>, tensor<4x64xbf16>) -> tensor<4x64xbf16>
  %n = nn.layer_normalization %a, %s, %b {axis = -1 : i64, epsilon = 1.0e-5 : f32} : (tensor<4x64xbf16>, tensor<64xbf16>, tensor<64xbf16>) -> tensor<4x64xbf16>
  return %a, %n : tensor<4x64xbf16>, tensor<4x64xbf16>
}

// -----

// GPT-2 small's rows (768 bf16): 8 elements a lane and step, 256 a warp
// step, so every lane takes 3 steps: each pass is unrolled, the first
// pass's 6 vector loads come before its first shuffle, and there is no
// loop. (Rows of 64, above, keep the loop: only 8 lanes have a step.)
// CHECK-LABEL: func.func @gpt2_norm
// CHECK: gpu.func @k0_add_layer_normalization
// CHECK-NOT: scf.for
// CHECK-COUNT-6: vector.load %arg{{[01]}}{{.*}} : memref<6144xbf16>, vector<8xbf16>
// CHECK-NOT: scf.for
// CHECK: gpu.shuffle xor
// CHECK-COUNT-3: vector.load %arg2{{.*}} : memref<768xbf16>, vector<8xbf16>
// CHECK-NOT: scf.for
// CHECK: gpu.return
// SCALAR-LABEL: func.func @gpt2_norm
// SCALAR: gpu.func @k0_add_layer_normalization
// SCALAR: scf.for
func.func @gpt2_norm(%x: tensor<8x768xbf16>, %r: tensor<8x768xbf16>, %s: tensor<768xbf16>, %b: tensor<768xbf16>) -> tensor<8x768xbf16> {
  %a = nn.add %x, %r : (tensor<8x768xbf16>, tensor<8x768xbf16>) -> tensor<8x768xbf16>
  %n = nn.layer_normalization %a, %s, %b {axis = -1 : i64, epsilon = 1.0e-5 : f32} : (tensor<8x768xbf16>, tensor<768xbf16>, tensor<768xbf16>) -> tensor<8x768xbf16>
  return %n : tensor<8x768xbf16>
}

// -----

// Rows reduced over a strided axis (inner > 1) keep one element a step.
// CHECK-LABEL: func.func @strided_rows
// CHECK: gpu.func @k0_softmax
// CHECK-NOT: vector.
// CHECK: gpu.return
func.func @strided_rows(%x: tensor<8x4xf32>) -> tensor<8x4xf32> {
  %s = nn.softmax %x {axis = 0 : i64} : (tensor<8x4xf32>) -> tensor<8x4xf32>
  return %s : tensor<8x4xf32>
}

// -----

// Llama's RMS norm (4096 bf16) runs a block of 256 threads per row, 8
// elements a thread and step, so each pass is 2 unrolled steps: the first
// pass's two vector loads come before the block reduction, with no loop.
// CHECK-LABEL: func.func @llama_norm
// CHECK: rt.launch @shardflow_kernels::@k0_rms_normalization grid [2, 1, 1] block [256, 1, 1]
// CHECK: gpu.func @k0_rms_normalization
// CHECK-NOT: scf.for
// CHECK-COUNT-2: vector.load %arg0{{.*}} : memref<8192xbf16>, vector<8xbf16>
// CHECK-NOT: scf.for
// CHECK: gpu.all_reduce
// CHECK-NOT: scf.for
// CHECK: gpu.return
// SCALAR-LABEL: func.func @llama_norm
// SCALAR: gpu.func @k0_rms_normalization
// SCALAR: scf.for
func.func @llama_norm(%x: tensor<2x4096xbf16>, %s: tensor<4096xbf16>) -> tensor<2x4096xbf16> {
  %n = nn.rms_normalization %x, %s {axis = -1 : i64, epsilon = 1.0e-5 : f32} : (tensor<2x4096xbf16>, tensor<4096xbf16>) -> tensor<2x4096xbf16>
  return %n : tensor<2x4096xbf16>
}
