// RUN: shard-opt %s -split-input-file -nn-raise-gelu | FileCheck %s
// RUN: shard-opt %s -split-input-file -nn-raise-gelu=explain=true -o /dev/null 2>&1 | FileCheck %s --check-prefix=EXPLAIN

// GPT-2's activation as torch exports it before opset 20: 0.5 * x first,
// pow(x, 3), the sum, sqrt(2/pi) as f32, tanh, 1 + t, the product.
// CHECK-LABEL: func.func @gpt2_new_gelu
// CHECK: %[[Y:.*]] = nn.gelu %arg0 {approximate = "tanh"} : (tensor<2x8xf32>) -> tensor<2x8xf32>
// CHECK-NOT: nn.tanh
// CHECK-NOT: nn.constant
// CHECK: return %[[Y]]
// EXPLAIN: remark: raised to nn.gelu: tanh approximation
func.func @gpt2_new_gelu(%x: tensor<2x8xf32>) -> tensor<2x8xf32> {
  %half = nn.constant dense<0.5> : tensor<f32>
  %hx = nn.mul %half, %x : (tensor<f32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  %three = nn.constant dense<3.0> : tensor<f32>
  %cube = nn.pow %x, %three : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
  %k = nn.constant dense<4.471500e-02> : tensor<f32>
  %kc = nn.mul %k, %cube : (tensor<f32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  %inner = nn.add %x, %kc : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  %c = nn.constant dense<0.797884583> : tensor<f32>
  %arg = nn.mul %c, %inner : (tensor<f32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  %t = nn.tanh %arg : (tensor<2x8xf32>) -> tensor<2x8xf32>
  %one = nn.constant dense<1.0> : tensor<f32>
  %o = nn.add %one, %t : (tensor<f32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  %y = nn.mul %hx, %o : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  return %y : tensor<2x8xf32>
}

// -----

// BERT's: x / sqrt(2), erf, + 1, times x, times 0.5 last; x keeps its
// other reader.
// CHECK-LABEL: func.func @bert_gelu
// CHECK: %[[Y:.*]] = nn.gelu %arg0 : (tensor<4xf32>) -> tensor<4xf32>
// CHECK-NOT: nn.erf
// CHECK: nn.add %[[Y]], %arg0
// EXPLAIN: remark: raised to nn.gelu: exact (erf)
func.func @bert_gelu(%x: tensor<4xf32>) -> tensor<4xf32> {
  %s = nn.constant dense<1.41421354> : tensor<f32>
  %d = nn.div %x, %s : (tensor<4xf32>, tensor<f32>) -> tensor<4xf32>
  %e = nn.erf %d : (tensor<4xf32>) -> tensor<4xf32>
  %one = nn.constant dense<1.0> : tensor<f32>
  %o = nn.add %e, %one : (tensor<4xf32>, tensor<f32>) -> tensor<4xf32>
  %xo = nn.mul %x, %o : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %half = nn.constant dense<0.5> : tensor<f32>
  %y = nn.mul %xo, %half : (tensor<4xf32>, tensor<f32>) -> tensor<4xf32>
  %r = nn.add %y, %x : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %r : tensor<4xf32>
}

// -----

// The tanh form with x^3 as x * x * x, every operand order flipped, and
// the 0.5 applied last.
// CHECK-LABEL: func.func @cube_as_products
// CHECK: nn.gelu %arg0 {approximate = "tanh"}
// EXPLAIN: remark: raised to nn.gelu: tanh approximation
func.func @cube_as_products(%x: tensor<4xf32>) -> tensor<4xf32> {
  %sq = nn.mul %x, %x : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %cube = nn.mul %sq, %x : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %k = nn.constant dense<4.471500e-02> : tensor<f32>
  %kc = nn.mul %cube, %k : (tensor<4xf32>, tensor<f32>) -> tensor<4xf32>
  %inner = nn.add %kc, %x : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %c = nn.constant dense<0.797884583> : tensor<f32>
  %arg = nn.mul %inner, %c : (tensor<4xf32>, tensor<f32>) -> tensor<4xf32>
  %t = nn.tanh %arg : (tensor<4xf32>) -> tensor<4xf32>
  %one = nn.constant dense<1.0> : tensor<f32>
  %o = nn.add %t, %one : (tensor<4xf32>, tensor<f32>) -> tensor<4xf32>
  %xo = nn.mul %o, %x : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %half = nn.constant dense<0.5> : tensor<f32>
  %y = nn.mul %half, %xo : (tensor<f32>, tensor<4xf32>) -> tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

// Not raised: the tanh's constant is not sqrt(2/pi) (0.8), and in the erf
// chain 1 + erf is also returned.
// CHECK-LABEL: func.func @not_gelu
// CHECK-NOT: nn.gelu
// EXPLAIN-NOT: remark
func.func @not_gelu(%x: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) {
  %three = nn.constant dense<3.0> : tensor<f32>
  %cube = nn.pow %x, %three : (tensor<4xf32>, tensor<f32>) -> tensor<4xf32>
  %k = nn.constant dense<4.471500e-02> : tensor<f32>
  %kc = nn.mul %k, %cube : (tensor<f32>, tensor<4xf32>) -> tensor<4xf32>
  %inner = nn.add %x, %kc : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %c = nn.constant dense<0.8> : tensor<f32>
  %arg = nn.mul %c, %inner : (tensor<f32>, tensor<4xf32>) -> tensor<4xf32>
  %t = nn.tanh %arg : (tensor<4xf32>) -> tensor<4xf32>
  %one = nn.constant dense<1.0> : tensor<f32>
  %o = nn.add %one, %t : (tensor<f32>, tensor<4xf32>) -> tensor<4xf32>
  %half = nn.constant dense<0.5> : tensor<f32>
  %hx = nn.mul %half, %x : (tensor<f32>, tensor<4xf32>) -> tensor<4xf32>
  %y = nn.mul %hx, %o : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %s = nn.constant dense<1.41421354> : tensor<f32>
  %d = nn.div %x, %s : (tensor<4xf32>, tensor<f32>) -> tensor<4xf32>
  %e = nn.erf %d : (tensor<4xf32>) -> tensor<4xf32>
  %o2 = nn.add %e, %one : (tensor<4xf32>, tensor<f32>) -> tensor<4xf32>
  %hx2 = nn.mul %x, %half : (tensor<4xf32>, tensor<f32>) -> tensor<4xf32>
  %y2 = nn.mul %hx2, %o2 : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %y, %y2, %o2 : tensor<4xf32>, tensor<4xf32>, tensor<4xf32>
}
