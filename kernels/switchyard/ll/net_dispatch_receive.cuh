// The receive half of the LL dispatch across nodes (ll/net_dispatch.cuh; ll/net_layout.cuh says who
// writes what where): as a gateway, relay each other node's signal to the ranks of this node; wait
// for every source; place and copy the records as on one node, reading a source of another node
// where its records landed, at its gateway; and note, per record this rank received as a gateway,
// the routing its combine forwarding needs.
#pragma once

#include "switchyard/common/base.cuh"
#include "switchyard/common/op_trace.cuh"
#include "switchyard/common/ptx.cuh"
#include "switchyard/common/record_layout.cuh"
#include "switchyard/common/trace_marks.cuh"
#include "switchyard/ll/dispatch_receive.cuh"
#include "switchyard/ll/dispatch_shape.cuh"
#include "switchyard/ll/ll_args.cuh"
#include "switchyard/ll/ll_layout.cuh"
#include "switchyard/ll/net_layout.cuh"
#include "switchyard/transport/ll_net_signals.cuh"

namespace switchyard::device {

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)

namespace ll_net_dispatch_detail {

// ll_dispatch_detail::LlOwnSet across nodes: a source of this node wrote into this rank's own set;
// a source s of another node m put its records and header to its gateway p (this node's rank with
// s's local index), where this rank reads them: the counts in p's received header of node m, the
// i-th record at the node slot p's header lists for this rank.
struct LlNodeSources {
    const LlBufferArgs* buffer;
    LlNodes nodes;
    int32_t set;
    int32_t local_experts;  // L of the op
    uint8_t* own_set_base;

    SY_DEVICE uint8_t* gateway_set(int32_t source) const {
        return buffer->set_base(buffer->peer_bases[nodes.rank_of(nodes.node, nodes.local_of(source))], set);
    }
    // This rank's entry in the header that source s's gateway received.
    SY_DEVICE const int32_t* entry(int32_t source) const {
        const LlSetLayout& layout = buffer->set_layout;
        return layout.node_header(gateway_set(source), nodes.other_index(nodes.node_of(source))) +
               ll_node_header_rank(nodes.local_index, layout.max_local_experts, layout.max_tokens);
    }
    SY_DEVICE int32_t header_word(const LlDispatchArgs&, int32_t source, int32_t word) const {
        if (nodes.on_my_node(source)) return buffer->set_layout.header(own_set_base, source)[word];
        return entry(source)[word == 0 ? kLlNodeHeaderTokens : kLlNodeHeaderCounts + word - 1];
    }
    SY_DEVICE const uint8_t* record(const LlDispatchArgs&, int32_t source, int32_t i, int64_t record_bytes) const {
        const LlSetLayout& layout = buffer->set_layout;
        if (nodes.on_my_node(source))
            return layout.record(own_set_base, ll_net_local_area(nodes.local_of(source)), i, record_bytes);
        const int32_t slot = entry(source)[kLlNodeHeaderCounts + layout.max_local_experts + i];
        return layout.record(gateway_set(source), ll_net_received_area(nodes, nodes.other_index(nodes.node_of(source))),
                             slot, record_bytes);
    }
    SY_DEVICE int32_t local_expert(int32_t named, int32_t source) const {
        if (named < 0 || nodes.on_my_node(source)) return named;
        const int32_t local = named - nodes.local_index * local_experts;
        return local >= 0 && local < local_experts ? local : -1;
    }
};

// Every warp, after the records: per record this rank received as the gateway of each other node's
// rail peer (whose arrival it relayed: the source is present here), the home token and the local
// index of each slot's owner on this node (-1: none), for the combine's forwarding; block 0 writes
// the record counts (0 for a source this rank masked).
template <int kNumWarps, int kHidden, int kTopk, int kScaleKind, class Backend>
SY_DEVICE void note_forward_routing(const LlNetDispatchArgs<Backend>& args, const LlDispatchShared& shared,
                                    uint8_t* own_set_base) {
    const LlDispatchArgs& base = args.base;
    const LlBufferArgs& buffer = base.buffer;
    const LlNodes& nodes = args.net.nodes;
    const LlSetLayout& layout = buffer.set_layout;
    const RecordLayout record_layout = ll_dispatch_record(kHidden, kScaleKind, kTopk);
    const int32_t T = layout.max_tokens, L = base.local_experts;
    auto records_of = [&](int32_t o) {
        const int32_t source = nodes.rank_of(nodes.other_node(o), nodes.local_index);
        return shared.present[source] ? layout.node_header(own_set_base, o)[0] : 0;
    };
    if (blockIdx.x == 0)
        for (int o = threadIdx.x; o < nodes.others(); o += blockDim.x) args.forward_counts[o] = records_of(o);
    const uint32_t lane = ptx::lane_id();
    const int num_warps = int(gridDim.x) * kNumWarps;
    const int first = int(blockIdx.x) * kNumWarps + int(threadIdx.x / 32);
    for (int32_t o = 0; o < nodes.others(); ++o) {
        const int32_t records = records_of(o);
        for (int32_t i = first; i < records; i += num_warps) {
            const int32_t* meta = reinterpret_cast<const int32_t*>(
                layout.record(own_set_base, ll_net_received_area(nodes, o), i, record_layout.total_bytes) +
                record_layout.meta_offset);
            int32_t* row = args.forward_rows + (int64_t(o) * T + i) * (kTopk + 1);
            if (int(lane) < kTopk) {
                const int32_t named = meta[2 + lane];
                row[1 + lane] = named >= 0 ? named / L : -1;
            }
            if (lane == 0) row[0] = meta[0];
        }
    }
}

// The receive half of every block across nodes. Returns early (every thread of the block) when the
// op failed.
template <int kNumWarps, int kHidden, int kTopk, int kScaleKind, bool kContiguous, class Backend>
SY_DEVICE void receive_tokens(const LlNetDispatchArgs<Backend>& args, const LlDispatchShared& shared,
                              uint64_t sequence) {
    const LlDispatchArgs& base = args.base;
    const LlBufferArgs& buffer = base.buffer;
    const LlNodes& nodes = args.net.nodes;
    const int32_t set = ll_set_of(sequence);
    uint8_t* own_set_base = buffer.set_base(buffer.local_base, set);
    // The gateway's relays first (one warp of block 0, a lane per other node), then its own waits:
    // a node-mate's receive waits for them.
    if (blockIdx.x == 0 && int(threadIdx.x / 32) == kNumWarps - 1)
        ll_net_relay(buffer, args.net, buffer.set_layout, own_set_base, sequence, shared.mask);
    if (!ll_net_wait_sources(buffer, nodes, ll_net_context(args.net.net.num_contexts), kLlDispatch, sequence,
                             shared.mask, shared.present, base.wait_time_stats,
                             buffer.signals.decided(buffer.signal_area(), kLlDispatch, set),
                             [](int32_t) { return true; }))
        return;
    if (threadIdx.x == 0) trace_mark(buffer.trace, kLlDispatchWaited);
    const LlNodeSources sources{&buffer, nodes, set, base.local_experts, own_set_base};
    // (Across nodes no source announces a failure in its headers yet: count_rows never notes one.)
    __shared__ int32_t failed_source;
    if (threadIdx.x == 0) failed_source = -1;
    __syncthreads();
    ll_dispatch_detail::count_rows(base, shared, sources, &failed_source);
    __syncthreads();
    ll_dispatch_detail::place_experts<kContiguous>(base, shared);
    __syncthreads();
    if (threadIdx.x == 0) trace_mark(buffer.trace, kLlDispatchPlanned);
    ll_dispatch_detail::receive_records<kNumWarps, kHidden, kTopk, kScaleKind, kContiguous>(base, shared, sources);
    note_forward_routing<kNumWarps, kHidden, kTopk, kScaleKind>(args, shared, own_set_base);
    if (ptx::lane_id() == 0) trace_mark(buffer.trace, kLlDispatchReceived);
}

}  // namespace ll_net_dispatch_detail

#endif

}  // namespace switchyard::device
