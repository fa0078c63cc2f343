//===- Kernel.h - the runtime's kernel interface --------------*- C++ -*-===//
//
// Plain C++ (no MLIR): shard-run links only the runtime. A kernel reads
// input tensors and writes output tensors whose buffers the device owns;
// its parameters are the attributes of the nn op it implements, under the
// same names (see the nn dialect reference). Kernels register themselves by
// the nn op's name without the dialect prefix ("matmul", "softmax", ...).
//
//===----------------------------------------------------------------------===//

#ifndef SHARDFLOW_RUNTIME_KERNEL_H
#define SHARDFLOW_RUNTIME_KERNEL_H

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace shardflow::runtime {

/// Element types, with the names the nn dialect prints (f32, i64, ui8, ...).
enum class DType : uint8_t { F16, BF16, F32, F64, I1, I8, I16, I32, I64, U8, U16, U32, U64 };

size_t dtypeSize(DType t);
const char *dtypeName(DType t);
std::optional<DType> parseDType(std::string_view name);

/// A shape as the artifact writes it: "2x3", or "scalar".
std::string shapeText(const std::vector<int64_t> &shape);
/// A shape as messages list it: "[2,3]".
std::string shapeList(const std::vector<int64_t> &shape);

/// Errors the runtime reports to the user: a message that names the tensor,
/// kernel or file; shard-run prints it and exits non-zero.
struct RuntimeError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// A view of a buffer: does not own its data. Row-major, contiguous.
struct Tensor {
  void *data = nullptr;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;

  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape)
      n *= d;
    return n;
  }
  size_t bytes() const { return size_t(numel()) * dtypeSize(dtype); }
  int64_t rank() const { return int64_t(shape.size()); }
  template <typename T> T *as() const { return static_cast<T *>(data); }
};

/// One parameter value: integer (also bool), float, string, integer list,
/// float list, or element type.
using ParamValue = std::variant<int64_t, double, std::string, std::vector<int64_t>,
                                std::vector<double>, DType>;

struct KernelSignature;

/// A kernel's parameters by name. Getters without a default throw a
/// RuntimeError naming the missing parameter. Bound to its kernel's
/// signature (KernelSignature.h), as shard-run binds every kernel
/// instruction's, a read of a parameter the signature lacks, or with a
/// getter of another type, throws: the kernel and the table disagree.
class Params {
public:
  /// Checks every later read against `kernel` (nullptr: no checks).
  void bind(const KernelSignature *kernel) { signature = kernel; }
  const KernelSignature *boundSignature() const { return signature; }

  void set(std::string name, ParamValue value) { values[std::move(name)] = std::move(value); }
  bool has(std::string_view name) const;
  const std::map<std::string, ParamValue> &all() const { return values; }

  int64_t getInt(std::string_view name) const;
  int64_t getInt(std::string_view name, int64_t dflt) const;
  double getFloat(std::string_view name) const;
  double getFloat(std::string_view name, double dflt) const;
  bool getBool(std::string_view name, bool dflt) const;
  std::string getString(std::string_view name, std::string_view dflt) const;
  /// An integer list; an empty list may arrive as an empty float list
  /// (the artifact's text cannot tell their types apart).
  std::vector<int64_t> getInts(std::string_view name) const;
  std::vector<int64_t> getInts(std::string_view name, std::vector<int64_t> dflt) const;
  DType getDType(std::string_view name) const;

private:
  const ParamValue &get(std::string_view name) const;
  /// With a signature: throws unless `name` is a parameter of it whose
  /// type is one of `types`.
  void checkRead(std::string_view name, std::initializer_list<uint8_t> types) const;
  std::map<std::string, ParamValue> values;
  const KernelSignature *signature = nullptr;
};

struct KernelContext {
  std::string_view kernel;     // for error messages
  std::vector<Tensor> inputs;  // absent optional operands are simply absent
  std::vector<Tensor> outputs; // preallocated, never aliasing an input
  const Params &params;
  int threads = 1;
  int rank = 0; // this process's rank in the world (a per-rank parameter's index)
};

using KernelFn = void (*)(const KernelContext &);

/// Registers a kernel by name; a second registration of a name is a bug.
bool registerKernel(std::string_view name, KernelFn fn);
/// The kernel for a name, or nullptr.
KernelFn findKernel(std::string_view name);
/// All registered names, sorted.
std::vector<std::string> kernelNames();

} // namespace shardflow::runtime

/// Registers `fn` under `name` at static-initialization time.
#define SHARDFLOW_REGISTER_KERNEL(name, fn)                                    \
  static const bool shardflowKernelRegistered_##fn =                           \
      ::shardflow::runtime::registerKernel(name, fn)

#endif // SHARDFLOW_RUNTIME_KERNEL_H
