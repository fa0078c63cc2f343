// RUN: shard-opt %s -nn-append-loss=kind=mse -nn-differentiate=loss=loss -nn-optimizer="optimizer=sgd lr=0.5 momentum=0.9" | FileCheck %s --check-prefix=SGD
// RUN: shard-opt %s -nn-append-loss=kind=mse -nn-differentiate=loss=loss -nn-optimizer="optimizer=adamw lr=0.01 no-decay=*.bias" | FileCheck %s --check-prefix=ADAMW
// RUN: shard-opt %s -nn-append-loss=kind=mse -nn-differentiate=loss=loss -nn-optimizer="optimizer=adamw lr=0.01 no-decay=*.bias fused-updates=true clip-grad-norm=1.0" | FileCheck %s --check-prefix=FUSED
// RUN: shard-opt %s -nn-append-loss=kind=mse -nn-differentiate=loss=loss -nn-optimizer="lr=0.01 warmup-steps=2 schedule=cosine total-steps=10 min-lr=0.001 clip-grad-norm=1.0" | FileCheck %s --check-prefix=SCHED
// RUN: shard-opt %s -nn-append-loss=kind=mse -nn-differentiate=loss=loss -nn-optimizer=optimizer=sgd -convert-nn-to-rt | FileCheck %s --check-prefix=RT
// RUN: shard-opt %s -nn-append-loss=kind=mse -nn-differentiate=loss=loss -nn-optimizer="optimizer=adamw fused-updates=true" -convert-nn-to-rt | FileCheck %s --check-prefix=INPLACE
// RUN: shard-opt %s -nn-append-loss=kind=mse -nn-differentiate=loss=loss -nn-optimizer="optimizer=sgd freeze=fc.bias" | FileCheck %s --check-prefix=FREEZE
// RUN: not shard-opt %s -nn-append-loss=kind=mse -nn-differentiate=loss=loss -nn-optimizer="schedule=linear total-steps=0" 2>&1 | FileCheck %s --check-prefix=TOTAL
// RUN: not shard-opt %s -nn-append-loss=kind=mse -nn-differentiate=loss=loss -nn-optimizer="optimizer=lamb" 2>&1 | FileCheck %s --check-prefix=KIND

// One step of SGD with momentum: the step counter, the gradients' norm, a
// momentum buffer per trained initializer (the embedded bias becomes an
// nn.weight: state, not a constant), each new value a result marked
// nn.state, kept as it was when the loss or the norm is not finite; the
// model's output and the gradients are results no more.
// SGD-LABEL: func.func @main
// SGD-SAME: -> (tensor<f32> {nn.name = "loss"}, tensor<f32> {nn.name = "grad_norm"}, tensor<f32> {nn.name = "lr"},
// SGD-SAME: tensor<3x4xf32> {nn.name = "fc.weight.momentum_buffer", nn.state = "fc.weight.momentum_buffer"},
// SGD-SAME: tensor<3x4xf32> {nn.name = "fc.weight", nn.state = "fc.weight"},
// SGD-SAME: tensor<4xf32> {nn.name = "fc.bias.momentum_buffer", nn.state = "fc.bias.momentum_buffer"},
// SGD-SAME: tensor<4xf32> {nn.name = "fc.bias", nn.state = "fc.bias"},
// SGD-SAME: tensor<f32> {nn.name = "optimizer.step", nn.state = "optimizer.step"})
// SGD: %[[STEP:.*]] = nn.weight "optimizer.step" {storage = "zeros"} : tensor<f32>
// SGD: %[[W:.*]] = nn.weight "fc.weight" {file = "m.data"
// SGD: %[[B:.*]] = nn.weight "fc.bias" {size = 16 : i64, storage = "protobuf"} : tensor<4xf32>
// SGD: nn.transpose %arg0
// SGD-NEXT: %[[GW:.*]] = nn.matmul
// SGD: %[[NEXT:.*]] = nn.add %[[STEP]]
// SGD: %[[LR:.*]] = nn.constant dense<5.000000e-01> : tensor<f32>
// SGD: %[[NORM:.*]] = nn.sqrt
// SGD: %[[OK:.*]] = nn.and
// SGD: %[[BUF:.*]] = nn.weight "fc.weight.momentum_buffer" {storage = "zeros"} : tensor<3x4xf32>
// SGD: %[[MU:.*]] = nn.constant dense<0.899999976> : tensor<f32>
// SGD: %[[DECAYED:.*]] = nn.mul %[[BUF]], %[[MU]]
// SGD: %[[NEWBUF:.*]] = nn.add %[[DECAYED]], %[[GW]]
// SGD: %[[KEPTBUF:.*]] = nn.where %[[OK]], %[[NEWBUF]], %[[BUF]]
// SGD: %[[STEPW:.*]] = nn.mul %[[LR]], %[[NEWBUF]]
// SGD: %[[NEWW:.*]] = nn.sub %[[W]], %[[STEPW]]
// SGD: %[[KEPTW:.*]] = nn.where %[[OK]], %[[NEWW]], %[[W]]
// SGD: return {{.*}}, %[[NORM]], %[[LR]], %[[KEPTBUF]], %[[KEPTW]], {{.*}}, {{.*}}, %[[NEXT]]

// AdamW: decoupled decay (not for the bias, by --no-decay), both moments,
// the bias corrections from the step counter.
// ADAMW: %[[W:.*]] = nn.weight "fc.weight"
// ADAMW: %[[LR:.*]] = nn.constant dense<0.00999999977>
// ADAMW: %[[WD:.*]] = nn.constant dense<0.00999999977>
// ADAMW: %[[LRWD:.*]] = nn.mul %[[LR]], %[[WD]]
// ADAMW: %[[KEEP:.*]] = nn.sub {{.*}}, %[[LRWD]]
// ADAMW: nn.mul %[[W]], %[[KEEP]]
// ADAMW: nn.weight "fc.weight.exp_avg" {storage = "zeros"}
// ADAMW: nn.weight "fc.weight.exp_avg_sq" {storage = "zeros"}
// ADAMW: nn.pow
// ADAMW: nn.pow
// ADAMW: nn.weight "fc.bias.exp_avg" {storage = "zeros"}
// ADAMW-NOT: nn.weight "fc.bias.momentum_buffer"

// Fused (the CPU target's form): one nn.adamw_update per parameter reads
// the weight, its gradient, both moments, the rate, the step, the
// clipping coefficient and the finite flag, and its three results are the
// new state, with no nn.where around them.
// FUSED: %[[W:.*]] = nn.weight "fc.weight"
// FUSED: %[[OK:.*]] = nn.and
// FUSED: %[[CLIP:.*]] = nn.min
// FUSED: %[[M:.*]] = nn.weight "fc.weight.exp_avg" {storage = "zeros"}
// FUSED: %[[V:.*]] = nn.weight "fc.weight.exp_avg_sq" {storage = "zeros"}
// FUSED: %[[NW:.*]], %[[NM:.*]], %[[NV:.*]] = nn.adamw_update %[[W]], %{{.*}}, %[[M]], %[[V]], %{{.*}}, %{{.*}}, %[[CLIP]], %[[OK]] {beta1 = 9.000000e-01 : f64, beta2 = 0.99899999999999999 : f64, eps = 1.000000e-08 : f64, weight_decay = 1.000000e-02 : f64}
// FUSED: nn.adamw_update {{.*}} weight_decay = 0.000000e+00 : f64} : (tensor<4xf32>
// FUSED-NOT: nn.where
// FUSED: return {{.*}}, %[[NM]], %[[NV]], %[[NW]],

// In rt the fused update writes the weight and its moments in place: no
// copy into the state ends the program for them (the step counter's
// remains).
// INPLACE: %[[W:.*]] = rt.weight "fc.weight" {{.*}}writable
// INPLACE: %[[M:.*]] = rt.weight "fc.weight.exp_avg" {{.*}}writable
// INPLACE: %[[V:.*]] = rt.weight "fc.weight.exp_avg_sq" {{.*}}writable
// INPLACE: rt.kernel "adamw_update" ins(%[[W]], %{{.*}}, %[[M]], %[[V]], {{.*}}) outs(%[[W]], %[[M]], %[[V]] :
// INPLACE: rt.kernel "adamw_update"
// INPLACE-NEXT: rt.kernel "identity" ins(%{{.*}} : memref<f32>) outs(%{{.*}} : memref<f32>)
// INPLACE-NEXT: return

// Warmup then cosine: where(t > W, cosine, lr t / W); clipping by
// min(1, c / (norm + 1e-6)).
// SCHED: nn.cos
// SCHED: %[[AFTER:.*]] = nn.greater
// SCHED: nn.where %[[AFTER]]
// SCHED: %[[EPS:.*]] = nn.constant dense<9.99999997E-7>
// SCHED: nn.add %{{.*}}, %[[EPS]]
// SCHED: nn.min

// In rt, state is writable rt.weight, never folded, and the program ends
// by copying each new value into it; only loss, grad_norm and lr remain
// results.
// RT: func.func @main({{.*}}) -> (memref<f32> {nn.name = "loss"}, memref<f32> {nn.name = "grad_norm"}, memref<f32> {nn.name = "lr"})
// RT: %[[S:.*]] = rt.weight "optimizer.step" {storage = "zeros", writable} : memref<f32>
// RT: %[[W:.*]] = rt.weight "fc.weight" {{.*}}writable} : memref<3x4xf32>
// RT: %[[B:.*]] = rt.weight "fc.bias" {{.*}}writable} : memref<4xf32>
// RT: rt.kernel "identity" ins(%{{.*}} : memref<3x4xf32>) outs(%[[W]] : memref<3x4xf32>)
// RT: rt.kernel "identity" ins(%{{.*}} : memref<4xf32>) outs(%[[B]] : memref<4xf32>)
// RT: rt.kernel "identity" ins(%{{.*}} : memref<f32>) outs(%[[S]] : memref<f32>)
// RT-NEXT: return

// A frozen initializer is read, not state: the embedded bias stays a
// constant; the module records what trains for --report.
// FREEZE: module attributes {nn.training = {frozen = {fc.bias = 4 : i64}, held = {}, tied = {}, trained = {fc.weight = 12 : i64}}}
// FREEZE: {nn.name = "lr"}, tensor<3x4xf32> {nn.name = "fc.weight", nn.state = "fc.weight"}, tensor<f32> {nn.name = "optimizer.step", nn.state = "optimizer.step"})
// FREEZE: nn.constant dense<[1.000000e+00, 2.000000e+00, 3.000000e+00, 4.000000e+00]>

// TOTAL: error: nn-optimizer: schedule linear needs total-steps greater than warmup-steps (0), got 0
// KIND: error: nn-optimizer: optimizer must be sgd or adamw, got 'lamb'
module {
  func.func @main(%x: tensor<2x3xf32> {nn.name = "x"}) -> (tensor<2x4xf32> {nn.name = "y"}) {
    %w = nn.weight "fc.weight" {storage = "external", file = "m.data", offset = 0 : i64, size = 48 : i64} : tensor<3x4xf32>
    %b = nn.constant dense<[1.0, 2.0, 3.0, 4.0]> : tensor<4xf32> loc("fc.bias")
    %m = nn.matmul %x, %w : (tensor<2x3xf32>, tensor<3x4xf32>) -> tensor<2x4xf32>
    %y = nn.add %m, %b : (tensor<2x4xf32>, tensor<4xf32>) -> tensor<2x4xf32>
    return %y : tensor<2x4xf32>
  }
}
