// Test kernel: one thread spins for `spin_ns` on the GPU's global timer, then stores the timer's
// value. Ranks sharing a GPU read one clock, so stamps taken before and after a barrier on every
// rank show whether any rank left before the last one arrived.
#pragma once

#include "switchyard/common/base.cuh"
#include "switchyard/common/ptx.cuh"

namespace switchyard::device {

struct TimeStampArgs {
    uint64_t* stamp;
    uint64_t spin_ns;
};

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)

__global__ void time_stamp_kernel(const __grid_constant__ TimeStampArgs args) {
    const uint64_t start = ptx::globaltimer_ns();
    while (ptx::globaltimer_ns() - start < args.spin_ns) {
    }
    *args.stamp = ptx::globaltimer_ns();
}

#endif

}  // namespace switchyard::device
