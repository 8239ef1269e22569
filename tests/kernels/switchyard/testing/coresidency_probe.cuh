// Co-residency probe (tests only): every block of every rank adds one to a shared counter, then
// waits until the counter shows every block of every rank. It finishes only if all ranks'
// kernels run at the same time, which is what the communication kernels of ranks sharing a GPU
// rely on (DESIGN.md §4).
#pragma once

#include "switchyard/common/base.cuh"
#include "switchyard/common/ptx.cuh"

namespace switchyard::device {

struct CoresidencyProbeArgs {
    unsigned long long* counter;  // in rank 0's buffer, mapped here
    uint64_t target;              // round * total blocks over all ranks
    uint64_t timeout_ns;
    int32_t* failed;  // this rank: set to 1 when a block gave up
};

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)

__global__ void coresidency_probe_kernel(const __grid_constant__ CoresidencyProbeArgs args) {
    if (threadIdx.x != 0) return;
    ptx::fence_acq_rel_sys();
    atomicAdd_system(args.counter, 1ull);
    const uint64_t start = ptx::globaltimer_ns();
    while (ptx::ld_acquire_sys(reinterpret_cast<const uint64_t*>(args.counter)) < args.target) {
        if (ptx::globaltimer_ns() - start > args.timeout_ns) {
            atomicExch(args.failed, 1);
            return;
        }
    }
}

#endif

}  // namespace switchyard::device
