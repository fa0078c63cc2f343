//===- RTDialect.cpp - the rt dialect and its verifiers --------------------===//

#include "shardflow/Dialect/RT/IR/RTDialect.h"
#include "shardflow/Dialect/RT/IR/RTOps.h"
#include "shardflow/Runtime/Format/KernelSignature.h"
#include "shardflow/Support/ONNXLocation.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "llvm/ADT/DenseSet.h"

#include <cmath>

using namespace mlir;
using namespace shardflow::rt;

#include "shardflow/Dialect/RT/IR/RTOpsDialect.cpp.inc"

void RTDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "shardflow/Dialect/RT/IR/RTOps.cpp.inc"
      >();
}

LogicalResult ViewOp::verify() {
  auto from = getSource().getType(), to = getResult().getType();
  if (from.getElementType() != to.getElementType() ||
      from.getNumElements() != to.getNumElements())
    return emitOpError("cannot view ")
           << from << " as " << to
           << ": element type and count must stay the same";
  return success();
}

LogicalResult ConstantOp::verify() {
  auto value = cast<ShapedType>(getValue().getType());
  auto type = getResult().getType();
  if (value.getShape() != type.getShape() ||
      value.getElementType() != type.getElementType())
    return emitOpError("value of type ")
           << value << " does not match the buffer " << type;
  return success();
}

static LogicalResult checkWritable(Operation *op, Value out);

/// Whether `value` is a parameter of type `type` as the IR holds it (the
/// artifact writes bools as integers, so the two stand for each other).
static bool fitsParam(Attribute value, shardflow::runtime::ParamType type) {
  using shardflow::runtime::ParamType;
  switch (type) {
  case ParamType::Int:
  case ParamType::Bool:
    return isa<IntegerAttr, BoolAttr>(value);
  case ParamType::Float:
    return isa<FloatAttr>(value);
  case ParamType::Number:
    return isa<FloatAttr, IntegerAttr>(value);
  case ParamType::String:
    return isa<StringAttr>(value);
  case ParamType::Ints:
    return isa<DenseI64ArrayAttr>(value);
  case ParamType::Floats:
    return isa<DenseF64ArrayAttr, DenseF32ArrayAttr>(value);
  case ParamType::DType:
    return isa<TypeAttr>(value);
  }
  return false;
}

const shardflow::runtime::KernelSignature *KernelOp::getSignature() {
  return shardflow::runtime::findKernelSignature(getKernel());
}

Attribute KernelOp::getParam(StringRef name) {
#ifndef NDEBUG
  // A compiler bug, not an input error: code that reads a parameter by a
  // name the kernel table lacks (a stale literal after a rename).
  if (getSignature() && !getSignature()->findParam(name))
    llvm::report_fatal_error(llvm::Twine("reading parameter '") + name + "' of kernel '" +
                             getKernel() + "', which its signature lacks (RTKernels.td)");
#endif
  return getParams().get(name);
}

LogicalResult KernelOp::verify() {
  const shardflow::runtime::KernelSignature *kernel = getSignature();
  if (!kernel)
    return emitOpError("calls kernel '")
           << getKernel() << "', which the kernel table lacks (RTKernels.td)";
  for (NamedAttribute param : getParams()) {
    const shardflow::runtime::ParamSignature *p = kernel->findParam(param.getName().getValue());
    if (!p)
      return emitOpError("kernel '") << getKernel() << "' has no parameter '"
                                     << param.getName().getValue() << "'";
    if (!fitsParam(param.getValue(), p->type))
      return emitOpError("parameter '") << param.getName().getValue() << "' of kernel '"
                                        << getKernel() << "' must be "
                                        << shardflow::runtime::paramTypeName(p->type) << ", got "
                                        << param.getValue();
  }
  if (getOutputs().empty())
    return emitOpError("kernel '") << getKernel() << "' writes no outputs";
  for (Value out : getOutputs())
    if (failed(checkWritable(*this, out)))
      return failure();
  // An optimizer's update reads each element of the state before it
  // writes it, and a training step updates its state in place.
  for (Value out : getOutputs())
    if (llvm::is_contained(getInputs(), out) && getKernel() != "adamw_update")
      return emitOpError("kernel '")
             << getKernel() << "' reads and writes the same buffer";
  return success();
}

LogicalResult LaunchOp::verify() {
  if (getGrid().size() != 3 || getBlock().size() != 3)
    return emitOpError("grid and block need three sizes each (x, y, z)");
  if (llvm::any_of(getGrid(), [](int64_t v) { return v < 1 || v > (int64_t(1) << 31) - 1; }) ||
      llvm::any_of(getBlock(), [](int64_t v) { return v < 1 || v > 1024; }))
    return emitOpError("grid sizes must lie in [1, 2^31) and block sizes in [1, 1024]");
  if (getBlock()[0] * getBlock()[1] * getBlock()[2] > 1024)
    return emitOpError("a block has at most 1024 threads");
  if (getSharedAttr().getInt() < 0)
    return emitOpError("shared memory size must be non-negative");
  if (getOutputs().empty())
    return emitOpError("writes no outputs");
  for (Value out : getOutputs()) {
    if (failed(checkWritable(*this, out)))
      return failure();
    if (llvm::is_contained(getInputs(), out))
      return emitOpError("reads and writes the same buffer");
  }
  if (getCheckingNodes() && !getChecks())
    return emitOpError("names checking nodes but does not check its data");
  return success();
}

std::string shardflow::rt::onnxNodeName(Location loc) { return getONNXNodeName(loc); }

Value shardflow::rt::rootOf(Value v) {
  while (auto view = v.getDefiningOp<ViewOp>())
    v = view.getSource();
  return v;
}

void shardflow::rt::collectReaders(Value buffer, SmallVectorImpl<Operation *> &readers,
                                   SmallVectorImpl<Operation *> &views) {
  for (Operation *user : buffer.getUsers()) {
    if (auto view = dyn_cast<ViewOp>(user)) {
      views.push_back(view);
      collectReaders(view.getResult(), readers, views);
    } else if (auto k = dyn_cast<KernelOp>(user);
               !k || !llvm::is_contained(k.getOutputs(), buffer)) {
      readers.push_back(user);
    }
  }
}

LogicalResult LaunchOp::verifySymbolUses(SymbolTableCollection &symbols) {
  auto fn = symbols.lookupNearestSymbolFrom<gpu::GPUFuncOp>(*this, getKernel());
  if (!fn || !fn.isKernel())
    return emitOpError("'") << getKernel() << "' is not a gpu.func kernel";
  SmallVector<Value> buffers(getInputs());
  llvm::append_range(buffers, getOutputs());
  size_t expected = buffers.size() + (getChecks() ? 1 : 0);
  if (fn.getNumArguments() != expected)
    return emitOpError("kernel '") << getKernel() << "' takes " << fn.getNumArguments()
                                   << " arguments, the launch passes " << expected
                                   << (getChecks() ? " (its buffers and the status word)" : "");
  if (getChecks()) {
    auto status = dyn_cast<MemRefType>(fn.getArgumentTypes().back());
    if (!status || status.getShape() != ArrayRef<int64_t>{2} ||
        !status.getElementType().isInteger(64))
      return emitOpError("kernel '") << getKernel()
                                     << "' must take its status word last, as memref<2xi64>";
  }
  for (auto [i, buffer] : llvm::enumerate(buffers)) {
    auto param = dyn_cast<MemRefType>(fn.getArgument(i).getType());
    auto type = cast<MemRefType>(buffer.getType());
    // Generated code is signless: an unsigned buffer is passed as the
    // signless integer of its width.
    Type elem = type.getElementType();
    if (elem.isUnsignedInteger())
      elem = IntegerType::get(getContext(), elem.getIntOrFloatBitWidth());
    if (!param || !param.hasStaticShape() || param.getElementType() != elem ||
        param.getNumElements() != type.getNumElements()) {
      InFlightDiagnostic d = emitOpError("buffer #")
                             << i << " of type " << type << " does not match kernel argument type "
                             << fn.getArgument(i).getType();
      if (elem != type.getElementType())
        d << " (unsigned buffers are passed as signless integers: " << elem << ")";
      return d;
    }
  }
  return success();
}

//===----------------------------------------------------------------------===//
// Weights and collectives: rank tables
//===----------------------------------------------------------------------===//

/// The world the op's function runs on: `rt.world_size`, 1 when absent.
static int64_t worldSizeOf(Operation *op) {
  auto fn = op->getParentOfType<func::FuncOp>();
  auto attr = fn ? fn->getAttrOfType<IntegerAttr>("rt.world_size") : IntegerAttr();
  return attr ? attr.getInt() : 1;
}

static LogicalResult checkRank(Operation *op, int64_t rank, int64_t world,
                               StringRef what) {
  if (rank < 0 || rank >= world)
    return op->emitOpError() << what << " names rank " << rank
                             << ", outside the world of " << world
                             << " (rt.world_size on the function)";
  return success();
}

LogicalResult WeightOp::verify() {
  if (getWritable() && (getSourceTypeAttr() || getPermutationAttr() || getScaleAttr()))
    return emitOpError("is writable state, which holds its bytes as stored: no source_type, "
                       "permutation or scale");
  if (getStorage() == "zeros" && (!getWritable() || getFile()))
    return emitOpError("of storage zeros must be writable and have no file");
  if (auto source = getSourceTypeAttr()) {
    Type elem = getResult().getType().getElementType();
    if (!isa<FloatType>(source.getValue()) || !isa<FloatType>(elem) ||
        source.getValue() == elem)
      return emitOpError("source_type ")
             << source.getValue() << " must be a float type other than the buffer's "
             << elem;
  }
  if (auto scale = getScaleAttr()) {
    double x = scale.getValueAsDouble();
    if (!isa<FloatType>(getResult().getType().getElementType()))
      return emitOpError("scale needs a float buffer, not ")
             << getResult().getType().getElementType();
    if (!std::isfinite(x) || x == 0)
      return emitOpError("scale must be finite and nonzero, got ") << x;
  }
  // The shape of the elements in the file (the slice's, when sliced):
  // the result's with the permutation undone.
  ArrayRef<int64_t> resultShape = getResult().getType().getShape();
  SmallVector<int64_t> shape(resultShape);
  if (auto perm = getPermutationAttr()) {
    ArrayRef<int64_t> p = perm.asArrayRef();
    SmallVector<bool> seen(resultShape.size(), false);
    if (p.size() != resultShape.size())
      return emitOpError("permutation has ")
             << p.size() << " entries for a buffer of rank " << resultShape.size();
    for (auto [i, d] : llvm::enumerate(p)) {
      if (d < 0 || d >= int64_t(p.size()) || seen[d])
        return emitOpError("permutation [")
               << llvm::make_range(p.begin(), p.end()) << "] is not a permutation";
      seen[d] = true;
      shape[d] = resultShape[i];
    }
  }
  auto global = getGlobalShapeAttr();
  auto starts = getStartsAttr();
  if (getZeroPadded() && !global)
    return emitOpError("zero_padded needs global_shape and starts");
  if (!global && !starts)
    return success();
  if (!global || !starts)
    return emitOpError("a sliced weight needs both global_shape and starts");
  if (global.size() != int64_t(shape.size()))
    return emitOpError("global_shape has rank ")
           << global.size() << ", the slice has rank " << shape.size();
  int64_t world = worldSizeOf(*this);
  if (int64_t(starts.size()) != world)
    return emitOpError("starts has ") << starts.size() << " entries for a world of "
                                      << world << " ranks";
  for (auto [r, attr] : llvm::enumerate(starts)) {
    auto start = cast<DenseI64ArrayAttr>(attr).asArrayRef();
    if (start.size() != shape.size())
      return emitOpError("the start of rank ") << r << " has " << start.size()
                                               << " entries, expected " << shape.size();
    // A zero-padded weight's slice may reach past the stored tensor.
    for (size_t d = 0; d < shape.size(); ++d)
      if (start[d] < 0 ||
          (getZeroPadded() ? start[d] > global[d] : start[d] + shape[d] > global[d]))
        return emitOpError("the slice of rank ")
               << r << " leaves the global shape in dimension " << d;
  }
  return success();
}

/// Weights and constants are mapped read-only: nothing may write them.
static LogicalResult checkWritable(Operation *op, Value out) {
  auto weight = out.getDefiningOp<WeightOp>();
  if ((weight && !weight.getWritable()) || out.getDefiningOp<ConstantOp>())
    return op->emitOpError("writes a read-only weight or constant");
  return success();
}

/// Checks `groups` and returns the common group size.
static FailureOr<int64_t> checkGroups(Operation *op, ArrayAttr groups) {
  int64_t world = worldSizeOf(op), size = -1;
  if (groups.empty())
    return op->emitOpError("needs at least one group");
  llvm::SmallDenseSet<int64_t> seen;
  for (Attribute a : groups) {
    auto group = cast<DenseI64ArrayAttr>(a).asArrayRef();
    if (group.empty())
      return op->emitOpError("has an empty group");
    if (size >= 0 && int64_t(group.size()) != size)
      return op->emitOpError("groups must have equal sizes, got ")
             << size << " and " << group.size();
    size = group.size();
    for (int64_t r : group) {
      if (failed(checkRank(op, r, world, "groups")))
        return failure();
      if (!seen.insert(r).second)
        return op->emitOpError("rank ") << r << " appears in groups twice";
    }
  }
  return size;
}

static LogicalResult checkReduction(Operation *op, StringRef r) {
  if (r != "sum" && r != "prod" && r != "max" && r != "min")
    return op->emitOpError("reduction must be sum, prod, max or min, got '") << r << "'";
  return success();
}

static LogicalResult checkDim(Operation *op, int64_t dim, MemRefType t, StringRef name) {
  if (dim < 0 || dim >= t.getRank())
    return op->emitOpError() << name << " " << dim << " is out of range for rank "
                             << t.getRank();
  return success();
}

/// `out` must be `in` with dimension `dim` multiplied by `mul` and divided
/// by `div` (exactly).
static LogicalResult checkScaledShape(Operation *op, MemRefType in, MemRefType out,
                                      int64_t dim, int64_t mul, int64_t div) {
  if (in.getElementType() != out.getElementType())
    return op->emitOpError("input and output element types differ");
  SmallVector<int64_t> want(in.getShape());
  if (want[dim] % div)
    return op->emitOpError("dimension ")
           << dim << " of size " << want[dim] << " does not split into " << div
           << " pieces";
  want[dim] = want[dim] / div * mul;
  if (ArrayRef<int64_t>(want) != out.getShape())
    return op->emitOpError("output shape must be [")
           << llvm::make_range(want.begin(), want.end()) << "]";
  return success();
}

LogicalResult AllReduceOp::verify() {
  if (failed(checkWritable(*this, getOutput())))
    return failure();
  if (failed(checkGroups(*this, getGroups())) || failed(checkReduction(*this, getReduction())))
    return failure();
  if (getInput().getType() != getOutput().getType())
    return emitOpError("input and output types differ");
  return success();
}

LogicalResult AllGatherOp::verify() {
  if (failed(checkWritable(*this, getOutput())))
    return failure();
  auto size = checkGroups(*this, getGroups());
  if (failed(size) || failed(checkDim(*this, getDim(), getInput().getType(), "dim")))
    return failure();
  return checkScaledShape(*this, getInput().getType(), getOutput().getType(), getDim(),
                          *size, 1);
}

LogicalResult ReduceScatterOp::verify() {
  if (failed(checkWritable(*this, getOutput())))
    return failure();
  auto size = checkGroups(*this, getGroups());
  if (failed(size) || failed(checkReduction(*this, getReduction())) ||
      failed(checkDim(*this, getDim(), getInput().getType(), "dim")))
    return failure();
  return checkScaledShape(*this, getInput().getType(), getOutput().getType(), getDim(),
                          1, *size);
}

LogicalResult AllToAllOp::verify() {
  if (failed(checkWritable(*this, getOutput())))
    return failure();
  auto size = checkGroups(*this, getGroups());
  MemRefType in = getInput().getType(), out = getOutput().getType();
  if (failed(size) || failed(checkDim(*this, getSplitDim(), in, "split_dim")) ||
      failed(checkDim(*this, getConcatDim(), in, "concat_dim")))
    return failure();
  if (in.getElementType() != out.getElementType())
    return emitOpError("input and output element types differ");
  SmallVector<int64_t> want(in.getShape());
  if (want[getSplitDim()] % *size)
    return emitOpError("split_dim ") << getSplitDim() << " of size " << want[getSplitDim()]
                                     << " does not split into " << *size << " pieces";
  want[getSplitDim()] /= *size;
  want[getConcatDim()] *= *size;
  if (ArrayRef<int64_t>(want) != out.getShape())
    return emitOpError("output shape must be [")
           << llvm::make_range(want.begin(), want.end()) << "]";
  return success();
}

LogicalResult CollectivePermuteOp::verify() {
  if (failed(checkWritable(*this, getOutput())))
    return failure();
  if (getInput().getType() != getOutput().getType())
    return emitOpError("input and output types differ");
  int64_t world = worldSizeOf(*this);
  llvm::SmallDenseSet<int64_t> sources, targets;
  for (Attribute a : getPairs()) {
    auto pair = cast<DenseI64ArrayAttr>(a).asArrayRef();
    if (pair.size() != 2)
      return emitOpError("pairs must be [source, target]");
    if (failed(checkRank(*this, pair[0], world, "pairs")) ||
        failed(checkRank(*this, pair[1], world, "pairs")))
      return failure();
    if (!sources.insert(pair[0]).second || !targets.insert(pair[1]).second)
      return emitOpError("a rank sends or receives twice");
  }
  return success();
}

static LogicalResult checkPeers(Operation *op, ArrayRef<int64_t> peers) {
  int64_t world = worldSizeOf(op);
  if (int64_t(peers.size()) != world)
    return op->emitOpError("peers needs one entry per rank (")
           << world << "), got " << peers.size();
  for (auto [r, p] : llvm::enumerate(peers)) {
    if (p == -1)
      continue;
    if (failed(checkRank(op, p, world, "peers")))
      return failure();
    if (p == int64_t(r))
      return op->emitOpError("rank ") << r << " names itself as its peer";
  }
  return success();
}

LogicalResult LocalSliceOp::verify() {
  if (failed(checkWritable(*this, getOutput())))
    return failure();
  if (getInput() == getOutput())
    return emitOpError("reads and writes the same buffer");
  MemRefType in = getInput().getType(), out = getOutput().getType();
  if (in.getElementType() != out.getElementType())
    return emitOpError("input and output element types differ");
  if (in.getRank() != out.getRank())
    return emitOpError("input has rank ")
           << in.getRank() << " but output has rank " << out.getRank();
  int64_t world = worldSizeOf(*this);
  if (int64_t(getStarts().size()) != world)
    return emitOpError("starts has ")
           << getStarts().size() << " entries for a world of " << world
           << " ranks (rt.world_size on the function)";
  for (auto [r, attr] : llvm::enumerate(getStarts())) {
    auto start = cast<DenseI64ArrayAttr>(attr).asArrayRef();
    if (int64_t(start.size()) != out.getRank())
      return emitOpError("the start of rank ")
             << r << " has " << start.size() << " entries, expected "
             << out.getRank();
    for (int64_t d = 0; d < out.getRank(); ++d)
      if (start[d] < 0 || start[d] + out.getDimSize(d) > in.getDimSize(d))
        return emitOpError("the block of rank ")
               << r << " leaves the input in dimension " << d << " (start "
               << start[d] << ", size " << out.getDimSize(d) << ", input size "
               << in.getDimSize(d) << ")";
  }
  return success();
}

LogicalResult SendOp::verify() { return checkPeers(*this, getPeers()); }
LogicalResult RecvOp::verify() {
  if (failed(checkWritable(*this, getOutput())))
    return failure();
  return checkPeers(*this, getPeers());
}

#define GET_OP_CLASSES
#include "shardflow/Dialect/RT/IR/RTOps.cpp.inc"
