// Sibling fusion: elementwise groups that stand next to each other in the
// program and neither read nor write what the other writes run as one
// launch, each in its own range of thread blocks (block-uniform branches),
// with its own lanes per thread. Only allocations and views may lie between
// them; a launch takes at most 8 groups.
// RUN: shard-opt %s -split-input-file -convert-nn-to-rt -convert-rt-to-gpu | FileCheck %s
// RUN: shard-opt %s -split-input-file -convert-nn-to-rt -convert-rt-to-gpu=sibling-fusion=false | FileCheck %s --check-prefix=OFF

// Llama's rotary embeddings of the query (4 heads) and the key (2 heads):
// 4096 and 2048 elements, 4 f32 a thread, so blocks 0-3 rotate the query
// and blocks 4-5 the key. Both check their position ids: one status word.
// CHECK-LABEL: func.func @rotary
// CHECK: rt.launch @shardflow_kernels::@k0_rotary_embedding_rotary_embedding grid [6, 1, 1] block [256, 1, 1] ins(%arg0, %arg2, %arg3, %arg4, %arg1 : {{.*}}) outs(%{{.*}}, %{{.*}} : memref<1x64x64xf32>, memref<1x64x32xf32>) {checks}
// CHECK-NOT: rt.launch
// CHECK: gpu.func @k0_rotary_embedding_rotary_embedding(%[[Q:.*]]: memref<4096xf32>, %{{.*}}: memref<512xf32>, %{{.*}}: memref<512xf32>, %{{.*}}: memref<64xi64>, %[[K:.*]]: memref<2048xf32>, %[[QR:.*]]: memref<4096xf32>, %[[KR:.*]]: memref<2048xf32>, %{{.*}}: memref<2xi64>)
// CHECK-SAME: known_grid_size = array<i32: 6, 1, 1>
// CHECK: %[[BID:.*]] = gpu.block_id x
// CHECK: %[[TID:.*]] = gpu.thread_id x
// CHECK: %[[QPART:.*]] = arith.cmpi ult, %[[BID]], %c4 : index
// CHECK: scf.if %[[QPART]] {
// CHECK: %[[QB:.*]] = arith.muli %[[BID]], %c256
// CHECK: %[[QI:.*]] = arith.addi %[[QB]], %[[TID]]
// CHECK: arith.cmpi ult, %[[QI]], %c1024
// CHECK: memref.load %[[Q]]
// CHECK: vector.store %{{.*}}, %[[QR]]
// CHECK-NOT: %[[KR]]
// CHECK: %[[LOCAL:.*]] = arith.subi %[[BID]], %c4
// CHECK: %[[KPART:.*]] = arith.cmpi ult, %[[LOCAL]], %c2
// CHECK: scf.if %[[KPART]] {
// CHECK: %[[KB:.*]] = arith.muli %[[LOCAL]], %c256
// CHECK: %[[KI:.*]] = arith.addi %[[KB]], %[[TID]]
// CHECK: arith.cmpi ult, %[[KI]], %c512
// CHECK: memref.load %[[K]]
// CHECK: vector.store %{{.*}}, %[[KR]]
// CHECK: gpu.return
// OFF-LABEL: func.func @rotary
// OFF: rt.launch @shardflow_kernels::@k0_rotary_embedding grid [4, 1, 1]
// OFF: rt.launch @shardflow_kernels::@k1_rotary_embedding grid [2, 1, 1]
func.func @rotary(%q: tensor<1x64x64xf32> {nn.name = "q"}, %k: tensor<1x64x32xf32> {nn.name = "k"}, %cos: tensor<64x8xf32> {nn.name = "cos"}, %sin: tensor<64x8xf32> {nn.name = "sin"}, %pos: tensor<1x64xi64> {nn.name = "pos"}) -> (tensor<1x64x64xf32> {nn.name = "qr"}, tensor<1x64x32xf32> {nn.name = "kr"}) {
  %qr = nn.rotary_embedding %q, %cos, %sin, %pos {num_heads = 4 : i64} : (tensor<1x64x64xf32>, tensor<64x8xf32>, tensor<64x8xf32>, tensor<1x64xi64>) -> tensor<1x64x64xf32>
  %kr = nn.rotary_embedding %k, %cos, %sin, %pos {num_heads = 2 : i64} : (tensor<1x64x32xf32>, tensor<64x8xf32>, tensor<64x8xf32>, tensor<1x64xi64>) -> tensor<1x64x32xf32>
  return %qr, %kr : tensor<1x64x64xf32>, tensor<1x64x32xf32>
}

// -----

// The add reads the exp's result with broadcasting (another thread's
// element), so it cannot take it from a register, and it depends on it:
// two launches.
// CHECK-LABEL: func.func @dependent
// CHECK: rt.launch @shardflow_kernels::@k0_exp
// CHECK: rt.launch @shardflow_kernels::@k1_add
func.func @dependent(%x: tensor<3x1xf32> {nn.name = "x"}, %y: tensor<3x4xf32> {nn.name = "y"}) -> (tensor<3x4xf32> {nn.name = "z"}) {
  %e = nn.exp %x : (tensor<3x1xf32>) -> tensor<3x1xf32>
  %a = nn.add %e, %y : (tensor<3x1xf32>, tensor<3x4xf32>) -> tensor<3x4xf32>
  return %a : tensor<3x4xf32>
}

// -----

// A GEMM between two independent kernels: each launches where it stands.
// CHECK-LABEL: func.func @apart
// CHECK: rt.launch @shardflow_kernels::@k0_exp
// CHECK: rt.kernel "matmul"
// CHECK: rt.launch @shardflow_kernels::@k1_tanh
func.func @apart(%x: tensor<4x4xf32> {nn.name = "x"}, %w: tensor<4x4xf32> {nn.name = "w"}, %y: tensor<4x4xf32> {nn.name = "y"}) -> (tensor<4x4xf32> {nn.name = "a"}, tensor<4x4xf32> {nn.name = "b"}, tensor<4x4xf32> {nn.name = "c"}) {
  %e = nn.exp %x : (tensor<4x4xf32>) -> tensor<4x4xf32>
  %m = nn.matmul %x, %w : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
  %t = nn.tanh %y : (tensor<4x4xf32>) -> tensor<4x4xf32>
  return %e, %m, %t : tensor<4x4xf32>, tensor<4x4xf32>, tensor<4x4xf32>
}

// -----

// Nine independent kernels: a launch of eight, then one of its own.
// CHECK-LABEL: func.func @nine
// CHECK: rt.launch @shardflow_kernels::@k0_exp_exp_exp_exp_exp_exp_exp_exp grid [8, 1, 1]
// CHECK: rt.launch @shardflow_kernels::@k1_exp grid [1, 1, 1]
// CHECK-NEXT: return
// OFF-LABEL: func.func @nine
// OFF-COUNT-9: rt.launch
func.func @nine(%x: tensor<16xf32> {nn.name = "x"}) -> (tensor<16xf32>, tensor<16xf32>, tensor<16xf32>, tensor<16xf32>, tensor<16xf32>, tensor<16xf32>, tensor<16xf32>, tensor<16xf32>, tensor<16xf32>) {
  %0 = nn.exp %x : (tensor<16xf32>) -> tensor<16xf32>
  %1 = nn.exp %x : (tensor<16xf32>) -> tensor<16xf32>
  %2 = nn.exp %x : (tensor<16xf32>) -> tensor<16xf32>
  %3 = nn.exp %x : (tensor<16xf32>) -> tensor<16xf32>
  %4 = nn.exp %x : (tensor<16xf32>) -> tensor<16xf32>
  %5 = nn.exp %x : (tensor<16xf32>) -> tensor<16xf32>
  %6 = nn.exp %x : (tensor<16xf32>) -> tensor<16xf32>
  %7 = nn.exp %x : (tensor<16xf32>) -> tensor<16xf32>
  %8 = nn.exp %x : (tensor<16xf32>) -> tensor<16xf32>
  return %0, %1, %2, %3, %4, %5, %6, %7, %8 : tensor<16xf32>, tensor<16xf32>, tensor<16xf32>, tensor<16xf32>, tensor<16xf32>, tensor<16xf32>, tensor<16xf32>, tensor<16xf32>, tensor<16xf32>
}
