// Timelines of the HT ops, layout kernel included (a profiling aid, off unless SWITCHYARD_HT_TRACE=1). Each
// op marks moments on the global timer: for each mark, the earliest (a "first" mark) or the latest time any
// thread reached it, gathered in workspace counters with atomics. The last block of the op's last kernel
// copies them into mapped host memory (single stores only) and sets the ready slot; the next call
// of the same op prints them (src/core/ht_ops.cpp).
#pragma once

#include "switchyard/common/base.cuh"
#include "switchyard/common/ptx.cuh"
#include "switchyard/common/workspace_layout.cuh"

namespace switchyard::device {

// Dispatch: its three kernels. Layout done = the dispatch grid past its wait for the layout kernel.
enum HtDispatchMark : int32_t {
    kHtLayoutStart = 0,     // first: the first layout block started
    kHtLayoutEnd,           // the last layout block ended
    kHtLayoutLoaded,        // the last layout block has its chunk's routing staged
    kHtLayoutPublished,     // the last layout block published its chunk's totals
    kHtLayoutLookedBack,    // the last layout block has every earlier chunk's totals
    kHtDispatchStart,       // first: the first dispatch block started (the layout may still run)
    kHtDispatchLayoutDone,  // every dispatch block past its wait for the layout kernel
    kHtDispatchNotified,    // block 0 sent its counts to every peer
    kHtDispatchCounts,      // every block has all peers' counts (the entry handshake)
    kHtDispatchSent,        // the last warp's rows issued and drained
    kHtDispatchFirstSent,   // first: the first warp's rows issued and drained (with Sent: the spread)
    kHtDispatchSignalled,   // the last block raised "done" at every destination
    kHtDispatchArrived,     // every source's "done" seen here
    kHtDispatchEnd,         // the last dispatch block ended
    kHtReceiveStart,        // first: a receive block past its wait for the dispatch kernel
    kHtReceiveEnd,          // the last receive block ended
    kHtDispatchMarks,
};
constexpr uint32_t kHtDispatchFirstMarks = (1u << kHtLayoutStart) | (1u << kHtDispatchStart) |
                                           (1u << kHtDispatchFirstSent) | (1u << kHtReceiveStart);

enum HtCombineMark : int32_t {
    kHtCombineStart = 0,     // first: the first block started
    kHtCombineEntered,       // every block past the entry handshake
    kHtCombineSent,          // the last sender warp's rows written
    kHtCombinePublished,     // the last publisher's arrivals raised
    kHtCombineReduced,       // the last warp finished reducing
    kHtCombineFirstReduced,  // first: the first warp found nothing left to reduce
    kHtCombineEnd,           // the last block ended
    kHtCombineMarks,
};
constexpr uint32_t kHtCombineFirstMarks = (1u << kHtCombineStart) | (1u << kHtCombineFirstReduced);

// Mapped host slots: the marks (ns), then the ready flag.
constexpr int32_t kHtTraceReady = kHtTraceMaxMarks;
constexpr int32_t kHtTraceSlots = kHtTraceMaxMarks + 1;
static_assert(kHtDispatchMarks <= kHtTraceMaxMarks && kHtCombineMarks <= kHtTraceMaxMarks);

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)

namespace ht_detail {

// One thread, when tracing (`trace` not null): raises mark `mark` to now; a first mark keeps the
// earliest (stored as ~ns).
SY_DEVICE void trace_mark(const void* trace, uint64_t* counters, int32_t mark, bool first = false) {
    if (trace == nullptr) return;
    const uint64_t now = ptx::globaltimer_ns();
    atomicMax(reinterpret_cast<unsigned long long*>(counters + kCounterHtTraceFirst + mark),
              (unsigned long long)(first ? ~now : now));
}

// Every thread of every block of the op's last kernel, at the block's end: marks `end_mark`, and
// the last block publishes the op's `marks` marks (`first_marks` decoded) and resets the counters.
SY_DEVICE void trace_finish(uint64_t* trace, uint64_t* counters, int32_t end_mark, int32_t marks,
                            uint32_t first_marks) {
    if (trace == nullptr) return;
    __syncthreads();
    if (threadIdx.x != 0) return;
    trace_mark(trace, counters, end_mark);
    ptx::fence_acq_rel_gpu();
    auto* blocks = reinterpret_cast<unsigned long long*>(counters + kCounterHtTraceBlocks);
    if (atomicAdd(blocks, 1ull) != gridDim.x - 1) return;
    ptx::fence_acq_rel_gpu();
    for (int mark = 0; mark < marks; ++mark) {
        const uint64_t value = counters[kCounterHtTraceFirst + mark];
        trace[mark] = (first_marks >> mark) & 1u ? (value == 0 ? 0 : ~value) : value;
    }
    for (int counter = kCounterHtTraceFirst; counter <= kCounterHtTraceBlocks; ++counter)
        counters[counter] = 0;
    __threadfence_system();
    trace[kHtTraceReady] = 1;
}

}  // namespace ht_detail

#endif

}  // namespace switchyard::device
