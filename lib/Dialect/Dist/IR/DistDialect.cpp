//===- DistDialect.cpp - the dist dialect ----------------------------------===//
//
// Attributes (shardings), the mesh, annotations and collectives, with
// verifiers that reject unknown axes, an axis used twice and splits that do
// not divide.
//
//===----------------------------------------------------------------------===//

#include "shardflow/Dialect/Dist/IR/DistOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallSet.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace shardflow;
using namespace shardflow::dist;

#include "shardflow/Dialect/Dist/IR/DistOpsDialect.cpp.inc"

#define GET_ATTRDEF_CLASSES
#include "shardflow/Dialect/Dist/IR/DistAttrs.cpp.inc"

//===----------------------------------------------------------------------===//
// Attributes
//===----------------------------------------------------------------------===//

namespace {

ParseResult parseAxisNames(AsmParser &p, SmallVectorImpl<StringAttr> &axes) {
  return p.parseCommaSeparatedList(AsmParser::Delimiter::Square, [&] {
    std::string name;
    if (p.parseString(&name))
      return failure();
    axes.push_back(StringAttr::get(p.getContext(), name));
    return success();
  });
}

void printAxisNames(AsmPrinter &p, ArrayRef<StringAttr> axes) {
  p << '[';
  llvm::interleaveComma(axes, p, [&](StringAttr a) { p.printString(a.getValue()); });
  p << ']';
}

} // namespace

// {"a", "b"}, {"a", ?}, {?}, {}
Attribute DimShardingAttr::parse(AsmParser &p, Type) {
  SmallVector<StringAttr> axes;
  bool open = false;
  if (p.parseLBrace())
    return {};
  if (succeeded(p.parseOptionalRBrace()))
    return DimShardingAttr::get(p.getContext(), axes, false);
  do {
    if (succeeded(p.parseOptionalQuestion())) {
      open = true;
      break;
    }
    std::string name;
    if (p.parseString(&name))
      return {};
    axes.push_back(StringAttr::get(p.getContext(), name));
  } while (succeeded(p.parseOptionalComma()));
  if (p.parseRBrace())
    return {};
  return DimShardingAttr::get(p.getContext(), axes, open);
}

void DimShardingAttr::print(AsmPrinter &p) const {
  p << '{';
  llvm::interleaveComma(getAxes(), p, [&](StringAttr a) { p.printString(a.getValue()); });
  if (getOpen())
    p << (getAxes().empty() ? "?" : ", ?");
  p << '}';
}

// <@mesh, [dims], replicated = [..], unreduced = [..]>
Attribute ShardingAttr::parse(AsmParser &p, Type) {
  FlatSymbolRefAttr mesh;
  SmallVector<DimShardingAttr> dims;
  SmallVector<StringAttr> replicated, unreduced;
  if (p.parseLess() || p.parseAttribute(mesh) || p.parseComma() ||
      p.parseCommaSeparatedList(AsmParser::Delimiter::Square, [&] {
        auto dim = DimShardingAttr::parse(p, Type());
        if (!dim)
          return failure();
        dims.push_back(cast<DimShardingAttr>(dim));
        return success();
      }))
    return {};
  while (succeeded(p.parseOptionalComma())) {
    StringRef key;
    if (p.parseKeyword(&key) || p.parseEqual())
      return {};
    if (key == "replicated") {
      if (parseAxisNames(p, replicated))
        return {};
    } else if (key == "unreduced") {
      if (parseAxisNames(p, unreduced))
        return {};
    } else {
      p.emitError(p.getCurrentLocation(),
                  "expected 'replicated' or 'unreduced', got '")
          << key << "'";
      return {};
    }
  }
  if (p.parseGreater())
    return {};
  return ShardingAttr::get(p.getContext(), mesh, dims, replicated, unreduced);
}

void ShardingAttr::print(AsmPrinter &p) const {
  p << '<' << getMesh() << ", [";
  llvm::interleaveComma(getDims(), p, [&](DimShardingAttr d) { d.print(p); });
  p << ']';
  if (!getReplicated().empty()) {
    p << ", replicated = ";
    printAxisNames(p, getReplicated());
  }
  if (!getUnreduced().empty()) {
    p << ", unreduced = ";
    printAxisNames(p, getUnreduced());
  }
  p << '>';
}

ShardingAttr ShardingAttr::getReplicated(MLIRContext *ctx, FlatSymbolRefAttr mesh,
                                         int64_t rank) {
  SmallVector<DimShardingAttr> dims(rank, DimShardingAttr::get(ctx, {}, false));
  return ShardingAttr::get(ctx, mesh, dims, {}, {});
}

bool ShardingAttr::isFullyReplicated() const {
  return getUnreduced().empty() &&
         llvm::all_of(getDims(), [](DimShardingAttr d) { return d.getAxes().empty(); });
}

// Used by the ops' custom<Sharding> directive: the attribute body only.
static ParseResult parseSharding(OpAsmParser &p, ShardingAttr &sharding) {
  auto attr = ShardingAttr::parse(p, Type());
  if (!attr)
    return failure();
  sharding = cast<ShardingAttr>(attr);
  return success();
}

static void printSharding(OpAsmPrinter &p, Operation *, ShardingAttr sharding) {
  sharding.print(p);
}

//===----------------------------------------------------------------------===//
// Dialect
//===----------------------------------------------------------------------===//

void DistDialect::initialize() {
  addAttributes<
#define GET_ATTRDEF_LIST
#include "shardflow/Dialect/Dist/IR/DistAttrs.cpp.inc"
      >();
  addOperations<
#define GET_OP_LIST
#include "shardflow/Dialect/Dist/IR/DistOps.cpp.inc"
      >();
}

MeshOp dist::lookupMesh(Operation *from, FlatSymbolRefAttr mesh) {
  auto op = SymbolTable::lookupNearestSymbolFrom<MeshOp>(from, mesh);
  if (!op)
    from->emitError("no dist.mesh named ") << mesh;
  return op;
}

LogicalResult
dist::verifySharding(ShardingAttr sharding, Type type, MeshOp mesh,
                     function_ref<InFlightDiagnostic()> emitError) {
  auto tensor = dyn_cast<RankedTensorType>(type);
  if (!tensor)
    return emitError() << "a sharding needs a ranked tensor, not " << type;
  if ((int64_t)sharding.getDims().size() != tensor.getRank())
    return emitError() << "sharding has " << sharding.getDims().size()
                       << " dimensions but the tensor " << type << " has "
                       << tensor.getRank();
  llvm::StringSet<> seen;
  auto use = [&](StringAttr axis, StringRef where) -> LogicalResult {
    if (mesh.axisIndex(axis.getValue()) < 0)
      return emitError() << "unknown mesh axis \"" << axis.getValue() << "\" in "
                         << where << " (mesh @" << mesh.getSymName() << " has "
                         << mesh.getAxisNames() << ")";
    if (!seen.insert(axis.getValue()).second)
      return emitError() << "mesh axis \"" << axis.getValue()
                         << "\" is used twice in one sharding";
    return success();
  };
  for (auto [d, dim] : llvm::enumerate(sharding.getDims())) {
    for (StringAttr axis : dim.getAxes())
      if (failed(use(axis, "dimension " + std::to_string(d))))
        return failure();
    int64_t parts = mesh.groupSize(dim.getAxes());
    if (tensor.getDimSize(d) % parts != 0)
      return emitError() << "dimension " << d << " of size " << tensor.getDimSize(d)
                         << " cannot be split evenly over " << parts
                         << " ranks (axes " << ArrayAttr::get(
                                mesh.getContext(),
                                SmallVector<Attribute>(dim.getAxes().begin(),
                                                       dim.getAxes().end()))
                         << ")";
  }
  for (StringAttr axis : sharding.getReplicated())
    if (failed(use(axis, "replicated")))
      return failure();
  for (StringAttr axis : sharding.getUnreduced())
    if (failed(use(axis, "unreduced")))
      return failure();
  return success();
}

RankedTensorType dist::localType(RankedTensorType type, ShardingAttr sharding,
                                 MeshOp mesh) {
  SmallVector<int64_t> shape(type.getShape());
  for (auto [d, dim] : llvm::enumerate(sharding.getDims()))
    shape[d] /= mesh.groupSize(dim.getAxes());
  return RankedTensorType::get(shape, type.getElementType(), type.getEncoding());
}

LogicalResult DistDialect::verifyOperationAttribute(Operation *op,
                                                    NamedAttribute attr) {
  auto checkOne = [&](Attribute a, Type type) -> LogicalResult {
    auto sharding = dyn_cast<ShardingAttr>(a);
    if (!sharding)
      return op->emitError() << "'" << attr.getName()
                             << "' expects #dist.sharding values, got " << a;
    MeshOp mesh = lookupMesh(op, sharding.getMesh());
    if (!mesh)
      return failure();
    return verifySharding(sharding, type, mesh, [&] { return op->emitError(); });
  };
  if (attr.getName() == kShardingsAttr) {
    auto list = dyn_cast<ArrayAttr>(attr.getValue());
    if (!list || list.size() != op->getNumResults())
      return op->emitError() << "'" << kShardingsAttr
                             << "' needs one #dist.sharding per result ("
                             << op->getNumResults() << ")";
    for (auto [a, r] : llvm::zip(list, op->getResults()))
      if (failed(checkOne(a, r.getType())))
        return failure();
    return success();
  }
  if (attr.getName() == kShardingAttr)
    return op->emitError() << "'" << kShardingAttr
                           << "' belongs on function arguments and results; ops "
                              "carry '"
                           << kShardingsAttr << "'";
  // Seed bookkeeping of dist-annotate, read and removed by dist-propagate.
  if (attr.getName() == "dist.priority") {
    if (!isa<IntegerAttr>(attr.getValue()))
      return op->emitError("'dist.priority' expects an integer");
    return success();
  }
  if (attr.getName() == "dist.origin") {
    if (!isa<StringAttr>(attr.getValue()))
      return op->emitError("'dist.origin' expects a string");
    return success();
  }
  // Pipeline stages (dist-split-stages): a stage function's number and pp
  // rank, and the module's schedule.
  if (attr.getName() == "dist.stage" || attr.getName() == "dist.pp_rank") {
    if (!isa<func::FuncOp>(op) || !isa<IntegerAttr>(attr.getValue()))
      return op->emitError() << "'" << attr.getName()
                             << "' expects an integer on a stage function";
    return success();
  }
  if (attr.getName() == "dist.layers") {
    auto range = dyn_cast<DenseI64ArrayAttr>(attr.getValue());
    if (!isa<func::FuncOp>(op) || !range || range.size() != 2)
      return op->emitError("'dist.layers' expects [first, end) on a stage function");
    return success();
  }
  if (attr.getName() == "dist.estimated_seconds" || attr.getName() == "dist.estimated_flops" ||
      attr.getName() == "dist.estimated_bytes") {
    if (!isa<func::FuncOp>(op) || !isa<FloatAttr>(attr.getValue()))
      return op->emitError() << "'" << attr.getName() << "' expects a float on a stage function";
    return success();
  }
  if (attr.getName() == "dist.pipeline") {
    auto dict = dyn_cast<DictionaryAttr>(attr.getValue());
    if (!isa<ModuleOp>(op) || !dict || !dict.getAs<IntegerAttr>("ranks") ||
        !dict.getAs<IntegerAttr>("microbatches") || !dict.getAs<DenseI64ArrayAttr>("stage_ranks") ||
        !dict.getAs<ArrayAttr>("actions"))
      return op->emitError("'dist.pipeline' expects, on the module, a dictionary of ranks, "
                           "microbatches, schedule, stage_ranks and actions");
    return success();
  }
  return op->emitError() << "unknown dist attribute '" << attr.getName() << "'";
}

/// `dist.sharding` (and seed bookkeeping) on a function argument or result.
static LogicalResult verifyValueAttr(Operation *op, Type type, NamedAttribute attr) {
  if (attr.getName() == "dist.priority" || attr.getName() == "dist.origin")
    return success();
  // A value passed between pipeline stages: its number, and the stage it
  // comes from (an argument) or the stages it goes to (a result).
  if (attr.getName() == "dist.transfer" || attr.getName() == "dist.from") {
    if (!isa<IntegerAttr>(attr.getValue()))
      return op->emitError() << "'" << attr.getName() << "' expects an integer";
    return success();
  }
  if (attr.getName() == "dist.to") {
    if (!isa<DenseI64ArrayAttr>(attr.getValue()))
      return op->emitError("'dist.to' expects an array of stages");
    return success();
  }
  if (attr.getName() != kShardingAttr)
    return op->emitError() << "unknown dist attribute '" << attr.getName()
                           << "' on a function argument or result";
  auto sharding = dyn_cast<ShardingAttr>(attr.getValue());
  if (!sharding)
    return op->emitError() << "'" << kShardingAttr << "' expects a #dist.sharding";
  MeshOp mesh = lookupMesh(op, sharding.getMesh());
  if (!mesh)
    return failure();
  return verifySharding(sharding, type, mesh, [&] { return op->emitError(); });
}

LogicalResult DistDialect::verifyRegionArgAttribute(Operation *op, unsigned region,
                                                    unsigned argIndex,
                                                    NamedAttribute attr) {
  Region &r = op->getRegion(region);
  if (r.empty() || argIndex >= r.front().getNumArguments())
    return success();
  return verifyValueAttr(op, r.front().getArgument(argIndex).getType(), attr);
}

LogicalResult DistDialect::verifyRegionResultAttribute(Operation *op, unsigned region,
                                                       unsigned resultIndex,
                                                       NamedAttribute attr) {
  auto fn = dyn_cast<func::FuncOp>(op);
  if (!fn || resultIndex >= fn.getNumResults())
    return success();
  return verifyValueAttr(op, fn.getResultTypes()[resultIndex], attr);
}

//===----------------------------------------------------------------------===//
// Mesh
//===----------------------------------------------------------------------===//

// dist.mesh @name ["a"=2, "b"=4]
ParseResult MeshOp::parse(OpAsmParser &p, OperationState &state) {
  StringAttr name;
  SmallVector<Attribute> names;
  SmallVector<int64_t> sizes;
  if (p.parseSymbolName(name, getSymNameAttrName(state.name), state.attributes) ||
      p.parseCommaSeparatedList(AsmParser::Delimiter::Square, [&] {
        std::string axis;
        int64_t size;
        if (p.parseString(&axis) || p.parseEqual() || p.parseInteger(size))
          return failure();
        names.push_back(p.getBuilder().getStringAttr(axis));
        sizes.push_back(size);
        return success();
      }) ||
      p.parseOptionalAttrDict(state.attributes))
    return failure();
  state.addAttribute(getAxisNamesAttrName(state.name), p.getBuilder().getArrayAttr(names));
  state.addAttribute(getAxisSizesAttrName(state.name),
                     p.getBuilder().getDenseI64ArrayAttr(sizes));
  return success();
}

void MeshOp::print(OpAsmPrinter &p) {
  p << ' ';
  p.printSymbolName(getSymName());
  p << " [";
  llvm::interleaveComma(llvm::zip(getAxisNames(), getAxisSizes()), p, [&](auto pair) {
    p.printString(cast<StringAttr>(std::get<0>(pair)).getValue());
    p << '=' << std::get<1>(pair);
  });
  p << ']';
  p.printOptionalAttrDict((*this)->getAttrs(),
                          {getSymNameAttrName(), getAxisNamesAttrName(),
                           getAxisSizesAttrName()});
}

LogicalResult MeshOp::verify() {
  if (getAxisNames().size() != getAxisSizes().size())
    return emitOpError("needs one size per axis name");
  if (getAxisNames().empty())
    return emitOpError("needs at least one axis");
  llvm::StringSet<> seen;
  for (auto [a, size] : llvm::zip(getAxisNames(), getAxisSizes())) {
    StringRef name = cast<StringAttr>(a).getValue();
    if (name.empty())
      return emitOpError("has an axis with an empty name");
    if (!seen.insert(name).second)
      return emitOpError("names axis \"") << name << "\" twice";
    if (size < 1)
      return emitOpError("axis \"") << name << "\" has size " << size
                                    << "; sizes must be positive";
  }
  return success();
}

int64_t MeshOp::getNumRanks() {
  int64_t n = 1;
  for (int64_t s : getAxisSizes())
    n *= s;
  return n;
}

int64_t MeshOp::axisIndex(StringRef name) {
  for (auto [i, a] : llvm::enumerate(getAxisNames()))
    if (cast<StringAttr>(a).getValue() == name)
      return i;
  return -1;
}

int64_t MeshOp::axisSize(StringRef name) {
  int64_t i = axisIndex(name);
  return i < 0 ? 1 : getAxisSizes()[i];
}

int64_t MeshOp::groupSize(ArrayRef<StringAttr> axes) {
  int64_t n = 1;
  for (StringAttr a : axes)
    n *= axisSize(a.getValue());
  return n;
}

namespace {
/// Row-major coordinates of `rank` on a mesh of `sizes`.
SmallVector<int64_t> coordinates(int64_t rank, ArrayRef<int64_t> sizes) {
  SmallVector<int64_t> coords(sizes.size());
  for (int64_t i = sizes.size() - 1; i >= 0; --i) {
    coords[i] = rank % sizes[i];
    rank /= sizes[i];
  }
  return coords;
}
} // namespace

int64_t MeshOp::indexAlong(int64_t rank, ArrayRef<StringAttr> axes) {
  SmallVector<int64_t> coords = coordinates(rank, getAxisSizes());
  int64_t index = 0;
  for (StringAttr a : axes) {
    int64_t i = axisIndex(a.getValue());
    index = index * getAxisSizes()[i] + coords[i];
  }
  return index;
}

SmallVector<SmallVector<int64_t>> MeshOp::groups(ArrayRef<StringAttr> axes) {
  // Key each rank by its coordinates off `axes`; members sorted by their
  // index along `axes`.
  ArrayRef<int64_t> sizes = getAxisSizes();
  llvm::SmallSet<int64_t, 4> inGroup;
  for (StringAttr a : axes)
    inGroup.insert(axisIndex(a.getValue()));
  std::map<SmallVector<int64_t>, SmallVector<int64_t>> byKey;
  int64_t groupSz = groupSize(axes);
  for (int64_t r = 0, n = getNumRanks(); r < n; ++r) {
    SmallVector<int64_t> coords = coordinates(r, sizes), key;
    for (auto [i, c] : llvm::enumerate(coords))
      if (!inGroup.contains(i))
        key.push_back(c);
    auto &members = byKey[key];
    if (members.empty())
      members.assign(groupSz, -1);
    members[indexAlong(r, axes)] = r;
  }
  SmallVector<SmallVector<int64_t>> result;
  for (auto &entry : byKey)
    result.push_back(entry.second);
  llvm::sort(result, [](auto &a, auto &b) { return a.front() < b.front(); });
  return result;
}

//===----------------------------------------------------------------------===//
// Annotations
//===----------------------------------------------------------------------===//

static LogicalResult verifyAnnotation(Operation *op, ShardingAttr sharding, Type type) {
  MeshOp mesh = lookupMesh(op, sharding.getMesh());
  if (!mesh)
    return failure();
  return verifySharding(sharding, type, mesh, [&] { return op->emitOpError(); });
}

LogicalResult ConstraintOp::verify() {
  return verifyAnnotation(*this, getSharding(), getType());
}

LogicalResult ReshardOp::verify() {
  return verifyAnnotation(*this, getSharding(), getType());
}

//===----------------------------------------------------------------------===//
// Collectives
//===----------------------------------------------------------------------===//

namespace {

/// Checks `axes` against the mesh and returns it, or null.
MeshOp verifyAxes(Operation *op, FlatSymbolRefAttr meshName, ArrayAttr axes,
                  SmallVectorImpl<StringAttr> &names) {
  MeshOp mesh = lookupMesh(op, meshName);
  if (!mesh)
    return {};
  llvm::StringSet<> seen;
  for (Attribute a : axes) {
    auto name = cast<StringAttr>(a);
    if (mesh.axisIndex(name.getValue()) < 0) {
      op->emitOpError("names unknown mesh axis \"")
          << name.getValue() << "\" (mesh @" << mesh.getSymName() << " has "
          << mesh.getAxisNames() << ")";
      return {};
    }
    if (!seen.insert(name.getValue()).second) {
      op->emitOpError("names mesh axis \"") << name.getValue() << "\" twice";
      return {};
    }
    names.push_back(name);
  }
  if (names.empty()) {
    op->emitOpError("needs at least one mesh axis");
    return {};
  }
  return mesh;
}

LogicalResult checkDim(Operation *op, int64_t dim, int64_t rank, StringRef what) {
  if (dim < 0 || dim >= rank)
    return op->emitOpError() << what << " " << dim << " is out of range for rank "
                             << rank;
  return success();
}

/// Result must be input with dims[d] scaled: multiply where mul[d], divide
/// where div[d].
LogicalResult checkScaled(Operation *op, RankedTensorType in, RankedTensorType out,
                          int64_t mulDim, int64_t divDim, int64_t n) {
  if (in.getElementType() != out.getElementType() || in.getRank() != out.getRank())
    return op->emitOpError("result must have the input's element type and rank");
  SmallVector<int64_t> want(in.getShape());
  if (divDim >= 0) {
    if (want[divDim] % n != 0)
      return op->emitOpError() << "dimension " << divDim << " of size " << want[divDim]
                               << " cannot be split evenly over " << n << " ranks";
    want[divDim] /= n;
  }
  if (mulDim >= 0)
    want[mulDim] *= n;
  if (ArrayRef<int64_t>(want) != out.getShape())
    return op->emitOpError() << "expects result type "
                             << RankedTensorType::get(want, in.getElementType())
                             << ", got " << out;
  return success();
}

LogicalResult checkReduction(Operation *op, StringRef reduction) {
  if (!llvm::is_contained({"sum", "prod", "max", "min"}, reduction))
    return op->emitOpError("reduction must be sum, prod, max or min, not '")
           << reduction << "'";
  return success();
}

template <typename OpT>
LogicalResult verifyCollective(OpT op, int64_t mulDim, int64_t divDim) {
  SmallVector<StringAttr> names;
  MeshOp mesh = verifyAxes(op, op.getMeshAttr(), op.getAxes(), names);
  if (!mesh)
    return failure();
  auto in = cast<RankedTensorType>(op.getInput().getType());
  auto out = cast<RankedTensorType>(op.getResult().getType());
  for (int64_t d : {mulDim, divDim})
    if (d != -1 && failed(checkDim(op, d, in.getRank(), "dimension")))
      return failure();
  return checkScaled(op, in, out, mulDim, divDim, mesh.groupSize(names));
}

LogicalResult verifyRankTable(Operation *op, FlatSymbolRefAttr meshName,
                              ArrayRef<int64_t> peers) {
  MeshOp mesh = lookupMesh(op, meshName);
  if (!mesh)
    return failure();
  int64_t n = mesh.getNumRanks();
  if ((int64_t)peers.size() != n)
    return op->emitOpError() << "needs one peer per rank of the mesh (" << n
                             << "), got " << peers.size();
  for (auto [r, p] : llvm::enumerate(peers))
    if (p < -1 || p >= n || p == (int64_t)r)
      return op->emitOpError() << "rank " << r << " has peer " << p
                               << "; peers are other ranks of the mesh or -1";
  return success();
}

} // namespace

LogicalResult AllReduceOp::verify() {
  if (failed(checkReduction(*this, getReduction())))
    return failure();
  return verifyCollective(*this, -1, -1);
}
LogicalResult AllGatherOp::verify() { return verifyCollective(*this, getDim(), -1); }
LogicalResult ReduceScatterOp::verify() {
  if (failed(checkReduction(*this, getReduction())))
    return failure();
  return verifyCollective(*this, -1, getDim());
}
LogicalResult AllToAllOp::verify() {
  if (getSplitDim() == getConcatDim())
    return emitOpError("split_dim and concat_dim must differ");
  return verifyCollective(*this, getConcatDim(), getSplitDim());
}
LogicalResult AllSliceOp::verify() { return verifyCollective(*this, -1, getDim()); }

LogicalResult CollectivePermuteOp::verify() {
  MeshOp mesh = lookupMesh(*this, getMeshAttr());
  if (!mesh)
    return failure();
  int64_t n = mesh.getNumRanks();
  llvm::SmallSet<int64_t, 8> sources, targets;
  for (DenseI64ArrayAttr pair : getPairs().getAsRange<DenseI64ArrayAttr>()) {
    if (pair.size() != 2)
      return emitOpError("each pair must be [source, target]");
    for (int64_t r : pair.asArrayRef())
      if (r < 0 || r >= n)
        return emitOpError() << "rank " << r << " is outside the mesh (" << n
                             << " ranks)";
    if (!sources.insert(pair[0]).second)
      return emitOpError() << "rank " << pair[0] << " sends twice";
    if (!targets.insert(pair[1]).second)
      return emitOpError() << "rank " << pair[1] << " receives twice";
  }
  return success();
}

LogicalResult SendOp::verify() { return verifyRankTable(*this, getMeshAttr(), getPeers()); }
LogicalResult RecvOp::verify() { return verifyRankTable(*this, getMeshAttr(), getPeers()); }

#define GET_OP_CLASSES
#include "shardflow/Dialect/Dist/IR/DistOps.cpp.inc"
