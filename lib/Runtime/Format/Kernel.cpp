//===- Kernel.cpp - element types, parameters, the kernel registry ---------===//

#include "shardflow/Runtime/Format/Kernel.h"
#include "shardflow/Runtime/Format/KernelSignature.h"

#include <algorithm>

using namespace shardflow::runtime;

namespace {
struct DTypeInfo {
  DType type;
  const char *name;
  size_t size;
};
// One table: the names match the nn dialect's printed element types.
constexpr DTypeInfo kDTypes[] = {
    {DType::F16, "f16", 2}, {DType::BF16, "bf16", 2}, {DType::F32, "f32", 4},
    {DType::F64, "f64", 8}, {DType::I1, "i1", 1},     {DType::I8, "i8", 1},
    {DType::I16, "i16", 2}, {DType::I32, "i32", 4},   {DType::I64, "i64", 8},
    {DType::U8, "ui8", 1},  {DType::U16, "ui16", 2},  {DType::U32, "ui32", 4},
    {DType::U64, "ui64", 8},
};

const DTypeInfo &info(DType t) {
  for (const auto &i : kDTypes)
    if (i.type == t)
      return i;
  throw RuntimeError("unknown element type");
}

std::map<std::string, KernelFn, std::less<>> &registry() {
  static std::map<std::string, KernelFn, std::less<>> kernels;
  return kernels;
}
} // namespace

size_t shardflow::runtime::dtypeSize(DType t) { return info(t).size; }
const char *shardflow::runtime::dtypeName(DType t) { return info(t).name; }
std::optional<DType> shardflow::runtime::parseDType(std::string_view name) {
  for (const auto &i : kDTypes)
    if (name == i.name)
      return i.type;
  return std::nullopt;
}

void Params::checkRead(std::string_view name, std::initializer_list<uint8_t> types) const {
  if (!signature || isInstructionParam(name))
    return;
  const ParamSignature *p = signature->findParam(name);
  if (!p)
    throw RuntimeError("kernel '" + std::string(signature->name) + "' reads parameter '" +
                       std::string(name) +
                       "', which its signature lacks (the kernel table, KernelSignatures.inc, "
                       "generated from RTKernels.td)");
  for (uint8_t t : types)
    if (uint8_t(p->type) == t)
      return;
  throw RuntimeError("kernel '" + std::string(signature->name) + "' reads parameter '" +
                     std::string(name) + "', a " + paramTypeName(p->type) +
                     " in its signature, as another type");
}

static uint8_t type(ParamType t) { return uint8_t(t); }

bool Params::has(std::string_view name) const {
  checkRead(name, {type(ParamType::Int), type(ParamType::Bool), type(ParamType::Float),
                   type(ParamType::Number), type(ParamType::String), type(ParamType::Ints),
                   type(ParamType::Floats), type(ParamType::DType)});
  return values.count(std::string(name));
}

std::string shardflow::runtime::shapeText(const std::vector<int64_t> &shape) {
  if (shape.empty())
    return "scalar";
  std::string s;
  for (size_t i = 0; i < shape.size(); ++i)
    s += (i ? "x" : "") + std::to_string(shape[i]);
  return s;
}

std::string shardflow::runtime::shapeList(const std::vector<int64_t> &shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    s += (i ? "," : "") + std::to_string(shape[i]);
  return s + "]";
}

const ParamValue &Params::get(std::string_view name) const {
  auto it = values.find(std::string(name));
  if (it == values.end())
    throw RuntimeError("missing parameter '" + std::string(name) + "'");
  return it->second;
}

int64_t Params::getInt(std::string_view name) const {
  checkRead(name, {type(ParamType::Int), type(ParamType::Bool)});
  const ParamValue &v = get(name);
  if (auto *i = std::get_if<int64_t>(&v))
    return *i;
  throw RuntimeError("parameter '" + std::string(name) + "' is not an integer");
}
int64_t Params::getInt(std::string_view name, int64_t dflt) const {
  checkRead(name, {type(ParamType::Int), type(ParamType::Bool)});
  return has(name) ? getInt(name) : dflt;
}
double Params::getFloat(std::string_view name) const {
  checkRead(name, {type(ParamType::Float), type(ParamType::Number)});
  const ParamValue &v = get(name);
  if (auto *f = std::get_if<double>(&v))
    return *f;
  if (auto *i = std::get_if<int64_t>(&v))
    return double(*i);
  throw RuntimeError("parameter '" + std::string(name) + "' is not a number");
}
double Params::getFloat(std::string_view name, double dflt) const {
  checkRead(name, {type(ParamType::Float), type(ParamType::Number)});
  return has(name) ? getFloat(name) : dflt;
}
bool Params::getBool(std::string_view name, bool dflt) const {
  checkRead(name, {type(ParamType::Bool), type(ParamType::Int)});
  return has(name) ? getInt(name) != 0 : dflt;
}
std::string Params::getString(std::string_view name, std::string_view dflt) const {
  checkRead(name, {type(ParamType::String)});
  if (!has(name))
    return std::string(dflt);
  if (auto *s = std::get_if<std::string>(&get(name)))
    return *s;
  throw RuntimeError("parameter '" + std::string(name) + "' is not a string");
}
std::vector<int64_t> Params::getInts(std::string_view name) const {
  checkRead(name, {type(ParamType::Ints)});
  const ParamValue &v = get(name);
  if (auto *ints = std::get_if<std::vector<int64_t>>(&v))
    return *ints;
  if (auto *floats = std::get_if<std::vector<double>>(&v); floats && floats->empty())
    return {};
  throw RuntimeError("parameter '" + std::string(name) + "' is not a list of integers");
}
std::vector<int64_t> Params::getInts(std::string_view name, std::vector<int64_t> dflt) const {
  checkRead(name, {type(ParamType::Ints)});
  return has(name) ? getInts(name) : dflt;
}
DType Params::getDType(std::string_view name) const {
  checkRead(name, {type(ParamType::DType)});
  if (auto *t = std::get_if<DType>(&get(name)))
    return *t;
  throw RuntimeError("parameter '" + std::string(name) + "' is not an element type");
}

bool shardflow::runtime::registerKernel(std::string_view name, KernelFn fn) {
  auto [it, inserted] = registry().emplace(std::string(name), fn);
  if (!inserted)
    throw RuntimeError("kernel '" + std::string(name) + "' registered twice");
  return true;
}

KernelFn shardflow::runtime::findKernel(std::string_view name) {
  auto it = registry().find(name);
  return it == registry().end() ? nullptr : it->second;
}

std::vector<std::string> shardflow::runtime::kernelNames() {
  std::vector<std::string> names;
  for (const auto &[name, fn] : registry())
    names.push_back(name);
  return names;
}
