// Clear errors for bad sharding options, naming the option and the value.
// RUN: not shard-opt %s --mesh dp=2,tp 2>&1 | FileCheck %s --check-prefix=MESH
// MESH: --mesh: expected AXIS=SIZE entries separated by commas (e.g. dp=2,tp=4), got 'tp'
// RUN: not shard-opt %s --mesh dp=2,dp=2 2>&1 | FileCheck %s --check-prefix=TWICE
// TWICE: --mesh: axis 'dp' is given twice
// RUN: not shard-opt %s --mesh tp=2 --shard y=tp,_ 2>&1 | FileCheck %s --check-prefix=NAME
// NAME: --shard: no graph input or weight is named 'y'
// RUN: not shard-opt %s --mesh tp=2 --shard x=pp,_ 2>&1 | FileCheck %s --check-prefix=AXIS
// AXIS: --shard x: unknown mesh axis 'pp' (the mesh has ["tp"])
// RUN: not shard-opt %s --mesh tp=2 --shard x=tp 2>&1 | FileCheck %s --check-prefix=RANK
// RUN: not shard-opt %s --mesh tp=4 --shard x=_,tp 2>&1 | FileCheck %s --check-prefix=UNEVEN
// UNEVEN: --shard x: dimension 1 of size 6 cannot be split evenly over 4 ranks (axes ["tp"])
// RANK: --shard x: SPEC has 1 entries but 'x' has rank 2 ('tensor<8x6xf32>')
// RUN: not shard-opt %s --mesh tp=2 --shard x=tp,tp 2>&1 | FileCheck %s --check-prefix=DUP
// DUP: --shard x: mesh axis "tp" is used twice in one sharding
// RUN: not shard-opt %s --mesh tp=2 --strategy zero 2>&1 | FileCheck %s --check-prefix=STRATEGY
// STRATEGY: --strategy must be dp, megatron or megatron-sp, got 'zero'
// RUN: not shard-opt %s --mesh tp=2 --strategy dp 2>&1 | FileCheck %s --check-prefix=NODP
// NODP: --strategy dp needs a mesh axis named 'dp' (or set --dp-axis)
// RUN: not shard-opt %s --mesh tp=2 --report 2>&1 | FileCheck %s --check-prefix=REPORT
// REPORT: --report needs --target
// RUN: not shard-opt %s --shard x=tp,_ 2>&1 | FileCheck %s --check-prefix=NOMESH
// NOMESH: the program has no dist.mesh (give shard-opt --mesh, e.g. --mesh dp=2,tp=2)

func.func @main(%x: tensor<8x6xf32> {nn.name = "x"}) -> tensor<8x6xf32> {
  %0 = nn.relu %x : (tensor<8x6xf32>) -> tensor<8x6xf32>
  return %0 : tensor<8x6xf32>
}
