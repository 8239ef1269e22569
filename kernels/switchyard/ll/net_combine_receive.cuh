// The receive half of the LL combine across nodes (ll/net_combine.cuh), on the home rank: which
// ranks' contributions are here (this node's, decided by the send half; each other node's, from
// its forwarder's signal and header), then each token's output: flat, as on one node (every row
// (t, k) is in this rank's combine rows, whichever node sent it); hierarchical, the node-level
// reduction of DESIGN.md §2 (this node's rank partials summed in fp32 and rounded to bf16, each
// other node's partial as its forwarder reduced it, all nodes summed ascending in fp32, one rounding).
#pragma once

#include "switchyard/common/base.cuh"
#include "switchyard/common/block_scan.cuh"
#include "switchyard/common/fp8.cuh"
#include "switchyard/common/op_trace.cuh"
#include "switchyard/common/ptx.cuh"
#include "switchyard/common/trace_marks.cuh"
#include "switchyard/ll/combine_receive.cuh"
#include "switchyard/ll/combine_shape.cuh"
#include "switchyard/ll/ll_args.cuh"
#include "switchyard/ll/ll_layout.cuh"
#include "switchyard/ll/ll_reduce.cuh"
#include "switchyard/ll/net_combine_send.cuh"
#include "switchyard/ll/net_layout.cuh"
#include "switchyard/transport/ll_net_signals.cuh"
#include "switchyard/transport/peer_masking.cuh"

namespace switchyard::device {

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)

namespace ll_net_combine_detail {

// Which ranks of other node o contributed, as the home takes them: the forwarder's header, unless
// it includes a rank this home has masked (a hierarchical node partial cannot leave one out: then
// none of the node counts), or the signal did not come (`arrived` false: none).
template <bool kHierarchical>
SY_DEVICE uint64_t accepted_contributors(const LlNodes& nodes, int32_t o, bool arrived, uint64_t header,
                                         const uint32_t* shared_mask) {
    if (!arrived) return 0;
    uint64_t accepted = header, refused = 0;
    for (int32_t g = 0; g < nodes.ranks_per_node; ++g)
        if (((header >> g) & 1u) && shared_mask[nodes.rank_of(nodes.other_node(o), g)])
            refused |= uint64_t(1) << g;
    if (refused == 0) return accepted;
    return kHierarchical ? 0 : accepted & ~refused;
}

// Every block: shared present [R] for every rank of this op's combine. This node's ranks as the
// send half decided (`same_node_known`: in shared present already, else from the workspace); each
// other node's from its forwarder's signal (op `sequence`, this rank's rail peer there) and header.
// A forwarder this rank has masked is not waited for. With masking, block 0 waits quietly, masks
// every rank of another node it does not accept, and publishes its decision, which the other
// blocks follow; without, every block waits and a timeout is an error naming the node. False when
// the op failed.
template <bool kHierarchical, class Backend>
SY_DEVICE bool wait_other_nodes(const LlNetCombineArgs<Backend>& args, const LlNetCombineShared& shared,
                                uint64_t sequence, bool same_node_known) {
    const LlBufferArgs& buffer = args.base.buffer;
    const LlNodes& nodes = args.net.nodes;
    const int32_t set = ll_set_of(sequence);
    uint8_t* signals = buffer.signal_area();
    uint8_t* set_base = buffer.set_base(buffer.local_base, set);
    uint32_t* present = shared.base.present;
    if (!same_node_known) {
        const uint32_t* decided_present = buffer.signals.net_present(signals, set);
        for (int g = threadIdx.x; g < nodes.ranks_per_node; g += blockDim.x) {
            const int32_t peer = nodes.rank_of(nodes.node, g);
            present[peer] = ptx::ld_relaxed_gpu(decided_present + peer);
        }
    }
    const NetPort<Backend> port(args.net.net, ll_net_context(args.net.net.num_contexts), buffer.diagnostics);
    const bool masking = buffer.mask_unresponsive != 0;
    const bool record_stats = args.base.wait_time_stats != nullptr && blockIdx.x == 0;
    // Thread o: other node o's contributors (waiting for its signal unless the forwarder is masked).
    auto contributors_of = [&](int32_t o) -> uint64_t {
        const int32_t m = nodes.other_node(o), forwarder = nodes.rank_of(m, nodes.local_index);
        if (shared.base.mask[forwarder]) return 0;
        const uint64_t start = ptx::globaltimer_ns();
        const bool arrived = ll_net_wait_signal(port, masking, ll_net_signal(kLlCombine, set, m), sequence, m,
                                                kPhaseLlCombine, buffer.diagnostics);
        if (record_stats)
            atomicAdd(reinterpret_cast<unsigned long long*>(args.base.wait_time_stats + forwarder),
                      (unsigned long long)(ptx::globaltimer_ns() - start));
        const uint64_t header =
            arrived ? ptx::ld_relaxed_sys(buffer.set_layout.combine_header(set_base, o)) : 0;
        return accepted_contributors<kHierarchical>(nodes, o, arrived, header, shared.base.mask);
    };
    if (!masking) {
        for (int o = threadIdx.x; o < nodes.others(); o += blockDim.x) {
            const uint64_t accepted = contributors_of(o);
            for (int32_t g = 0; g < nodes.ranks_per_node; ++g)
                present[nodes.rank_of(nodes.other_node(o), g)] = (accepted >> g) & 1u;
        }
        return __syncthreads_and(!is_poisoned(buffer.diagnostics)) != 0;
    }
    uint32_t* mask = buffer.signals.mask(signals);
    uint64_t* decided = buffer.signals.net_decided(signals, set, kLlNetStageRemote);
    if (blockIdx.x == 0) {
        for (int o = threadIdx.x; o < nodes.others(); o += blockDim.x) {
            const uint64_t accepted = contributors_of(o);
            if (is_poisoned(buffer.diagnostics)) continue;
            for (int32_t g = 0; g < nodes.ranks_per_node; ++g)
                if (((accepted >> g) & 1u) == 0) atomicExch(mask + nodes.rank_of(nodes.other_node(o), g), 1u);
        }
        __syncthreads();
        if (threadIdx.x == 0) publish_mask_decision(decided, sequence);
    } else if (threadIdx.x == 0) {
        follow_mask_decision(decided, sequence, buffer.diagnostics, kPhaseLlCombine, buffer.rank);
    }
    __syncthreads();
    for (int s = threadIdx.x; s < buffer.num_ranks; s += blockDim.x)
        if (!nodes.on_my_node(s)) present[s] = ptx::ld_relaxed_gpu(mask + s) == 0;
    return __syncthreads_and(!is_poisoned(buffer.diagnostics)) != 0;
}

// Eight channels of each step rounded to bf16 and back (a node partial as the wire carries it).
template <int kSteps>
SY_DEVICE void round_to_bf16(float (&acc)[kSteps][8]) {
#pragma unroll
    for (int i = 0; i < kSteps; ++i)
#pragma unroll
        for (int c = 0; c < 8; ++c) acc[i][c] = fp8::bf16_low(fp8::bf16x2(acc[i][c], 0.0f));
}

// Hierarchical receive across nodes, item `part` of token t: this node's rank partials (each in
// the slot of its rank's first k) summed over ranks ascending in fp32 and rounded to bf16; each
// other node's partial (in the slot of the first k a contributing rank of it owns); the node
// partials summed over nodes ascending in fp32, rounded once. A node without a contribution to the
// token adds nothing (the reference's order exactly).
template <int kHidden, int kTopk, int kSteps, typename IndexT>
SY_DEVICE void reduce_node_partials(const LlCombineArgs& args, const LlNodes& nodes, uint8_t* set_base,
                                    int32_t t, int part, const ll_combine_detail::HomeSlots<IndexT>& home,
                                    const uint32_t* shared_present) {
    using namespace ll_combine_detail;
    constexpr int kBatch = kTopk < 4 ? kTopk : 4;  // rows loaded at a time (registers: two accumulators)
    const uint32_t lane = ptx::lane_id();
    const int32_t expert = home_slot_expert(args, home);
    const int32_t L = args.local_experts;
    const int32_t owner = expert >= 0 && shared_present[expert / L] != 0 ? expert / L : -1;
    const int32_t owner_node = owner >= 0 ? nodes.node_of(owner) : -1;
    const int64_t row_bytes = LlSetLayout::combine_row_bytes(kHidden);
    const ReduceItem<kSteps> item = reduce_item<kHidden, kSteps>(part);
    const uint8_t* row = args.buffer.set_layout.combine_row(set_base, int32_t(lane), t, row_bytes);
    // This node: a partial per rank.
    // Every lane takes part in each warp collective: a short-circuited `&& first_lane_with(...)`
    // would leave lanes out of its __match_any_sync (undefined; it faulted on the GPU).
    const bool first_of_owner = first_lane_with(owner), first_of_node = first_lane_with(owner_node);
    const bool own = owner_node == nodes.node && first_of_owner;
    const int own_count = __popc(__ballot_sync(0xffffffffu, own));
    float own_acc[kSteps][8];
#pragma unroll
    for (int i = 0; i < kSteps; ++i)
#pragma unroll
        for (int c = 0; c < 8; ++c) own_acc[i][c] = 0.0f;
    accumulate_rows<kBatch, kSteps>(own ? row : nullptr, 1.0f, own, position_among_selected(own, owner),
                                    own_count, item, own_acc);
    round_to_bf16<kSteps>(own_acc);
    // Other nodes: a partial per node, before this one's and after it.
    const bool remote = owner_node >= 0 && owner_node != nodes.node && first_of_node;
    const bool before = remote && owner_node < nodes.node, after = remote && owner_node > nodes.node;
    float acc[kSteps][8];
#pragma unroll
    for (int i = 0; i < kSteps; ++i)
#pragma unroll
        for (int c = 0; c < 8; ++c) acc[i][c] = 0.0f;
    accumulate_rows<kBatch, kSteps>(before ? row : nullptr, 1.0f, before,
                                    position_among_selected(before, owner_node),
                                    __popc(__ballot_sync(0xffffffffu, before)), item, acc);
    if (own_count > 0)
#pragma unroll
        for (int i = 0; i < kSteps; ++i)
#pragma unroll
            for (int c = 0; c < 8; ++c) acc[i][c] = acc[i][c] + own_acc[i][c];
    accumulate_rows<kBatch, kSteps>(after ? row : nullptr, 1.0f, after,
                                    position_among_selected(after, owner_node),
                                    __popc(__ballot_sync(0xffffffffu, after)), item, acc);
    uint8_t* out = static_cast<uint8_t*>(args.out) + int64_t(t) * args.out_row_stride * 2;
#pragma unroll
    for (int i = 0; i < kSteps; ++i)
        if (item.in_range[i])
            *reinterpret_cast<uint4*>(out + int64_t(item.channel[i]) * 2) = pack_bf16x8(acc[i]);
}

// The receive half of every block across nodes (ll_combine_detail::reduce_home with the waits of
// this path). Returns early (every thread of the block) when the op failed.
template <int kNumWarps, int kHidden, int kTopk, typename IndexT, bool kHierarchical, class Backend>
SY_DEVICE void reduce_home(const LlNetCombineArgs<Backend>& args, const LlNetCombineShared& shared,
                           uint64_t sequence, bool same_node_known) {
    using namespace ll_combine_detail;
    const LlCombineArgs& base = args.base;
    const LlBufferArgs& buffer = base.buffer;
    const int global_warp = int(blockIdx.x) * kNumWarps + int(threadIdx.x / 32);
    const int num_warps = int(gridDim.x) * kNumWarps;
    constexpr int kItemsPerToken = reduce_items_per_token(kHidden);
    constexpr int kStepsPerToken = reduce_items_per_token(kHidden, 1);
    const bool long_items = int64_t(base.num_tokens) * kItemsPerToken * 4 >= num_warps;
    const int32_t per_token = long_items ? kItemsPerToken : kStepsPerToken;
    const int32_t items = base.num_tokens * per_token;
    auto home_of = [&](int32_t item) {
        return load_home_slots<kTopk, IndexT, !kHierarchical>(base, item / per_token);
    };
    HomeSlots<IndexT> home{IndexT(-1), 0.0f};
    if (global_warp < items) home = home_of(global_warp);
    if (!wait_other_nodes<kHierarchical>(args, shared, sequence, same_node_known)) return;
    if (threadIdx.x == 0) trace_mark(buffer.trace, kLlCombineWaited);
    uint8_t* set_base = buffer.set_base(buffer.local_base, ll_set_of(sequence));
    const uint32_t* present = shared.base.present;
    for (int32_t item = global_warp; item < items; item += num_warps) {
        const int32_t t = item / per_token, part = item % per_token;
        if (item != global_warp) home = home_of(item);
        if constexpr (kHierarchical) {
            if (long_items)
                reduce_node_partials<kHidden, kTopk, kLlReduceStepsPerItem, IndexT>(
                    base, args.net.nodes, set_base, t, part, home, present);
            else
                reduce_node_partials<kHidden, kTopk, 1, IndexT>(base, args.net.nodes, set_base, t, part, home,
                                                                present);
        } else if (long_items) {
            reduce_token<kHidden, kTopk, kLlReduceStepsPerItem, IndexT>(base, set_base, t, part, home,
                                                                        present);
        } else {
            reduce_token<kHidden, kTopk, 1, IndexT>(base, set_base, t, part, home, present);
        }
    }
    if (ptx::lane_id() == 0) trace_mark(buffer.trace, kLlCombineReduced);
}

}  // namespace ll_net_combine_detail

#endif

}  // namespace switchyard::device
