// CUDA runtime error checking for host code: a failed call throws CudaError naming the call.
#pragma once

#include <cuda_runtime_api.h>

#include <string>

#include "switchyard/errors.hpp"

namespace switchyard::util {

inline void cuda_check(cudaError_t status, const char* what) {
    if (status != cudaSuccess)
        throw CudaError(std::string("switchyard: ") + what + " failed: " + cudaGetErrorName(status) + " (" +
                        cudaGetErrorString(status) + ")");
}

}  // namespace switchyard::util

#define SY_CUDA_CHECK(call) ::switchyard::util::cuda_check((call), #call)
