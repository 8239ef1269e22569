// The host half of the op timelines (kernels/switchyard/common/op_trace.cuh): with SWITCHYARD_TRACE=1
// each traced op gets mapped host slots its kernels publish into, and the next call of the same op
// prints the previous one's timeline to stderr, in microseconds after its first mark.
#pragma once

#include <cstdint>

#include "switchyard/common/op_trace.cuh"

namespace switchyard::core {

enum class TracedOp : int32_t {
    kHtDispatch,
    kHtCombine,
    kLlDispatchSend,
    kLlDispatchReceive,
    kLlDispatch,
    kLlCombineSend,
    kLlCombineReceive,
    kLlCombine,
    kCount,
};

// The marks an op records, as the host prints them.
struct TracedOpMarks {
    const char* name;
    const char* const* mark_names;
    int32_t num_marks;
};

class OpTracer {
  public:
    // `counters`: this rank's workspace counters (device address); `rank` names the printed lines.
    OpTracer(uint64_t* counters, int rank);
    ~OpTracer();
    OpTracer(const OpTracer&) = delete;
    OpTracer& operator=(const OpTracer&) = delete;

    // The trace for one call of `op`: null slots unless SWITCHYARD_TRACE is set. Prints the
    // previous call's timeline when its kernels have published it.
    device::OpTrace begin(TracedOp op, const TracedOpMarks& marks);

  private:
    uint64_t* counters_;
    int rank_;
    uint64_t* host_slots_ = nullptr;  // [TracedOp::kCount][kTraceSlots], mapped
    uint64_t* device_slots_ = nullptr;
};

}  // namespace switchyard::core
