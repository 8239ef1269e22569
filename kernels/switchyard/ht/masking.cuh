// HT masking (BufferConfig::ht_mask_unresponsive_ranks): which peers an op goes on with.
//
// An op's first exchange with each peer decides: the dispatch's counts entry, the combine's entry
// word (with masking every combine announces its entry, also right after a dispatch). Block 0
// waits for each peer not masked yet, bounded and without an error record; a peer that has not
// come within the timeout is masked, and block 0 publishes its decision for the op, which the
// other blocks wait for, so every block of the grid agrees. Masked peers are then skipped by the
// op and by later ops: nothing is sent to them (a token's rows for one are dropped, its combine
// slot stays empty), nothing is expected from them (their rows are absent), no signal goes to
// them (transport/completion.cuh, ht_peer_masked). A peer that came takes part in the whole op: if
// it stops later in the op, the waits on it end in a TimeoutError, as without masking.
#pragma once

#include "switchyard/common/base.cuh"
#include "switchyard/common/diagnostics.cuh"
#include "switchyard/common/ptx.cuh"
#include "switchyard/common/workspace_layout.cuh"
#include "switchyard/ht/ht_args.cuh"
#include "switchyard/transport/peer_masking.cuh"

namespace switchyard::device {

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)

namespace ht_detail {

// Every thread of every block, with masking on: decides the peers of op `sequence` (above);
// `signal(q)` is the word of this rank's workspace that reaches `sequence` once peer q has entered
// the op. False (in every thread) when the op failed (the buffer is poisoned).
template <typename Signal>
SY_DEVICE bool decide_op_peers(const HtCommon& c, uint64_t sequence, int32_t phase, Signal signal) {
    uint32_t* mask = c.layout.workspace.ht_mask(c.local_base);
    uint64_t* decided = c.layout.workspace.ht_mask_decided(c.local_base);
    if (blockIdx.x == 0) {
        for (int q = threadIdx.x; q < c.num_ranks; q += blockDim.x) {
            if (q == c.rank || ptx::ld_relaxed_gpu(mask + q) != 0) continue;
            if (!wait_bounded(signal(q), sequence, c.diagnostics) && !is_poisoned(c.diagnostics))
                atomicExch(mask + q, 1u);
        }
        __syncthreads();
        if (threadIdx.x == 0) publish_mask_decision(decided, sequence);
    } else if (threadIdx.x == 0) {
        follow_mask_decision(decided, sequence, c.diagnostics, phase, c.rank);
    }
    return __syncthreads_and(!is_poisoned(c.diagnostics)) != 0;
}

}  // namespace ht_detail

#endif

}  // namespace switchyard::device
