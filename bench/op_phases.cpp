// See op_phases.hpp.
#include "op_phases.hpp"

#include <cmath>

namespace switchyard::bench {

std::optional<double> ht_rows_us(const OpTimeline& timeline) {
    // The mark names of src/core/ht_ops.cpp (kernels/switchyard/common/trace_marks.cuh).
    const bool dispatch = timeline.op == "ht dispatch";
    if (!dispatch && timeline.op != "ht combine") return std::nullopt;
    const double begin = timeline.at(dispatch ? "counts in" : "entered");
    const double end = timeline.at(dispatch ? "sent" : "senders done");
    if (std::isnan(begin) || std::isnan(end) || end <= begin) return std::nullopt;
    return end - begin;
}

}  // namespace switchyard::bench
