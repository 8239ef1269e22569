// Hierarchical HT dispatch (ranks on several nodes; docs/architecture.md, "HT across nodes"). One
// cooperative kernel after the routing kernel (which adds the node streams' slots), before the
// direct path's receive kernel. Each token crosses the network once per destination node, to the
// rail peer there, which forwards it over NVLink to the ranks of its node that own its experts.
// Its roles:
//
//  exchange_counts  block 0 first: counts to the rail peers, every source's notify entry at every
//                   rank of this node, the receive summary, the forwarders' offsets
//                   (hier/dispatch_counts.cuh);
//  send_tokens      every warp first, for the head (the tokens of the streams' first batches, one
//                   token a claim), then warps [0, kSendWarps) of each block for the rest, in runs:
//                   tokens into the per-node record streams, batches sent whole as they complete
//                   (hier/dispatch_send.cuh);
//  forward_records  the other warps, after the head: batches of records that arrived (from the
//                   network, or from this rank's own senders) to their final rows at the ranks of
//                   this node (hier/dispatch_forward.cuh);
//  finish           the last block tells each rank of this node that this rank, as a forwarder, is
//                   done (the direct path's dispatch-done signal), books the batch signals it
//                   consumed, records the puts' source tally (the next dispatch waits for the
//                   network to have read them: HierSources) and advances the sequences; block 0 then
//                   waits for the forwarders of its node: when the kernel ends, every row of this
//                   rank landed.
//
// Template arguments (src/launch/hier_dispatch_launch.cpp): the network backend, kWarps per block
// with two stages each, kSendWarps senders, kClaimTokens per claim, the shape (HtDispatchShape) and
// whether the receive layout is the masked one.
#pragma once

#include "switchyard/common/base.cuh"
#include "switchyard/common/diagnostics.cuh"
#include "switchyard/common/op_trace.cuh"
#include "switchyard/common/peer_kernel_details.cuh"
#include "switchyard/common/ptx.cuh"
#include "switchyard/common/trace_marks.cuh"
#include "switchyard/common/workspace_layout.cuh"
#include "switchyard/hier/dispatch_counts.cuh"
#include "switchyard/hier/dispatch_forward.cuh"
#include "switchyard/hier/dispatch_send.cuh"
#include "switchyard/hier/hier_args.cuh"
#include "switchyard/hier/hier_common.cuh"
#include "switchyard/ht/dispatch.cuh"
#include "switchyard/transport/completion.cuh"
#include "switchyard/transport/net.cuh"

namespace switchyard::device {

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)

namespace hier_detail {

// The last block: dispatch-done at each rank of this node, the batch signals consumed from each
// node's stream (the next dispatch of this parity waits for one more) and the staged counts back to
// zero (book_batches, by the whole block), this op's source puts tallied (a counts block and the
// stream's batches to each other node: HierSources), the sequences advanced.
template <class Backend>
SY_DEVICE void finish_dispatch(const HierDispatchArgs<Backend>& args, const HierOp& op, uint64_t* counters) {
    const HtCommon& c = args.ht.common;
    const WorkspaceLayout& ws = c.layout.workspace;
    if (!ht_detail::block_is_last_to_finish<true>(counters)) return;
    if (threadIdx.x == 0) signal_node(c, op, ws.ht_dispatch_done_offset, op.sequence);
    book_batches(c, op, 0, op.parity,
                 [&](int32_t node) { return hier_batches_of(args.forward_counts[node], op.batch_records); });
    if (threadIdx.x != 0) return;
    uint64_t source_puts = 0;
    for (int32_t node = 0; node < op.num_nodes; ++node)
        if (node != op.node)
            source_puts += 1 + uint64_t(hier_batches_of(args.num_tokens_per_node[node], op.batch_records));
    dispatch_sources().add(counters, source_puts);
    counters[kCounterHierHeadItem] = 0;
    counters[kCounterHierDispatches] += 1;
    ht_detail::end_op(counters, op.sequence, kCounterHtLastDispatch);
}

// Block 0: the op is complete here once every forwarder of this node has written its rows here.
SY_DEVICE void wait_for_forwarders(const HtDispatchArgs& ht, const HierOp& op) {
    const HtCommon& c = ht.common;
    for (int g = threadIdx.x; g < op.ranks_per_node; g += blockDim.x) {
        const int q = op.rank_of(op.node, g);
        wait_for_sequence(c.layout.workspace.ht_dispatch_done(c.local_base) + q, op.sequence, c.diagnostics,
                          kPhaseHtData, q, node_peer_details(c, q));
        trace_mark(ht.trace, kHtDispatchArrived);
    }
}

}  // namespace hier_detail

template <class Backend, int kWarps, int kSendWarps, int kClaimTokens, int kHidden, int kTopk, int kInputPayload,
          int kScaleKind, bool kMaskedLayout>
__global__ void __launch_bounds__(32 * kWarps, 1)
    hier_dispatch_kernel(const __grid_constant__ HierDispatchArgs<Backend> args) {
    using Shape = HtDispatchShape<kHidden, kTopk, kInputPayload, kScaleKind>;
    static_assert(kWarps >= 2 && kWarps <= 16, "senders and forwarders; two stage barriers per warp");
    static_assert(kSendWarps >= 1 && kSendWarps < kWarps, "at least one sender and one forwarder per block");
    extern __shared__ __align__(128) uint8_t dynamic_smem[];  // [kWarps][2] stages
    __shared__ __align__(8) uint64_t stage_barriers[kWarps][2];
    const HtCommon& c = args.ht.common;
    uint64_t* counters = c.layout.workspace.counters(c.local_base);
    // The workspace (the counters below, the previous dispatch's source tally, the trace) is read
    // before the wait for the routing kernel only where one precedes this grid (ht/dispatch.cuh).
    if (!args.ht.after_routing) ptx::grid_dependency_wait();
    if (threadIdx.x == 0) trace_mark(args.ht.trace, kHtDispatchStart, true);
    const uint64_t sequence = counters[kCounterHt] + 1;
    const uint64_t dispatch_index = counters[kCounterHierDispatches];
    ht_detail::init_stage_barriers<kWarps>(stage_barriers);
    const HierOp op = hier_op(args.net, c, sequence, int32_t(dispatch_index & 1), args.forward_bytes);
    const NetPort<Backend> port(args.net, kHierContext, c.diagnostics);
    // Before this op rewrites its sources (the counts blocks, the records): the previous dispatch's
    // puts have read theirs (HierSources; this op does not flush its own).
    __shared__ int sources_read;
    if (threadIdx.x == 0) sources_read = hier_detail::dispatch_sources().wait_read(port, counters);
    __syncthreads();  // the barriers are initialized before any warp uses its stages
    const int warp = int(threadIdx.x / 32);
    uint8_t* stages = dynamic_smem + int64_t(warp) * 2 * Shape::record().meta_offset;
    // Every warp sends the head (the streams' first batches), the senders then the rest in runs,
    // and the forwarders forward. `staged`: the tokens this warp staged so far (its stage barriers'
    // phases where tokens are bulk-loaded). The head's first token of each warp loads while the
    // routing kernel still runs (HtDispatchArgs::after_routing), except in block 0, which claims its
    // head tokens only once the counts are out (a claimed token waits for its warp).
    int32_t staged = 0;
    const bool head_ahead = args.ht.after_routing && blockIdx.x != 0;
    hier_detail::SenderStart head{};
    if (head_ahead)
        head = hier_detail::start_runs<Shape>(args, hier_detail::head_runs(args, op, counters), stages,
                                              stage_barriers[warp], staged, true);
    ptx::grid_dependency_wait();  // the routing kernel's results (programmatic dependent launch)
    if (args.ht.receive_scheduled_early) ptx::launch_dependents();
    if (threadIdx.x == 0) trace_mark(args.ht.trace, kHtDispatchRoutingDone);  // the last block got here
    if (blockIdx.x == 0 && threadIdx.x == 0) mark_kernel_start(counters, kHtStartSlots, sequence);

    // A poisoned buffer (an earlier op failed) sends nothing: its peers report the stall.
    bool ok = sources_read != 0 && !is_poisoned(c.diagnostics);
    if (blockIdx.x == 0 && sources_read != 0)
        ok = hier_detail::exchange_counts<Backend, kMaskedLayout>(args, op, port, dispatch_index);
    if (ok && !head_ahead)
        head = hier_detail::start_runs<Shape>(args, hier_detail::head_runs(args, op, counters), stages,
                                              stage_barriers[warp], staged, false);
    if (ok)
        ok = hier_detail::send_tokens<Shape, Backend>(args, op, port, stages, stage_barriers[warp], head,
                                                      staged);
    else if (head.staged)
        ht_detail::drop_staged<Shape>(args.ht, &stage_barriers[warp][0], StageUse::of_token(0));
    if (ok && warp < kSendWarps) {
        const hier_detail::SenderStart body =
            hier_detail::start_runs<Shape>(args, hier_detail::body_runs<kClaimTokens>(args, op, counters),
                                           stages, stage_barriers[warp], staged, false);
        ok = hier_detail::send_tokens<Shape, Backend>(args, op, port, stages, stage_barriers[warp], body,
                                                      staged);
        hier_detail::mark_sent(args.ht.trace);
    } else if (ok)
        ok = hier_detail::forward_records<Shape>(args, op, port, counters, stages, stage_barriers[warp],
                                                 Shape::kQuantize ? 0 : staged);

    // finish: bulk writes ordered with generic ones first, then the last block signals this node.
    ptx::fence_proxy_async_global();
    hier_detail::finish_dispatch(args, op, counters);
    if (threadIdx.x == 0) trace_mark(args.ht.trace, kHtDispatchSignalled);
    if (blockIdx.x == 0 && ok) hier_detail::wait_for_forwarders(args.ht, op);
    if (args.ht.trace.slots != nullptr) {
        __syncthreads();
        if (threadIdx.x == 0) trace_mark(args.ht.trace, kHtDispatchEnd);
    }
}

#endif

}  // namespace switchyard::device
