// A kernel that fails to compile on purpose, to test the JIT's error path: broken_kernel<0>
// compiles, broken_kernel<1> stops at a static_assert and broken_kernel<2> at an identifier that
// does not exist (both only when instantiated, so the header itself is valid).
#pragma once

#include "switchyard/common/base.cuh"
#include "switchyard/testing/sample_args.cuh"

namespace switchyard::device {

template <int kVariant>
struct BrokenKernelTraits {
    static constexpr int kValue = 1;
};

template <int kVariant>
__global__ void broken_kernel(const __grid_constant__ ScaleArgs args) {
    static_assert(kVariant != 1, "broken_kernel<1> fails to compile on purpose (JIT error-path test)");
    if constexpr (kVariant == 2) {
        // Dependent name: looked up at instantiation, where it does not exist.
        args.data[0] = BrokenKernelTraits<kVariant>::switchyard_jit_test_missing_member;
    } else {
        if (threadIdx.x == 0 && args.num_elements > 0) args.data[0] += BrokenKernelTraits<kVariant>::kValue;
    }
}

}  // namespace switchyard::device
