// CUDA runtime error checking: a failed call throws CudaError naming the call. The one check for the
// library, its tests and its benchmark (SY_CUDA_CHECK); the message ends with the source file and
// line of the check, so a failure in a long test or benchmark points at its call.
#pragma once

#include <cuda_runtime_api.h>

#include <cstring>
#include <string>

#include "switchyard/errors.hpp"

namespace switchyard::util {

inline void cuda_check(cudaError_t status, const char* what) {
    if (status != cudaSuccess)
        throw CudaError(std::string("switchyard: ") + what + " failed: " + cudaGetErrorName(status) + " (" +
                        cudaGetErrorString(status) + ")");
}

// As above, with " at <file name>:<line>" appended (the file's name without its directories).
inline void cuda_check(cudaError_t status, const char* what, const char* file, int line) {
    if (status == cudaSuccess) return;
    const char* slash = std::strrchr(file, '/');
    throw CudaError(std::string("switchyard: ") + what + " failed: " + cudaGetErrorName(status) + " (" +
                    cudaGetErrorString(status) + ") at " + (slash ? slash + 1 : file) + ":" +
                    std::to_string(line));
}

}  // namespace switchyard::util

#define SY_CUDA_CHECK(call) ::switchyard::util::cuda_check((call), #call, __FILE__, __LINE__)
