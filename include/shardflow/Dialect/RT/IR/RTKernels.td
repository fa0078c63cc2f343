//===- RTKernels.td - the kernels rt programs call -----------*- tablegen -*-===//
//
// After convert-nn-to-rt, an op is an rt.kernel named after it whose
// `params` are its attributes; later passes add kernels of their own and
// parameters to existing ones. This file says which kernels there are, each
// with its parameters (names and types), and how the CUDA target runs it;
// every nn op is named here, as a kernel or as not one. shardflow-tblgen
// -gen-kernel-signatures turns it, with the nn ODS, into the kernel
// signature table (include/shardflow/Runtime/Format/KernelSignatures.h),
// which the runtime reads without tblgen and against which the rt.kernel
// verifier, the CPU kernel registry and the CUDA runtime's kernels are
// checked.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDFLOW_DIALECT_RT_IR_RTKERNELS_TD
#define SHARDFLOW_DIALECT_RT_IR_RTKERNELS_TD

include "shardflow/Dialect/NN/IR/NNOps.td"

// How the CUDA target runs a kernel.
class RT_CudaImpl<string n> { string name = n; }
// shard-run's CUDA device runs it: cuBLASLt or a hand-written kernel.
def RT_CudaRuntime : RT_CudaImpl<"runtime">;
// Generated, fused with its elementwise neighbours.
def RT_CudaElementwise : RT_CudaImpl<"elementwise">;
// Generated, elementwise in its output but reading other positions of its
// inputs (a rotation partner, a window): fused as a consumer only.
def RT_CudaNeighbours : RT_CudaImpl<"neighbours">;
// Generated as a row reduction (a warp or a block per row) with an
// elementwise prologue and epilogue.
def RT_CudaRow : RT_CudaImpl<"row">;
// Generated as a row reduction where its axes are one contiguous block,
// else as a launch of its own.
def RT_CudaReduction : RT_CudaImpl<"reduction">;
// Generated as a launch of its own.
def RT_CudaStandalone : RT_CudaImpl<"standalone">;
// A CUDA rt rewrite turns it into other kernels first.
class RT_CudaRewrittenBy<string pass> : RT_CudaImpl<"rewritten"> { string rewrite = pass; }
// No CUDA implementation (the op folds before it could reach the target).
def RT_CudaNone : RT_CudaImpl<"none">;

// A parameter a pass adds to a kernel, beyond its nn op's attributes.
// Types as the artifact writes them: int, bool, float, string, ints,
// floats, dtype.
class RT_Param<string n, string t> {
  string name = n;
  string type = t;
}

// The kernel of nn op `op`: its attributes are its parameters.
class RT_NNKernel<Op o, RT_CudaImpl c, list<RT_Param> extra = []> {
  Op op = o;
  RT_CudaImpl cuda = c;
  list<RT_Param> extraParams = extra;
}

// An nn op that never becomes a kernel, and why.
class RT_NotAKernel<Op o, string w> {
  Op op = o;
  string why = w;
}

// A kernel that a pass creates, with no nn op behind it. `cpu` says
// whether the CPU runtime has it.
class RT_Kernel<string n, list<RT_Param> p, RT_CudaImpl c, bit onCpu = 0> {
  string name = n;
  list<RT_Param> params = p;
  RT_CudaImpl cuda = c;
  bit cpu = onCpu;
}

//===----------------------------------------------------------------------===//
// Not kernels
//===----------------------------------------------------------------------===//

def : RT_NotAKernel<NN_ConstantOp, "becomes rt.constant">;
def : RT_NotAKernel<NN_WeightOp, "becomes rt.weight">;
def : RT_NotAKernel<NN_ReshapeOp, "becomes rt.view">;
def : RT_NotAKernel<NN_FlattenOp, "becomes rt.view">;
def : RT_NotAKernel<NN_SqueezeOp, "becomes rt.view">;
def : RT_NotAKernel<NN_UnsqueezeOp, "becomes rt.view">;

//===----------------------------------------------------------------------===//
// Elementwise
//===----------------------------------------------------------------------===//

foreach op = [NN_AddOp, NN_SubOp, NN_MulOp, NN_DivOp, NN_ModOp, NN_PowOp, NN_MinOp, NN_MaxOp,
              NN_EqualOp, NN_LessOp, NN_GreaterOp, NN_AndOp, NN_WhereOp, NN_SqrtOp,
              NN_ExpOp, NN_LogOp, NN_TanhOp, NN_SigmoidOp, NN_ErfOp, NN_CosOp, NN_SinOp, NN_FloorOp, NN_CeilOp,
              NN_RoundOp, NN_ReciprocalOp,
              NN_ReluOp, NN_NegOp, NN_AbsOp, NN_NotOp, NN_LeakyReluOp, NN_GeluOp,
              NN_ClipOp, NN_CastOp, NN_RangeOp, NN_TriluOp, NN_ConstantOfShapeOp] in
  def : RT_NNKernel<op, RT_CudaElementwise>;
// The identities are views, except where a pass needs a copy (a scatter's
// destination) or a view cannot serve.
def : RT_NNKernel<NN_GeluGradOp, RT_CudaElementwise>;
def : RT_NNKernel<NN_IdentityOp, RT_CudaElementwise>;
def : RT_NNKernel<NN_DropoutOp, RT_CudaElementwise>;
// The CUDA target's nn-optimizer writes the update as elementwise ops.
def : RT_NNKernel<NN_AdamWUpdateOp, RT_CudaNone>;
// Generated: each element draws its own Philox numbers. Per-rank block
// starts reach it as a third input (cuda-keyed-dropout-starts).
def : RT_NNKernel<NN_KeyedDropoutOp, RT_CudaNeighbours>;
def : RT_NNKernel<NN_TrainingDropoutOp, RT_CudaRewrittenBy<"cuda-precompute-dropout-masks">>;
// cuda-precompute-dropout-masks: the input times a constant mask, scaled.
def : RT_Kernel<"masked_scale", [RT_Param<"scale", "float">], RT_CudaElementwise>;

//===----------------------------------------------------------------------===//
// Normalizations, reductions, scans
//===----------------------------------------------------------------------===//

foreach op = [NN_SoftmaxOp, NN_LogSoftmaxOp, NN_LayerNormalizationOp,
              NN_RMSNormalizationOp] in
  def : RT_NNKernel<op, RT_CudaRow>;
foreach op = [NN_ReduceSumOp, NN_ReduceMeanOp, NN_ReduceMaxOp, NN_ReduceMinOp, NN_ReduceProdOp,
              NN_GlobalAveragePoolOp] in
  def : RT_NNKernel<op, RT_CudaReduction>;
// The norms' backward: the input's cotangent is a row kernel like the
// forward's; the scale's, a sum over rows, is rewritten into the forward
// row kernel (with a unit scale), a product and a reduce_sum.
def : RT_NNKernel<NN_NormalizationGradOp, RT_CudaRow>;
def : RT_NNKernel<NN_NormalizationScaleGradOp,
                  RT_CudaRewrittenBy<"cuda-split-normalization-scale-grads">>;
// Softmax cross-entropy: the forward is expanded to its parts by
// nn-differentiate; its backward is generated elementwise code (the row's
// lse, label and cotangent broadcast along the classes).
def : RT_NotAKernel<NN_SoftmaxCrossEntropyOp, "expanded by nn-differentiate">;
def : RT_NNKernel<NN_SoftmaxCrossEntropyGradOp, RT_CudaElementwise>;
def : RT_NNKernel<NN_BatchNormalizationOp, RT_CudaNeighbours>;
def : RT_NNKernel<NN_CumSumOp, RT_CudaStandalone>;
def : RT_NNKernel<NN_TopKOp, RT_CudaStandalone>;
def : RT_NNKernel<NN_ArgMaxOp, RT_CudaStandalone>;
def : RT_NNKernel<NN_ArgMinOp, RT_CudaStandalone>;

//===----------------------------------------------------------------------===//
// Contractions, attention, windows
//===----------------------------------------------------------------------===//

// The CUDA rt rewrites add a cuBLASLt epilogue (bias, relu_bias,
// gelu_bias; its bias the last input but one), a residual taken as C (the
// last input) and a transposed weight; the CPU's rt-fold-transposes-into-
// matmuls operands stored with their last two dimensions swapped.
def : RT_NNKernel<NN_MatMulOp, RT_CudaRuntime,
                  [RT_Param<"epilogue", "string">, RT_Param<"residual", "bool">,
                   RT_Param<"trans_a", "bool">, RT_Param<"trans_b", "bool">]>;
def : RT_NNKernel<NN_GemmOp, RT_CudaRuntime, [RT_Param<"epilogue", "string">]>;
def : RT_NNKernel<NN_EinsumOp, RT_CudaStandalone>;
def : RT_NNKernel<NN_ConvOp, RT_CudaRewrittenBy<"cuda-lower-convolutions">>;
// cuda-read-attention-inputs-in-place: the widths of Q, K and V in one
// packed buffer passed three times.
def : RT_NNKernel<NN_AttentionOp, RT_CudaRuntime, [RT_Param<"packed_qkv", "ints">]>;
// The runtime's two backward kernels on CUDA, with the workspace
// cuda-attention-grad-workspace adds as a fourth output.
def : RT_NNKernel<NN_AttentionGradOp, RT_CudaRuntime>;
def : RT_NNKernel<NN_RotaryEmbeddingOp, RT_CudaNeighbours>;
def : RT_NNKernel<NN_RotateHalfOp, RT_CudaNeighbours>;
foreach op = [NN_MaxPoolOp, NN_MaxPoolWithIndicesOp, NN_AveragePoolOp] in
  def : RT_NNKernel<op, RT_CudaNeighbours>;
// cuda-lower-convolutions: the patch matrix of a convolution's window.
def : RT_Kernel<"im2col", [RT_Param<"kernel_shape", "ints">, RT_Param<"out_spatial", "ints">,
                           RT_Param<"group", "int">, RT_Param<"strides", "ints">,
                           RT_Param<"pads", "ints">, RT_Param<"dilations", "ints">],
                RT_CudaNeighbours>;

//===----------------------------------------------------------------------===//
// Data movement
//===----------------------------------------------------------------------===//

foreach op = [NN_TransposeOp, NN_ConcatOp, NN_SplitOp, NN_SliceOp, NN_PadOp, NN_GatherOp,
              NN_ExpandOp] in
  def : RT_NNKernel<op, RT_CudaRuntime>;
def : RT_NNKernel<NN_GatherElementsOp, RT_CudaStandalone>;
def : RT_NNKernel<NN_ScatterNDOp, RT_CudaRewrittenBy<"cuda-split-scatters">>;
// cuda-split-scatters: the updates written in place into a copy of the data.
def : RT_Kernel<"scatter_nd_updates", [RT_Param<"reduction", "string">], RT_CudaStandalone>;
// Always folds at import: a kernel only in programs written by hand.
def : RT_NNKernel<NN_ShapeOp, RT_CudaNone>;

#endif // SHARDFLOW_DIALECT_RT_IR_RTKERNELS_TD
