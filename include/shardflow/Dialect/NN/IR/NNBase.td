//===- NNBase.td - the nn dialect and its op base classes --*- tablegen -*-===//
//
// The nn dialect holds a model as imported from ONNX: value-semantic tensor
// ops with ONNX semantics on statically shaped tensors. Later phases give
// every op a sharding rule, so ops stay pure and their semantics exact.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDFLOW_DIALECT_NN_NNBASE_TD
#define SHARDFLOW_DIALECT_NN_NNBASE_TD

include "mlir/IR/OpBase.td"
include "mlir/IR/AttrTypeBase.td"
include "mlir/IR/CommonTypeConstraints.td"
include "mlir/IR/CommonAttrConstraints.td"
include "mlir/IR/BuiltinAttributeInterfaces.td"
include "mlir/Interfaces/SideEffectInterfaces.td"
include "mlir/Interfaces/InferTypeOpInterface.td"

def NN_Dialect : Dialect {
  let name = "nn";
  let cppNamespace = "::shardflow::nn";
  let summary = "Tensor operations with ONNX semantics on static shapes";
  let description = [{
    The `nn` dialect is the first form of a model inside Shardflow. Each op
    mirrors one ONNX operator (opsets 13 to 23) with the same broadcasting
    rules and attribute defaults, but on ranked tensors whose shapes are all
    known: the importer pins symbolic dimensions and folds the shape
    arithmetic that exporters emit. Attributes that ONNX passes as constant
    inputs (axes, split sizes, slice bounds, clip limits, `k`) are attributes
    here. Weights stay out of the IR: `nn.weight` names an initializer and
    where its bytes lie.

    Every op is pure and infers its result types from its operands and
    attributes; the verifier reports a mismatch in one sentence naming the
    operand or attribute at fault.
  }];
  let hasConstantMaterializer = 1;
  let dependentDialects = ["::mlir::func::FuncDialect"];
}

//===----------------------------------------------------------------------===//
// Type constraints
//===----------------------------------------------------------------------===//

def NN_FloatElement : AnyTypeOf<[F16, BF16, F32, F64], "floating-point">;
def NN_IntElement : AnyTypeOf<[AnySignlessInteger, AnyUnsignedInteger], "integer">;

def NN_Tensor : StaticShapeTensorOf<[AnyType]>;
def NN_FloatTensor : StaticShapeTensorOf<[F16, BF16, F32, F64]>;
def NN_NumericTensor : StaticShapeTensorOf<[F16, BF16, F32, F64,
                                             AnySignlessInteger, AnyUnsignedInteger]>;
def NN_BoolTensor : StaticShapeTensorOf<[I1]>;
def NN_IndexTensor : StaticShapeTensorOf<[I32, I64]>;
def NN_I64Tensor : StaticShapeTensorOf<[I64]>;

//===----------------------------------------------------------------------===//
// Op facts as traits
//===----------------------------------------------------------------------===//
//
// What the passes need to know of an op's semantics is declared with the
// op, never listed by name in a pass. nn/IR/NNTraits.h has the queries
// (nn::isLinearIn, ...); the sharding rule, attribute localization and cost
// of each op are in the op registry (Dist/IR/OpRegistry.h).

class NN_Trait<string name> : NativeOpTrait<name> {
  let cppNamespace = "::shardflow::nn";
}

// Each result element is computed from the operands' elements at the same
// position, after numpy broadcasting: arithmetic, comparisons, unary math
// and activations, casts, `where`, inference dropout.
def NN_Elementwise : NN_Trait<"Elementwise">;

// The result is the first operand's elements in the same row-major order,
// reshaped: reshape, flatten, squeeze, unsqueeze, and the identities
// (identity, inference dropout). A buffer serves both unchanged.
def NN_ViewLike : NN_Trait<"ViewLike">;

// Linearity, which decides how partial sums (each rank holding an addend of
// the value) flow through an op without being reduced first:
// - Additive: the result is a signed sum of the operands (add, sub), linear
//   in all of them together; any operands may be partial, and a whole one
//   must then be added in 1/n parts, one per rank.
// - LinearInEachOperand: linear in every operand while the others are
//   fixed (mul); at most one operand may be partial.
// - LinearInFirstOperand: linear in operand 0 (neg, div's numerator, the
//   identities, data movement); only it may be partial.
def NN_Additive : NN_Trait<"Additive">;
def NN_LinearInEachOperand : NN_Trait<"LinearInEachOperand">;
def NN_LinearInFirstOperand : NN_Trait<"LinearInFirstOperand">;

// Reads no tensor: the value is computed from attributes alone (constant,
// range, constant_of_shape) and made whole on every rank, where a split of
// it is a local slice, never communication. (A weight is loaded by slices.)
def NN_MadeFromAttributes : NN_Trait<"MadeFromAttributes">;

// In Megatron's tensor-parallel region, between a column-parallel and a
// row-parallel linear layer: the result's features (hidden columns or
// attention heads) come from the same features of the operands, so a split
// of the first layer's output columns stays useful through the op. Every
// elementwise op keeps columns apart; other ops declare it: data movement
// that keeps the feature dimension (reshape, transpose, squeeze, unsqueeze,
// split, slice, concat), attention and its pieces per head (matmul,
// softmax, rotary_embedding, rotate_half, attention).
def NN_KeepsColumnsApart : NN_Trait<"KeepsColumnsApart">;

// Draws from a random stream (training dropout's mask): the constant
// evaluator never folds it, whatever its operands.
def NN_Random : NN_Trait<"Random">;

//===----------------------------------------------------------------------===//
// Op base classes
//===----------------------------------------------------------------------===//

// Every nn op is pure and prints as `nn.op %a, %b {attrs} : (types) -> types`.
class NN_Op<string mnemonic, list<Trait> traits = []>
    : Op<NN_Dialect, mnemonic, !listconcat([Pure], traits)> {
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
}

// Ops whose result types follow from operands and attributes. Their verifier
// runs the inference first, so a malformed op is reported with the reason
// inference gives rather than a bare "failed to infer" from the interface.
class NN_InferredOp<string mnemonic, list<Trait> traits = []>
    : NN_Op<mnemonic, !listconcat([InferTypeOpAdaptor], traits)> {
  let hasVerifier = 1;
}

// Elementwise with ONNX multidirectional broadcasting.
class NN_BinaryOp<string mnemonic, string onnxName, list<Trait> traits = []>
    : NN_InferredOp<mnemonic, !listconcat([NN_Elementwise], traits)> {
  let summary = "ONNX " # onnxName # " with multidirectional broadcasting";
  let arguments = (ins NN_NumericTensor:$lhs, NN_NumericTensor:$rhs);
  let results = (outs NN_NumericTensor:$result);
}

class NN_CompareOp<string mnemonic, string onnxName>
    : NN_InferredOp<mnemonic, [NN_Elementwise]> {
  let summary = "ONNX " # onnxName # ": elementwise comparison, broadcasting, i1 result";
  let arguments = (ins NN_NumericTensor:$lhs, NN_NumericTensor:$rhs);
  let results = (outs NN_BoolTensor:$result);
}

class NN_UnaryOp<string mnemonic, string onnxName, Type operandType = NN_FloatTensor,
                 list<Trait> traits = []>
    : NN_InferredOp<mnemonic, !listconcat([NN_Elementwise], traits)> {
  let summary = "ONNX " # onnxName # ", elementwise";
  let arguments = (ins operandType:$input);
  let results = (outs operandType:$result);
}

class NN_ReduceOp<string mnemonic, string onnxName> : NN_InferredOp<mnemonic> {
  let summary = "ONNX " # onnxName # " over explicit axes";
  let description = [{
    Reduces `input` over `axes` (sorted, non-negative after import; the
    importer turns ONNX's "empty axes" forms into an explicit list or into
    `nn.identity`). With `keepdims` the reduced dimensions stay as size 1.
  }];
  let arguments = (ins NN_NumericTensor:$input, DenseI64ArrayAttr:$axes,
                       DefaultValuedAttr<BoolAttr, "true">:$keepdims);
  let results = (outs NN_NumericTensor:$result);
}

#endif // SHARDFLOW_DIALECT_NN_NNBASE_TD
