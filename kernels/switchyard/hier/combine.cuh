// Hierarchical HT combine (ranks on several nodes; docs/architecture.md, "HT across nodes"). One
// cooperative kernel. Each token's rows go back over NVLink to the rank that forwarded the token
// into their node; that forwarder reduces them to one bf16 partial per (token, node), which crosses
// the network once; the home sums the partials over nodes ascending after its biases (DESIGN.md §2,
// "Several nodes"). Its roles:
//
//  enter_combine       handshakes unless the combine follows a dispatch; the home's weights to the
//                      forwarders in a flat weighted combine (hier/combine_send.cuh);
//  send_contributions  warps [0, kSendWarps): received rows to their forwarders' stages, over
//                      NVLink (hier/combine_send.cuh);
//  publish_rows        warp kSendWarps: the direct path's publisher, raising the forwarders'
//                      arrival counters (ht/combine_publish.cuh);
//  reduce_items        the other warps, joined by the senders and the publisher once their rows are
//                      out: node items (partials of the tokens this rank forwarded, batches sent
//                      back whole), then home items (this rank's tokens; hier/combine_reduce.cuh);
//  finish              the last block books the batch signals consumed, resets the staged counts,
//                      records the puts' source tally (the next combine waits for the network to
//                      have read them: HierSources) and advances the sequences (GPU scope: nobody
//                      waits for a combine's end, the batch signals carry its data).
//
// Template arguments (src/launch/hier_combine_launch.cpp): the network backend, kWarps per block,
// kSendWarps of them sending, kSendGroup rows per claim, and the shape (HtCombineShape).
#pragma once

#include "switchyard/common/base.cuh"
#include "switchyard/common/diagnostics.cuh"
#include "switchyard/common/op_trace.cuh"
#include "switchyard/common/ptx.cuh"
#include "switchyard/common/trace_marks.cuh"
#include "switchyard/common/workspace_layout.cuh"
#include "switchyard/hier/combine_reduce.cuh"
#include "switchyard/hier/combine_send.cuh"
#include "switchyard/hier/hier_args.cuh"
#include "switchyard/hier/hier_common.cuh"
#include "switchyard/ht/combine.cuh"
#include "switchyard/transport/completion.cuh"
#include "switchyard/transport/net.cuh"

namespace switchyard::device {

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)

namespace hier_detail {

// The reduce items in claim order: node items (kHtCombineChunkTokens stream slots of one source
// node), first those of the other nodes, whose partials cross the network, a chunk of each node in
// turn (so every stream to a home advances from the start), then this node's; then the home items
// (kHtCombineChunkTokens of this rank's tokens). Which warp takes an item never changes a sum.
// False when a wait or a put failed.
template <typename Shape, class Backend>
SY_DEVICE bool reduce_items(const HierCombineArgs<Backend>& args, const HierOp& op, const NetPort<Backend>& port,
                            uint64_t* counters, uint64_t weight_rounds) {
    const HtCommon& c = args.ht.common;
    const int lane = int(ptx::lane_id());
    // Lane n: the records forwarded from node n and their chunks.
    const int32_t records = lane < op.num_nodes ? args.forward_counts[lane] : 0;
    const int32_t chunks = int32_t(ceil_div(records, kHtCombineChunkTokens));
    int32_t remote_rounds = lane != op.node ? chunks : 0;  // the most chunks of another node
    for (int offset = 16; offset >= 1; offset /= 2)
        remote_rounds = max(remote_rounds, __shfl_xor_sync(0xffffffffu, remote_rounds, offset));
    const int32_t others = op.num_nodes - 1;
    const int32_t remote_items = remote_rounds * others;
    const int32_t node_items = remote_items + __shfl_sync(0xffffffffu, chunks, op.node);
    const int32_t items = node_items + int32_t(ceil_div(c.num_tokens, kHtCombineChunkTokens));
    int32_t waited = -1;  // lane m: the last batch of node m's partials waited for
    for (;;) {
        unsigned long long taken = 0;
        if (lane == 0) taken = atomicAdd(reinterpret_cast<unsigned long long*>(counters + kCounterHtNextItem), 1ull);
        const int32_t item = int32_t(min(__shfl_sync(0xffffffffu, taken, 0), (unsigned long long)items));
        if (item >= items) return true;
        bool ok = true;
        if (item < node_items) {
            int32_t node = op.node, chunk = item - remote_items;
            if (item < remote_items) {
                const int32_t other = item % others;
                node = other < op.node ? other : other + 1;
                chunk = item / others;
            }
            const int32_t node_records = __shfl_sync(0xffffffffu, records, node);
            if (chunk * kHtCombineChunkTokens < node_records)
                ok = reduce_node_chunk<Shape>(args, op, port, node, chunk, node_records, weight_rounds);
        } else {
            ok = reduce_home_chunk<Shape>(args, op, port, item - node_items, waited);
        }
        if (!ok) return false;
    }
}

// The last block: the combine batch signals consumed (one more per batch of each node's partials
// for the next combine) and the staged counts back to zero (book_batches, by the whole block), this
// op's source puts tallied (the batches of partials to each other node and the weights puts:
// HierSources), the entry and weights rounds, the sequence. GPU scope only (finish_locally's
// reasoning).
template <class Backend>
SY_DEVICE void finish_combine(const HierCombineArgs<Backend>& args, const HierOp& op, uint64_t* counters,
                              bool handshake) {
    const HtCommon& c = args.ht.common;
    if (!ht_detail::block_is_last_to_finish<false>(counters)) return;
    book_batches(c, op, 1, 2, [&](int32_t node) {
        return hier_batches_of(args.num_tokens_per_node[node], op.batch_records);
    });
    if (threadIdx.x != 0) return;
    uint64_t source_puts = 0;
    for (int32_t node = 0; node < op.num_nodes; ++node) {
        if (node != op.node)
            source_puts += uint64_t(hier_batches_of(args.forward_counts[node], op.batch_records)) +
                           (args.weights_travel && c.num_tokens > 0 ? 1u : 0u);
    }
    combine_sources().add(counters, source_puts);
    if (handshake) counters[kCounterHierCombineEntries] += 1;
    if (args.weights_travel) counters[kCounterHierWeightRounds] += 1;
    ht_detail::end_op(counters, op.sequence, -1);
}

}  // namespace hier_detail

template <class Backend, int kWarps, int kSendWarps, int kSendGroup, int kHidden, int kTopk, int kMode>
__global__ void __launch_bounds__(32 * kWarps, 1)
    hier_combine_kernel(const __grid_constant__ HierCombineArgs<Backend> args) {
    using Shape = HtCombineShape<kHidden, kTopk, kMode>;
    static_assert(kSendWarps >= 1 && kSendWarps + 2 <= kWarps, "senders, a publisher and reducers");
    const HtCommon& c = args.ht.common;
    uint64_t* counters = c.layout.workspace.counters(c.local_base);
    const uint64_t sequence = counters[kCounterHt] + 1;
    const uint64_t weight_rounds = counters[kCounterHierWeightRounds];
    if (threadIdx.x == 0) trace_mark(args.ht.trace, kHtCombineStart, true);
    if (blockIdx.x == 0 && threadIdx.x == 0) mark_kernel_start(counters, kHtStartSlots, sequence);
    const int warp = int(threadIdx.x / 32);
    __shared__ ht_detail::PublishQueues<kSendWarps> publish_queues;
    publish_queues.init();
    const HierOp op = hier_op(args.net, c, sequence, 0, Shape::record().total_bytes);
    const NetPort<Backend> port(args.net, kHierContext, c.diagnostics);
    bool handshake = false;

    bool ok = hier_detail::enter_combine(args, op, port, counters, kTopk, handshake);
    if (threadIdx.x == 0) trace_mark(args.ht.trace, kHtCombineEntered);
    __shared__ int32_t row_offsets[kHtMaxRanks + 1];
    ht_detail::load_row_offsets(args.ht, row_offsets);
    if (ok && warp < kSendWarps) {
        hier_detail::send_contributions<Shape, Backend, kSendWarps, kSendGroup>(args, op, counters, row_offsets,
                                                                                publish_queues, warp);
    } else if (ok && warp == kSendWarps) {
        ht_detail::publish_rows(c, publish_queues);
        if (ptx::lane_id() == 0) trace_mark(args.ht.trace, kHtCombinePublished);
    }
    if (ok) ok = hier_detail::reduce_items<Shape>(args, op, port, counters, weight_rounds);
    if (ptx::lane_id() == 0) ht_detail::trace_reduced(args.ht.trace);

    trace_finish(args.ht.trace, kHtCombineEnd, kHtCombineMarks, kHtCombineFirstMarks);
    hier_detail::finish_combine(args, op, counters, handshake);
}

#endif

}  // namespace switchyard::device
