// Cross-rank barrier over mapped memory (one block).
//
// Thread r publishes this barrier's sequence number into peer r's slot for this rank (release,
// system scope), then waits until this rank's slot for peer r holds at least that number. The
// sequence comes from a device counter, so a captured graph replays correctly. A peer that never
// arrives ends in an error record naming it (phase "barrier").
#pragma once

#include "switchyard/common/base.cuh"
#include "switchyard/common/diagnostics.cuh"
#include "switchyard/common/ptx.cuh"
#include "switchyard/common/workspace_layout.cuh"

namespace switchyard::device {

constexpr int64_t kBarrierPeerNeverStarted = -(int64_t(1) << 62);  // error detail 1 (wait_for_peer)

struct BarrierArgs {
    uint8_t* const* peer_bases;  // [R] each rank's buffer base as mapped here (device array)
    uint64_t peer_table_digest;  // XOR of the table's entries as the host wrote them
    uint8_t* local_base;
    WorkspaceLayout workspace;
    int32_t rank;
    int32_t num_ranks;
    Diagnostics diagnostics;
};

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)

// Waits until this rank's slot for `peer` holds `sequence`. On timeout the error record also says
// which barrier the peer's latest kernel on this buffer runs and how long ago it started (detail 0
// and 1; kBarrierPeerNeverStarted if it never started one; on another GPU the two global timers
// may differ a little), so a peer that never ran is told apart from one whose signal went astray.
SY_DEVICE bool wait_for_peer(const BarrierArgs& args, const uint64_t* slot, int peer, uint64_t sequence) {
    if (ptx::ld_acquire_sys(slot) >= sequence) return true;
    const uint64_t start = ptx::globaltimer_ns();
    for (uint32_t spin = 1;; ++spin) {
        const uint64_t value = ptx::ld_acquire_sys(slot);
        if (value >= sequence) return true;
        if ((spin & 63u) != 0) continue;
        if (is_poisoned(args.diagnostics)) return false;
        const uint64_t now = ptx::globaltimer_ns();
        if (now - start <= args.diagnostics.timeout_ns) continue;
        const uint64_t* peer_counters = args.workspace.counters(args.peer_bases[peer]);
        const uint64_t running = ptx::ld_relaxed_sys(peer_counters + kCounterBarrierRunning);
        const uint64_t started = ptx::ld_relaxed_sys(peer_counters + kCounterBarrierStartNs);
        report_error(args.diagnostics, kErrorTimeout, kPhaseBarrier, peer, sequence, value, now - start,
                     int64_t(running), started != 0 ? int64_t(now - started) : kBarrierPeerNeverStarted);
        return false;
    }
}

template <int kNumThreads>
__global__ void __launch_bounds__(kNumThreads, 1) barrier_kernel(const __grid_constant__ BarrierArgs args) {
    uint64_t* counter = args.workspace.counters(args.local_base) + kCounterBarrier;
    const uint64_t sequence = *counter + 1;
    // A rare failure with co-located ranks (design notes §3) looks like one rank signalling into
    // wrong addresses: check the peer table against the host's digest before writing through it.
    __shared__ int table_ok;
    if (threadIdx.x == 0) {
        uint64_t digest = 0;
        for (int peer = 0; peer < args.num_ranks; ++peer)
            digest ^= reinterpret_cast<uint64_t>(args.peer_bases[peer]);
        table_ok = digest == args.peer_table_digest && args.peer_bases[args.rank] == args.local_base;
        if (!table_ok)
            report_error(args.diagnostics, kErrorPeerTable, kPhaseBarrier, args.rank, args.peer_table_digest,
                         digest, 0);
    }
    __syncthreads();  // everyone read the old value before thread 0 advances it
    if (!table_ok) return;
    if (threadIdx.x == 0) {
        ptx::st_relaxed_sys(args.workspace.counters(args.local_base) + kCounterBarrierStartNs,
                            ptx::globaltimer_ns());
        ptx::st_relaxed_sys(args.workspace.counters(args.local_base) + kCounterBarrierRunning, sequence);
    }

    // Make this rank's earlier writes (previous kernels in the stream) visible before signalling.
    ptx::fence_acq_rel_sys();
    for (int peer = threadIdx.x; peer < args.num_ranks; peer += kNumThreads) {
        uint64_t* slot = args.workspace.barrier_signals(args.peer_bases[peer]) + args.rank;
        ptx::st_release_sys(slot, sequence);
    }
    const uint64_t* own_slots = args.workspace.barrier_signals(args.local_base);
    for (int peer = threadIdx.x; peer < args.num_ranks; peer += kNumThreads) {
        if (!wait_for_peer(args, own_slots + peer, peer, sequence)) break;
    }
    __syncthreads();
    if (threadIdx.x == 0) *counter = sequence;
}

#endif

}  // namespace switchyard::device
