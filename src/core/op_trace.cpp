#include "core/op_trace.hpp"

#include <cuda_runtime_api.h>

#include <cstdio>
#include <sstream>

#include "util/env_knobs.hpp"
#include "util/mapped_host.hpp"

namespace switchyard::core {

OpTracer::OpTracer(uint64_t* counters, int rank) : counters_(counters), rank_(rank) {}

OpTracer::~OpTracer() {
    if (host_slots_) cudaFreeHost(host_slots_);
}

device::OpTrace OpTracer::begin(TracedOp op, const TracedOpMarks& marks) {
    static const bool enabled = util::knob_flag(util::Knob::kTrace);  // read once: no lookups per op
    if (!enabled) return {nullptr, nullptr};
    constexpr int64_t kOps = int64_t(TracedOp::kCount);
    if (host_slots_ == nullptr) {
        const auto slots = util::allocate_mapped_host<uint64_t>(kOps * device::kTraceSlots);
        host_slots_ = slots.host;
        device_slots_ = slots.device;
    }
    const int64_t first = int64_t(op) * device::kTraceSlots;
    volatile uint64_t* slots = host_slots_ + first;
    if (slots[device::kTraceReadySlot] == 1) {
        std::ostringstream line;
        line << "[switchyard trace] rank " << rank_ << " " << marks.name << " (us after its first mark):";
        for (int mark = 1; mark < marks.num_marks; ++mark) {
            line << " " << marks.mark_names[mark] << " ";
            if (slots[mark] == 0 || slots[0] == 0)
                line << "-";
            else
                line << double(int64_t(slots[mark] - slots[0])) * 1e-3;
        }
        line << "\n";
        std::fputs(line.str().c_str(), stderr);
        for (int slot = 0; slot < device::kTraceSlots; ++slot) slots[slot] = 0;
    }
    return {device_slots_ + first, counters_ + device::kCounterTraceFirst};
}

}  // namespace switchyard::core
