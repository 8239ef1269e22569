// The host half of the op timelines (kernels/switchyard/common/op_trace.cuh): each traced op gets
// mapped host slots its kernels publish into. With SWITCHYARD_TRACE=1 every op is traced and the
// next call of the same op prints the previous one's timeline to stderr, in microseconds after its
// first mark; Buffer::set_op_tracing traces one buffer's ops without printing. The latest
// published timeline of each op is kept for Buffer::op_timeline.
#pragma once

#include <array>
#include <cstdint>

#include "switchyard/common/op_trace.cuh"
#include "switchyard/op_timeline.hpp"

namespace switchyard::core {

// The traced ops are the public kinds (an LL op with a receive hook traced as its two halves).
using TracedOp = OpTimelineKind;
constexpr size_t kTracedOps = size_t(OpTimelineKind::kLlCombine) + 1;

// The marks an op records, as the host names them (in the order of common/trace_marks.cuh).
struct TracedOpMarks {
    const char* name;
    const char* const* mark_names;
    int32_t num_marks;
};
const TracedOpMarks& traced_op_marks(TracedOp op);

// One op's published slots (kTraceSlots words: the marks in ns, decoded; then the ready flag) as a
// timeline: each mark after mark 0, NaN where a mark (or mark 0) was not reached.
OpTimeline decode_timeline(const volatile uint64_t* slots, const TracedOpMarks& marks);

class OpTracer {
  public:
    // `counters`: this rank's workspace counters (device address); `rank` names the printed lines.
    OpTracer(uint64_t* counters, int rank);
    ~OpTracer();
    OpTracer(const OpTracer&) = delete;
    OpTracer& operator=(const OpTracer&) = delete;

    // Tracing of this buffer's ops from the next call on (SWITCHYARD_TRACE=1 starts it on). The
    // slots are allocated when tracing is first turned on, never inside an op: an allocation while
    // a co-located rank's kernel waits for this rank may wait for that kernel (DESIGN.md §4, rule 2).
    void set_enabled(bool on);

    // The trace for one call of `op`: null slots unless tracing is on. Takes in the previous call's
    // timeline when its kernels have published it (and prints it under SWITCHYARD_TRACE).
    device::OpTrace begin(TracedOp op);

    // The latest published timeline of `op` not yet returned (empty if none).
    OpTimeline take_latest(TracedOp op);

  private:
    void allocate_slots();
    void collect(TracedOp op);  // the slots of `op`, if published, into latest_ (printed if asked)

    uint64_t* counters_;
    int rank_;
    bool enabled_;
    bool print_;
    uint64_t* host_slots_ = nullptr;  // [kTracedOps][kTraceSlots], mapped
    uint64_t* device_slots_ = nullptr;
    std::array<OpTimeline, kTracedOps> latest_{};
};

}  // namespace switchyard::core
