//===- DeviceCode.cpp - generated GPU kernels into cubin and PTX ------------===//
//
// Runs MLIR's own GPU pipeline on a copy of the generated kernels:
// scf → cf, gpu → nvvm (bare-pointer calling convention, so a launch passes
// one device pointer per buffer), math → llvm for what that leaves, then
// gpu-module-to-binary, which
// translates to LLVM IR, links libdevice, emits PTX with the NVPTX backend
// and runs ptxas. The toolkit is looked up once and a missing one is
// reported with the paths tried.
//
//===----------------------------------------------------------------------===//

#include "shardflow/Target/DeviceCode.h"

#include "mlir/Conversion/GPUToNVVM/GPUToNVVMPass.h"
#include "mlir/Conversion/MathToLLVM/MathToLLVM.h"
#include "mlir/Conversion/ReconcileUnrealizedCasts/ReconcileUnrealizedCasts.h"
#include "mlir/Conversion/SCFToControlFlow/SCFToControlFlow.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/ControlFlow/IR/ControlFlow.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/GPU/Transforms/Passes.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/InitAllExtensions.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"
#include "mlir/Target/LLVM/NVVM/Target.h"
#include "mlir/Target/LLVMIR/Dialect/Builtin/BuiltinToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/GPU/GPUToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/LLVMIR/LLVMToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/NVVM/NVVMToLLVMIRTranslation.h"
#include "mlir/Transforms/Passes.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"

#include <algorithm>
#include <cstdlib>

using namespace mlir;
using namespace shardflow;

void shardflow::registerDeviceCodeDialects(DialectRegistry &registry) {
  registry.insert<arith::ArithDialect, cf::ControlFlowDialect, func::FuncDialect,
                  gpu::GPUDialect, LLVM::LLVMDialect, NVVM::NVVMDialect, math::MathDialect,
                  memref::MemRefDialect, scf::SCFDialect, vector::VectorDialect>();
  // The *-to-LLVM conversion interfaces that convert-gpu-to-nvvm consults.
  registerAllExtensions(registry);
  NVVM::registerNVVMTargetInterfaceExternalModels(registry);
  registerBuiltinDialectTranslation(registry);
  registerLLVMDialectTranslation(registry);
  registerNVVMDialectTranslation(registry);
  registerGPUDialectTranslation(registry);
}

namespace {

/// The toolkit folder holding bin/ptxas and the libdevice bitcode.
FailureOr<std::pair<std::string, std::string>> findToolkit(ModuleOp module,
                                                           const std::string &given) {
  std::vector<std::string> candidates;
  if (!given.empty())
    candidates.push_back(given);
  else {
    for (const char *env : {"CUDA_PATH", "CUDA_HOME"})
      if (const char *v = std::getenv(env); v && *v)
        candidates.push_back(v);
    candidates.push_back("/usr/local/cuda");
  }
  std::string tried;
  for (const std::string &root : candidates) {
    llvm::SmallString<256> ptxas(root), libdevice(root);
    llvm::sys::path::append(ptxas, "bin", "ptxas");
    llvm::sys::path::append(libdevice, "nvvm", "libdevice", "libdevice.10.bc");
    if (llvm::sys::fs::can_execute(ptxas) && llvm::sys::fs::exists(libdevice))
      return std::make_pair(root, std::string(libdevice));
    tried += (tried.empty() ? "" : ", ") + root;
  }
  return module.emitError("--target cuda needs the CUDA toolkit (bin/ptxas and "
                          "nvvm/libdevice/libdevice.10.bc); none found in ")
         << tried << " (set --cuda-path, CUDA_PATH or CUDA_HOME)";
}

/// "sm_80" -> "compute_80": the virtual architecture PTX is written for.
std::string virtualArch(StringRef chip) {
  return chip.starts_with("sm_") ? ("compute_" + chip.drop_front(3)).str() : chip.str();
}

} // namespace

void shardflow::buildKernelLoweringPipeline(OpPassManager &pm, bool index32) {
  OpPassManager &perModule = pm.nest<gpu::GPUModuleOp>();
  perModule.addPass(createCanonicalizerPass());
  perModule.addPass(createCSEPass());
  perModule.addPass(createSCFToControlFlowPass());
  ConvertGpuOpsToNVVMOpsOptions nvvm;
  nvvm.useBarePtrCallConv = true;
  if (index32)
    nvvm.indexBitwidth = 32;
  perModule.addPass(createConvertGpuOpsToNVVMOps(nvvm));
  // What gpu → nvvm leaves of math (math.absi: libdevice has no integer
  // abs) becomes LLVM intrinsics.
  perModule.addPass(createConvertMathToLLVMPass());
  pm.addPass(createReconcileUnrealizedCastsPass());
}

namespace {
struct KernelLoweringOptions : public PassPipelineOptions<KernelLoweringOptions> {
  Option<bool> index32{*this, "index32",
                       llvm::cl::desc("32-bit index arithmetic (every buffer under 2^31 "
                                      "elements)"),
                       llvm::cl::init(true)};
};
} // namespace

void shardflow::registerDeviceCodePipelines() {
  PassPipelineRegistration<KernelLoweringOptions>(
      "shardflow-lower-gpu-kernels",
      "The generated gpu.module kernels to NVVM, as the artifact phase lowers them before "
      "ptxas (canonicalize, cse, scf to cf, gpu to nvvm with bare pointers, math to llvm)",
      [](OpPassManager &pm, const KernelLoweringOptions &options) {
        buildKernelLoweringPipeline(pm, options.index32);
      });
}

FailureOr<std::vector<runtime::DeviceModule>>
shardflow::compileDeviceCode(ModuleOp module, const DeviceCodeOptions &options) {
  std::vector<runtime::DeviceModule> result;
  SmallVector<gpu::GPUModuleOp> gpuModules(module.getOps<gpu::GPUModuleOp>());
  if (gpuModules.empty())
    return result;
  if (options.chips.empty())
    return module.emitError("no GPU architecture to compile for"), failure();
  auto toolkit = findToolkit(module, options.cudaPath);
  if (failed(toolkit))
    return failure();
  MLIRContext *ctx = module.getContext();
  ctx->loadDialect<NVVM::NVVMDialect, LLVM::LLVMDialect, gpu::GPUDialect>();
  Builder b(ctx);

  // A module of the kernels alone: the host program's rt.launch ops would
  // no longer verify once their gpu.module becomes a gpu.binary.
  OwningOpRef<ModuleOp> lowered = ModuleOp::create(module.getLoc());
  (*lowered)->setAttr(gpu::GPUDialect::getContainerModuleAttrName(), b.getUnitAttr());
  SmallVector<Attribute> targets;
  for (const std::string &chip : options.chips)
    targets.push_back(NVVM::NVVMTargetAttr::get(
        ctx, /*optLevel=*/3, "nvptx64-nvidia-cuda", chip, "+ptx80", nullptr,
        b.getStrArrayAttr({toolkit->second})));
  {
    OpBuilder ob = OpBuilder::atBlockEnd(lowered->getBody());
    for (gpu::GPUModuleOp m : gpuModules) {
      auto copy = cast<gpu::GPUModuleOp>(ob.clone(*m));
      copy.setTargetsAttr(b.getArrayAttr(targets));
    }
  }
  // 32-bit index arithmetic when every buffer has fewer than 2^31 elements:
  // 64-bit division and remainder (broadcast and row indexing) cost several
  // times more instructions on the GPU.
  int64_t largest = 0;
  lowered->walk([&](gpu::GPUFuncOp fn) {
    for (Type t : fn.getArgumentTypes())
      if (auto m = dyn_cast<MemRefType>(t); m && m.hasStaticShape())
        largest = std::max(largest, m.getNumElements());
    if (auto grid = fn.getKnownGridSizeAttr(); grid && fn.getKnownBlockSizeAttr())
      largest = std::max(largest, int64_t(grid[0]) * fn.getKnownBlockSizeAttr()[0]);
  });
  PassManager lower(ctx);
  lower.enableVerifier(true);
  buildKernelLoweringPipeline(lower, largest < (int64_t(1) << 31) - 1024);
  if (failed(lower.run(*lowered)))
    return module.emitError("lowering the generated GPU kernels to NVVM failed"), failure();
  // Switches (a sibling-fused kernel picks its part by block) become
  // compare trees, not jump tables: brx.idx through a .branchtargets table
  // buys nothing over a few compares in these kernels, and the CUDA
  // stand-in that runs the tests has no model of it.
  lowered->walk([&](LLVM::LLVMFuncOp fn) {
    SmallVector<Attribute> passthrough;
    if (ArrayAttr old = fn.getPassthroughAttr())
      passthrough.assign(old.begin(), old.end());
    passthrough.push_back(b.getStrArrayAttr({"no-jump-tables", "true"}));
    fn.setPassthroughAttr(b.getArrayAttr(passthrough));
  });

  // One binary per format: cubins (ptxas) for every chip, then PTX.
  for (StringRef format : {"bin", "isa"}) {
    OwningOpRef<ModuleOp> copy = cast<ModuleOp>((*lowered)->clone());
    // PTX is kept for the oldest chip only: compile it for that one.
    if (format == "isa")
      for (auto m : copy->getOps<gpu::GPUModuleOp>())
        m.setTargetsAttr(b.getArrayAttr({targets.front()}));
    PassManager serialize(ctx);
    GpuModuleToBinaryPassOptions opts;
    opts.toolkitPath = toolkit->first;
    opts.compilationTarget = format.str();
    serialize.addPass(createGpuModuleToBinaryPass(opts));
    if (failed(serialize.run(*copy)))
      return module.emitError("compiling the generated GPU kernels (") << format
                                                                        << ") failed",
             failure();
    for (auto binary : copy->getOps<gpu::BinaryOp>()) {
      for (Attribute a : binary.getObjectsAttr()) {
        auto object = cast<gpu::ObjectAttr>(a);
        auto target = cast<NVVM::NVVMTargetAttr>(object.getTarget());
        runtime::DeviceModule m;
        m.name = binary.getName().str();
        StringRef bytes = object.getObject().getValue();
        m.data.assign(bytes.begin(), bytes.end());
        if (format == "bin") {
          m.arch = target.getChip().str();
          m.format = "cubin";
        } else {
          // The driver compiles the oldest chip's PTX for newer GPUs.
          m.arch = virtualArch(target.getChip());
          m.format = "ptx";
        }
        result.push_back(std::move(m));
      }
    }
  }
  return result;
}
