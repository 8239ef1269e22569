// See workspace_dump.hpp.
#include "common/workspace_dump.hpp"

#include <cuda_runtime_api.h>

#include <sstream>
#include <vector>

#include "switchyard/buffer.hpp"
#include "switchyard/common/workspace_layout.cuh"
#include "switchyard/ll/ll_layout.cuh"

namespace switchyard::testing {

std::string describe_workspace(const Buffer& buffer) {
    const int R = buffer.num_ranks();
    const auto layout = device::WorkspaceLayout::make(R, (buffer.config().max_experts + R - 1) / R);
    std::vector<uint8_t> bytes(static_cast<size_t>(layout.total_bytes));
    std::ostringstream out;
    out << "  workspace of rank " << buffer.rank() << ":";
    if (cudaMemcpy(bytes.data(), buffer.local_memory(), bytes.size(), cudaMemcpyDeviceToHost) !=
        cudaSuccess) {
        (void)cudaGetLastError();
        out << " (unreadable)\n";
        return out.str();
    }
    uint8_t* base = bytes.data();
    const uint64_t* counters = layout.counters(base);
    out << " counters barrier=" << counters[device::kCounterBarrier] << " (latest kernel #"
        << counters[device::kCounterBarrierRunning] << " started at "
        << counters[device::kCounterBarrierStartNs] << " ns)"
        << " ht=" << counters[device::kCounterHt] << " (latest kernel #"
        << counters[device::kCounterHtRunning] << " started at " << counters[device::kCounterHtStartNs]
        << " ns)"
        << " ll_dispatch_send/recv=" << counters[device::kCounterLlDispatchSend] << "/"
        << counters[device::kCounterLlDispatchRecv]
        << " ll_combine_send/recv=" << counters[device::kCounterLlCombineSend] << "/"
        << counters[device::kCounterLlCombineRecv] << " ht_blocks=" << counters[device::kCounterHtBlocksDone]
        << " ll_blocks=" << counters[device::kCounterLlBlocksDone] << " poison=" << *layout.poison(base)
        << "\n";
    auto row = [&](const char* name, auto value_of) {
        out << "    " << name << ":";
        for (int s = 0; s < R; ++s) out << " " << value_of(s);
        out << "\n";
    };
    row("barrier from", [&](int s) { return layout.barrier_signals(base)[s]; });
    row("ht notify from",
        [&](int s) { return *reinterpret_cast<uint64_t*>(layout.ht_notify_entry(base, s)); });
    row("ht dispatch done from", [&](int s) { return layout.ht_dispatch_done(base)[s]; });
    row("ht combine entry from", [&](int s) { return layout.ht_combine_entry(base)[s]; });
    row("ht combine done from", [&](int s) { return layout.ht_combine_done(base)[s]; });
    const auto signals = device::LlSignalLayout::make(R);
    for (int kind = 0; kind < 2; ++kind)
        for (int set = 0; set < 2; ++set) {
            const std::string name = std::string(kind == 0 ? "ll dispatch" : "ll combine") + " set " +
                                     std::to_string(set) + " from";
            row(name.c_str(), [&](int s) { return signals.arrivals(layout.ll_signals(base), kind, set)[s]; });
        }
    return out.str();
}

}  // namespace switchyard::testing
