// High-throughput combine, direct topology. One kernel; each block's warps split into senders, one
// publisher and reducers, so the home reduces tokens while the rows of later tokens are still
// crossing. Its roles:
//
//  enter          tell every peer this rank entered the combine (its combine region is free to
//                 be written) and wait until every peer has (enter_combine); with masking, the
//                 peers that do not come are masked (ht/masking.cuh);
//  send_rows      warps [0, kSendWarps): rows back to their homes (ht/combine_send.cuh);
//  publish_rows   warp kSendWarps: makes the senders' rows visible and raises the homes' arrival
//                 counters (ht/combine_publish.cuh);
//  reduce_home    the other warps, joined by the senders and the publisher once their rows are out
//                 when the chunks are claimed (ht/combine_reduce.cuh);
//  finish         the last block advances the op sequence and tells every peer it is done.
//
// Template arguments (src/launch/ht_combine_launch.cpp): kWarps per block, kSendWarps of them
// sending, kSendGroup rows per sender claim and publication, and the shape (HtCombineShape:
// hidden, top-k and the reduction).
#pragma once

#include "switchyard/common/base.cuh"
#include "switchyard/common/diagnostics.cuh"
#include "switchyard/common/op_trace.cuh"
#include "switchyard/common/peer_kernel_details.cuh"
#include "switchyard/common/ptx.cuh"
#include "switchyard/common/trace_marks.cuh"
#include "switchyard/common/workspace_layout.cuh"
#include "switchyard/ht/combine_publish.cuh"
#include "switchyard/ht/combine_reduce.cuh"
#include "switchyard/ht/combine_send.cuh"
#include "switchyard/ht/ht_args.cuh"
#include "switchyard/ht/masking.cuh"
#include "switchyard/transport/completion.cuh"

namespace switchyard::device {

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)

namespace ht_detail {

// Every thread: rows may go to a home once its combine region is free, i.e. once it has entered
// this op. Right after a dispatch that is already known: every peer's counts for that dispatch
// arrived here, so every peer had finished its earlier ops, the last combine that read its region
// included (ops on one buffer run in lock step). Otherwise the ranks announce entry, and so they
// always do with masking: a peer may have stopped after the dispatch, and its entry is where the
// combine decides to go on without it. False when a wait failed (the error is recorded).
SY_DEVICE bool enter_combine(const HtCommon& c, const uint64_t* counters, uint64_t sequence) {
    __shared__ int ok;
    if (threadIdx.x == 0) ok = 1;
    const bool after_dispatch = counters[kCounterHtLastDispatch] + 1 == sequence && !c.mask_unresponsive;
    if (!after_dispatch) {
        // After a failed op the buffer is poisoned: announce nothing, so peers report the stall.
        if (blockIdx.x == 0 && !is_poisoned(c.diagnostics))
            for (int peer = threadIdx.x; peer < c.num_ranks; peer += blockDim.x)
                if (!ht_peer_masked(c, peer))
                    ptx::st_release_sys(c.layout.workspace.ht_combine_entry(c.peer_bases[peer]) + c.rank,
                                        sequence);
        __syncthreads();
        if (c.mask_unresponsive)
            return decide_op_peers(c, sequence, kPhaseHtCombine, [&](int32_t peer) -> const uint64_t* {
                return c.layout.workspace.ht_combine_entry(c.local_base) + peer;
            });
        for (int peer = threadIdx.x; peer < c.num_ranks; peer += blockDim.x)
            if (!wait_for_sequence(c.layout.workspace.ht_combine_entry(c.local_base) + peer, sequence,
                                   c.diagnostics, kPhaseHtCombine, peer, peer_details(c, peer)))
                ok = 0;
    }
    __syncthreads();
    return ok != 0;
}

// Every thread: the per-source row offsets of the dispatch this combine answers, read once per
// block into shared memory (`row_offsets` [R + 1]).
SY_DEVICE void load_row_offsets(const HtCombineArgs& args, int32_t* row_offsets) {
    const HtCommon& c = args.common;
    const HtRecvInfoLayout info{c.num_ranks, c.local_experts};
    for (int s = threadIdx.x; s <= c.num_ranks; s += blockDim.x)
        row_offsets[s] = args.recv_info[info.row_offsets() + s];
    __syncthreads();
}

}  // namespace ht_detail

template <int kWarps, int kSendWarps, int kSendGroup, int kHidden, int kTopk, int kMode>
__global__ void __launch_bounds__(32 * kWarps, 1)
    ht_combine_kernel(const __grid_constant__ HtCombineArgs args) {
    using Shape = HtCombineShape<kHidden, kTopk, kMode>;
    static_assert(kSendWarps >= 1 && kSendWarps + 2 <= kWarps, "senders, a publisher and reducers");
    const HtCommon& c = args.common;
    uint64_t* counters = c.layout.workspace.counters(c.local_base);
    const uint64_t sequence = counters[kCounterHt] + 1;
    if (threadIdx.x == 0) trace_mark(args.trace, kHtCombineStart, true);
    if (blockIdx.x == 0 && threadIdx.x == 0) mark_kernel_start(counters, kHtStartSlots, sequence);
    const int warp = int(threadIdx.x / 32);
    __shared__ ht_detail::PublishQueues<kSendWarps> publish_queues;
    publish_queues.init();

    const bool ok = ht_detail::enter_combine(c, counters, sequence);
    if (threadIdx.x == 0) trace_mark(args.trace, kHtCombineEntered);
    __shared__ int32_t row_offsets[kHtMaxRanks + 1];
    ht_detail::load_row_offsets(args, row_offsets);
    if (ok && warp < kSendWarps) {
        ht_detail::send_rows<Shape, kSendWarps, kSendGroup>(args, counters, row_offsets, publish_queues,
                                                            warp);
    } else if (ok && warp == kSendWarps) {
        ht_detail::publish_rows(c, publish_queues);
        if (ptx::lane_id() == 0) trace_mark(args.trace, kHtCombinePublished);
    }
    if (ok) ht_detail::reduce_home<Shape, kWarps, kSendWarps>(args, counters, row_offsets[c.rank]);

    // finish (no system fences: the arrival counters carry the rows' completion, finish_locally)
    trace_finish(args.trace, kHtCombineEnd, kHtCombineMarks, kHtCombineFirstMarks);
    ht_detail::finish_locally(c, counters, c.layout.workspace.ht_combine_done_offset, sequence);
}

#endif

}  // namespace switchyard::device
