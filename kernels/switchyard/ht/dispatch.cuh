// High-throughput dispatch, direct topology (one NVLink domain). One kernel, its roles in order:
//
//  exchange_counts    every peer gets this rank's row counts (sent by the routing kernel as soon as
//                     it has the totals, or here by block 0 when no routing kernel ran: a cached
//                     dispatch); every block waits until all peers' counts carry this op's tag
//                     (ht/dispatch_counts.cuh);
//  publish_recv_info  block 0: the receiver-side summary (ht/dispatch_counts.cuh);
//  send_tokens        every warp: tokens to their destinations' rows (ht/dispatch_send.cuh);
//  finish             the last block to finish publishes "done" to every destination; the op ends
//                     when every source's "done" has arrived here (wait_for_rows).
//
// Rows land in the receive region in final rank-major order, so the rank-major output is a view
// of the buffer; the receive kernel expands expert-major layouts from it.
//
// Template arguments (the launcher spells them, src/launch/ht_dispatch_launch.cpp): kWarps per
// block, each with two shared-memory stages of one record's payload and scales; kClaimTokens per
// claim (WarpTokens); the shape (HtDispatchShape); and whether the receive layout is the masked one
// (the expert offsets publish_recv_info writes).
#pragma once

#include "switchyard/common/base.cuh"
#include "switchyard/common/diagnostics.cuh"
#include "switchyard/common/op_trace.cuh"
#include "switchyard/common/peer_kernel_details.cuh"
#include "switchyard/common/ptx.cuh"
#include "switchyard/common/trace_marks.cuh"
#include "switchyard/common/workspace_layout.cuh"
#include "switchyard/ht/dispatch_counts.cuh"
#include "switchyard/ht/dispatch_send.cuh"
#include "switchyard/ht/ht_args.cuh"
#include "switchyard/transport/completion.cuh"

namespace switchyard::device {

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)

namespace ht_detail {

// The first warp: each of the block's warps gets two stage barriers (one arrival each: the lane
// that issues a stage's bulk load). The kernel's block barrier after it publishes them.
template <int kWarps>
SY_DEVICE void init_stage_barriers(uint64_t (*barriers)[2]) {
    const uint32_t lane = ptx::lane_id();
    if (threadIdx.x < 32 && lane < 2 * kWarps) {
        ptx::mbarrier_init(&barriers[lane / 2][lane % 2], 1);
        ptx::fence_mbarrier_init();
    }
}

// Block 0, once this rank's own rows are out: the op is complete here once every unmasked
// source's rows have landed (its "done" signal, raised after its rows).
SY_DEVICE void wait_for_rows(const HtDispatchArgs& args, uint64_t sequence) {
    const HtCommon& c = args.common;
    for (int source = threadIdx.x; source < c.num_ranks; source += blockDim.x) {
        if (ht_peer_masked(c, source)) continue;
        wait_for_sequence(c.layout.workspace.ht_dispatch_done(c.local_base) + source, sequence, c.diagnostics,
                          kPhaseHtData, source, peer_details(c, source));
        trace_mark(args.trace, kHtDispatchArrived);
    }
}

}  // namespace ht_detail

template <int kWarps, int kClaimTokens, int kHidden, int kTopk, int kInputPayload, int kScaleKind,
          bool kMaskedLayout>
__global__ void __launch_bounds__(32 * kWarps, 1)
    ht_dispatch_kernel(const __grid_constant__ HtDispatchArgs args) {
    using Shape = HtDispatchShape<kHidden, kTopk, kInputPayload, kScaleKind>;
    static_assert(kWarps >= 1 && kWarps <= 16, "the first warp's lanes initialize two barriers per warp");
    static_assert(kClaimTokens >= 1, "warps claim their tokens");
    extern __shared__ __align__(128) uint8_t dynamic_smem[];  // [kWarps][2] stages (send_tokens)
    __shared__ int32_t dest_offset[kHtMaxRanks];
    __shared__ __align__(8) uint64_t stage_barriers[kWarps][2];
    const HtCommon& c = args.common;
    uint64_t* counters = c.layout.workspace.counters(c.local_base);
    // After a routing kernel (HtDispatchArgs::after_routing) the workspace was last written by the
    // previous op's kernels, which ended before the routing kernel began: the op's sequence is read
    // (and the start traced) before the wait below, one round trip less after it. A cached dispatch
    // may be chained right after the previous op's last kernel, whose last writes (the sequence, the
    // trace) a dependent grid sees only after its wait: it waits first.
    if (!args.after_routing) ptx::grid_dependency_wait();
    if (threadIdx.x == 0) trace_mark(args.trace, kHtDispatchStart, true);
    const uint64_t sequence = counters[kCounterHt] + 1;
    ht_detail::init_stage_barriers<kWarps>(stage_barriers);
    __syncthreads();  // the stage barriers, before any warp stages a token
    const int warp = int(threadIdx.x / 32);
    uint8_t* stages = dynamic_smem + int64_t(warp) * 2 * Shape::record().meta_offset;
    // Each warp's first token loads while the routing kernel still runs, where a routing kernel
    // precedes this grid (HtDispatchArgs::after_routing); otherwise it is claimed after the wait.
    ht_detail::WarpStart start{};
    if (args.after_routing)
        start = ht_detail::start_tokens<Shape, kWarps, kClaimTokens>(args, counters, stages,
                                                                     stage_barriers[warp], true);
    // With programmatic dependent launch this grid is resident before the routing kernel ends:
    // wait for it before reading anything it wrote (the routing, the poison word); then, on a GPU
    // of its own, let the receive kernel be scheduled, to wait in turn at its start.
    ptx::grid_dependency_wait();
    if (args.receive_scheduled_early) ptx::launch_dependents();
    if (threadIdx.x == 0) trace_mark(args.trace, kHtDispatchRoutingDone);
    if (blockIdx.x == 0 && threadIdx.x == 0) mark_kernel_start(counters, kHtStartSlots, sequence);
    if (!args.after_routing)
        start = ht_detail::start_tokens<Shape, kWarps, kClaimTokens>(args, counters, stages,
                                                                     stage_barriers[warp], false);

    const bool ok = ht_detail::exchange_counts(args, sequence, dest_offset);
    if (ok && blockIdx.x == 0) ht_detail::publish_recv_info<kMaskedLayout>(args);
    if (ok)
        ht_detail::send_tokens<Shape>(args, start, dest_offset, stages, stage_barriers[warp]);
    else if (start.staged)
        ht_detail::drop_staged<Shape>(args, &stage_barriers[warp][0], StageUse::of_token(0));

    // finish: bulk writes are ordered with generic ones first, then the last block signals.
    ptx::fence_proxy_async_global();
    ht_detail::finish_and_signal(c, counters, c.layout.workspace.ht_dispatch_done_offset, sequence,
                                 kCounterHtLastDispatch);
    if (threadIdx.x == 0) trace_mark(args.trace, kHtDispatchSignalled);
    if (blockIdx.x == 0 && ok) ht_detail::wait_for_rows(args, sequence);
    if (args.trace.slots != nullptr) {
        __syncthreads();
        if (threadIdx.x == 0) trace_mark(args.trace, kHtDispatchEnd);
    }
}

#endif

}  // namespace switchyard::device
