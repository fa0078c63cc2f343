//===- ArtifactExport.cpp - rt programs into .shard artifacts --------------===//
//
// A straight walk of the planned rt function: every value becomes a
// numbered buffer (input, arena slot, view, weight or constant), every
// rt.kernel an instruction whose parameters are its `params` dictionary,
// every collective (and rt.local_slice, whose effect depends on the rank) a
// collective instruction with its rank tables, and the returned values the
// named outputs.
//
//===----------------------------------------------------------------------===//

#include "shardflow/Target/ArtifactExport.h"
#include "shardflow/Dialect/NN/IR/Evaluate.h"
#include "shardflow/Dialect/NN/IR/NNOps.h"
#include "shardflow/Dialect/RT/IR/RTOps.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "llvm/ADT/DenseMap.h"

using namespace mlir;
using namespace shardflow;
namespace rtm = shardflow::runtime;

static FailureOr<rtm::DType> dtypeOf(Type t, Operation *op) {
  if (auto d = nn::getRuntimeDType(t))
    return *d;
  return op->emitOpError("element type ") << t << " has no runtime equivalent";
}

static LogicalResult describe(Value v, Operation *op, rtm::BufferDesc &b) {
  auto type = cast<MemRefType>(v.getType());
  auto dtype = dtypeOf(type.getElementType(), op);
  if (failed(dtype))
    return failure();
  b.dtype = *dtype;
  b.shape.assign(type.getShape().begin(), type.getShape().end());
  return success();
}

static LogicalResult addParam(rtm::Params &params, NamedAttribute attr,
                              Operation *op) {
  if (nn::setKernelParam(params, attr.getName().getValue(), attr.getValue()))
    return success();
  if (auto t = dyn_cast<TypeAttr>(attr.getValue()))
    return dtypeOf(t.getValue(), op);
  return op->emitOpError("parameter '")
         << attr.getName().getValue() << "' of kind " << attr.getValue()
         << " cannot be written to an artifact";
}

/// Rank lists flattened, with their common length.
static std::pair<std::vector<int64_t>, int64_t> flatten(ArrayAttr lists) {
  std::vector<int64_t> flat;
  int64_t size = 0;
  for (Attribute a : lists) {
    auto list = cast<DenseI64ArrayAttr>(a).asArrayRef();
    flat.insert(flat.end(), list.begin(), list.end());
    size = int64_t(list.size());
  }
  return {flat, size};
}

/// A collective op as an artifact instruction (verified already).
static rtm::Instruction collectiveInstruction(Operation &op,
                                              const llvm::DenseMap<Value, int> &index) {
  rtm::Instruction inst;
  inst.collective = true;
  // The rt op's name is the collective's name in the format.
  auto kind = rtm::parseCollectiveKind(op.getName().stripDialect());
  assert(kind && "every rt collective is a kind of the format");
  inst.collectiveKind = *kind;
  inst.kernel = rtm::collectiveKindName(*kind);
  auto groups = [&](ArrayAttr g) {
    auto [flat, size] = flatten(g);
    inst.params.set("groups", flat);
    inst.params.set("group_size", size);
  };
  if (auto send = dyn_cast<rt::SendOp>(op)) {
    inst.inputs.push_back(index.lookup(send.getInput()));
    inst.params.set("peers", std::vector<int64_t>(send.getPeers().begin(),
                                                  send.getPeers().end()));
    return inst;
  }
  if (auto recv = dyn_cast<rt::RecvOp>(op)) {
    inst.outputs.push_back(index.lookup(recv.getOutput()));
    inst.params.set("peers", std::vector<int64_t>(recv.getPeers().begin(),
                                                  recv.getPeers().end()));
    return inst;
  }
  inst.inputs.push_back(index.lookup(op.getOperand(0)));
  inst.outputs.push_back(index.lookup(op.getOperand(1)));
  if (auto c = dyn_cast<rt::AllReduceOp>(op)) {
    groups(c.getGroups());
    inst.params.set("reduction", c.getReduction().str());
  } else if (auto c = dyn_cast<rt::AllGatherOp>(op)) {
    groups(c.getGroups());
    inst.params.set("dim", int64_t(c.getDim()));
  } else if (auto c = dyn_cast<rt::ReduceScatterOp>(op)) {
    groups(c.getGroups());
    inst.params.set("dim", int64_t(c.getDim()));
    inst.params.set("reduction", c.getReduction().str());
  } else if (auto c = dyn_cast<rt::AllToAllOp>(op)) {
    groups(c.getGroups());
    inst.params.set("split_dim", int64_t(c.getSplitDim()));
    inst.params.set("concat_dim", int64_t(c.getConcatDim()));
  } else if (auto c = dyn_cast<rt::CollectivePermuteOp>(op)) {
    inst.params.set("pairs", flatten(c.getPairs()).first);
  } else if (auto c = dyn_cast<rt::LocalSliceOp>(op)) {
    // One start list per rank, each as long as the output's rank.
    inst.params.set("starts", flatten(c.getStarts()).first);
  }
  return inst;
}

FailureOr<rtm::Artifact> shardflow::exportArtifact(ModuleOp module,
                                                   StringRef target,
                                                   StringRef modelDir) {
  auto fn = module.lookupSymbol<func::FuncOp>("main");
  if (!fn)
    return module.emitError("no func.func @main to export");
  rtm::Artifact art;
  art.target = target.str();
  art.modelDir = modelDir.str();
  auto peak = fn->getAttrOfType<IntegerAttr>("rt.peak_bytes");
  if (!peak)
    return fn.emitOpError("has no memory plan (run rt-plan-memory)");
  art.arenaBytes = peak.getInt();
  if (auto world = fn->getAttrOfType<IntegerAttr>("rt.world_size")) {
    if (world.getInt() < 1)
      return fn.emitOpError("rt.world_size must be positive");
    art.worldSize = int(world.getInt());
  }

  llvm::DenseMap<Value, int> index;
  auto add = [&](Value v, rtm::BufferDesc b) {
    index[v] = int(art.buffers.size());
    art.buffers.push_back(std::move(b));
  };
  for (auto [i, arg] : llvm::enumerate(fn.getArguments())) {
    rtm::BufferDesc b;
    b.kind = rtm::BufferDesc::Kind::Input;
    if (failed(describe(arg, fn, b)))
      return failure();
    auto name = fn.getArgAttrOfType<StringAttr>(i, "nn.name");
    b.name = name ? name.str() : "input" + std::to_string(i);
    // Class labels (nn-append-loss): the range the runtime checks.
    if (auto range = fn.getArgAttrOfType<DenseI64ArrayAttr>(i, "nn.valid_range");
        range && range.size() == 2)
      b.validRange = {range[0], range[1]};
    if (auto ignore = fn.getArgAttrOfType<IntegerAttr>(i, "nn.ignore_value"))
      b.ignoreValue = ignore.getInt();
    add(arg, b);
  }
  for (Operation &op : fn.getBody().front()) {
    rtm::BufferDesc b;
    if (auto alloc = dyn_cast<rt::AllocOp>(op)) {
      if (!alloc.getOffset())
        return alloc.emitOpError("has no planned offset (run rt-plan-memory)");
      b.kind = rtm::BufferDesc::Kind::Arena;
      b.offset = int64_t(*alloc.getOffset());
      if (failed(describe(alloc, &op, b)))
        return failure();
      add(alloc, b);
    } else if (auto view = dyn_cast<rt::ViewOp>(op)) {
      b.kind = rtm::BufferDesc::Kind::View;
      b.source = index.lookup(view.getSource());
      if (failed(describe(view, &op, b)))
        return failure();
      add(view, b);
    } else if (auto w = dyn_cast<rt::WeightOp>(op)) {
      b.kind = rtm::BufferDesc::Kind::Weight;
      b.name = w.getName().str();
      b.storage = w.getStorage().str();
      if (w.getFile())
        b.file = w.getFile()->str();
      if (w.getOffset())
        b.fileOffset = int64_t(*w.getOffset());
      if (failed(describe(w, &op, b)))
        return failure();
      if (auto source = w.getSourceTypeAttr()) {
        auto d = dtypeOf(source.getValue(), &op);
        if (failed(d))
          return failure();
        b.sourceDType = *d;
      }
      if (auto perm = w.getPermutationAttr())
        b.permutation.assign(perm.asArrayRef().begin(), perm.asArrayRef().end());
      b.zeroPadded = w.getZeroPadded();
      b.writable = w.getWritable();
      if (auto shape = w->getAttrOfType<DenseI64ArrayAttr>("nn.model_shape"); shape && b.writable)
        b.modelShape.assign(shape.asArrayRef().begin(), shape.asArrayRef().end());
      if (auto scale = w.getScaleAttr())
        b.scale = scale.getValueAsDouble();
      if (auto global = w.getGlobalShapeAttr()) {
        b.globalShape.assign(global.asArrayRef().begin(), global.asArrayRef().end());
        for (Attribute start : w.getStartsAttr()) {
          auto list = cast<DenseI64ArrayAttr>(start).asArrayRef();
          b.starts.emplace_back(list.begin(), list.end());
        }
      }
      add(w, b);
    } else if (auto c = dyn_cast<rt::ConstantOp>(op)) {
      auto dense = dyn_cast<DenseElementsAttr>(c.getValue());
      if (!dense)
        return c.emitOpError("only dense constants can be exported");
      b.kind = rtm::BufferDesc::Kind::Constant;
      if (failed(describe(c, &op, b)))
        return failure();
      b.data = nn::getRuntimeBytes(dense);
      add(c, b);
    } else if (auto k = dyn_cast<rt::KernelOp>(op)) {
      rtm::Instruction inst;
      inst.kernel = k.getKernel().str();
      for (Value v : k.getInputs())
        inst.inputs.push_back(index.lookup(v));
      for (Value v : k.getOutputs())
        inst.outputs.push_back(index.lookup(v));
      for (NamedAttribute attr : k.getParams())
        if (failed(addParam(inst.params, attr, &op)))
          return failure();
      // The runtime names the ONNX node when the kernel fails.
      if (std::string node = rt::onnxNodeName(k.getLoc()); !node.empty())
        inst.params.set("node", node);
      art.program.push_back(std::move(inst));
    } else if (auto launch = dyn_cast<rt::LaunchOp>(op)) {
      // Generated device code: the module and function by name, the launch
      // shape; the device code itself is added by compileDeviceCode.
      rtm::Instruction inst;
      inst.kernel = "launch";
      for (Value v : launch.getInputs())
        inst.inputs.push_back(index.lookup(v));
      for (Value v : launch.getOutputs())
        inst.outputs.push_back(index.lookup(v));
      inst.params.set("module", launch.getKernel().getRootReference().str());
      inst.params.set("function", launch.getKernel().getLeafReference().str());
      inst.params.set("grid", std::vector<int64_t>(launch.getGrid().begin(), launch.getGrid().end()));
      inst.params.set("block",
                      std::vector<int64_t>(launch.getBlock().begin(), launch.getBlock().end()));
      inst.params.set("shared", int64_t(launch.getShared()));
      if (launch.getChecks()) {
        // The runtime passes a status word and, when the kernel reports an
        // error, names the ONNX node whose check it was: the one of the
        // reporting operation's ordinal in `checking_nodes` (one name a
        // line), else `node`.
        inst.params.set("checks", int64_t(1));
        if (std::string node = rt::onnxNodeName(launch.getLoc()); !node.empty())
          inst.params.set("node", node);
        if (ArrayAttr names = launch.getCheckingNodesAttr()) {
          std::string joined;
          for (auto [i, name] : llvm::enumerate(names.getAsValueRange<StringAttr>()))
            joined += (i ? "\n" : "") + name.str();
          inst.params.set("checking_nodes", joined);
        }
      }
      art.program.push_back(std::move(inst));
    } else if (isa<rt::AllReduceOp, rt::AllGatherOp, rt::ReduceScatterOp, rt::AllToAllOp,
                   rt::CollectivePermuteOp, rt::SendOp, rt::RecvOp,
                   rt::LocalSliceOp>(op)) {
      art.program.push_back(collectiveInstruction(op, index));
    } else if (auto ret = dyn_cast<func::ReturnOp>(op)) {
      for (auto [i, v] : llvm::enumerate(ret.getOperands())) {
        auto name = fn.getResultAttrOfType<StringAttr>(i, "nn.name");
        art.outputs.emplace_back(name ? name.str() : "output" + std::to_string(i),
                                 index.lookup(v));
        // A padded GEMM result returned as it is (convert-rt-to-gpu).
        auto columns = fn.getResultAttrOfType<IntegerAttr>(i, "rt.columns");
        art.outputColumns.resize(art.outputs.size(), 0);
        art.outputColumns.back() = columns ? columns.getInt() : 0;
      }
    } else {
      return op.emitOpError("cannot be exported to an artifact");
    }
  }
  return art;
}
