// Op timelines: when an op's kernels reached the moments of its timeline, read back from a traced
// op (Buffer::set_op_tracing, Buffer::op_timeline; SWITCHYARD_TRACE=1 prints them instead). The
// marks of each op, in the kernels' order, are listed in kernels/switchyard/common/trace_marks.cuh;
// docs/architecture.md §11 says how they are recorded.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace switchyard {

// The traced ops. An LL op with a receive hook is traced as its two halves, each an op of its own.
enum class OpTimelineKind : int32_t {
    kHtDispatch,
    kHtCombine,
    kLlDispatchSend,
    kLlDispatchReceive,
    kLlDispatch,
    kLlCombineSend,
    kLlCombineReceive,
    kLlCombine,
};

struct OpTimeline {
    std::string op;                  // "ht dispatch", "ll combine send", ...
    std::vector<std::string> marks;  // in the kernels' order; marks[0] is the op's first moment
    std::vector<double> us;          // us[i]: mark i in microseconds after mark 0; NaN: not reached
    uint64_t start_ns = 0;  // mark 0 on the GPU's global timer: aligns the timelines of ranks on one GPU

    bool empty() const { return marks.empty(); }
    // The time of the mark called `name` (NaN when the op has no such mark or did not reach it).
    double at(std::string_view name) const;
};

}  // namespace switchyard
