//===- KernelSignaturesGen.cpp - the kernel signature table ----------------===//
//
// -gen-kernel-signatures: from the nn ODS and RTKernels.td, one C++ table
// of every kernel an rt program may call, with each parameter's name and
// type and how each target runs it. The runtime includes the generated
// header as checked in (it builds without tblgen); the compiler's build
// generates it again, and a test fails when the two differ.
//
// Every nn op must be named in RTKernels.td, as a kernel or as not one: an
// op added to the dialect without a decision fails the build here.
//
//===----------------------------------------------------------------------===//

#include "mlir/TableGen/GenInfo.h"
#include "mlir/TableGen/Operator.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/TableGen/Error.h"
#include "llvm/TableGen/Record.h"

#include <map>

using namespace llvm;
using mlir::tblgen::Operator;

namespace {
struct Param {
  std::string name, type;
  bool required;
};

struct Kernel {
  std::string name, nnOp, cuda, rewrite;
  bool cpu = true;
  std::vector<Param> params;
};

/// The artifact's type of an attribute, by its storage class.
std::string paramType(const mlir::tblgen::Attribute &attr, const Record *where,
                      StringRef name) {
  StringRef storage = attr.getStorageType();
  if (storage == "::mlir::IntegerAttr")
    return "int";
  if (storage == "::mlir::BoolAttr")
    return "bool";
  if (storage == "::mlir::FloatAttr")
    return "float";
  if (storage == "::mlir::StringAttr")
    return "string";
  if (storage == "::mlir::DenseI64ArrayAttr")
    return "ints";
  if (storage == "::mlir::TypeAttr")
    return "dtype";
  if (storage == "::mlir::TypedAttr")
    return "number";
  PrintFatalError(where->getLoc(), "attribute '" + name + "' is stored as " + storage +
                                       ", which no kernel parameter type holds");
}

const char *cudaEnum(StringRef name) {
  return StringSwitch<const char *>(name)
      .Case("runtime", "Runtime")
      .Case("elementwise", "Elementwise")
      .Case("neighbours", "Neighbours")
      .Case("row", "Row")
      .Case("reduction", "Reduction")
      .Case("standalone", "Standalone")
      .Case("rewritten", "Rewritten")
      .Case("none", "None")
      .Default(nullptr);
}

const char *typeEnum(StringRef type) {
  return StringSwitch<const char *>(type)
      .Case("int", "Int")
      .Case("bool", "Bool")
      .Case("float", "Float")
      .Case("number", "Number")
      .Case("string", "String")
      .Case("ints", "Ints")
      .Case("floats", "Floats")
      .Case("dtype", "DType")
      .Default(nullptr);
}

std::vector<Param> extraParams(const Record *def, StringRef field) {
  std::vector<Param> params;
  for (const Record *p : def->getValueAsListOfDefs(field)) {
    Param param{p->getValueAsString("name").str(), p->getValueAsString("type").str(), false};
    if (!typeEnum(param.type))
      PrintFatalError(p->getLoc(), "unknown parameter type '" + param.type + "'");
    params.push_back(param);
  }
  return params;
}

void readCuda(const Record *def, Kernel &k) {
  const Record *impl = def->getValueAsDef("cuda");
  k.cuda = impl->getValueAsString("name").str();
  if (!cudaEnum(k.cuda))
    PrintFatalError(impl->getLoc(), "unknown CUDA implementation '" + k.cuda + "'");
  if (impl->getValue("rewrite"))
    k.rewrite = impl->getValueAsString("rewrite").str();
}

bool emitKernelSignatures(const RecordKeeper &records, raw_ostream &os) {
  std::map<std::string, Kernel> kernels;
  StringSet<> decided;
  for (const Record *def : records.getAllDerivedDefinitions("RT_NNKernel")) {
    Operator op(def->getValueAsDef("op"));
    Kernel k;
    k.name = op.getOperationName().substr(op.getDialectName().size() + 1);
    k.nnOp = op.getOperationName();
    readCuda(def, k);
    for (const mlir::tblgen::NamedAttribute &attr : op.getAttributes()) {
      if (attr.attr.isDerivedAttr())
        continue;
      k.params.push_back({attr.name.str(), paramType(attr.attr, def, attr.name),
                          !attr.attr.isOptional() && !attr.attr.hasDefaultValue()});
    }
    for (Param &p : extraParams(def, "extraParams"))
      k.params.push_back(p);
    if (!decided.insert(k.nnOp).second)
      PrintFatalError(def->getLoc(), k.nnOp + " is named twice");
    kernels[k.name] = k;
  }
  for (const Record *def : records.getAllDerivedDefinitions("RT_NotAKernel")) {
    Operator op(def->getValueAsDef("op"));
    if (!decided.insert(op.getOperationName()).second)
      PrintFatalError(def->getLoc(), op.getOperationName() + " is named twice");
  }
  for (const Record *def : records.getAllDerivedDefinitions("RT_Kernel")) {
    Kernel k;
    k.name = def->getValueAsString("name").str();
    k.cpu = def->getValueAsBit("cpu");
    readCuda(def, k);
    k.params = extraParams(def, "params");
    if (kernels.count(k.name))
      PrintFatalError(def->getLoc(), "kernel '" + k.name + "' is named twice");
    kernels[k.name] = k;
  }
  for (const Record *def : records.getAllDerivedDefinitions("Op")) {
    Operator op(def);
    if (op.getDialectName() == "nn" && !decided.contains(op.getOperationName()))
      PrintFatalError(def->getLoc(), op.getOperationName() +
                                         " is neither a kernel nor marked as not one in "
                                         "RTKernels.td");
  }

  os << "// The kernel signature table: generated by shardflow-tblgen\n"
        "// -gen-kernel-signatures from include/shardflow/Dialect/NN/IR/NNOps.td and\n"
        "// include/shardflow/Dialect/RT/IR/RTKernels.td. Do not edit: run\n"
        "// tools/update-kernel-signatures.sh (python/tests/test_kernel_signatures.py\n"
        "// fails while this copy is stale). KernelSignature.h says what it holds.\n\n";
  os << "// NOLINTBEGIN\n";
  for (auto &[name, k] : kernels) {
    if (k.params.empty())
      continue;
    os << "inline constexpr ParamSignature k_" << name << "_params[] = {\n";
    for (const Param &p : k.params)
      os << formatv("    {{\"{0}\", ParamType::{1}, {2}},\n", p.name, typeEnum(p.type),
                    p.required ? "true" : "false");
    os << "};\n";
  }
  os << "\ninline constexpr KernelSignature kKernelSignatures[] = {\n";
  for (auto &[name, k] : kernels) {
    std::string params = k.params.empty() ? "nullptr, 0"
                                          : formatv("k_{0}_params, {1}", name, k.params.size())
                                                .str();
    os << formatv("    {{\"{0}\", \"{1}\", {2}, CudaImpl::{3}, \"{4}\", {5}},\n", name, k.nnOp,
                  k.cpu ? "true" : "false", cudaEnum(k.cuda), k.rewrite, params);
  }
  os << "};\n// NOLINTEND\n";
  return false;
}

mlir::GenRegistration genKernelSignatures("gen-kernel-signatures",
                                          "The kernel signature table (KernelSignature.h)",
                                          emitKernelSignatures);
} // namespace
