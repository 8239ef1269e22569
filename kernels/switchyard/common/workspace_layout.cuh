// The control workspace at the front of every rank's symmetric buffer.
//
// It starts zeroed and stays zero-or-monotone: signals are sequence numbers that only grow, so no
// consumer has to re-zero them and CUDA-graph replays stay valid (sequence counters live here too,
// on the device, not in host variables baked into a graph). Host (sizing, zeroing) and device
// (addressing) use this one struct, so they agree on every offset.
#pragma once

#include "switchyard/common/base.cuh"

namespace switchyard::device {

// Local sequence counters (only the owning rank touches them).
enum Counter : int32_t {
    kCounterBarrier = 0,  // barriers issued on this buffer
    kCounterHt = 1,       // high-throughput ops
    kCounterLlSend = 2,   // low-latency send halves
    kCounterLlRecv = 3,   // low-latency receive halves
    kNumCounters = 16,
};

struct WorkspaceLayout {
    static constexpr int64_t kAlignment = 128;

    int32_t num_ranks = 0;
    int64_t counters_offset = 0;         // [kNumCounters] uint64, local
    int64_t poison_offset = 0;           // uint32, local: non-zero once an op failed
    int64_t barrier_signals_offset = 0;  // [R] uint64: slot s holds rank s's latest barrier sequence
    int64_t total_bytes = 0;

    SY_HOST_DEVICE static WorkspaceLayout make(int32_t num_ranks) {
        WorkspaceLayout layout;
        layout.num_ranks = num_ranks;
        int64_t offset = 0;
        layout.counters_offset = offset;
        offset += align_up(kNumCounters * 8, kAlignment);
        layout.poison_offset = offset;
        offset += kAlignment;
        layout.barrier_signals_offset = offset;
        offset += align_up(int64_t(num_ranks) * 8, kAlignment);
        layout.total_bytes = align_up(offset, 4096);
        return layout;
    }

    SY_HOST_DEVICE uint64_t* counters(uint8_t* base) const {
        return reinterpret_cast<uint64_t*>(base + counters_offset);
    }
    SY_HOST_DEVICE uint32_t* poison(uint8_t* base) const { return reinterpret_cast<uint32_t*>(base + poison_offset); }
    SY_HOST_DEVICE uint64_t* barrier_signals(uint8_t* base) const {
        return reinterpret_cast<uint64_t*>(base + barrier_signals_offset);
    }
};

}  // namespace switchyard::device
