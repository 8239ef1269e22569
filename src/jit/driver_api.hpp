// The CUDA driver API, opened with dlopen("libcuda.so.1") on first use so that the library links
// and compiles kernels on machines without a GPU driver. Only the types and enums of <cuda.h> are
// used at build time; libcuda is never linked.
#pragma once

#include <cuda.h>

#include <string>

namespace switchyard::jit {

// Entry points we use. Members are named like the API macros of <cuda.h>, so a name such as
// cuCtxPushCurrent resolves to the versioned symbol (cuCtxPushCurrent_v2) the header declares.
struct DriverApi {
    decltype(&::cuInit) cuInit = nullptr;
    decltype(&::cuDriverGetVersion) cuDriverGetVersion = nullptr;
    decltype(&::cuGetErrorName) cuGetErrorName = nullptr;
    decltype(&::cuGetErrorString) cuGetErrorString = nullptr;
    decltype(&::cuDeviceGet) cuDeviceGet = nullptr;
    decltype(&::cuDeviceGetCount) cuDeviceGetCount = nullptr;
    decltype(&::cuDeviceGetAttribute) cuDeviceGetAttribute = nullptr;
    decltype(&::cuDevicePrimaryCtxRetain) cuDevicePrimaryCtxRetain = nullptr;
    decltype(&::cuCtxGetCurrent) cuCtxGetCurrent = nullptr;
    decltype(&::cuCtxSetCurrent) cuCtxSetCurrent = nullptr;
    decltype(&::cuCtxPushCurrent) cuCtxPushCurrent = nullptr;
    decltype(&::cuCtxPopCurrent) cuCtxPopCurrent = nullptr;
    decltype(&::cuModuleLoadData) cuModuleLoadData = nullptr;
    decltype(&::cuModuleGetFunction) cuModuleGetFunction = nullptr;
    decltype(&::cuFuncSetAttribute) cuFuncSetAttribute = nullptr;
    decltype(&::cuLaunchKernelEx) cuLaunchKernelEx = nullptr;
    // Optional (driver >= 12.4): lets load time check the one-argument-struct contract.
    decltype(&::cuFuncGetParamInfo) cuFuncGetParamInfo = nullptr;
    // Optional: the emulated network's engine writes signals with it (src/net/emulated_network.cpp)
    // and falls back to 8-byte copies without it.
    decltype(&::cuStreamWriteValue64) cuStreamWriteValue64 = nullptr;
    // Optional: the engine writes a call's signals, counters and flush reports in one batch.
    decltype(&::cuStreamBatchMemOp) cuStreamBatchMemOp = nullptr;
};

// The loaded and initialized (cuInit) driver. Throws UnsupportedError when there is no driver or
// no device, CudaError when the driver is present but unusable. Loads once per process; the
// outcome, including a failure, is remembered.
const DriverApi& driver();

// Throws CudaError "<call> failed: CUDA_ERROR_X (text) <where>" unless result is CUDA_SUCCESS.
void check_cu(CUresult result, const char* call, const std::string& where);

// Makes `context` current on this thread for the guard's lifetime and restores the caller's context
// afterwards, so the JIT never changes which device the CUDA runtime thinks is current.
class ScopedContext {
  public:
    explicit ScopedContext(CUcontext context);
    ~ScopedContext();
    ScopedContext(const ScopedContext&) = delete;
    ScopedContext& operator=(const ScopedContext&) = delete;

  private:
    bool pushed_ = false;
};

}  // namespace switchyard::jit
