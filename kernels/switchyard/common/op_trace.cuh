// Op timelines (a profiling aid, off unless SWITCHYARD_TRACE=1), one mechanism for every kernel
// family. An op marks moments on the global timer: for each mark, the earliest (a "first" mark) or
// the latest time any thread of the op's kernels reached it, gathered in workspace counters with
// atomics. The last block of the op's last kernel copies them into mapped host memory (single
// stores only) and sets the ready slot; the next call of the same op prints them
// (src/core/op_trace.cpp). The marks of each op are listed in common/trace_marks.cuh.
#pragma once

#include "switchyard/common/base.cuh"
#include "switchyard/common/ptx.cuh"
#include "switchyard/common/workspace_layout.cuh"

namespace switchyard::device {

// Mapped host slots of one traced op: the marks (ns), then the ready flag.
constexpr int32_t kTraceReadySlot = kTraceMaxMarks;
constexpr int32_t kTraceSlots = kTraceMaxMarks + 1;

// What a kernel needs to trace: null slots when tracing is off (every call is then a no-op).
struct OpTrace {
    uint64_t* slots;     // mapped host [kTraceSlots], or null
    uint64_t* counters;  // the workspace counters from kCounterTraceFirst: [kTraceMaxMarks + 1]
};

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)

// One thread: raises mark `mark` to now; a first mark keeps the earliest (stored as ~ns).
SY_DEVICE void trace_mark(const OpTrace& trace, int32_t mark, bool first = false) {
    if (trace.slots == nullptr) return;
    const uint64_t now = ptx::globaltimer_ns();
    atomicMax(reinterpret_cast<unsigned long long*>(trace.counters + mark),
              (unsigned long long)(first ? ~now : now));
}

// Every thread of every block of the op's last kernel, at the block's end: marks `end_mark`, and
// the last block publishes the op's `marks` marks (`first_marks` decoded) and resets the counters.
SY_DEVICE void trace_finish(const OpTrace& trace, int32_t end_mark, int32_t marks, uint32_t first_marks) {
    if (trace.slots == nullptr) return;
    __syncthreads();
    if (threadIdx.x != 0) return;
    trace_mark(trace, end_mark);
    ptx::fence_acq_rel_gpu();
    auto* blocks = reinterpret_cast<unsigned long long*>(trace.counters + kTraceMaxMarks);
    if (atomicAdd(blocks, 1ull) != gridDim.x - 1) return;
    ptx::fence_acq_rel_gpu();
    for (int mark = 0; mark < marks; ++mark) {
        const uint64_t value = trace.counters[mark];
        trace.slots[mark] = (first_marks >> mark) & 1u ? (value == 0 ? 0 : ~value) : value;
    }
    for (int counter = 0; counter <= kTraceMaxMarks; ++counter) trace.counters[counter] = 0;
    __threadfence_system();
    trace.slots[kTraceReadySlot] = 1;
}

#endif

}  // namespace switchyard::device
