// Small kernels for testing the JIT (compile, cache, load, launch). Not used by the library.
#pragma once

#include "switchyard/common/base.cuh"
#include "switchyard/testing/sample_args.cuh"

namespace switchyard::device {

// Multiplies every element by kScale; a grid-stride loop so any grid size is correct.
template <int kBlockSize, int kScale>
__global__ void __launch_bounds__(kBlockSize) scale_kernel(const __grid_constant__ ScaleArgs args) {
    const int64_t stride = static_cast<int64_t>(gridDim.x) * kBlockSize;
    for (int64_t i = static_cast<int64_t>(blockIdx.x) * kBlockSize + threadIdx.x; i < args.num_elements;
         i += stride)
        args.data[i] *= static_cast<float>(kScale);
}

// Keeps kNumValues accumulators live across a loop while __launch_bounds__(1024, 2) caps the
// registers at 32 per thread, so ptxas has to spill (for the SWITCHYARD_JIT_FAIL_ON_SPILLS test).
template <int kNumValues>
__global__ void __launch_bounds__(1024, 2) spill_kernel(const __grid_constant__ SpillArgs args) {
    float values[kNumValues];
#pragma unroll
    for (int i = 0; i < kNumValues; ++i) values[i] = args.in[threadIdx.x + i * args.stride];
    for (int round = 0; round < args.num_rounds; ++round) {
#pragma unroll
        for (int i = 0; i < kNumValues; ++i)
            values[i] = values[i] * values[(i + 1) % kNumValues] + args.in[round * kNumValues + i];
    }
    float sum = 0.0f;
#pragma unroll
    for (int i = 0; i < kNumValues; ++i) sum += values[i] * static_cast<float>(i);
    args.out[threadIdx.x] = sum;
}

}  // namespace switchyard::device
