// cuBLASLt multiplies f32, f16 and bf16: a matmul of another element type
// becomes the einsum it is, which convert-rt-to-gpu generates.
// RUN: shard-opt %s -split-input-file -convert-nn-to-rt -cuda-lower-non-gemm-matmuls -convert-rt-to-gpu | FileCheck %s
// RUN: shard-opt %s -split-input-file -convert-nn-to-rt -cuda-lower-non-gemm-matmuls | FileCheck %s --check-prefix=RT

// cuBLASLt has no integer GEMM: an integer matmul is generated as the
// einsum it is, one loop over the contracted dimension.
// RT-LABEL: func.func @main
// RT: rt.kernel "einsum" ins(%arg0, %arg1 : memref<3x4xi64>, memref<4x5xi64>) outs(%{{.*}} : memref<3x5xi64>) {params = {equation = "...ij,...jk->...ik"}}
// RT-NOT: "matmul"
// CHECK-LABEL: func.func @main
// CHECK: rt.launch @shardflow_kernels::@k0_einsum grid [1, 1, 1] block [256, 1, 1]
// CHECK: gpu.func @k0_einsum(%{{.*}}: memref<12xi64>, %{{.*}}: memref<20xi64>, %{{.*}}: memref<15xi64>)
// CHECK: scf.for %{{.*}} = %c0{{(_[0-9]+)?}} to %c4{{(_[0-9]+)?}} step %c1{{(_[0-9]+)?}} iter_args({{.*}}) -> (i64)
// CHECK: arith.muli
func.func @main(%a: tensor<3x4xi64> {nn.name = "a"}, %b: tensor<4x5xi64> {nn.name = "b"}) -> (tensor<3x5xi64> {nn.name = "c"}) {
  %c = nn.matmul %a, %b : (tensor<3x4xi64>, tensor<4x5xi64>) -> tensor<3x5xi64>
  return %c : tensor<3x5xi64>
}

// -----

// A vector operand keeps its rank in the equation; f64 is no GEMM type
// either, while f32 stays a matmul.
// RT-LABEL: func.func @vectors
// RT: rt.kernel "einsum" ins(%arg0, %arg1 : memref<4xf64>, memref<4x5xf64>) outs(%{{.*}} : memref<5xf64>) {params = {equation = "j,...jk->...k"}}
// RT: rt.kernel "einsum" ins(%arg1, %arg2 : memref<4x5xf64>, memref<5xf64>) outs(%{{.*}} : memref<4xf64>) {params = {equation = "...ij,j->...i"}}
// RT: rt.kernel "matmul" ins(%arg3, %arg4 : memref<3x4xf32>, memref<4x5xf32>)
// CHECK-LABEL: func.func @vectors
func.func @vectors(%v: tensor<4xf64> {nn.name = "v"}, %m: tensor<4x5xf64> {nn.name = "m"}, %u: tensor<5xf64> {nn.name = "u"}, %a: tensor<3x4xf32> {nn.name = "a"}, %b: tensor<4x5xf32> {nn.name = "b"}) -> (tensor<5xf64> {nn.name = "x"}, tensor<4xf64> {nn.name = "y"}, tensor<3x5xf32> {nn.name = "z"}) {
  %x = nn.matmul %v, %m : (tensor<4xf64>, tensor<4x5xf64>) -> tensor<5xf64>
  %y = nn.matmul %m, %u : (tensor<4x5xf64>, tensor<5xf64>) -> tensor<4xf64>
  %z = nn.matmul %a, %b : (tensor<3x4xf32>, tensor<4x5xf32>) -> tensor<3x5xf32>
  return %x, %y, %z : tensor<5xf64>, tensor<4xf64>, tensor<3x5xf32>
}
