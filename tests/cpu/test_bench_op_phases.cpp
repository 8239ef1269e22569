// Op timelines on the CPU: the slots a traced op's last block publishes decode to each mark's time
// after the op's first (core::decode_timeline), every traced op names its marks in the kernels'
// order, and the bench's rows span of an HT op (bench/op_phases.hpp) comes from the marks the
// library names.
#include <cmath>
#include <string>
#include <vector>

#include "common/testing.hpp"
#include "core/op_trace.hpp"
#include "op_phases.hpp"
#include "switchyard/common/trace_marks.cuh"

using namespace switchyard;

namespace {

// Published slots of `op` with mark i at `ns[i]` (0: not reached), ready.
OpTimeline published(core::TracedOp op, const std::vector<uint64_t>& ns) {
    std::vector<uint64_t> slots(device::kTraceSlots, 0);
    for (size_t i = 0; i < ns.size(); ++i) slots[i] = ns[i];
    slots[device::kTraceReadySlot] = 1;
    return core::decode_timeline(slots.data(), core::traced_op_marks(op));
}

int index_of(const OpTimeline& timeline, const std::string& name) {
    for (size_t i = 0; i < timeline.marks.size(); ++i)
        if (timeline.marks[i] == name) return int(i);
    return -1;
}

}  // namespace

SY_TEST(OpTimelines, DecodeMarksAfterTheFirst) {
    const OpTimeline t = published(core::TracedOp::kLlCombine, {1'000'000, 1'002'500, 0, 1'010'000});
    SY_CHECK_EQ(t.op, std::string("ll combine"));
    SY_CHECK_EQ(t.marks.size(), size_t(device::kLlCombineMarks));
    SY_CHECK_EQ(t.us.size(), t.marks.size());
    SY_CHECK_EQ(t.us[0], 0.0);
    SY_CHECK_EQ(t.us[1], 2.5);
    SY_CHECK(std::isnan(t.us[2]));  // not reached
    SY_CHECK_EQ(t.us[3], 10.0);
    SY_CHECK_EQ(t.at("entered"), 2.5);
    SY_CHECK(std::isnan(t.at("no such mark")));
    // Without the first mark no time can be given.
    const OpTimeline none = published(core::TracedOp::kLlCombine, {0, 1'002'500});
    SY_CHECK(std::isnan(none.us[1]));
    SY_CHECK(OpTimeline{}.empty());
}

SY_TEST(OpTimelines, EveryOpNamesItsMarksInTheKernelsOrder) {
    const int counts[] = {device::kHtDispatchMarks, device::kHtCombineMarks,  device::kLlDispatchMarks,
                          device::kLlDispatchMarks, device::kLlDispatchMarks, device::kLlCombineMarks,
                          device::kLlCombineMarks,  device::kLlCombineMarks};
    for (int op = 0; op < int(core::kTracedOps); ++op) {
        const core::TracedOpMarks& marks = core::traced_op_marks(core::TracedOp(op));
        SY_CHECK_EQ(marks.num_marks, counts[op]);
        SY_CHECK_EQ(std::string(marks.mark_names[0]), std::string("start"));
        for (int i = 0; i < marks.num_marks; ++i) SY_CHECK(marks.mark_names[i] && *marks.mark_names[i]);
    }
    // The marks the bench's rows span reads sit where the kernels record them.
    const OpTimeline dispatch = published(core::TracedOp::kHtDispatch, {});
    SY_CHECK_EQ(index_of(dispatch, "counts in"), int(device::kHtDispatchCounts));
    SY_CHECK_EQ(index_of(dispatch, "sent"), int(device::kHtDispatchSent));
    const OpTimeline combine = published(core::TracedOp::kHtCombine, {});
    SY_CHECK_EQ(index_of(combine, "entered"), int(device::kHtCombineEntered));
    SY_CHECK_EQ(index_of(combine, "senders done"), int(device::kHtCombineSent));
}

SY_TEST(OpTimelines, HtRowsSpan) {
    std::vector<uint64_t> ns(device::kHtDispatchMarks, 0);
    ns[device::kHtRoutingStart] = 5'000'000;
    ns[device::kHtDispatchCounts] = 5'012'000;
    ns[device::kHtDispatchSent] = 5'090'500;
    ns[device::kHtReceiveEnd] = 5'100'000;
    const auto rows = bench::ht_rows_us(published(core::TracedOp::kHtDispatch, ns));
    SY_CHECK(rows.has_value());
    SY_CHECK_EQ(*rows, 78.5);

    std::vector<uint64_t> combine(device::kHtCombineMarks, 0);
    combine[device::kHtCombineStart] = 1'000;
    combine[device::kHtCombineEntered] = 4'000;
    combine[device::kHtCombineSent] = 64'000;
    SY_CHECK_EQ(bench::ht_rows_us(published(core::TracedOp::kHtCombine, combine)).value_or(-1), 60.0);

    // A mark not reached, marks out of order, or another op's timeline: no span.
    ns[device::kHtDispatchSent] = 0;
    SY_CHECK(!bench::ht_rows_us(published(core::TracedOp::kHtDispatch, ns)).has_value());
    combine[device::kHtCombineSent] = 3'000;
    SY_CHECK(!bench::ht_rows_us(published(core::TracedOp::kHtCombine, combine)).has_value());
    SY_CHECK(!bench::ht_rows_us(published(core::TracedOp::kLlCombine, {1, 2, 3, 4})).has_value());
}

SY_TEST_MAIN()
