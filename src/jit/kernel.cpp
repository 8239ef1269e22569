// Loading: the Kernel class, get_kernel() (compile for the device's arch, load into the device's
// primary context, cache in-process) and the arch helpers.
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>

#include "jit/driver_api.hpp"
#include "jit/jit.hpp"
#include "jit/knobs.hpp"
#include "switchyard/errors.hpp"

namespace switchyard::jit {
namespace {

CUdevice device_handle(int device) {
    const DriverApi& api = driver();
    int count = 0;
    check_cu(api.cuDeviceGetCount(&count), "cuDeviceGetCount", "");
    if (device < 0 || device >= count)
        throw InvalidArgument("switchyard jit: device " + std::to_string(device) +
                              " does not exist; the driver sees " + std::to_string(count) + " device(s)");
    CUdevice handle = 0;
    check_cu(api.cuDeviceGet(&handle, device), "cuDeviceGet", "for device " + std::to_string(device));
    return handle;
}

// The context the CUDA runtime uses for `device`, so that device pointers, streams and events made
// with cudart work with our modules. Retained once per device and never released: modules live
// for the whole process.
CUcontext primary_context(int device) {
    static std::mutex mutex;
    static std::map<int, CUcontext> contexts;
    std::lock_guard<std::mutex> lock(mutex);
    if (auto found = contexts.find(device); found != contexts.end()) return found->second;
    CUcontext context = nullptr;
    check_cu(driver().cuDevicePrimaryCtxRetain(&context, device_handle(device)), "cuDevicePrimaryCtxRetain",
             "for device " + std::to_string(device));
    contexts[device] = context;
    return context;
}

// Size of parameter `index`, or -1 when it does not exist or the driver cannot tell.
long long param_size(CUfunction function, size_t index) {
    const DriverApi& api = driver();
    if (!api.cuFuncGetParamInfo) return -1;
    size_t offset = 0, size = 0;
    if (api.cuFuncGetParamInfo(function, index, &offset, &size) != CUDA_SUCCESS) return -1;
    return static_cast<long long>(size);
}

std::unique_ptr<Kernel> load_kernel(const KernelSource& source, int device, const CompileOptions& options) {
    CompiledKernel compiled = compile(source, options);
    const std::string where = "for kernel " + source.kernel + " (" + compiled.cubin_path + ") on device " +
                              std::to_string(device) + ", " + options.arch;
    const DriverApi& api = driver();
    CUcontext context = primary_context(device);
    ScopedContext scope(context);
    CUmodule module = nullptr;
    check_cu(api.cuModuleLoadData(&module, compiled.cubin.data()), "cuModuleLoadData", where);
    CUfunction function = nullptr;
    check_cu(api.cuModuleGetFunction(&function, module, compiled.lowered_name.c_str()), "cuModuleGetFunction",
             where);

    // JIT kernels take exactly one by-value argument struct; launch() checks its size against the
    // argument the launcher passes. (Probing parameter 1 to prove there is no second one is a
    // failing driver call that compute-sanitizer reports as an API error on every load.)
    const long long bytes = param_size(function, 0);
    if (debug_enabled())
        debug_log("loaded " + source.kernel + " on device " + std::to_string(device) + " (" + options.arch +
                  ", parameter " + std::to_string(bytes) + " bytes)");
    return std::make_unique<Kernel>(source, std::move(compiled), device, context, module, function, bytes);
}

}  // namespace

std::string arch_for_compute_capability(int major, int minor) {
    // The "a" variants unlock arch-specific instructions (wgmma, setmaxnreg, tcgen05, ...); a cubin
    // built for them only runs on exactly that compute capability, which is what we want here.
    if ((major == 9 && minor == 0) || (major == 10 && minor == 0))
        return "sm_" + std::to_string(major * 10) + "a";
    return "sm_" + std::to_string(major) + std::to_string(minor);
}

std::string arch_for_device(int device) {
    // Asked on every get_kernel(), i.e. on every launch: four driver calls the first time per
    // device, a map lookup after.
    static std::mutex mutex;
    static std::map<int, std::string> known;
    {
        std::lock_guard<std::mutex> lock(mutex);
        if (auto found = known.find(device); found != known.end()) return found->second;
    }
    const DriverApi& api = driver();
    const CUdevice handle = device_handle(device);
    int major = 0, minor = 0;
    check_cu(api.cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, handle),
             "cuDeviceGetAttribute", "(compute capability)");
    check_cu(api.cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, handle),
             "cuDeviceGetAttribute", "(compute capability)");
    std::string arch = arch_for_compute_capability(major, minor);
    std::lock_guard<std::mutex> lock(mutex);
    known[device] = arch;
    return arch;
}

Kernel::Kernel(const KernelSource& source, CompiledKernel compiled, int device, void* context, void* module,
               void* function, long long param_bytes)
    : source_(source),
      compiled_(std::move(compiled)),
      device_(device),
      context_(context),
      module_(module),
      function_(function),
      param_bytes_(param_bytes) {}

void Kernel::ensure_dynamic_shared(unsigned bytes) const {
    std::lock_guard<std::mutex> lock(shared_mutex_);
    if (bytes <= max_dynamic_shared_) return;
    ScopedContext scope(static_cast<CUcontext>(context_));
    check_cu(
        driver().cuFuncSetAttribute(static_cast<CUfunction>(function_),
                                    CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, static_cast<int>(bytes)),
        "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)",
        "for kernel " + source_.kernel + " asking for " + std::to_string(bytes) +
            " bytes of dynamic shared memory (the device's opt-in limit may be lower)");
    max_dynamic_shared_ = bytes;
}

namespace {

// The in-process cache: one slot per key. Per-slot lock: loading one kernel does not block lookups
// or loads of others. A failed load leaves the slot empty so a later call retries (e.g. after the
// user fixes the cache dir).
struct Slot {
    std::mutex mutex;
    std::unique_ptr<Kernel> kernel;
};
std::mutex slots_mutex;
std::map<std::string, std::unique_ptr<Slot>> slots;

// The options with the arch filled in, and the in-process cache key: everything that selects a
// distinct loaded kernel.
std::string cache_key(const KernelSource& source, int device, CompileOptions& resolved) {
    if (resolved.arch.empty()) resolved.arch = arch_for_device(device);
    std::string key = std::to_string(device) + "|" + source.family + "|" + source.header + "|" +
                      source.kernel + "|" + resolved.arch + "|" + (resolved.line_info ? "L" : "-") +
                      (resolved.compiler == Compiler::kNvccNccl ? "|nvcc" : "");
    for (const auto& define : resolved.defines) key += "|D" + define;
    return key;
}

}  // namespace

const Kernel& get_kernel(const KernelSource& source, int device, const CompileOptions& options) {
    // Fail on a missing driver before compiling anything: without it the result is unusable.
    driver();
    CompileOptions resolved = options;
    const std::string key = cache_key(source, device, resolved);
    Slot* slot = nullptr;
    {
        std::lock_guard<std::mutex> lock(slots_mutex);
        auto& entry = slots[key];
        if (!entry) entry = std::make_unique<Slot>();
        slot = entry.get();
    }
    std::lock_guard<std::mutex> lock(slot->mutex);
    if (!slot->kernel) slot->kernel = load_kernel(source, device, resolved);
    return *slot->kernel;
}

const Kernel* loaded_kernel(const KernelSource& source, int device, const CompileOptions& options) {
    CompileOptions resolved = options;
    const std::string key = cache_key(source, device, resolved);
    Slot* slot = nullptr;
    {
        std::lock_guard<std::mutex> lock(slots_mutex);
        const auto found = slots.find(key);
        if (found == slots.end()) return nullptr;
        slot = found->second.get();
    }
    std::lock_guard<std::mutex> lock(slot->mutex);
    return slot->kernel.get();
}

}  // namespace switchyard::jit
