// Checked CUDA runtime calls for the benchmark.
//
// Every CUDA call in the benchmark goes through SWITCHYARD_BENCH_CUDA so a failure on the GPU
// machine names the call, the error and the source line instead of producing a wrong number.
#pragma once

#include <string>

#include <cuda_runtime_api.h>

namespace switchyard::bench {

// Throws switchyard::CudaError("<call> failed: <name> (<text>) at <file>:<line>") unless ok.
void check_cuda(cudaError_t result, const char* call, const char* file, int line);

// Number of CUDA devices this process can use; 0 when there is no driver, no device, or the
// runtime refuses (the reason goes to `why` so the caller can print it).
int usable_gpu_count(std::string* why = nullptr);

// The device's marketing name ("NVIDIA H200"), from cudaGetDeviceProperties.
std::string gpu_name(int device);

}  // namespace switchyard::bench

#define SWITCHYARD_BENCH_CUDA(call) ::switchyard::bench::check_cuda((call), #call, __FILE__, __LINE__)
