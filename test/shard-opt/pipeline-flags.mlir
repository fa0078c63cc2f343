// The pipeline's flags: a pp axis in --mesh cuts the program into stages
// (--compile-to stages, the default without --target, prints them), and
// clear errors for what does not fit, naming the flag.
// RUN: shard-opt %s --mesh pp=2 --microbatches 4 | FileCheck %s
// CHECK: dist.pipeline = {actions = ["0F0,0F1,0F2,0F3", "1F0,1F1,1F2,1F3"], microbatches = 4 : i64, ranks = 2 : i64, schedule = "1f1b", stage_ranks = array<i64: 0, 1>}
// CHECK: func.func @stage_0(
// CHECK: func.func @stage_1(
// RUN: shard-opt %s --mesh pp=2 | FileCheck %s --check-prefix=DEFAULT
// DEFAULT: microbatches = 2 : i64, ranks = 2 : i64
// RUN: shard-opt %s --mesh pp=2 --pipeline-schedule zbv | FileCheck %s --check-prefix=ZBV
// ZBV: actions = ["0F0,0F1,3F0,3F1", "1F0,2F0,1F1,2F1"]{{.*}}schedule = "zbv", stage_ranks = array<i64: 0, 1, 1, 0>
// RUN: shard-opt %s --mesh pp=2 --compile-to=partitioned | FileCheck %s --check-prefix=BEFORE
// BEFORE: func.func @main(
// BEFORE-NOT: dist.pipeline

// RUN: not shard-opt %s --mesh tp=2 --pipeline-schedule gpipe 2>&1 | FileCheck %s --check-prefix=NOPP
// NOPP: --pipeline-schedule needs a pp axis of 2 or more in --mesh (--mesh pp=2,...)
// RUN: not shard-opt %s --mesh tp=2,pp=2 2>&1 | FileCheck %s --check-prefix=FIRST
// FIRST: --mesh: pp must be the first axis (the outermost: ranks 0 to k-1 run stage 0), got 'tp=2,pp=2'
// RUN: not shard-opt %s --mesh pp=2 --pipeline-schedule pipedream 2>&1 | FileCheck %s --check-prefix=NAME
// NAME: --pipeline-schedule takes gpipe, 1f1b, interleaved-1f1b, zb-h1, zbv, got 'pipedream'
// The artifact: a stage artifact per stage, the schedule, the whole batch.
// RUN: shard-opt %s --mesh pp=2 --microbatches 2 --target cpu --weight-checksums=false -o %t.shard
// RUN: FileCheck %s --check-prefix=ARTIFACT < %t.shard
// ARTIFACT: shardflow-pipeline 1
// ARTIFACT-NEXT: target cpu
// ARTIFACT-NEXT: world-size 2
// ARTIFACT-NEXT: pp 2
// ARTIFACT-NEXT: microbatches 2
// ARTIFACT-NEXT: schedule 1f1b
// ARTIFACT-NEXT: stage-ranks 0,1
// ARTIFACT-NEXT: actions 0 0F0,0F1
// ARTIFACT-NEXT: actions 1 1F0,1F1
// ARTIFACT-NEXT: input x f32 8x8
// ARTIFACT-NEXT: output y f32 8x8
// ARTIFACT-NEXT: stage 0 lines
// ARTIFACT-NEXT: shardflow-artifact 4
// ARTIFACT: buffer 0 input f32 4x8 name=x
// ARTIFACT: output transfer:0
// ARTIFACT: stage 1 lines
// ARTIFACT: buffer 0 input f32 4x8 name=transfer:0
// ARTIFACT: output y
// ARTIFACT: end
// ARTIFACT-NEXT: end
// RUN: not shard-opt %s --mesh pp=2 --target cpu --compile-to rt 2>&1 | FileCheck %s --check-prefix=RT
// RT: --compile-to rt prints one program; with a pp axis, compile to stages (a function per stage) or to the artifact
// RUN: shard-opt %s --mesh pp=2 --target cpu --weight-checksums=false --report -o %t.r.shard 2>&1 | FileCheck %s --check-prefix=REPORT
// REPORT: stage 0 on pp rank 0: layers 0 to 1 and the embeddings, estimated {{[0-9.]+}} ms per micro-batch
// REPORT: peak activation bytes per rank
// REPORT: stage 1 on pp rank 1: layers 2 to 3 and the head, estimated
// Pipelined training: what is not built yet is refused, naming the flag.
// RUN: not shard-opt %s --mesh pp=2 --train --loss mse --labels y --target cuda 2>&1 | FileCheck %s --check-prefix=TRAIN-CUDA
// TRAIN-CUDA: --mesh pp=2 --train --target cuda: pipelined training runs on the cpu target
// RUN: not shard-opt %s --mesh pp=2 --train --loss mse --labels y --dropout on 2>&1 | FileCheck %s --check-prefix=TRAIN-DROPOUT
// TRAIN-DROPOUT: --mesh pp=2 --train: --dropout on is not built for pipelines yet
// RUN: not shard-opt %s --mesh pp=2 --pipeline-split blocks:2 2>&1 | FileCheck %s --check-prefix=SPLIT
// SPLIT: --pipeline-split takes layers:I,J,... (the layer each stage after the first starts at) or nodes:A,B,... (an ONNX node of that layer), got 'blocks:2'
// RUN: not shard-opt %s --mesh pp=3 --pipeline-schedule interleaved-1f1b --microbatches 4 2>&1 | FileCheck %s --check-prefix=INTER
// INTER: interleaved-1f1b: --microbatches 4 must be a multiple of pp (3)

// A schedule file that deadlocks: rank 0 waits for stage 3's input, which
// stage 2 on rank 1 sends only after stage 1 has its input from rank 0.
// RUN: printf '3F0,0F0\n1F0,2F0\n' > %t.csv
// RUN: not shard-opt %s --mesh pp=2 --microbatches 1 --pipeline-schedule-file %t.csv 2>&1 | FileCheck %s --check-prefix=DEADLOCK
// DEADLOCK: --pipeline-schedule-file {{.*}}.csv: deadlock: rank 0, action 1 (3RECV_F0) waits for 2SEND_F0, action 4 of rank 1; rank 1, action 1 (1RECV_F0) waits for 0SEND_F0, action 4 of rank 0
// RUN: printf '0F0,0Q1\n1F0\n' > %t.bad.csv
// RUN: not shard-opt %s --mesh pp=2 --microbatches 2 --pipeline-schedule-file %t.bad.csv 2>&1 | FileCheck %s --check-prefix=BADFILE
// BADFILE: --pipeline-schedule-file {{.*}}.bad.csv:1: cell 2: '0Q1': unknown action
// RUN: printf '0F0,2F0\n1F0,3F0\n' > %t.good.csv
// RUN: shard-opt %s --mesh pp=2 --microbatches 1 --pipeline-schedule-file %t.good.csv | FileCheck %s --check-prefix=FILE
// FILE: actions = ["0F0,2F0", "1F0,3F0"]{{.*}}stage_ranks = array<i64: 0, 1, 0, 1>

// Four residual layers (an MLIR program is taken as one micro-batch's).
func.func @main(%x: tensor<4x8xf32> {nn.name = "x"}) -> (tensor<4x8xf32> {nn.name = "y"}) {
  %w0 = nn.weight "w0" {storage = "external", file = "m.data", offset = 0 : i64, size = 256 : i64} : tensor<8x8xf32>
  %p0 = nn.matmul %x, %w0 : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %r0 = nn.relu %p0 : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %h1 = nn.add %x, %r0 : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %w1 = nn.weight "w1" {storage = "external", file = "m.data", offset = 256 : i64, size = 256 : i64} : tensor<8x8xf32>
  %p1 = nn.matmul %h1, %w1 : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %r1 = nn.relu %p1 : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %h2 = nn.add %h1, %r1 : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %w2 = nn.weight "w2" {storage = "external", file = "m.data", offset = 512 : i64, size = 256 : i64} : tensor<8x8xf32>
  %p2 = nn.matmul %h2, %w2 : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %r2 = nn.relu %p2 : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %h3 = nn.add %h2, %r2 : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %w3 = nn.weight "w3" {storage = "external", file = "m.data", offset = 768 : i64, size = 256 : i64} : tensor<8x8xf32>
  %p3 = nn.matmul %h3, %w3 : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %r3 = nn.relu %p3 : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %h4 = nn.add %h3, %r3 : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  return %h4 : tensor<4x8xf32>
}
