//===- CudaKernelCheck.cpp - run the CUDA kernels against the CPU kernels --===//
//
// A test tool for a machine with an NVIDIA GPU: loads the runtime's
// embedded fatbin through the CUDA driver API, runs every device kernel on
// random inputs over a range of shapes and flags, and compares each result
// with the runtime's CPU kernel (findKernel) on the same inputs. One line
// per case, then `N passed, M failed`; exit status 1 when any failed.
//
//   cuda-kernel-check                  all cases
//   cuda-kernel-check --filter attn    cases whose name contains "attn"
//                                      (attn-grad: the attention backward)
//   cuda-kernel-check --time           attention timing (TFLOP/s)
//   cuda-kernel-check --emulate        all cases without a GPU: the kernels
//                                      compiled as host code (HostEmulation.h)
//   cuda-kernel-check --quick          without the few large cases (a GPU-sized
//                                      attention, a many-block copy), which
//                                      take a third of an emulated run
//
// Tolerances, |gpu - cpu| <= tol * (1 + |cpu|) elementwise: f32 1e-4,
// f16 5e-3, bf16 2e-2 for attention; data movement must match bit for bit.
//
// The driver is opened with dlopen (libcuda.so.1) so that the tool builds
// on machines whose toolkit lacks the libcuda stub; it needs no CUDA
// header either.
//
//===----------------------------------------------------------------------===//

#include "shardflow/Runtime/Device/CUDA/DeviceKernels.h"
#include "shardflow/Runtime/Format/Kernel.h"

#include "DevicePlanner.h"
#ifdef SHARDFLOW_KERNEL_EMULATION
#include "EmulatedKernels.h"
#endif

#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

using namespace shardflow::runtime;
using namespace shardflow::runtime::cuda;

namespace {

//===----------------------------------------------------------------------===//
// The driver API, opened at run time
//===----------------------------------------------------------------------===//

using CUresult = int;
using CUdevice = int;
using CUdeviceptr = unsigned long long;
using CUcontext = struct CUctx_st *;
using CUmodule = struct CUmod_st *;
using CUfunction = struct CUfunc_st *;
using CUstream = struct CUstream_st *;
constexpr int kAttrMaxDynamicShared = 8;  // CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
constexpr int kAttrCcMajor = 75;          // CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR
constexpr int kAttrCcMinor = 76;          // CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR

struct Driver {
  CUresult (*init)(unsigned);
  CUresult (*deviceGet)(CUdevice *, int);
  CUresult (*deviceGetName)(char *, int, CUdevice);
  CUresult (*deviceGetAttribute)(int *, int, CUdevice);
  CUresult (*primaryCtxRetain)(CUcontext *, CUdevice);
  CUresult (*ctxSetCurrent)(CUcontext);
  CUresult (*ctxSynchronize)();
  CUresult (*moduleLoadData)(CUmodule *, const void *);
  CUresult (*moduleGetFunction)(CUfunction *, CUmodule, const char *);
  CUresult (*funcSetAttribute)(CUfunction, int, int);
  CUresult (*memAlloc)(CUdeviceptr *, size_t);
  CUresult (*memFree)(CUdeviceptr);
  CUresult (*memcpyHtoD)(CUdeviceptr, const void *, size_t);
  CUresult (*memcpyDtoH)(void *, CUdeviceptr, size_t);
  CUresult (*memsetD8)(CUdeviceptr, unsigned char, size_t);
  CUresult (*launchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
                           unsigned, unsigned, CUstream, void **, void **);
  CUresult (*getErrorString)(CUresult, const char **);
};

Driver drv;
CUmodule module;
/// --emulate: no driver; "device" memory is host memory and launches run
/// the kernels compiled as host code (HostEmulation.h).
bool emulate = false;

[[noreturn]] void die(const std::string &what) {
  std::fprintf(stderr, "cuda-kernel-check: %s\n", what.c_str());
  std::exit(2);
}

void check(CUresult r, const char *what) {
  if (r == 0)
    return;
  const char *s = nullptr;
  if (drv.getErrorString)
    drv.getErrorString(r, &s);
  throw RuntimeError(std::string(what) + " failed: " + (s ? s : "error " + std::to_string(r)));
}

void openDriver() {
  void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib)
    lib = dlopen("libcuda.so", RTLD_NOW | RTLD_LOCAL);
  if (!lib)
    die("cannot open the CUDA driver (libcuda.so.1): no GPU driver on this machine");
  auto sym = [&](auto &fn, const char *name) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, name));
    if (!fn)
      die(std::string("the CUDA driver lacks ") + name);
  };
  sym(drv.init, "cuInit");
  sym(drv.deviceGet, "cuDeviceGet");
  sym(drv.deviceGetName, "cuDeviceGetName");
  sym(drv.deviceGetAttribute, "cuDeviceGetAttribute");
  sym(drv.primaryCtxRetain, "cuDevicePrimaryCtxRetain");
  sym(drv.ctxSetCurrent, "cuCtxSetCurrent");
  sym(drv.ctxSynchronize, "cuCtxSynchronize");
  sym(drv.moduleLoadData, "cuModuleLoadData");
  sym(drv.moduleGetFunction, "cuModuleGetFunction");
  sym(drv.funcSetAttribute, "cuFuncSetAttribute");
  sym(drv.memAlloc, "cuMemAlloc_v2");
  sym(drv.memFree, "cuMemFree_v2");
  sym(drv.memcpyHtoD, "cuMemcpyHtoD_v2");
  sym(drv.memcpyDtoH, "cuMemcpyDtoH_v2");
  sym(drv.memsetD8, "cuMemsetD8_v2");
  sym(drv.launchKernel, "cuLaunchKernel");
  sym(drv.getErrorString, "cuGetErrorString");
  check(drv.init(0), "cuInit");
  CUdevice dev;
  check(drv.deviceGet(&dev, 0), "cuDeviceGet");
  char name[256] = {};
  drv.deviceGetName(name, sizeof(name), dev);
  int major = 0, minor = 0;
  drv.deviceGetAttribute(&major, kAttrCcMajor, dev);
  drv.deviceGetAttribute(&minor, kAttrCcMinor, dev);
  std::printf("device: %s (sm_%d%d)\n", name, major, minor);
  CUcontext ctx;
  check(drv.primaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
  check(drv.ctxSetCurrent(ctx), "cuCtxSetCurrent");
  if (!deviceKernelsFatbin())
    die("this build embeds no fatbin (nvcc was not found when it was built)");
  check(drv.moduleLoadData(&module, deviceKernelsFatbin()), "cuModuleLoadData");
}

/// The driver calls the cases make, on host memory (--emulate).
void openEmulation() {
  drv.memAlloc = [](CUdeviceptr *p, size_t bytes) -> CUresult {
    *p = CUdeviceptr(reinterpret_cast<uintptr_t>(std::malloc(bytes)));
    return *p ? 0 : 2; // CUDA_ERROR_OUT_OF_MEMORY
  };
  drv.memFree = [](CUdeviceptr p) -> CUresult {
    std::free(reinterpret_cast<void *>(uintptr_t(p)));
    return 0;
  };
  drv.memcpyHtoD = [](CUdeviceptr d, const void *s, size_t n) -> CUresult {
    std::memcpy(reinterpret_cast<void *>(uintptr_t(d)), s, n);
    return 0;
  };
  drv.memcpyDtoH = [](void *d, CUdeviceptr s, size_t n) -> CUresult {
    std::memcpy(d, reinterpret_cast<const void *>(uintptr_t(s)), n);
    return 0;
  };
  drv.memsetD8 = [](CUdeviceptr d, unsigned char v, size_t n) -> CUresult {
    std::memset(reinterpret_cast<void *>(uintptr_t(d)), v, n);
    return 0;
  };
  drv.ctxSynchronize = []() -> CUresult { return 0; };
  std::printf("device: none (--emulate: the kernels run as host code)\n");
}

/// Runs launches as the executor would: one function per launch, the
/// argument struct as the only kernel parameter, the dynamic shared memory
/// limit raised where a launch needs more than the default 48 KiB.
void runLaunches(const std::vector<DeviceLaunch> &launches, bool sync = true) {
#ifdef SHARDFLOW_KERNEL_EMULATION
  if (emulate) {
    for (const DeviceLaunch &l : launches)
      runEmulated(l);
    return;
  }
#endif
  for (const DeviceLaunch &l : launches) {
    CUfunction fn;
    check(drv.moduleGetFunction(&fn, module, l.function.c_str()),
          ("cuModuleGetFunction(" + l.function + ")").c_str());
    if (l.sharedBytes > 48 * 1024)
      check(drv.funcSetAttribute(fn, kAttrMaxDynamicShared, int(l.sharedBytes)),
            "cuFuncSetAttribute(max dynamic shared memory)");
    void *params[] = {const_cast<uint8_t *>(l.argument.data())};
    check(drv.launchKernel(fn, l.grid[0], l.grid[1], l.grid[2], l.block[0], l.block[1],
                           l.block[2], l.sharedBytes, nullptr, params, nullptr),
          ("cuLaunchKernel(" + l.function + ")").c_str());
  }
  if (sync)
    check(drv.ctxSynchronize(), "cuCtxSynchronize");
}

//===----------------------------------------------------------------------===//
// Host tensors
//===----------------------------------------------------------------------===//

float halfToFloat(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000u) << 16, exp = (h >> 10) & 0x1f, mant = h & 0x3ffu;
  float f;
  if (exp == 0) {
    f = std::ldexp(float(mant), -24);
  } else if (exp == 31) {
    f = mant ? NAN : INFINITY;
  } else {
    f = std::ldexp(float(mant | 0x400u), int(exp) - 25);
  }
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  bits |= sign;
  std::memcpy(&f, &bits, 4);
  return f;
}
uint16_t floatToHalf(float f) {
  // Exact enough for test data in [-4, 4]: round to nearest even via the
  // float's bits, no overflow or NaN handling needed.
  uint32_t x;
  std::memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000u, absx = x & 0x7fffffffu;
  if (absx < 0x38800000u)
    return uint16_t(sign | uint32_t(std::nearbyint(std::fabs(f) * 16777216.0f)));
  uint32_t m = absx + 0xfffu + ((absx >> 13) & 1u) - (112u << 23);
  return uint16_t(sign | (m >> 13));
}
float bf16ToFloat(uint16_t b) {
  uint32_t x = uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}
uint16_t floatToBf16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  return uint16_t((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

struct HostTensor {
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape)
      n *= d;
    return n;
  }
  Tensor view() { return Tensor{bytes.data(), dtype, shape}; }
  float get(int64_t i) const {
    switch (dtype) {
    case DType::F32: { float f; std::memcpy(&f, &bytes[size_t(i) * 4], 4); return f; }
    case DType::F16: { uint16_t h; std::memcpy(&h, &bytes[size_t(i) * 2], 2); return halfToFloat(h); }
    case DType::BF16: { uint16_t h; std::memcpy(&h, &bytes[size_t(i) * 2], 2); return bf16ToFloat(h); }
    default: return 0;
    }
  }
  void set(int64_t i, float v) {
    switch (dtype) {
    case DType::F32: std::memcpy(&bytes[size_t(i) * 4], &v, 4); break;
    case DType::F16: { uint16_t h = floatToHalf(v); std::memcpy(&bytes[size_t(i) * 2], &h, 2); break; }
    case DType::BF16: { uint16_t h = floatToBf16(v); std::memcpy(&bytes[size_t(i) * 2], &h, 2); break; }
    default: break;
    }
  }
};

std::mt19937_64 rng(1234);

HostTensor make(DType t, std::vector<int64_t> shape) {
  HostTensor h;
  h.dtype = t;
  h.shape = std::move(shape);
  h.bytes.assign(size_t(h.numel()) * dtypeSize(t), 0);
  return h;
}

HostTensor randomFloat(DType t, std::vector<int64_t> shape, float lo = -1, float hi = 1) {
  HostTensor h = make(t, std::move(shape));
  std::uniform_real_distribution<float> u(lo, hi);
  for (int64_t i = 0; i < h.numel(); ++i)
    h.set(i, u(rng));
  return h;
}

/// Random bytes (any element type; i1 gets 0/1; floats get finite values).
HostTensor randomAny(DType t, std::vector<int64_t> shape) {
  if (t == DType::F32 || t == DType::F16 || t == DType::BF16)
    return randomFloat(t, std::move(shape), -8, 8);
  HostTensor h = make(t, std::move(shape));
  for (auto &b : h.bytes)
    b = uint8_t(rng());
  if (t == DType::I1)
    for (auto &b : h.bytes)
      b &= 1;
  if (t == DType::F64)
    for (int64_t i = 0; i < h.numel(); ++i) {
      double d = double(int64_t(rng() % 2001) - 1000) / 7;
      std::memcpy(&h.bytes[size_t(i) * 8], &d, 8);
    }
  return h;
}

/// A device copy of a host tensor, `offset` bytes into its allocation (to
/// exercise the device-kernel planner's alignment checks).
struct DeviceBuffer {
  CUdeviceptr base = 0;
  size_t offset = 0;
  DeviceBuffer(size_t bytes, size_t off = 0) : offset(off) {
    check(drv.memAlloc(&base, std::max<size_t>(bytes + off, 1)), "cuMemAlloc");
    // Garbage, not zeros: a kernel that skips an element is caught.
    check(drv.memsetD8(base, 0xa5, bytes + off), "cuMemsetD8");
  }
  ~DeviceBuffer() { drv.memFree(base); }
  DeviceBuffer(const DeviceBuffer &) = delete;
  DeviceBuffer &operator=(const DeviceBuffer &) = delete;
  void *ptr() const { return reinterpret_cast<void *>(base + offset); }
};

//===----------------------------------------------------------------------===//
// Cases
//===----------------------------------------------------------------------===//

struct Case {
  std::string name;
  std::string kernel;
  std::vector<HostTensor> inputs;
  std::vector<HostTensor> outputs; // shapes and types; contents are computed
  Params params;
  double tol = 0;   // 0: bitwise
  AttentionPath path = AttentionPath::Auto;
  int rank = 0;     // local_slice, a vocabulary-parallel gather
  size_t misalign = 0; // byte offset of the first output on the device
  // Attention on one fused [B, S, W] input (packed_qkv, the query's, key's
  // and value's widths): the device reads it three times, the CPU kernel
  // gets the three column blocks as tensors of their own.
  std::vector<int64_t> packed;
  // The outputs the CPU kernel writes and the check compares (0: all):
  // attention_grad's workspace is the device's alone.
  size_t compared = 0;
  bool large = false; // skipped under --quick
};

/// Columns [from, from + width) of a [B, S, W] tensor, as a tensor.
HostTensor columns(const HostTensor &t, int64_t from, int64_t width) {
  HostTensor out{t.dtype, {t.shape[0], t.shape[1], width}, {}};
  size_t es = dtypeSize(t.dtype);
  int64_t rows = t.shape[0] * t.shape[1], w = t.shape[2];
  out.bytes.resize(size_t(rows * width) * es);
  for (int64_t r = 0; r < rows; ++r)
    std::memcpy(&out.bytes[size_t(r * width) * es], &t.bytes[size_t(r * w + from) * es],
                size_t(width) * es);
  return out;
}

int passed = 0, failed = 0;

void runCase(Case &c) {
  std::string verdict;
  try {
    // CPU reference.
    std::vector<HostTensor> expected = c.outputs;
    std::vector<Tensor> ins, outs;
    std::vector<HostTensor> pieces; // packed: the CPU kernel's query, key, value
    if (!c.packed.empty()) {
      pieces.push_back(columns(c.inputs[0], 0, c.packed[0]));
      pieces.push_back(columns(c.inputs[0], c.packed[0], c.packed[1]));
      pieces.push_back(columns(c.inputs[0], c.packed[0] + c.packed[1], c.packed[2]));
    }
    for (HostTensor &t : c.packed.empty() ? c.inputs : pieces)
      ins.push_back(t.view());
    size_t compared = c.compared ? c.compared : expected.size();
    for (size_t o = 0; o < compared; ++o)
      outs.push_back(expected[o].view());
    if (c.kernel == "local_slice") {
      // The executor implements local_slice itself: slice the block here.
      HostTensor &in = c.inputs[0], &out = expected[0];
      std::vector<int64_t> all = c.params.getInts("starts");
      size_t dims = in.shape.size(), es = dtypeSize(in.dtype);
      const int64_t *start = all.data() + size_t(c.rank) * dims;
      for (int64_t i = 0; i < out.numel(); ++i) {
        int64_t rest = i, off = 0, stride = 1;
        for (size_t d = dims; d-- > 0;) {
          int64_t idx = rest % out.shape[d] + start[d];
          rest /= out.shape[d];
          off += idx * stride;
          stride *= in.shape[d];
        }
        std::memcpy(&out.bytes[size_t(i) * es], &in.bytes[size_t(off) * es], es);
      }
    } else {
      KernelFn fn = findKernel(c.kernel);
      if (!fn)
        throw RuntimeError("no CPU kernel " + c.kernel);
      KernelContext ctx{c.kernel, ins, outs, c.params, 1, c.rank};
      fn(ctx);
    }

    // GPU.
    std::vector<std::unique_ptr<DeviceBuffer>> dIn, dOut;
    std::vector<Tensor> dins, douts;
    for (HostTensor &t : c.inputs) {
      dIn.push_back(std::make_unique<DeviceBuffer>(t.bytes.size()));
      check(drv.memcpyHtoD(dIn.back()->base, t.bytes.data(), t.bytes.size()), "cuMemcpyHtoD");
      dins.push_back(Tensor{dIn.back()->ptr(), t.dtype, t.shape});
    }
    Params deviceParams = c.params;
    if (!c.packed.empty()) {
      dins.assign(3, dins.front());
      deviceParams.set("packed_qkv", c.packed);
    }
    for (size_t o = 0; o < c.outputs.size(); ++o) {
      HostTensor &t = c.outputs[o];
      dOut.push_back(std::make_unique<DeviceBuffer>(t.bytes.size(), o == 0 ? c.misalign : 0));
      douts.push_back(Tensor{dOut.back()->ptr(), t.dtype, t.shape});
    }
    std::vector<DeviceLaunch> launches =
        c.kernel == "attention" ? planAttention(c.kernel, dins, douts, deviceParams, c.path)
                                : planDeviceKernel(c.kernel, dins, douts, c.params, c.rank);
    runLaunches(launches);

    double worst = 0;
    int64_t bad = -1;
    size_t badOut = 0;
    std::vector<HostTensor> got = c.outputs;
    for (size_t o = 0; o < compared; ++o) {
      if (!got[o].bytes.empty())
        check(drv.memcpyDtoH(got[o].bytes.data(), dOut[o]->base + dOut[o]->offset,
                             got[o].bytes.size()),
              "cuMemcpyDtoH");
      const HostTensor &want = expected[o];
      if (c.tol == 0) {
        size_t es = dtypeSize(want.dtype);
        for (int64_t i = 0; i < want.numel() && bad < 0; ++i)
          if (std::memcmp(&got[o].bytes[size_t(i) * es], &want.bytes[size_t(i) * es], es))
            bad = i, badOut = o;
        continue;
      }
      for (int64_t i = 0; i < want.numel(); ++i) {
        double g = got[o].get(i), w = want.get(i);
        // Equal infinities (the log-sum-exp of a fully masked row) match.
        double err = g == w ? 0 : std::fabs(g - w) / (1 + std::fabs(w));
        if (std::isnan(err))
          err = INFINITY;
        if (!(err <= c.tol) && bad < 0)
          bad = i, badOut = o;
        worst = std::max(worst, err);
      }
    }
    std::string fns;
    for (const DeviceLaunch &l : launches)
      fns += (fns.empty() ? "" : ",") + l.function;
    char buf[256];
    if (bad >= 0 && c.tol == 0) {
      std::snprintf(buf, sizeof buf, "FAIL  output %zu element %lld differs", badOut,
                    (long long)bad);
    } else if (bad >= 0) {
      std::snprintf(buf, sizeof buf, "FAIL  output %zu element %lld: gpu %g cpu %g (worst %.3g)",
                    badOut, (long long)bad, double(got[badOut].get(bad)),
                    double(expected[badOut].get(bad)), worst);
    } else if (c.tol) {
      std::snprintf(buf, sizeof buf, "ok    (worst %.2g)", worst);
    } else {
      std::snprintf(buf, sizeof buf, "ok");
    }
    verdict = std::string(buf) + " [" + (fns.empty() ? "no launch" : fns) + "]";
    ++(bad >= 0 ? failed : passed);
  } catch (const std::exception &e) {
    verdict = std::string("FAIL  ") + e.what();
    ++failed;
  }
  std::printf("%-64s %s\n", c.name.c_str(), verdict.c_str());
  std::fflush(stdout);
}

double tolFor(DType t) { return t == DType::F32 ? 1e-4 : t == DType::F16 ? 5e-3 : 2e-2; }

struct AttnSpec {
  DType t = DType::F32;
  int64_t B = 2, Hq = 4, Hkv = 4, Sq = 64, Skv = 64, D = 64, Dv = -1;
  bool causal = false, threeD = false;
  bool packed = false; // 3-D, Sq = Skv: query, key and value in one buffer
  double softcap = 0, scale = 0; // 0: default
  std::string mask; // "", "bool", "float", "boolhead", "float2d", "boolrow", "floatkeys"
  AttentionPath path = AttentionPath::Auto;
  bool lse = false; // also the log-sum-exp output, [B, Hq, Sq] f32
};

Case attentionCase(const AttnSpec &s) {
  Case c;
  c.kernel = "attention";
  int64_t Dv = s.Dv < 0 ? s.D : s.Dv;
  char buf[256];
  std::snprintf(buf, sizeof buf, "attn %s B%lld Hq%lld Hkv%lld Sq%lld Skv%lld D%lld Dv%lld%s%s%s%s%s%s%s",
                dtypeName(s.t), (long long)s.B, (long long)s.Hq, (long long)s.Hkv,
                (long long)s.Sq, (long long)s.Skv, (long long)s.D, (long long)Dv,
                s.causal ? " causal" : "", s.packed ? " packed" : s.threeD ? " 3d" : "",
                s.softcap > 0 ? " softcap" : "", s.scale > 0 ? " scale" : "",
                s.mask.empty() ? "" : (" mask=" + s.mask).c_str(),
                s.path == AttentionPath::Simt   ? " simt"
                : s.path == AttentionPath::Mma  ? " mma"
                : s.path == AttentionPath::Mma2 ? " mma2"
                                                : "",
                s.lse ? " lse" : "");
  c.name = buf;
  if (s.packed) {
    int64_t wq = s.Hq * s.D, wk = s.Hkv * s.D, wv = s.Hkv * Dv;
    c.inputs.push_back(randomFloat(s.t, {s.B, s.Sq, wq + wk + wv}));
    c.outputs.push_back(make(s.t, {s.B, s.Sq, s.Hq * Dv}));
    c.params.set("q_num_heads", s.Hq);
    c.params.set("kv_num_heads", s.Hkv);
    c.packed = {wq, wk, wv};
  } else if (s.threeD) {
    c.inputs.push_back(randomFloat(s.t, {s.B, s.Sq, s.Hq * s.D}));
    c.inputs.push_back(randomFloat(s.t, {s.B, s.Skv, s.Hkv * s.D}));
    c.inputs.push_back(randomFloat(s.t, {s.B, s.Skv, s.Hkv * Dv}));
    c.outputs.push_back(make(s.t, {s.B, s.Sq, s.Hq * Dv}));
    c.params.set("q_num_heads", s.Hq);
    c.params.set("kv_num_heads", s.Hkv);
  } else {
    c.inputs.push_back(randomFloat(s.t, {s.B, s.Hq, s.Sq, s.D}));
    c.inputs.push_back(randomFloat(s.t, {s.B, s.Hkv, s.Skv, s.D}));
    c.inputs.push_back(randomFloat(s.t, {s.B, s.Hkv, s.Skv, Dv}));
    c.outputs.push_back(make(s.t, {s.B, s.Hq, s.Sq, Dv}));
  }
  if (s.mask == "bool" || s.mask == "boolhead" || s.mask == "boolrow") {
    // [Sq, Skv] (or [1, Hq, 1, Skv], or [Sq, 1]: one flag for all of a
    // row's keys) with about a third masked, and every fourth query row
    // fully masked (its output must be zeros).
    std::vector<int64_t> shape = s.mask == "bool"       ? std::vector<int64_t>{s.Sq, s.Skv}
                                 : s.mask == "boolhead" ? std::vector<int64_t>{1, s.Hq, 1, s.Skv}
                                                        : std::vector<int64_t>{s.Sq, 1};
    HostTensor m = make(DType::I1, shape);
    for (int64_t i = 0; i < m.numel(); ++i) {
      int64_t row = s.mask == "bool" ? i / s.Skv : s.mask == "boolrow" ? i : -1;
      m.bytes[size_t(i)] = (row >= 0 && row % 4 == 3) ? 0 : (rng() % 3 != 0);
    }
    c.inputs.push_back(std::move(m));
  } else if (s.mask == "float" || s.mask == "float2d" || s.mask == "floatkeys") {
    // floatkeys: [B, 1, 1, Skv], a padding mask over the keys.
    std::vector<int64_t> shape = s.mask == "float"      ? std::vector<int64_t>{s.B, 1, s.Sq, s.Skv}
                                 : s.mask == "floatkeys" ? std::vector<int64_t>{s.B, 1, 1, s.Skv}
                                                        : std::vector<int64_t>{s.Sq, s.Skv};
    HostTensor m = randomFloat(s.t, shape, -2, 2);
    for (int64_t i = 0; i < m.numel(); ++i)
      if (rng() % 4 == 0)
        m.set(i, -INFINITY);
    c.inputs.push_back(std::move(m));
  }
  if (s.causal)
    c.params.set("is_causal", int64_t(1));
  if (s.softcap > 0)
    c.params.set("softcap", s.softcap);
  if (s.scale > 0)
    c.params.set("scale", s.scale);
  if (s.lse)
    c.outputs.push_back(make(DType::F32, {s.B, s.Hq, s.Sq}));
  c.tol = tolFor(s.t);
  c.path = s.path;
  return c;
}

std::vector<Case> attentionCases() {
  std::vector<Case> cases;
  auto add = [&](AttnSpec s) { cases.push_back(attentionCase(s)); };
  for (DType t : {DType::F32, DType::F16, DType::BF16})
    for (int64_t D : {64, 128})
      for (bool causal : {false, true}) {
        AttnSpec s;
        s.t = t, s.D = D, s.causal = causal, s.Sq = 200, s.Skv = 200;
        add(s);
        if (t != DType::F32) {
          s.path = AttentionPath::Simt;
          add(s);
        }
      }
  for (DType t : {DType::F32, DType::BF16}) {
    AttnSpec s;
    s.t = t;
    // Grouped-query attention, Sq != Skv both ways, causal and not.
    for (bool causal : {false, true}) {
      s.causal = causal;
      s.Hq = 8, s.Hkv = 2, s.Sq = 100, s.Skv = 300;
      add(s);
      s.Sq = 300, s.Skv = 100;
      add(s);
      s.Sq = 1, s.Skv = 77;
      add(s);
      s.Sq = 130, s.Skv = 1;
      add(s);
    }
    s = AttnSpec{};
    s.t = t;
    for (const char *m : {"bool", "float", "boolhead", "float2d", "boolrow", "floatkeys"}) {
      s.mask = m, s.Sq = 96, s.Skv = 160;
      s.causal = false;
      add(s);
      s.causal = true;
      add(s);
    }
    // An odd number of keys: the tensor-core kernel reads the mask a key
    // at a time, not in pairs.
    for (const char *m : {"bool", "float"}) {
      s.mask = m, s.Sq = 96, s.Skv = 161, s.causal = false;
      add(s);
    }
    s = AttnSpec{};
    s.t = t;
    s.softcap = 5, s.scale = 0.5, s.Sq = 128, s.Skv = 192;
    add(s);
    s.causal = true;
    s.mask = "float";
    add(s);
    s = AttnSpec{};
    s.t = t;
    s.threeD = true, s.Hq = 6, s.Hkv = 3, s.Sq = 70, s.Skv = 90, s.D = 64;
    add(s);
    s.causal = true;
    add(s);
    // Query, key and value as column blocks of one buffer (a fused QKV
    // projection's result read in place): rows W = 768 apart.
    s = AttnSpec{};
    s.t = t, s.packed = true, s.Hq = 6, s.Hkv = 3, s.Sq = s.Skv = 70, s.D = 64;
    add(s);
    s.causal = true;
    add(s);
    if (t == DType::BF16) {
      s.Hq = s.Hkv = 4, s.Sq = s.Skv = 200, s.path = AttentionPath::Mma2;
      add(s);
    }
    // Head sizes the tensor-core kernel does not take.
    for (auto [D, Dv] : {std::pair<int64_t, int64_t>{32, 32}, {96, 96}, {64, 128}, {128, 64},
                         {256, 256}, {40, 72}}) {
      s = AttnSpec{};
      s.t = t, s.D = D, s.Dv = Dv, s.Sq = 80, s.Skv = 150, s.causal = D == 64;
      add(s);
    }
  }
  // Tensor-core path with masks and GQA on f16.
  {
    AttnSpec s;
    s.t = DType::F16, s.Hq = 8, s.Hkv = 2, s.Sq = 333, s.Skv = 257, s.D = 128;
    s.causal = true, s.mask = "bool", s.path = AttentionPath::Mma;
    add(s);
    cases.back().large = true;
    s.mask = "float", s.softcap = 3;
    add(s);
    cases.back().large = true;
    // The same paths on a shape --quick keeps.
    s.Sq = 97, s.Skv = 129;
    add(s);
    s.mask = "bool", s.softcap = 0;
    add(s);
    s.t = DType::BF16, s.D = 64, s.mask = "", s.softcap = 0, s.Sq = 1024, s.Skv = 1024;
    add(s);
    cases.back().large = true;
  }
  // Two query tiles per warp (D = 64): ragged and exact row counts, causal
  // and not, GQA, masks with fully masked rows, softcap, 3-D, Sq != Skv.
  for (DType t : {DType::F16, DType::BF16}) {
    AttnSpec s;
    s.t = t, s.path = AttentionPath::Mma2;
    for (auto [sq, skv] : {std::pair<int64_t, int64_t>{200, 200}, {256, 256}, {1, 77},
                           {130, 1}, {100, 300}, {300, 100}})
      for (bool causal : {false, true}) {
        s.Sq = sq, s.Skv = skv, s.causal = causal;
        s.Hq = 8, s.Hkv = 2;
        add(s);
      }
    s = AttnSpec{};
    s.t = t, s.path = AttentionPath::Mma2;
    for (const char *m : {"bool", "float"}) {
      s.mask = m, s.Sq = 150, s.Skv = 160, s.causal = true, s.softcap = 3;
      add(s);
      s.Skv = 161, s.causal = false, s.softcap = 0;
      add(s);
    }
    s.mask = "boolrow", s.Skv = 160;
    add(s);
    s = AttnSpec{};
    s.t = t, s.path = AttentionPath::Mma2;
    s.threeD = true, s.Hq = 6, s.Hkv = 3, s.Sq = 170, s.Skv = 90, s.causal = true;
    add(s);
  }
  // The log-sum-exp a training step's forward saves for its backward, on
  // every kernel (SIMT, tensor cores, two tiles; general and plain), with
  // fully masked rows (-inf).
  {
    AttnSpec s;
    s.lse = true, s.Sq = 96, s.Skv = 160, s.causal = true, s.mask = "bool";
    add(s); // f32, SIMT
    s.t = DType::F16, s.path = AttentionPath::Simt;
    add(s);
    s.path = AttentionPath::Mma, s.D = 128;
    add(s);
    s.t = DType::BF16, s.path = AttentionPath::Mma2, s.D = 64, s.mask = "float", s.softcap = 3;
    add(s);
    s.mask = "", s.softcap = 0;
    add(s); // plain
    s.path = AttentionPath::Mma;
    add(s); // plain, one tile
    s = AttnSpec{};
    s.lse = true, s.t = DType::BF16, s.threeD = true, s.Hq = 6, s.Hkv = 3, s.Sq = 70, s.Skv = 90;
    add(s);
  }
  return cases;
}

/// attention_grad of the attention case `s`: a random cotangent of its
/// result, the forward's log-sum-exp as the CPU kernel computes it, the
/// cotangents of query, key and value compared, and the device's workspace
/// (B x Hq x Sq floats).
Case attentionGradCase(AttnSpec s) {
  s.lse = true;
  Case c = attentionCase(s);
  c.name = "attn-grad" + c.name.substr(4, c.name.size() - 4 - 4); // without " lse"
  c.kernel = "attention_grad";
  {
    std::vector<Tensor> ins, outs;
    for (HostTensor &t : c.inputs)
      ins.push_back(t.view());
    for (HostTensor &t : c.outputs)
      outs.push_back(t.view());
    KernelContext ctx{"attention", ins, outs, c.params, 1, 0};
    findKernel("attention")(ctx);
  }
  HostTensor lse = c.outputs[1];
  c.inputs.insert(c.inputs.begin() + 3, {randomFloat(s.t, c.outputs[0].shape), lse});
  c.outputs.clear();
  for (int i = 0; i < 3; ++i)
    c.outputs.push_back(make(s.t, c.inputs[size_t(i)].shape));
  c.outputs.push_back(make(DType::F32, {s.B * s.Hq * s.Sq}));
  c.compared = 3;
  // Sums over every key (dQ) or every query row (dK, dV): the f32
  // tolerance a little above the forward's.
  c.tol = s.t == DType::F32 ? 2e-4 : tolFor(s.t);
  return c;
}

std::vector<Case> attentionGradCases() {
  // Small: a warp's every dot product is a shuffle reduction, which the
  // emulation runs as fiber switches.
  std::vector<Case> cases;
  auto add = [&](AttnSpec s) { cases.push_back(attentionGradCase(s)); };
  AttnSpec s;
  s.B = 1, s.Hq = s.Hkv = 2, s.Sq = s.Skv = 24;
  add(s); // plain, 4-D
  s.causal = true, s.Hq = 4, s.Hkv = 2, s.Sq = s.Skv = 33;
  add(s); // grouped-query, causal
  s = AttnSpec{};
  s.B = 1, s.threeD = true, s.Hq = 4, s.Hkv = 2, s.Sq = 20, s.Skv = 31, s.D = 32, s.Dv = 48;
  add(s); // 3-D, Sq != Skv, Dv != D
  s = AttnSpec{};
  s.B = 1, s.Hq = s.Hkv = 2, s.mask = "bool", s.Sq = 16, s.Skv = 24, s.softcap = 3;
  add(s); // fully masked rows, softcap
  s.mask = "float", s.softcap = 0, s.scale = 0.3, s.causal = true;
  add(s);
  s = AttnSpec{};
  s.B = 1, s.D = 256, s.Sq = 8, s.Skv = 12, s.Hq = s.Hkv = 1;
  add(s); // the largest head size: 8 elements a lane
  for (DType t : {DType::F16, DType::BF16}) {
    s = AttnSpec{};
    s.t = t, s.B = 1, s.Hq = s.Hkv = 2, s.causal = true, s.Sq = s.Skv = 24;
    add(s);
  }
  return cases;
}

Case copyCase(std::string name, std::string kernel, std::vector<HostTensor> ins,
              std::vector<HostTensor> outs, Params p = {}) {
  Case c;
  c.name = std::move(name);
  c.kernel = std::move(kernel);
  c.inputs = std::move(ins);
  c.outputs = std::move(outs);
  c.params = std::move(p);
  return c;
}

std::vector<Case> dataMovementCases() {
  std::vector<Case> cases;
  const DType types[] = {DType::F32, DType::F16, DType::BF16, DType::I64, DType::I32,
                         DType::I8,  DType::I1,  DType::F64,  DType::U16};
  for (DType t : types) {
    std::string tn = dtypeName(t);
    {
      Params p;
      p.set("perm", std::vector<int64_t>{0, 2, 1, 3});
      cases.push_back(copyCase("transpose " + tn + " 2x12x64x32 perm 0,2,1,3", "transpose",
                               {randomAny(t, {2, 12, 64, 32})}, {make(t, {2, 64, 12, 32})}, p));
    }
    {
      Params p;
      p.set("perm", std::vector<int64_t>{2, 0, 1});
      cases.push_back(copyCase("transpose " + tn + " 33x17x5 perm 2,0,1", "transpose",
                               {randomAny(t, {33, 17, 5})}, {make(t, {5, 33, 17})}, p));
    }
    {
      Params p;
      p.set("starts", std::vector<int64_t>{1, -50});
      p.set("ends", std::vector<int64_t>{9, 1000});
      p.set("axes", std::vector<int64_t>{0, 2});
      p.set("steps", std::vector<int64_t>{2, 1});
      cases.push_back(copyCase("slice " + tn + " 10x3x64 steps 2,1", "slice",
                               {randomAny(t, {10, 3, 64})}, {make(t, {4, 3, 50})}, p));
    }
    {
      Params p;
      p.set("starts", std::vector<int64_t>{-1});
      p.set("ends", std::vector<int64_t>{-1000});
      p.set("axes", std::vector<int64_t>{-1});
      p.set("steps", std::vector<int64_t>{-3});
      cases.push_back(copyCase("slice " + tn + " 7x20 backwards step -3", "slice",
                               {randomAny(t, {7, 20})}, {make(t, {7, 7})}, p));
    }
    {
      Params p;
      p.set("axis", int64_t(1));
      cases.push_back(copyCase("concat " + tn + " axis 1 of 3", "concat",
                               {randomAny(t, {4, 3, 16}), randomAny(t, {4, 5, 16}),
                                randomAny(t, {4, 1, 16})},
                               {make(t, {4, 9, 16})}, p));
      Params q;
      q.set("axis", int64_t(-1));
      cases.push_back(copyCase("concat " + tn + " axis -1", "concat",
                               {randomAny(t, {6, 7}), randomAny(t, {6, 9})},
                               {make(t, {6, 16})}, q));
    }
    {
      Params p;
      p.set("axis", int64_t(2));
      p.set("sizes", std::vector<int64_t>{64, 64, 128});
      cases.push_back(copyCase("split " + tn + " axis 2 64,64,128", "split",
                               {randomAny(t, {2, 10, 256})},
                               {make(t, {2, 10, 64}), make(t, {2, 10, 64}), make(t, {2, 10, 128})},
                               p));
    }
    cases.push_back(copyCase("expand " + tn + " 3x1x5 -> 2x3x4x5", "expand",
                             {randomAny(t, {3, 1, 5})}, {make(t, {2, 3, 4, 5})}));
    cases.push_back(copyCase("expand " + tn + " scalar -> 7x9", "expand", {randomAny(t, {})},
                             {make(t, {7, 9})}));
    for (DType it : {DType::I32, DType::I64}) {
      HostTensor idx = make(it, {3, 2});
      int64_t vals[] = {0, -1, 5, -7, 3, 6};
      for (int i = 0; i < 6; ++i) {
        if (it == DType::I32) {
          int32_t v = int32_t(vals[i]);
          std::memcpy(&idx.bytes[size_t(i) * 4], &v, 4);
        } else {
          std::memcpy(&idx.bytes[size_t(i) * 8], &vals[i], 8);
        }
      }
      Params p;
      p.set("axis", int64_t(1));
      cases.push_back(copyCase("gather " + tn + " axis 1 " + dtypeName(it) + " indices", "gather",
                               {randomAny(t, {4, 7, 24}), idx}, {make(t, {4, 3, 2, 24})}, p));
      Params q;
      q.set("axis", int64_t(0));
      cases.push_back(copyCase("gather " + tn + " embedding rows " + dtypeName(it), "gather",
                               {randomAny(t, {7, 128}), idx}, {make(t, {3, 2, 128})}, q));
      // A vocabulary-parallel table of 13 rows padded to 14: rank 1 of 2
      // holds rows 7..12 and a zero row; of the global indices above only
      // -1 (row 12) is its own, the others read as zeros.
      Params v = q;
      v.set("axis_size", int64_t(13));
      v.set("axis_starts", std::vector<int64_t>{0, 7});
      Case block = copyCase("gather " + tn + " vocabulary block of rank 1 " + dtypeName(it),
                            "gather", {randomAny(t, {7, 128}), idx}, {make(t, {3, 2, 128})}, v);
      block.rank = 1;
      cases.push_back(std::move(block));
    }
    for (const char *mode : {"constant", "edge", "reflect", "wrap"}) {
      Params p;
      p.set("pads", std::vector<int64_t>{1, 0, 3, 2, 0, 4});
      p.set("mode", std::string(mode));
      p.set("value", 1.5);
      cases.push_back(copyCase("pad " + tn + " " + mode + " 5x3x7", "pad",
                               {randomAny(t, {5, 3, 7})}, {make(t, {8, 3, 14})}, p));
    }
    {
      Params p;
      p.set("pads", std::vector<int64_t>{-1, 2, 0, 3});
      cases.push_back(copyCase("pad " + tn + " constant negative pads", "pad",
                               {randomAny(t, {6, 5})}, {make(t, {5, 10})}, p));
    }
    {
      Params p;
      // Two ranks split dimension 1 of 4x8x6; rank 1 takes columns 4..7.
      p.set("starts", std::vector<int64_t>{0, 0, 0, 0, 4, 0});
      Case c = copyCase("local_slice " + tn + " rank 1 of 2", "local_slice",
                        {randomAny(t, {4, 8, 6})}, {make(t, {4, 4, 6})}, p);
      c.rank = 1;
      cases.push_back(std::move(c));
    }
  }
  // Misaligned output: the device-kernel planner must not widen elements.
  {
    Params p;
    p.set("perm", std::vector<int64_t>{1, 0});
    Case c = copyCase("transpose f16 misaligned output", "transpose",
                      {randomAny(DType::F16, {64, 64})}, {make(DType::F16, {64, 64})}, p);
    c.misalign = 2;
    cases.push_back(std::move(c));
    Params q;
    q.set("axis", int64_t(0));
    Case d = copyCase("concat f16 misaligned output", "concat",
                      {randomAny(DType::F16, {3, 64}), randomAny(DType::F16, {5, 64})},
                      {make(DType::F16, {8, 64})}, q);
    d.misalign = 6;
    cases.push_back(std::move(d));
  }
  // A large copy: 64-bit index arithmetic is not needed, but many blocks are.
  {
    Params p;
    p.set("perm", std::vector<int64_t>{1, 0, 2});
    cases.push_back(copyCase("transpose bf16 2048x1024x64", "transpose",
                             {randomAny(DType::BF16, {2048, 1024, 64})},
                             {make(DType::BF16, {1024, 2048, 64})}, p));
    cases.back().large = true;
  }
  return cases;
}

//===----------------------------------------------------------------------===//
// Timing
//===----------------------------------------------------------------------===//

/// The attention shapes --time runs (bf16): GPT-2 small's, and the Llama
/// bench's (2048 wide, 16 heads of 128).
struct AttentionShape {
  int64_t B, H, S, D;
};
constexpr AttentionShape kGpt2Attention{8, 12, 1024, 64}, kLlamaAttention{8, 16, 512, 128};

/// Times the attention kernel `path` plans for `shape`; with `general`, the
/// same launch on the tensor-core kernel that has the general score rule
/// (masks, softcaps) instead of the `_plain` one the device-kernel planner picks: what
/// the split buys; with `padding`, with a BERT-style bool padding mask
/// [B, 1, 1, S] (each sequence's last eighth of keys masked), which the
/// general kernel reads two keys at a time.
void timeAttention(AttentionPath path, bool causal, bool general = false,
                   AttentionShape shape = kGpt2Attention, bool padding = false) {
  const int64_t B = shape.B, H = shape.H, S = shape.S, D = shape.D;
  const DType t = DType::BF16;
  size_t bytes = size_t(B * H * S * D) * 2;
  DeviceBuffer q(bytes), k(bytes), v(bytes), y(bytes);
  // Random contents: uniform bytes make NaNs, so copy real values up.
  HostTensor host = randomFloat(t, {B, H, S, D});
  for (DeviceBuffer *b : {&q, &k, &v})
    check(drv.memcpyHtoD(b->base, host.bytes.data(), bytes), "cuMemcpyHtoD");
  std::vector<Tensor> ins = {{q.ptr(), t, {B, H, S, D}}, {k.ptr(), t, {B, H, S, D}},
                             {v.ptr(), t, {B, H, S, D}}};
  std::vector<Tensor> outs = {{y.ptr(), t, {B, H, S, D}}};
  std::optional<DeviceBuffer> mask;
  if (padding) {
    std::vector<uint8_t> keep(size_t(B * S));
    for (int64_t i = 0; i < B * S; ++i)
      keep[size_t(i)] = i % S < S - S / 8;
    mask.emplace(keep.size());
    check(drv.memcpyHtoD(mask->base, keep.data(), keep.size()), "cuMemcpyHtoD");
    ins.push_back({mask->ptr(), DType::I1, {B, 1, 1, S}});
  }
  Params p;
  if (causal)
    p.set("is_causal", int64_t(1));
  std::vector<DeviceLaunch> launches = planAttention("attention", ins, outs, p, path);
  if (general && !padding) {
    std::string &f = launches[0].function;
    if (f.size() < 6 || f.compare(f.size() - 6, 6, "_plain") != 0)
      throw RuntimeError("expected a _plain kernel, got " + f);
    f.resize(f.size() - 6);
  }
  for (int i = 0; i < 3; ++i)
    runLaunches(launches);
  const int iters = 20;
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i)
    runLaunches(launches, /*sync=*/false);
  check(drv.ctxSynchronize(), "cuCtxSynchronize");
  double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / iters;
  // Two GEMMs of 2 * S * S * D flops per (batch, head); causal does half.
  double flops = 4.0 * double(B * H) * double(S) * double(S) * double(D) * (causal ? 0.5 : 1.0);
  std::printf("attention bf16 B=%lld H=%lld S=%lld D=%lld %-10s %-7s %8.3f ms  %7.2f TFLOP/s\n",
              (long long)B, (long long)H, (long long)S, (long long)D,
              causal ? "causal" : "non-causal",
              padding   ? (path == AttentionPath::Mma2 ? "mma2-pad" : "mma-pad")
              : general ? (path == AttentionPath::Mma2 ? "mma2-gen" : "mma-gen")
              : launches[0].function.find("mma2") != std::string::npos ? "mma2"
              : launches[0].function.find("mma") != std::string::npos  ? "mma"
                                                                       : "simt",
              secs * 1e3, flops / secs / 1e12);
}

} // namespace

int main(int argc, char **argv) {
  std::string filter;
  bool timing = false, quick = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--time")
      timing = true;
    else if (a == "--emulate")
      emulate = true;
    else if (a == "--quick")
      quick = true;
    else if (a == "--filter" && i + 1 < argc)
      filter = argv[++i];
    else {
      std::fprintf(stderr, "usage: cuda-kernel-check [--filter TEXT] [--quick] [--time | --emulate]\n");
      return 2;
    }
  }
  if (emulate) {
#ifndef SHARDFLOW_KERNEL_EMULATION
    die("this build has no kernel emulation (it needs the CUDA toolkit's headers)");
#endif
    if (timing)
      die("--time measures a GPU: not with --emulate");
    openEmulation();
  } else {
    openDriver();
  }
  if (timing) {
    try {
      for (bool causal : {true, false}) {
        timeAttention(AttentionPath::Auto, causal);
        timeAttention(AttentionPath::Auto, causal, /*general=*/true);
        timeAttention(AttentionPath::Mma2, causal);
        timeAttention(AttentionPath::Mma2, causal, /*general=*/true);
        timeAttention(AttentionPath::Simt, causal);
      }
      timeAttention(AttentionPath::Auto, true, false, kLlamaAttention);
      timeAttention(AttentionPath::Auto, true, true, kLlamaAttention);
      // BERT-style: non-causal with a padding mask.
      timeAttention(AttentionPath::Auto, false, true, kGpt2Attention, /*padding=*/true);
      timeAttention(AttentionPath::Mma2, false, true, kGpt2Attention, /*padding=*/true);
    } catch (const std::exception &e) {
      std::printf("timing failed: %s\n", e.what());
      return 1;
    }
    return 0;
  }
  std::vector<Case> cases = attentionCases();
  for (Case &c : attentionGradCases())
    cases.push_back(std::move(c));
  for (Case &c : dataMovementCases())
    cases.push_back(std::move(c));
  int skipped = 0;
  for (Case &c : cases) {
    if (!filter.empty() && c.name.find(filter) == std::string::npos)
      continue;
    if (quick && c.large) {
      ++skipped;
      continue;
    }
    runCase(c);
  }
  if (skipped)
    std::printf("%d large cases skipped (--quick)\n", skipped);
  std::printf("%d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
