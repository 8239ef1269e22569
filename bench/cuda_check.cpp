#include "cuda_check.hpp"

#include <sstream>

#include "switchyard/errors.hpp"

namespace switchyard::bench {

void check_cuda(cudaError_t result, const char* call, const char* file, int line) {
    if (result == cudaSuccess) return;
    std::ostringstream message;
    message << call << " failed: " << cudaGetErrorName(result) << " (" << cudaGetErrorString(result)
            << ") at " << file << ":" << line;
    throw CudaError(message.str());
}

int usable_gpu_count(std::string* why) {
    int count = 0;
    const cudaError_t result = cudaGetDeviceCount(&count);
    if (result != cudaSuccess) {
        // Without a driver the runtime reports an error here; that is the normal CPU-only case.
        if (why) *why = std::string(cudaGetErrorName(result)) + ": " + cudaGetErrorString(result);
        cudaGetLastError();  // reset the last-error slot so later checks start clean
        return 0;
    }
    if (count == 0 && why) *why = "cudaGetDeviceCount returned 0 devices";
    return count;
}

std::string gpu_name(int device) {
    cudaDeviceProp prop{};
    SWITCHYARD_BENCH_CUDA(cudaGetDeviceProperties(&prop, device));
    return prop.name;
}

}  // namespace switchyard::bench
