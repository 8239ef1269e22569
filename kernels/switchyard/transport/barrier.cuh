// Cross-rank barrier over mapped memory (one block), for the ranks of one node.
//
// Thread r publishes this barrier's sequence number into peer r's slot for this rank (release,
// system scope), then waits until this rank's slot for peer r holds at least that number. The
// sequence comes from a device counter, so a captured graph replays correctly. A peer that never
// arrives ends in an error record naming it (phase "barrier"). A buffer spanning nodes meets its
// rail peers over the network first (transport/net_barrier.cuh), then its node here.
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
    // The ranks met over NVLink: [first_peer, first_peer + num_peers) (all on one node, this node's
    // ranks of a buffer spanning nodes).
    int32_t first_peer;
    int32_t num_peers;
    Diagnostics diagnostics;
};

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)

namespace barrier_detail {

// Whether the peer table is the one the host wrote (checked before writing through it: a rare
// failure with co-located ranks looked like one rank signalling into wrong addresses). Every
// thread gets the answer; a bad table is reported.
SY_DEVICE bool peer_table_ok(const BarrierArgs& args) {
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
    __syncthreads();
    return table_ok != 0;
}

// Publishes `sequence` at every peer of the node and waits for theirs (every thread calls it).
template <int kNumThreads>
SY_DEVICE void meet_node(const BarrierArgs& args, uint64_t sequence) {
    // Make this rank's earlier writes (previous kernels in the stream) visible before signalling.
    ptx::fence_acq_rel_sys();
    const int end = args.first_peer + args.num_peers;
    for (int peer = args.first_peer + int(threadIdx.x); peer < end; peer += kNumThreads) {
        uint64_t* slot = args.workspace.barrier_signals(args.peer_bases[peer]) + args.rank;
        ptx::st_relaxed_sys(slot, sequence);  // the fence above made it a release
    }
    const uint64_t* own_slots = args.workspace.barrier_signals(args.local_base);
    for (int peer = args.first_peer + int(threadIdx.x); peer < end; peer += kNumThreads) {
        // On a timeout: when the peer's latest barrier kernel started (or that it never did), and
        // whether the peer's buffer is poisoned.
        const PeerKernelDetails details{args.workspace.counters(args.peer_bases[peer]), kBarrierStartSlots,
                                        args.workspace.poison(args.peer_bases[peer])};
        if (!wait_at_least(own_slots + peer, sequence, args.diagnostics, kPhaseBarrier, peer, details)) break;
    }
}

// One barrier (every thread of the block calls it): the sequence from the barrier counter, the
// peer table checked, `meet_first(sequence)` (true in every thread to go on: the ranks met before
// the node, none on one node), the node met, the counter advanced.
template <int kNumThreads, class MeetFirst>
SY_DEVICE void run_barrier(const BarrierArgs& args, MeetFirst meet_first) {
    uint64_t* counter = args.workspace.counters(args.local_base) + kCounterBarrier;
    const uint64_t sequence = *counter + 1;
    // Everyone read the old value (the table check's barrier) before thread 0 advances it.
    if (!peer_table_ok(args)) return;
    if (threadIdx.x == 0)
        mark_kernel_start(args.workspace.counters(args.local_base), kBarrierStartSlots, sequence);
    // A rank that failed to meet the others first does not meet its node: its node-mates time out
    // naming it, as the rank it waited for is named in its own record.
    if (__syncthreads_and(meet_first(sequence))) meet_node<kNumThreads>(args, sequence);
    __syncthreads();
    if (threadIdx.x == 0) *counter = sequence;
}

}  // namespace barrier_detail

template <int kNumThreads>
__global__ void __launch_bounds__(kNumThreads, 1) barrier_kernel(const __grid_constant__ BarrierArgs args) {
    barrier_detail::run_barrier<kNumThreads>(args, [](uint64_t) { return true; });
}

#endif

}  // namespace switchyard::device
