// The CUDA attention backward's two kernels share each query row's
// rowsum(P * dP): a workspace of B x Hq x Sq f32 values, added as the
// kernel's fourth output (3-D inputs: Hq from q_num_heads). Both read the
// forward's saved log-sum-exp (an input). The runtime runs the kernel (no
// generated launch).
// RUN: shard-opt %s -convert-nn-to-rt -cuda-attention-grad-workspace | FileCheck %s
// RUN: shard-opt %s -convert-nn-to-rt -cuda-attention-grad-workspace -convert-rt-to-gpu | FileCheck %s --check-prefix=GPU

// CHECK-LABEL: func.func @main
// CHECK: %[[W:.*]] = rt.alloc : memref<80xf32>
// CHECK: rt.kernel "attention_grad" ins(%arg0, %arg1, %arg2, %arg3, %arg4 : {{.*}}) outs(%{{.*}}, %{{.*}}, %{{.*}}, %[[W]] : memref<2x10x64xf32>, memref<2x10x32xf32>, memref<2x10x32xf32>, memref<80xf32>)
// GPU: rt.kernel "attention_grad"
// GPU-NOT: rt.launch
func.func @main(%q: tensor<2x10x64xf32> {nn.name = "q"}, %k: tensor<2x10x32xf32> {nn.name = "k"},
                %v: tensor<2x10x32xf32> {nn.name = "v"}, %dy: tensor<2x10x64xf32> {nn.name = "dy"},
                %lse: tensor<2x4x10xf32> {nn.name = "lse"})
    -> (tensor<2x10x64xf32> {nn.name = "dq"}, tensor<2x10x32xf32> {nn.name = "dk"}, tensor<2x10x32xf32> {nn.name = "dv"}) {
  %dq, %dk, %dv = nn.attention_grad %q, %k, %v, %dy, %lse {is_causal = true, q_num_heads = 4 : i64, kv_num_heads = 2 : i64} : (tensor<2x10x64xf32>, tensor<2x10x32xf32>, tensor<2x10x32xf32>, tensor<2x10x64xf32>, tensor<2x4x10xf32>) -> (tensor<2x10x64xf32>, tensor<2x10x32xf32>, tensor<2x10x32xf32>)
  return %dq, %dk, %dv : tensor<2x10x64xf32>, tensor<2x10x32xf32>, tensor<2x10x32xf32>
}
