// Argument structs of the JIT test kernels (sample_kernels.cuh, broken_kernel.cuh). Included by
// both the device code and the host tests, so it uses only base.cuh.
#pragma once

#include "switchyard/common/base.cuh"

namespace switchyard::device {

// scale_kernel: data[i] *= kScale for i < num_elements.
struct ScaleArgs {
    float* data;
    int64_t num_elements;
};

// spill_kernel: out[t] = a register-hungry function of in[]; exists to make ptxas spill.
struct SpillArgs {
    const float* in;
    float* out;
    int32_t stride;
    int32_t num_rounds;
};

}  // namespace switchyard::device
