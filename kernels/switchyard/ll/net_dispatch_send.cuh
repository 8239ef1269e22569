// The send half of the LL dispatch across nodes (ll/net_dispatch.cuh; ll/net_layout.cuh says who
// writes what where): records to the ranks of this node over NVLink, as on one node, and one record
// per (token, other node) into this rank's staging for that node; then the last sending block puts
// each node's records and header to this rank's rail peer there, with the op's signal.
#pragma once

#include "switchyard/common/base.cuh"
#include "switchyard/common/block_scan.cuh"
#include "switchyard/common/diagnostics.cuh"
#include "switchyard/common/fp8.cuh"
#include "switchyard/common/op_trace.cuh"
#include "switchyard/common/ptx.cuh"
#include "switchyard/common/record_layout.cuh"
#include "switchyard/common/trace_marks.cuh"
#include "switchyard/ll/dispatch_send.cuh"
#include "switchyard/ll/dispatch_shape.cuh"
#include "switchyard/ll/ll_args.cuh"
#include "switchyard/ll/ll_layout.cuh"
#include "switchyard/ll/net_layout.cuh"
#include "switchyard/transport/ll_net_signals.cuh"
#include "switchyard/transport/net.cuh"

namespace switchyard::device {

// Dynamic shared memory of the dispatch across nodes: as on one node (ll_dispatch_shared_bytes),
// with one more routing mask per node (tokens routed to any rank of it).
SY_HOST_DEVICE int64_t ll_net_dispatch_shared_bytes(int32_t num_ranks, int32_t num_nodes, int32_t num_experts,
                                                    int32_t num_tokens) {
    const int64_t masks =
        (int64_t(num_experts) + num_ranks + num_nodes) * ll_token_mask_words(num_tokens);
    const int64_t receive = int64_t(num_experts) + 2 * (int64_t(num_experts) / num_ranks + 1);
    return 4 * (3 * int64_t(num_ranks) + 1 + max64(masks, receive)) + 64;
}

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)

namespace ll_net_dispatch_detail {

using ll_dispatch_detail::RoutingMasks;
using ll_dispatch_detail::TokenSlice;

// The mask of tokens routed to node m: after the expert and rank masks.
SY_DEVICE uint32_t* node_mask(const RoutingMasks& masks, int32_t num_ranks, int32_t m) {
    return masks.words + int64_t(masks.num_experts + num_ranks + m) * masks.words_per_mask;
}

// Every thread of a sending block, after finish_masks: node m's mask is the OR of its ranks' masks.
SY_DEVICE void build_node_masks(const RoutingMasks& masks, const LlNodes& nodes, int32_t num_ranks) {
    const int32_t words = masks.words_per_mask;
    for (int i = threadIdx.x; i < nodes.num_nodes * words; i += blockDim.x) {
        const int32_t m = i / words, w = i % words;
        uint32_t bits = 0;
        for (int32_t g = 0; g < nodes.ranks_per_node; ++g) bits |= masks.rank(nodes.rank_of(m, g))[w];
        node_mask(masks, num_ranks, m)[w] = bits;
    }
    __syncthreads();
}

// One token's slice: to each unmasked rank of this node that owns one of its experts (its record
// [this source][its slot there], as on one node) and, once per other node that owns one, into this
// rank's staging for that node at the token's node slot. The metadata names local experts at a
// rank of this node, node-local experts (expert - m * G * L) in a record for node m.
template <int kHidden, int kTopk, int kScaleKind, typename IndexT, class Backend>
SY_DEVICE void send_token(const LlNetDispatchArgs<Backend>& args, int32_t t, int slice, const TokenSlice& input,
                          uint64_t sequence, const uint32_t* shared_mask, const RoutingMasks& masks) {
    const LlDispatchArgs& base = args.base;
    const LlBufferArgs& buffer = base.buffer;
    const LlNodes& nodes = args.net.nodes;
    const uint32_t lane = ptx::lane_id();
    const int32_t R = buffer.num_ranks, L = base.local_experts;
    const RecordLayout layout = ll_dispatch_record(kHidden, kScaleKind, kTopk);
    const int32_t set = ll_set_of(sequence);
    const int32_t expert = ll_dispatch_detail::token_expert<kTopk, IndexT>(base, t);
    const int32_t rank = expert >= 0 ? expert / L : -1;
    const int32_t node = rank >= 0 ? nodes.node_of(rank) : -1;
    const bool here = node == nodes.node;
    // A destination: a rank of this node (its rank), or another node (R + node).
    const int32_t destination = rank < 0 ? -1 : here ? rank : R + node;
    const int32_t position = expert >= 0 ? RoutingMasks::below(masks.expert(expert), t) : 0;
    const bool sends = first_lane_with(destination) && (!here || shared_mask[rank] == 0);
    const uint32_t destinations = __ballot_sync(0xffffffffu, sends);
    const float weight = slice == 0 && base.topk_weights != nullptr && expert >= 0
                             ? base.topk_weights[int64_t(t) * base.weights_row_stride + lane]
                             : 0.0f;
    uint8_t* record = nullptr;
    if (sends) {
        if (here)
            record = buffer.set_layout.record(buffer.set_base(buffer.peer_bases[rank], set),
                                              ll_net_local_area(nodes.local_index),
                                              RoutingMasks::below(masks.rank(rank), t), layout.total_bytes);
        else
            record = buffer.set_layout.record(buffer.set_base(buffer.local_base, set),
                                              ll_net_staging_area(nodes, nodes.other_index(node)),
                                              RoutingMasks::below(node_mask(masks, R, node), t), layout.total_bytes);
    }
    // Metadata (the token's first slice only): lane k writes slot k as the destination reads it.
    for (uint32_t rest = slice == 0 ? destinations : 0u; rest != 0; rest &= rest - 1) {
        const int source_lane = __ffs(rest) - 1;
        const int32_t to = __shfl_sync(0xffffffffu, destination, source_lane);
        int32_t* meta = reinterpret_cast<int32_t*>(
            __shfl_sync(0xffffffffu, reinterpret_cast<unsigned long long>(record), source_lane) +
            layout.meta_offset);
        const bool mine = destination == to && expert >= 0;
        const int32_t first_expert = to < R ? to * L : (to - R) * nodes.ranks_per_node * L;
        if (lane == 0) {
            meta[0] = t;
            meta[1] = -1;
        }
        if (int(lane) < kTopk) {
            meta[2 + lane] = mine ? expert - first_expert : -1;
            meta[2 + kTopk + lane] = mine ? int32_t(fp8::float_to_bits(weight)) : 0;
            meta[2 + 2 * kTopk + lane] = mine ? position : -1;
        }
    }
    ll_dispatch_detail::store_payload<kHidden, kTopk, kScaleKind>(input, slice, destinations, record);
}

// Block 0, after its sends: the headers of the unmasked ranks of this node (as on one node).
SY_DEVICE void write_local_headers(const LlDispatchArgs& args, const LlNodes& nodes, uint64_t sequence,
                                   const uint32_t* shared_mask, const RoutingMasks& masks) {
    const LlBufferArgs& buffer = args.buffer;
    const int32_t L = args.local_experts;
    const int32_t set = ll_set_of(sequence);
    for (int i = threadIdx.x; i < nodes.ranks_per_node * (L + 1); i += blockDim.x) {
        const int32_t q = nodes.rank_of(nodes.node, i / (L + 1)), e = i % (L + 1);
        if (shared_mask[q]) continue;
        int32_t* header = buffer.set_layout.header(buffer.set_base(buffer.peer_bases[q], set), buffer.rank);
        header[e] = masks.total(e == 0 ? masks.rank(q) : masks.expert(q * L + e - 1));
    }
}

// The last sending block: each other node's header, staged (every thread), from the masks.
SY_DEVICE void stage_node_headers(const LlDispatchArgs& args, const LlNodes& nodes, uint64_t sequence,
                                  const uint32_t* shared_mask, const RoutingMasks& masks) {
    const LlBufferArgs& buffer = args.buffer;
    const LlSetLayout& set_layout = buffer.set_layout;
    const int32_t R = buffer.num_ranks, L = args.local_experts, G = nodes.ranks_per_node;
    const int32_t T = set_layout.max_tokens, L_max = set_layout.max_local_experts;
    uint8_t* set_base = buffer.set_base(buffer.local_base, ll_set_of(sequence));
    // Per (other node, rank g there): present, tokens and rows per local expert; one thread each
    // for (o, g, word), words 0 .. L + 1.
    const int32_t entries = nodes.others() * G * (L + 2);
    for (int i = threadIdx.x; i < entries; i += blockDim.x) {
        const int32_t o = i / (G * (L + 2)), g = (i / (L + 2)) % G, word = i % (L + 2);
        const int32_t m = nodes.other_node(o), q = nodes.rank_of(m, g);
        int32_t* header = set_layout.node_header(set_base, nodes.others() + o);
        int32_t* entry = header + ll_node_header_rank(g, L_max, T);
        if (word == kLlNodeHeaderPresent)
            entry[word] = shared_mask[q] == 0;
        else if (word == kLlNodeHeaderTokens)
            entry[word] = masks.total(masks.rank(q));
        else
            entry[word] = masks.total(masks.expert(q * L + word - kLlNodeHeaderCounts));
        if (g == 0 && word == 0) header[0] = masks.total(node_mask(masks, R, m));
    }
    // Slot lists: the node slot of each token routed to rank g of node m, in token order.
    const int32_t tokens = args.num_tokens;
    for (int i = threadIdx.x; i < nodes.others() * G * tokens; i += blockDim.x) {
        const int32_t o = i / (G * tokens), g = (i / tokens) % G, t = i % tokens;
        const int32_t m = nodes.other_node(o), q = nodes.rank_of(m, g);
        const uint32_t* rank_mask = masks.rank(q);
        if (((rank_mask[t / 32] >> (t % 32)) & 1u) == 0) continue;
        int32_t* slots = set_layout.node_header(set_base, nodes.others() + o) + ll_node_header_rank(g, L_max, T) +
                         kLlNodeHeaderCounts + L_max;
        slots[RoutingMasks::below(rank_mask, t)] = RoutingMasks::below(node_mask(masks, R, m), t);
    }
    __syncthreads();
}

// The last sending block, after stage_node_headers: lane o of warp 0 puts this rank's staged
// records and header for other node o to its rail peer there, the header with the op's signal
// (strong: it lands after the records). A request that cannot be issued is reported (net.cuh).
template <int kHidden, int kTopk, int kScaleKind, class Backend>
SY_DEVICE void put_to_nodes(const LlNetDispatchArgs<Backend>& args, uint64_t sequence) {
    const LlBufferArgs& buffer = args.base.buffer;
    const LlNodes& nodes = args.net.nodes;
    const int32_t o = int32_t(threadIdx.x);
    if (o >= nodes.others()) return;
    const LlSetLayout& set_layout = buffer.set_layout;
    const RecordLayout layout = ll_dispatch_record(kHidden, kScaleKind, kTopk);
    const int32_t set = ll_set_of(sequence), m = nodes.other_node(o), at = nodes.index_at(m);
    uint8_t* local = buffer.local_base;
    uint8_t* set_base = buffer.set_base(local, set);
    auto offset = [local](const void* pointer) { return uint64_t(static_cast<const uint8_t*>(pointer) - local); };
    const int32_t* staged = set_layout.node_header(set_base, nodes.others() + o);
    const NetPort<Backend> port(args.net.net, ll_net_context(args.net.net.num_contexts), buffer.diagnostics);
    const int64_t records = staged[0];
    if (records > 0)
        port.put(m, offset(set_layout.record(set_base, ll_net_received_area(nodes, at), 0, layout.total_bytes)),
                 offset(set_layout.record(set_base, ll_net_staging_area(nodes, o), 0, layout.total_bytes)),
                 uint64_t(records) * uint64_t(layout.total_bytes));
    port.put(m, offset(set_layout.node_header(set_base, at)), offset(staged), uint64_t(set_layout.node_header_bytes),
             net_signal_add(ll_net_signal(kLlDispatch, set, nodes.node), kLlNetOpAmount));
}

// The send half of one sending block across nodes: the masks (with a mask per node), the block's
// items, block 0's headers for this node, the arrivals at this node's ranks; then the last sending
// block stages every other node's header and puts the records and headers over the network.
// Block 0 reports an invalid id last (its peers must still get this op).
template <int kNumWarps, int kHidden, int kTopk, int kScaleKind, typename IndexT, class Backend>
SY_DEVICE void send_tokens(const LlNetDispatchArgs<Backend>& args, const LlDispatchShared& shared,
                           const ll_dispatch_detail::SendPrefetch<IndexT>& prefetch, uint64_t sequence,
                           int32_t sending_blocks, int32_t* first_invalid) {
    const LlDispatchArgs& base = args.base;
    const LlBufferArgs& buffer = base.buffer;
    const LlNodes& nodes = args.net.nodes;
    const RoutingMasks masks = ll_dispatch_detail::finish_masks<kTopk, IndexT>(
        base, reinterpret_cast<uint32_t*>(shared.scratch), prefetch.ids, first_invalid);
    build_node_masks(masks, nodes, buffer.num_ranks);
    if (threadIdx.x == 0) trace_mark(buffer.trace, kLlDispatchRouted);
    constexpr int kSlices = ll_send_slices(kHidden);
    const int64_t items = int64_t(base.num_tokens) * kSlices;
    const int64_t stride = int64_t(sending_blocks) * kNumWarps;
    TokenSlice input = prefetch.input;
    for (int64_t item = int(blockIdx.x) * kNumWarps + int(threadIdx.x / 32); item < items; item += stride) {
        TokenSlice next{};
        if (item + stride < items) next = ll_dispatch_detail::load_send_item<kHidden>(base, item + stride);
        send_token<kHidden, kTopk, kScaleKind, IndexT>(args, int32_t(item / kSlices), int32_t(item % kSlices),
                                                       input, sequence, shared.mask, masks);
        input = next;
    }
    if (ptx::lane_id() == 0) trace_mark(buffer.trace, kLlDispatchSent);
    if (blockIdx.x == 0) write_local_headers(base, nodes, sequence, shared.mask, masks);
    ll_net_arrive_local(buffer, nodes, kLlDispatch, sequence, sending_blocks, shared.mask);
    if (int(threadIdx.x) < nodes.ranks_per_node) trace_mark(buffer.trace, kLlDispatchArrived);
    if (ll_net_last_block(buffer, kCounterLlNetDispatchElect, sending_blocks)) {
        stage_node_headers(base, nodes, sequence, shared.mask, masks);
        put_to_nodes<kHidden, kTopk, kScaleKind>(args, sequence);
    }
    if (blockIdx.x == 0) ll_dispatch_detail::report_invalid_routing<kTopk, IndexT>(base, *first_invalid);
}

}  // namespace ll_net_dispatch_detail

#endif

}  // namespace switchyard::device
