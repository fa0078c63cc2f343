// Elementwise kernels fuse along buffers read once and element for element;
// the fused intermediates disappear; a row reduction takes the elementwise
// producer of its input as prologue; matmul stays a runtime kernel.
// (Vector accesses are off here, and no GEMM epilogue is fused:
// vectorize.mlir and Target/CUDA/fuse-gemm-epilogues.mlir test them.)
// RUN: shard-opt %s -split-input-file -convert-nn-to-rt -convert-rt-to-gpu=vectorize=false | FileCheck %s

// CHECK-LABEL: func.func @main
// CHECK: rt.kernel "matmul"
// CHECK-NEXT: %[[OUT:.*]] = rt.alloc : memref<2x4xf32>
// CHECK-NEXT: rt.launch @shardflow_kernels::@k0_add_gelu_softmax grid [1, 1, 1] block [64, 1, 1] ins(%{{.*}}, %{{.*}} : memref<2x4xf32>, memref<4xf32>) outs(%[[OUT]] : memref<2x4xf32>)
// CHECK-NEXT: return %[[OUT]]
// CHECK: gpu.module @shardflow_kernels
// Short rows run one warp per row (2 rows: one block of 2 warps). Each
// row (4 elements) is kept in its warp's stretch of shared memory: the
// first pass computes add+gelu and stores it there, the later passes read
// it back. The reductions are xor shuffles (16, 8, 4, 2, 1), no barrier.
// CHECK: gpu.func @k0_add_gelu_softmax(%{{.*}}: memref<8xf32>, %{{.*}}: memref<4xf32>, %{{.*}}: memref<8xf32>) workgroup(%[[ROW:.*]] : memref<8xf32, #gpu.address_space<workgroup>>) kernel
// CHECK-SAME: known_block_size = array<i32: 64, 1, 1>
// CHECK: %[[TID:.*]] = gpu.thread_id x
// CHECK: %[[WARP:.*]] = arith.divui %[[TID]], %c32{{.*}}
// CHECK: %[[LANE:.*]] = arith.remui %[[TID]], %c32{{.*}}
// CHECK-NOT: scf.if
// CHECK: scf.for %{{.*}} = %[[LANE]] to %c4{{.*}} step %c32{{.*}}
// CHECK: math.erf
// CHECK: memref.store %{{.*}}, %[[ROW]]
// CHECK-COUNT-5: gpu.shuffle xor
// CHECK-NOT: gpu.barrier
// CHECK: scf.for
// CHECK-NOT: math.erf
// CHECK: memref.load %[[ROW]]
// CHECK-COUNT-5: gpu.shuffle xor
// CHECK: memref.load %[[ROW]]
// CHECK: math.exp
// CHECK: memref.store
// CHECK-NOT: gpu.all_reduce
// CHECK: gpu.return
func.func @main(%x: tensor<2x8xf32> {nn.name = "x"}, %w: tensor<8x4xf32> {nn.name = "w"}, %b: tensor<4xf32> {nn.name = "b"}) -> (tensor<2x4xf32> {nn.name = "y"}) {
  %mm = nn.matmul %x, %w : (tensor<2x8xf32>, tensor<8x4xf32>) -> tensor<2x4xf32>
  %a = nn.add %mm, %b : (tensor<2x4xf32>, tensor<4xf32>) -> tensor<2x4xf32>
  %g = nn.gelu %a : (tensor<2x4xf32>) -> tensor<2x4xf32>
  %s = nn.softmax %g {axis = 1 : i64} : (tensor<2x4xf32>) -> tensor<2x4xf32>
  return %s : tensor<2x4xf32>
}

// -----

// Multi-output fusion: exp's result is read element for element by both add
// and mul, so all three run in one kernel and exp's buffer never exists;
// add's result is also returned, so the kernel writes it as well as mul's.
// CHECK-LABEL: func.func @main
// CHECK-NOT: rt.alloc : memref<3x4xf32>{{$}}
// CHECK: %[[T:.*]] = rt.alloc : memref<3x4xf32>
// CHECK: %[[M:.*]] = rt.alloc : memref<3x4xf32>
// CHECK: rt.launch @shardflow_kernels::@k0_exp_add_tanh_mul {{.*}} ins(%arg0, %arg1 : memref<3x4xf32>, memref<4xf32>) outs(%[[T]], %[[M]] : memref<3x4xf32>, memref<3x4xf32>)
// CHECK-NEXT: return %[[T]], %[[M]]
// CHECK: gpu.func @k0_exp_add_tanh_mul(%{{.*}}: memref<12xf32>, %{{.*}}: memref<4xf32>, %{{.*}}: memref<12xf32>, %{{.*}}: memref<12xf32>) kernel
// CHECK-SAME: known_grid_size = array<i32: 1, 1, 1>
// CHECK: arith.cmpi ult
// CHECK: scf.if
// CHECK: math.exp
// CHECK: arith.remui
// CHECK: math.tanh
// CHECK: memref.store
// CHECK: arith.mulf
// CHECK: memref.store
func.func @main(%x: tensor<3x4xf32> {nn.name = "x"}, %b: tensor<4xf32> {nn.name = "b"}) -> (tensor<3x4xf32> {nn.name = "y"}, tensor<3x4xf32> {nn.name = "z"}) {
  %e = nn.exp %x : (tensor<3x4xf32>) -> tensor<3x4xf32>
  %a = nn.add %e, %b : (tensor<3x4xf32>, tensor<4xf32>) -> tensor<3x4xf32>
  %t = nn.tanh %a : (tensor<3x4xf32>) -> tensor<3x4xf32>
  %m = nn.mul %e, %e : (tensor<3x4xf32>, tensor<3x4xf32>) -> tensor<3x4xf32>
  return %t, %m : tensor<3x4xf32>, tensor<3x4xf32>
}

// -----

// A result read with broadcasting (another thread's element) is not fused:
// exp of the [3,1] column is written by its own kernel, which closes before
// the add reads it.
// CHECK-LABEL: func.func @main
// CHECK: %[[E:.*]] = rt.alloc : memref<3x1xf32>
// CHECK: rt.launch @shardflow_kernels::@k0_exp {{.*}} outs(%[[E]]
// CHECK: rt.launch @shardflow_kernels::@k1_add {{.*}} ins(%[[E]], %arg1
func.func @main(%x: tensor<3x1xf32> {nn.name = "x"}, %y: tensor<3x4xf32> {nn.name = "y"}) -> (tensor<3x4xf32> {nn.name = "z"}) {
  %e = nn.exp %x : (tensor<3x1xf32>) -> tensor<3x1xf32>
  %a = nn.add %e, %y : (tensor<3x1xf32>, tensor<3x4xf32>) -> tensor<3x4xf32>
  return %a : tensor<3x4xf32>
}

// -----

// bf16 data: loads widen to f32, the one store rounds.
// CHECK-LABEL: gpu.func @k0_add_sigmoid
// CHECK: memref.load {{.*}} : memref<16xbf16>
// CHECK: arith.extf {{.*}} : bf16 to f32
// CHECK: arith.addf {{.*}} : f32
// CHECK: arith.truncf {{.*}} : f32 to bf16
// CHECK-NEXT: memref.store
func.func @main(%x: tensor<16xbf16> {nn.name = "x"}, %y: tensor<16xbf16> {nn.name = "y"}) -> (tensor<16xbf16> {nn.name = "z"}) {
  %a = nn.add %x, %y : (tensor<16xbf16>, tensor<16xbf16>) -> tensor<16xbf16>
  %s = nn.sigmoid %a : (tensor<16xbf16>) -> tensor<16xbf16>
  return %s : tensor<16xbf16>
}

// -----

// Rows longer than 1024 elements run one block per row (block-wide
// reductions); 12 short rows take two blocks of 8 warps, and the spare
// warps of the second skip the body as a whole.
// CHECK-LABEL: func.func @layouts
// CHECK: rt.launch @shardflow_kernels::@k{{[0-9]+}}_softmax grid [3, 1, 1] block [256, 1, 1]
// CHECK: rt.launch @shardflow_kernels::@k{{[0-9]+}}_layer_normalization grid [2, 1, 1] block [256, 1, 1]
// CHECK: gpu.func @k{{[0-9]+}}_softmax
// CHECK-SAME: workgroup(%{{.*}} : memref<2048xf32, #gpu.address_space<workgroup>>)
// CHECK: gpu.all_reduce maximumf
// CHECK: gpu.all_reduce add
// CHECK: gpu.func @k{{[0-9]+}}_layer_normalization
// CHECK-SAME: workgroup(%{{.*}} : memref<768xf32, #gpu.address_space<workgroup>>)
// CHECK: %[[ROW:.*]] = arith.addi %{{.*}}, %{{.*}} : index
// CHECK: %[[IN:.*]] = arith.cmpi ult, %[[ROW]], %c12{{.*}}
// CHECK: scf.if %[[IN]]
// CHECK-COUNT-10: gpu.shuffle xor
func.func @layouts(%x: tensor<3x2048xf32>, %y: tensor<12x96xf32>, %s: tensor<96xf32>) -> (tensor<3x2048xf32>, tensor<12x96xf32>) {
  %a = nn.softmax %x {axis = 1 : i64} : (tensor<3x2048xf32>) -> tensor<3x2048xf32>
  %n = nn.layer_normalization %y, %s {axis = -1 : i64, epsilon = 1.0e-5 : f32} : (tensor<12x96xf32>, tensor<96xf32>) -> tensor<12x96xf32>
  return %a, %n : tensor<3x2048xf32>, tensor<12x96xf32>
}

// -----

// A row's elementwise consumers are its epilogue: they run in the last
// pass on the row's results, and the norm's own result, read only by
// them, is never stored.
// CHECK-LABEL: func.func @epilogue
// CHECK-NOT: rt.alloc : memref<4x64xf32>{{$}}
// CHECK: %[[H:.*]] = rt.alloc : memref<4x64xbf16>
// CHECK-NEXT: rt.launch @shardflow_kernels::@k{{[0-9]+}}_add_rms_normalization_mul_cast grid [1, 1, 1] block [128, 1, 1] ins(%arg0, %arg1, %arg2, %arg3 : memref<4x64xf32>, memref<4x64xf32>, memref<64xf32>, memref<64xf32>) outs(%[[H]] : memref<4x64xbf16>)
// CHECK-NEXT: return %[[H]]
// A consumer that also reads the prologue's value (the residual stream
// %a, in no register in the last pass) is a launch of its own.
// CHECK-LABEL: func.func @prologue_value
// CHECK: rt.launch @shardflow_kernels::@k{{[0-9]+}}_add_rms_normalization grid
// CHECK-NEXT: rt.alloc
// CHECK-NEXT: rt.launch @shardflow_kernels::@k{{[0-9]+}}_add grid
// Rows of 64 elements, one per lane and step: each pass is 2 unrolled
// steps (the first one's loads issue before the second one's), no loop.
// CHECK: gpu.func @k{{[0-9]+}}_add_rms_normalization_mul_cast
// CHECK-NOT: scf.for
// CHECK-COUNT-5: gpu.shuffle xor
// CHECK-NOT: scf.for
// CHECK: arith.mulf
// CHECK: arith.mulf
// CHECK: arith.mulf
// CHECK: arith.truncf {{.*}} : f32 to bf16
// CHECK: memref.store
// CHECK: arith.mulf
// CHECK: arith.mulf
// CHECK: arith.mulf
// CHECK: arith.truncf {{.*}} : f32 to bf16
// CHECK: memref.store
// CHECK-NOT: memref.store
// CHECK: gpu.return
func.func @epilogue(%x: tensor<4x64xf32>, %y: tensor<4x64xf32>, %s: tensor<64xf32>, %w: tensor<64xf32>) -> tensor<4x64xbf16> {
  %a = nn.add %x, %y : (tensor<4x64xf32>, tensor<4x64xf32>) -> tensor<4x64xf32>
  %n = nn.rms_normalization %a, %s {axis = -1 : i64, epsilon = 1.0e-5 : f32} : (tensor<4x64xf32>, tensor<64xf32>) -> tensor<4x64xf32>
  %m = nn.mul %n, %w : (tensor<4x64xf32>, tensor<64xf32>) -> tensor<4x64xf32>
  %h = nn.cast %m {to = bf16} : (tensor<4x64xf32>) -> tensor<4x64xbf16>
  return %h : tensor<4x64xbf16>
}
func.func @prologue_value(%x: tensor<4x64xf32>, %y: tensor<4x64xf32>, %s: tensor<64xf32>) -> tensor<4x64xf32> {
  %a = nn.add %x, %y : (tensor<4x64xf32>, tensor<4x64xf32>) -> tensor<4x64xf32>
  %n = nn.rms_normalization %a, %s {axis = -1 : i64, epsilon = 1.0e-5 : f32} : (tensor<4x64xf32>, tensor<64xf32>) -> tensor<4x64xf32>
  %z = nn.add %n, %a : (tensor<4x64xf32>, tensor<4x64xf32>) -> tensor<4x64xf32>
  return %z : tensor<4x64xf32>
}
