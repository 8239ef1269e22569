#include "jit/driver_api.hpp"

#include <dlfcn.h>

#include "switchyard/errors.hpp"

namespace switchyard::jit {
namespace {

// Two steps so that a macro argument (cuCtxPushCurrent) is expanded before it is quoted.
#define SY_JIT_QUOTE_(x) #x
#define SY_JIT_QUOTE(x) SY_JIT_QUOTE_(x)

struct DriverState {
    DriverApi api;
    std::string error;         // empty when usable
    bool unsupported = false;  // no driver / no device (vs. a broken one)
};

std::string init_failure_hint(CUresult result) {
    switch (result) {
        case CUDA_ERROR_NO_DEVICE:
            return "the CUDA driver sees no GPU (check CUDA_VISIBLE_DEVICES); loading and launching kernels "
                   "needs one";
        case CUDA_ERROR_STUB_LIBRARY:
            return "the libcuda.so.1 found is the CUDA toolkit's stub library, not a real driver (is a "
                   "lib/stubs directory on LD_LIBRARY_PATH?); loading and launching kernels needs an NVIDIA "
                   "GPU with its driver installed";
        case CUDA_ERROR_SYSTEM_DRIVER_MISMATCH:
            return "the kernel-mode driver and libcuda.so.1 come from different driver versions; reinstall "
                   "the "
                   "driver";
        default:
            return "the CUDA driver is installed but not usable";
    }
}

DriverState load_driver() {
    DriverState state;
    void* handle = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
    if (!handle) {
        const char* why = ::dlerror();
        state.unsupported = true;
        state.error = std::string("the CUDA driver (libcuda.so.1) could not be loaded: ") +
                      (why ? why : "unknown") +
                      ". Loading and launching kernels needs an NVIDIA GPU with its driver installed; "
                      "compiling (jit::compile / jit::precompile) works without one.";
        return state;
    }
    DriverApi& api = state.api;
    std::string missing;
#define SY_JIT_RESOLVE(name, required)                                                    \
    api.name = reinterpret_cast<decltype(api.name)>(::dlsym(handle, SY_JIT_QUOTE(name))); \
    if (!api.name && (required)) missing += std::string(" ") + SY_JIT_QUOTE(name);
    SY_JIT_RESOLVE(cuInit, true)
    SY_JIT_RESOLVE(cuDriverGetVersion, true)
    SY_JIT_RESOLVE(cuGetErrorName, true)
    SY_JIT_RESOLVE(cuGetErrorString, true)
    SY_JIT_RESOLVE(cuDeviceGet, true)
    SY_JIT_RESOLVE(cuDeviceGetCount, true)
    SY_JIT_RESOLVE(cuDeviceGetAttribute, true)
    SY_JIT_RESOLVE(cuDevicePrimaryCtxRetain, true)
    SY_JIT_RESOLVE(cuCtxGetCurrent, true)
    SY_JIT_RESOLVE(cuCtxSetCurrent, true)
    SY_JIT_RESOLVE(cuCtxPushCurrent, true)
    SY_JIT_RESOLVE(cuCtxPopCurrent, true)
    SY_JIT_RESOLVE(cuModuleLoadData, true)
    SY_JIT_RESOLVE(cuModuleGetFunction, true)
    SY_JIT_RESOLVE(cuFuncSetAttribute, true)
    SY_JIT_RESOLVE(cuLaunchKernelEx, true)
    SY_JIT_RESOLVE(cuFuncGetParamInfo, false)
    SY_JIT_RESOLVE(cuStreamWriteValue64, false)
    SY_JIT_RESOLVE(cuStreamBatchMemOp, false)
#undef SY_JIT_RESOLVE
    if (!missing.empty()) {
        state.error = "the CUDA driver (libcuda.so.1) is too old: it lacks" + missing +
                      ". Switchyard needs a driver for CUDA 12.0 or newer.";
        return state;
    }
    const CUresult init = api.cuInit(0);
    if (init != CUDA_SUCCESS) {
        const char* name = nullptr;
        if (api.cuGetErrorName(init, &name) != CUDA_SUCCESS) name = nullptr;
        state.unsupported = init == CUDA_ERROR_NO_DEVICE || init == CUDA_ERROR_STUB_LIBRARY;
        state.error = std::string("cuInit failed with ") + (name ? name : "error") + " (code " +
                      std::to_string(static_cast<int>(init)) + "): " + init_failure_hint(init);
    }
    return state;
}

}  // namespace

const DriverApi& driver() {
    static const DriverState state = load_driver();
    if (state.error.empty()) return state.api;
    if (state.unsupported) throw UnsupportedError("switchyard jit: " + state.error);
    throw CudaError("switchyard jit: " + state.error);
}

void check_cu(CUresult result, const char* call, const std::string& where) {
    if (result == CUDA_SUCCESS) return;
    const DriverApi& api = driver();
    const char* name = nullptr;
    const char* text = nullptr;
    api.cuGetErrorName(result, &name);
    api.cuGetErrorString(result, &text);
    throw CudaError(std::string("switchyard jit: ") + call + " failed with " + (name ? name : "?") + " (" +
                    (text ? text : "no description") + ") " + where);
}

ScopedContext::ScopedContext(CUcontext context) {
    const DriverApi& api = driver();
    CUcontext current = nullptr;
    check_cu(api.cuCtxGetCurrent(&current), "cuCtxGetCurrent", "");
    if (current == context) return;
    check_cu(api.cuCtxPushCurrent(context), "cuCtxPushCurrent", "");
    pushed_ = true;
}

ScopedContext::~ScopedContext() {
    if (!pushed_) return;
    CUcontext popped = nullptr;
    driver().cuCtxPopCurrent(&popped);
}

}  // namespace switchyard::jit
