// Cross-rank barrier over mapped memory (one block).
//
// Thread r publishes this barrier's sequence number into peer r's slot for this rank (release,
// system scope), then waits until this rank's slot for peer r holds at least that number. The
// sequence comes from a device counter, so a captured graph replays correctly. A peer that never
// arrives ends in an error record naming it (phase "barrier").
#pragma once

#include "switchyard/common/base.cuh"
#include "switchyard/common/diagnostics.cuh"
#include "switchyard/common/peer_kernel_details.cuh"
#include "switchyard/common/ptx.cuh"
#include "switchyard/common/workspace_layout.cuh"

namespace switchyard::device {

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

template <int kNumThreads>
__global__ void __launch_bounds__(kNumThreads, 1) barrier_kernel(const __grid_constant__ BarrierArgs args) {
    uint64_t* counter = args.workspace.counters(args.local_base) + kCounterBarrier;
    const uint64_t sequence = *counter + 1;
    // A rare failure with co-located ranks looks like one rank signalling into
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
    if (threadIdx.x == 0)
        mark_kernel_start(args.workspace.counters(args.local_base), kBarrierStartSlots, sequence);

    // Make this rank's earlier writes (previous kernels in the stream) visible before signalling.
    ptx::fence_acq_rel_sys();
    for (int peer = threadIdx.x; peer < args.num_ranks; peer += kNumThreads) {
        uint64_t* slot = args.workspace.barrier_signals(args.peer_bases[peer]) + args.rank;
        ptx::st_relaxed_sys(slot, sequence);  // the fence above made it a release
    }
    const uint64_t* own_slots = args.workspace.barrier_signals(args.local_base);
    for (int peer = threadIdx.x; peer < args.num_ranks; peer += kNumThreads) {
        // On a timeout: when the peer's latest barrier kernel started (or that it never did), and
        // whether the peer's buffer is poisoned.
        const PeerKernelDetails details{args.workspace.counters(args.peer_bases[peer]), kBarrierStartSlots,
                                        args.workspace.poison(args.peer_bases[peer])};
        if (!wait_at_least(own_slots + peer, sequence, args.diagnostics, kPhaseBarrier, peer, details)) break;
    }
    __syncthreads();
    if (threadIdx.x == 0) *counter = sequence;
}

#endif

}  // namespace switchyard::device
