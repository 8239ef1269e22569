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

struct BarrierArgs {
    uint8_t* const* peer_bases;  // [R] each rank's buffer base as mapped here (device array)
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
    __syncthreads();  // everyone read the old value before thread 0 advances it

    // Make this rank's earlier writes (previous kernels in the stream) visible before signalling.
    ptx::fence_acq_rel_sys();
    for (int peer = threadIdx.x; peer < args.num_ranks; peer += kNumThreads) {
        uint64_t* slot = args.workspace.barrier_signals(args.peer_bases[peer]) + args.rank;
        ptx::st_release_sys(slot, sequence);
    }
    const uint64_t* own_slots = args.workspace.barrier_signals(args.local_base);
    for (int peer = threadIdx.x; peer < args.num_ranks; peer += kNumThreads) {
        if (!wait_at_least(own_slots + peer, sequence, args.diagnostics, kPhaseBarrier, peer)) break;
    }
    __syncthreads();
    if (threadIdx.x == 0) *counter = sequence;
}

#endif

}  // namespace switchyard::device
