#include "core/op_trace.hpp"

#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <sstream>

#include "switchyard/common/trace_marks.cuh"
#include "util/env_knobs.hpp"
#include "util/mapped_host.hpp"

namespace switchyard {

double OpTimeline::at(std::string_view name) const {
    for (size_t i = 0; i < marks.size() && i < us.size(); ++i)
        if (marks[i] == name) return us[i];
    return std::numeric_limits<double>::quiet_NaN();
}

}  // namespace switchyard

namespace switchyard::core {

const TracedOpMarks& traced_op_marks(TracedOp op) {
    static const char* const kHtDispatch[device::kHtDispatchMarks] = {"start",
                                                                      "routing end",
                                                                      "routing loaded",
                                                                      "routing published",
                                                                      "routing looked back",
                                                                      "dispatch start",
                                                                      "routing done",
                                                                      "notified",
                                                                      "counts in",
                                                                      "sent",
                                                                      "first sent",
                                                                      "signalled",
                                                                      "rows in",
                                                                      "end",
                                                                      "receive start",
                                                                      "receive end",
                                                                      "first put",
                                                                      "first landed",
                                                                      "last landed",
                                                                      "first staged",
                                                                      "first run"};
    static const char* const kHtCombine[device::kHtCombineMarks] = {
        "start", "entered",   "senders done", "publisher done", "reduce done", "first reduce done",
        "end",   "first put", "first landed", "last landed"};
    static const char* const kLlDispatch[device::kLlDispatchMarks] = {
        "start", "entered", "routed", "sent", "arrived", "waited", "planned", "received", "end"};
    static const char* const kLlCombine[device::kLlCombineMarks] = {"start",   "entered", "planned", "sent",
                                                                    "arrived", "waited",  "reduced", "end"};
    static const TracedOpMarks kMarks[kTracedOps] = {
        {"ht dispatch", kHtDispatch, device::kHtDispatchMarks},
        {"ht combine", kHtCombine, device::kHtCombineMarks},
        {"ll dispatch send", kLlDispatch, device::kLlDispatchMarks},
        {"ll dispatch receive", kLlDispatch, device::kLlDispatchMarks},
        {"ll dispatch", kLlDispatch, device::kLlDispatchMarks},
        {"ll combine send", kLlCombine, device::kLlCombineMarks},
        {"ll combine receive", kLlCombine, device::kLlCombineMarks},
        {"ll combine", kLlCombine, device::kLlCombineMarks}};
    return kMarks[size_t(op)];
}

OpTimeline decode_timeline(const volatile uint64_t* slots, const TracedOpMarks& marks) {
    OpTimeline timeline;
    timeline.op = marks.name;
    const uint64_t first = slots[0];
    timeline.start_ns = first;
    for (int mark = 0; mark < marks.num_marks; ++mark) {
        timeline.marks.emplace_back(marks.mark_names[mark]);
        const uint64_t value = slots[mark];
        timeline.us.push_back(value == 0 || first == 0 ? std::numeric_limits<double>::quiet_NaN()
                                                       : double(int64_t(value - first)) * 1e-3);
    }
    return timeline;
}

OpTracer::OpTracer(uint64_t* counters, int rank)
    : counters_(counters),
      rank_(rank),
      enabled_(util::knob_flag(util::Knob::kTrace)),
      print_(enabled_) {  // SWITCHYARD_TRACE traces every op and prints it
    if (enabled_) allocate_slots();
}

void OpTracer::allocate_slots() {
    if (host_slots_ != nullptr) return;
    const auto slots = util::allocate_mapped_host<uint64_t>(kTracedOps * device::kTraceSlots);
    host_slots_ = slots.host;
    device_slots_ = slots.device;
}

void OpTracer::set_enabled(bool on) {
    if (on) allocate_slots();
    enabled_ = on;
}

OpTracer::~OpTracer() {
    if (host_slots_) cudaFreeHost(host_slots_);
}

void OpTracer::collect(TracedOp op) {
    if (host_slots_ == nullptr) return;
    volatile uint64_t* slots = host_slots_ + int64_t(op) * device::kTraceSlots;
    if (slots[device::kTraceReadySlot] != 1) return;
    OpTimeline timeline = decode_timeline(slots, traced_op_marks(op));
    for (int slot = 0; slot < device::kTraceSlots; ++slot) slots[slot] = 0;
    if (print_) {
        std::ostringstream line;
        line << "[switchyard trace] rank " << rank_ << " " << timeline.op << " (us after its first mark, at "
             << timeline.start_ns / 1000 << " us on the GPU's clock):";
        for (size_t mark = 1; mark < timeline.marks.size(); ++mark) {
            line << " " << timeline.marks[mark] << " ";
            if (std::isnan(timeline.us[mark]))
                line << "-";
            else
                line << timeline.us[mark];
        }
        line << "\n";
        std::fputs(line.str().c_str(), stderr);
    }
    latest_[size_t(op)] = std::move(timeline);
}

device::OpTrace OpTracer::begin(TracedOp op) {
    if (!enabled_) return {nullptr, nullptr};
    collect(op);
    return {device_slots_ + int64_t(op) * device::kTraceSlots, counters_ + device::kCounterTraceFirst};
}

OpTimeline OpTracer::take_latest(TracedOp op) {
    collect(op);
    OpTimeline timeline = std::move(latest_[size_t(op)]);
    latest_[size_t(op)] = OpTimeline{};
    return timeline;
}

}  // namespace switchyard::core
