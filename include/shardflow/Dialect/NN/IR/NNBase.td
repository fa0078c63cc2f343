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
    : NN_InferredOp<mnemonic, traits> {
  let summary = "ONNX " # onnxName # " with multidirectional broadcasting";
  let arguments = (ins NN_NumericTensor:$lhs, NN_NumericTensor:$rhs);
  let results = (outs NN_NumericTensor:$result);
}

class NN_CompareOp<string mnemonic, string onnxName>
    : NN_InferredOp<mnemonic> {
  let summary = "ONNX " # onnxName # ": elementwise comparison, broadcasting, i1 result";
  let arguments = (ins NN_NumericTensor:$lhs, NN_NumericTensor:$rhs);
  let results = (outs NN_BoolTensor:$result);
}

class NN_UnaryOp<string mnemonic, string onnxName, Type operandType = NN_FloatTensor,
                 list<Trait> traits = []>
    : NN_InferredOp<mnemonic, traits> {
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
