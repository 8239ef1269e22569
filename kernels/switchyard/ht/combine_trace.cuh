// HT combine timeline (a profiling aid, off unless SWITCHYARD_HT_TRACE=1): the global-timer time
// at which the first block started, every block had entered, the last sender warp finished, the
// last publisher finished, the last warp finished reducing and the last block ended, gathered in
// workspace counters with atomics; the grid's last block copies them into mapped host memory
// (single stores only) and sets the ready slot for the host to print.
#pragma once

#include "switchyard/common/base.cuh"
#include "switchyard/common/ptx.cuh"
#include "switchyard/common/workspace_layout.cuh"

namespace switchyard::device {

enum HtTraceSlot : int32_t {
    kHtTraceStart = 0,
    kHtTraceEntered = 1,
    kHtTraceSent = 2,
    kHtTracePublished = 3,
    kHtTraceReduced = 4,
    kHtTraceEnd = 5,
    kHtTraceReady = 6,
    kHtTraceSlots = 7,
};

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)

namespace ht_detail {

// One thread: raises counter `counter` to now (kCounterHtTraceStart keeps the earliest as ~ns).
SY_DEVICE void trace_mark(const uint64_t* trace, uint64_t* counters, int32_t counter) {
    if (trace == nullptr) return;
    const uint64_t now = ptx::globaltimer_ns();
    atomicMax(reinterpret_cast<unsigned long long*>(counters + counter),
              (unsigned long long)(counter == kCounterHtTraceStart ? ~now : now));
}

// Every thread of every block, at the block's end: the last block publishes the timeline.
SY_DEVICE void trace_finish(uint64_t* trace, uint64_t* counters) {
    if (trace == nullptr) return;
    __syncthreads();
    if (threadIdx.x != 0) return;
    trace_mark(trace, counters, kCounterHtTraceEnd);
    ptx::fence_acq_rel_gpu();
    auto* blocks = reinterpret_cast<unsigned long long*>(counters + kCounterHtTraceBlocks);
    if (atomicAdd(blocks, 1ull) != gridDim.x - 1) return;
    ptx::fence_acq_rel_gpu();
    trace[kHtTraceStart] = ~counters[kCounterHtTraceStart];
    for (int slot = kHtTraceEntered; slot <= kHtTraceEnd; ++slot)
        trace[slot] = counters[kCounterHtTraceEntered + slot - kHtTraceEntered];
    for (int counter = kCounterHtTraceStart; counter <= kCounterHtTraceBlocks; ++counter)
        counters[counter] = 0;
    __threadfence_system();
    trace[kHtTraceReady] = 1;
}

}  // namespace ht_detail

#endif

}  // namespace switchyard::device
