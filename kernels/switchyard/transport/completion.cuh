// Completion of a high-throughput kernel: the last block to finish tells every peer that this
// rank's writes into it are complete (one monotone signal per source and destination).
#pragma once

#include "switchyard/common/base.cuh"
#include "switchyard/common/diagnostics.cuh"
#include "switchyard/common/peer_kernel_details.cuh"
#include "switchyard/common/ptx.cuh"
#include "switchyard/common/workspace_layout.cuh"
#include "switchyard/ht/ht_args.cuh"

namespace switchyard::device {

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)

namespace ht_detail {

// For a timed-out wait on `peer`: which HT op the peer's latest kernel runs, when it started, and
// whether the peer's buffer is poisoned.
SY_DEVICE PeerKernelDetails peer_details(const HtCommon& c, int peer) {
    return {c.layout.workspace.counters(c.peer_bases[peer]), kHtStartSlots,
            c.layout.workspace.poison(c.peer_bases[peer])};
}

// Whether peer q is masked (HtCommon::mask_unresponsive; ht/masking.cuh decides). Read after the
// op's decision, when the mask no longer changes during the op.
SY_DEVICE bool ht_peer_masked(const HtCommon& c, int q) {
    return c.mask_unresponsive && ptx::ld_relaxed_gpu(c.layout.workspace.ht_mask(c.local_base) + q) != 0;
}

// Raises this rank's slot of the [R] signal array at `done_offset` in every peer not masked.
SY_DEVICE void signal_unmasked_peers(const HtCommon& c, int64_t done_offset, uint64_t sequence) {
    for (int q = 0; q < c.num_ranks; ++q)
        if (!ht_peer_masked(c, q))
            ptx::st_relaxed_sys(reinterpret_cast<uint64_t*>(c.peer_bases[q] + done_offset) + c.rank,
                                sequence);
}

// Called by every thread of every block at its end: true in thread 0 of the grid's last block to
// get here, once every block's writes are ordered before that thread's later stores, at system
// scope (kSystem: the writes went to peers, whose readers the signal releases) or GPU scope.
template <bool kSystem>
SY_DEVICE bool last_block_to_finish(uint64_t* counters) {
    auto fence = [] {
        if constexpr (kSystem)
            ptx::fence_acq_rel_sys();
        else
            ptx::fence_acq_rel_gpu();
    };
    if constexpr (kSystem) ptx::fence_acq_rel_sys();
    __syncthreads();
    if (threadIdx.x != 0) return false;
    // The fence after the barrier is what makes the whole block's writes (observed through the
    // barrier) precede this arrival: fences are cumulative only over writes the fencing thread has
    // observed, so the per-thread fences above are not enough on their own.
    fence();
    const unsigned long long finished =
        atomicAdd(reinterpret_cast<unsigned long long*>(counters + kCounterHtBlocksDone), 1ull);
    if (finished + 1 != gridDim.x) return false;
    fence();
    return true;
}

// last_block_to_finish for a finish the whole block shares: true in every thread of the grid's
// last block (thread 0's view, as there, passed on through the block barrier).
template <bool kSystem>
SY_DEVICE bool block_is_last_to_finish(uint64_t* counters) {
    __shared__ int last;
    const bool mine = last_block_to_finish<kSystem>(counters);
    if (threadIdx.x == 0) last = mine ? 1 : 0;
    __syncthreads();
    return last != 0;
}

// The last block, after its signals: resets the kernel's counters and advances the op sequence
// (and `op_counter`, if >= 0, to it).
SY_DEVICE void end_op(uint64_t* counters, uint64_t sequence, int32_t op_counter) {
    counters[kCounterHtBlocksDone] = 0;
    counters[kCounterHtNextItem] = counters[kCounterHtNextSendItem] = 0;
    if (op_counter >= 0) counters[op_counter] = sequence;
    counters[kCounterHt] = sequence;
}

// Called by every thread of every block after its writes. `done_offset` is the workspace offset
// of the [R] signal array to raise in each unmasked peer (dispatch-done); `op_counter`, a counter the last
// block also sets to the sequence (or -1).
SY_DEVICE void finish_and_signal(const HtCommon& c, uint64_t* counters, int64_t done_offset,
                                 uint64_t sequence, int32_t op_counter = -1) {
    if (!last_block_to_finish<true>(counters)) return;
    // A failed op must not look complete to the peers: they time out and report instead. The
    // system fence that ended last_block_to_finish makes each relaxed store a release.
    if (!is_poisoned(c.diagnostics)) signal_unmasked_peers(c, done_offset, sequence);
    end_op(counters, sequence, op_counter);
}

// The end of a kernel whose data needs no completion signal (the combine: the arrival counters
// carry its rows' completion, and its other writes are local): every thread of every block
// calls it; the last block resets the kernel's counters and advances the op sequence, with
// GPU-scope ordering only (no system fences). It still leaves `done_offset`'s marker at each peer,
// without a fence: a progress record for diagnostics, not a signal anyone waits for.
SY_DEVICE void finish_locally(const HtCommon& c, uint64_t* counters, int64_t done_offset, uint64_t sequence) {
    if (!last_block_to_finish<false>(counters)) return;
    if (!is_poisoned(c.diagnostics)) signal_unmasked_peers(c, done_offset, sequence);
    end_op(counters, sequence, -1);
}

}  // namespace ht_detail

#endif

}  // namespace switchyard::device
