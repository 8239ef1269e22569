// The send half of the LL combine across nodes (ll/net_combine.cuh; ll/net_layout.cuh says who
// writes what where): which node-mates' forward areas this op may write, the rows (or partials)
// of this node's homes as on one node and of other nodes' homes into their forwarders' forward
// areas, then this rank's forwarding: for each other node, its rail peer's rows from this node's
// ranks (hierarchical: reduced per token over them) put over the network, and the op's signal.
#pragma once

#include "switchyard/common/base.cuh"
#include "switchyard/common/block_scan.cuh"
#include "switchyard/common/diagnostics.cuh"
#include "switchyard/common/peer_kernel_details.cuh"
#include "switchyard/common/ptx.cuh"
#include "switchyard/common/trace_marks.cuh"
#include "switchyard/ll/combine_send.cuh"
#include "switchyard/ll/combine_shape.cuh"
#include "switchyard/ll/ll_args.cuh"
#include "switchyard/ll/ll_layout.cuh"
#include "switchyard/ll/ll_reduce.cuh"
#include "switchyard/ll/net_layout.cuh"
#include "switchyard/transport/ll_net_signals.cuh"
#include "switchyard/transport/net.cuh"
#include "switchyard/transport/peer_masking.cuh"

namespace switchyard::device {

// Dynamic shared memory of the combine across nodes: the one-node combine's, then per other node
// the ranks of it that contributed (a bit per local index).
SY_HOST_DEVICE int64_t ll_net_combine_shared_bytes(int32_t num_ranks, int32_t local_experts,
                                                   int32_t num_nodes) {
    return ll_combine_shared_bytes(num_ranks, local_experts) + 8 * int64_t(num_nodes) + 16;
}

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)

// The one-node carve, and the contributors [N - 1] (uint64) after it.
struct LlNetCombineShared {
    LlCombineShared base;
    uint64_t* contributors;

    SY_DEVICE static LlNetCombineShared carve(int32_t* words, int32_t num_ranks, int32_t local_experts) {
        LlNetCombineShared shared;
        shared.base = LlCombineShared::carve(words, num_ranks, local_experts);
        const int64_t bytes = ll_combine_shared_bytes(num_ranks, local_experts);
        shared.contributors =
            reinterpret_cast<uint64_t*>(reinterpret_cast<uint8_t*>(words) + align_up(bytes, 16));
        return shared;
    }
};

namespace ll_net_combine_detail {

// ll_combine_detail::LlHomesOnNode across nodes: a home of this node as on one node; a home of
// another node through its forwarder, the rank of this node with the home's local index, into its
// forward area (its shared mask entry set: its area may not be written in this op). Arrivals reach
// this node's ranks only, after block 0 wrote each of them this rank's forward flag: the other
// nodes whose rail peer it sent rows for (those it has not masked).
template <class Backend>
struct LlHomesAcrossNodes {
    const LlNetCombineArgs<Backend>* net_args;

    SY_DEVICE uint8_t* row(const LlCombineArgs& args, int32_t set, int32_t home, int32_t k, int32_t token,
                           int64_t row_bytes, const uint32_t* shared_mask) const {
        const LlNodes& nodes = net_args->net.nodes;
        if (shared_mask[home]) return nullptr;
        if (nodes.on_my_node(home))
            return args.buffer.set_layout.combine_row(args.buffer.set_base(args.buffer.peer_bases[home], set),
                                                      k, token, row_bytes);
        const int32_t forwarder = nodes.rank_of(nodes.node, nodes.local_of(home));
        if (shared_mask[forwarder]) return nullptr;
        return args.buffer.peer_bases[forwarder] +
               net_args->net.forward.row_offset(nodes.other_index(nodes.node_of(home)), k, token, row_bytes);
    }

    SY_DEVICE void arrive(const LlCombineArgs& args, uint64_t sequence, int32_t sending_blocks,
                          const uint32_t* shared_mask) const {
        const LlNodes& nodes = net_args->net.nodes;
        const LlBufferArgs& buffer = args.buffer;
        if (blockIdx.x == 0)
            for (int g = threadIdx.x; g < nodes.ranks_per_node; g += blockDim.x) {
                const int32_t forwarder = nodes.rank_of(nodes.node, g);
                if (shared_mask[forwarder]) continue;
                uint64_t flags = 0;
                for (int32_t o = 0; o < nodes.others(); ++o)
                    if (!shared_mask[nodes.rank_of(nodes.other_node(o), g)]) flags |= uint64_t(1) << o;
                *buffer.set_layout.forward_flag(
                    buffer.set_base(buffer.peer_bases[forwarder], ll_set_of(sequence)), nodes.local_index) =
                    flags;
            }
        ll_net_arrive_local(buffer, nodes, kLlCombine, sequence, sending_blocks, shared_mask);
    }
};

// Every block, first thing of the send half: block 0 lets this op's node-mates write its forward
// area once its earlier forward puts have read their sources (its counter reached the tally); then
// each node-mate whose area this op may not write is set in the block's mask. Without masking, a
// node-mate that does not publish in time is a TimeoutError (phase "low-latency buffer reuse"); with
// masking, block 0 masks it and publishes its decision, which the other blocks follow. False when
// the op failed.
template <class Backend>
SY_DEVICE bool claim_forward_areas(const LlNetCombineArgs<Backend>& args, uint64_t sequence,
                                   uint32_t* shared_mask) {
    const LlBufferArgs& buffer = args.base.buffer;
    const LlNodes& nodes = args.net.nodes;
    uint64_t* counters = buffer.workspace.counters(buffer.local_base);
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        const NetPort<Backend> port(args.net.net, ll_net_context(args.net.net.num_contexts),
                                    buffer.diagnostics);
        if (port.wait_counter(kLlNetForwardCounter, counters[kCounterLlNetForwardTally], kPhaseLlFlowControl))
            ptx::st_release_sys(counters + kCounterLlNetForwardReady, sequence);
    }
    const int32_t set = ll_set_of(sequence);
    auto ready_word = [&](int32_t g) {
        return buffer.workspace.counters(buffer.peer_bases[nodes.rank_of(nodes.node, g)]) +
               kCounterLlNetForwardReady;
    };
    if (!buffer.mask_unresponsive) {
        for (int g = threadIdx.x; g < nodes.ranks_per_node; g += blockDim.x) {
            const int32_t peer = nodes.rank_of(nodes.node, g);
            if (shared_mask[peer]) continue;
            uint8_t* base = buffer.peer_bases[peer];
            const PeerKernelDetails details{
                buffer.workspace.counters(base), ll_start_slots(kLlCombine), buffer.workspace.poison(base),
                buffer.signals.mask(buffer.workspace.ll_signals(base)) + buffer.rank};
            wait_at_least(ready_word(g), sequence, buffer.diagnostics, kPhaseLlFlowControl, peer, details);
        }
        return __syncthreads_and(!is_poisoned(buffer.diagnostics)) != 0;
    }
    uint8_t* signals = buffer.signal_area();
    uint32_t* mask = buffer.signals.mask(signals);
    uint64_t* decided = buffer.signals.net_decided(signals, set, kLlNetStageForwardReady);
    if (blockIdx.x == 0) {
        for (int g = threadIdx.x; g < nodes.ranks_per_node; g += blockDim.x) {
            const int32_t peer = nodes.rank_of(nodes.node, g);
            if (shared_mask[peer]) continue;
            if (!wait_bounded(ready_word(g), sequence, buffer.diagnostics) &&
                !is_poisoned(buffer.diagnostics))
                atomicExch(mask + peer, 1u);
        }
        __syncthreads();
        if (threadIdx.x == 0) publish_mask_decision(decided, sequence);
    } else if (threadIdx.x == 0) {
        follow_mask_decision(decided, sequence, buffer.diagnostics, kPhaseLlFlowControl, buffer.rank);
    }
    __syncthreads();
    for (int g = threadIdx.x; g < nodes.ranks_per_node; g += blockDim.x) {
        const int32_t peer = nodes.rank_of(nodes.node, g);
        if (ptx::ld_relaxed_gpu(mask + peer)) shared_mask[peer] = 1;
    }
    return __syncthreads_and(!is_poisoned(buffer.diagnostics)) != 0;
}

// Hierarchical forwarding of one token of other node o's rail peer (home token t): the partials
// of this node's contributing ranks (lane k: the local index of slot k's owner, -1 for none),
// summed over those ranks ascending in fp32, rounded to bf16 once, in place into the slot of the
// first k they own; lane 0 puts that row to the home's slot. Returns the puts issued (0 or 1).
template <int kHidden, int kTopk, class Backend>
SY_DEVICE int32_t forward_partial(const LlNetCombineArgs<Backend>& args, const NetPort<Backend>& port,
                                  int32_t o, int32_t token, int32_t owner, uint64_t contributors,
                                  int32_t set) {
    using namespace ll_combine_detail;
    const LlBufferArgs& buffer = args.base.buffer;
    const LlNodes& nodes = args.net.nodes;
    const uint32_t lane = ptx::lane_id();
    const int64_t row_bytes = LlSetLayout::combine_row_bytes(kHidden);
    const int32_t counted = owner >= 0 && ((contributors >> owner) & 1u) ? owner : -1;
    const bool holds = first_lane_with(counted);
    const uint32_t holders = __ballot_sync(0xffffffffu, holds);
    if (holders == 0) return 0;
    const int position = position_among_selected(holds, counted);
    uint8_t* local = buffer.local_base;
    const int32_t first_k = __ffs(holders) - 1;
    uint8_t* to = local + args.net.forward.row_offset(o, first_k, token, row_bytes);
    const uint8_t* row =
        holds ? local + args.net.forward.row_offset(o, int32_t(lane), token, row_bytes) : nullptr;
    constexpr int kParts = reduce_items_per_token(kHidden, kLlWideSendSteps);
    for (int part = 0; part < kParts; ++part)
        reduce_rows_to<kTopk, kLlWideSendSteps, kLlWideSendBatch>(
            to, row, 1.0f, holds, position, reduce_item<kHidden, kLlWideSendSteps>(part));
    __syncwarp();
    if (lane == 0) {
        const int32_t m = nodes.other_node(o);
        uint8_t* home_row =
            buffer.set_layout.combine_row(buffer.set_base(local, set), first_k, token, row_bytes);
        port.put(m, uint64_t(home_row - local), uint64_t(to - local), uint64_t(row_bytes), NetSignal{},
                 net_counter_inc(kLlNetForwardCounter));
    }
    return 1;
}

// Flat forwarding of one token of other node o's rail peer: lane 0 puts each row of a contributing
// owner, as it is, to the home's slot [k][t]. Returns the puts issued.
template <int kHidden, class Backend>
SY_DEVICE int32_t forward_rows(const LlNetCombineArgs<Backend>& args, const NetPort<Backend>& port, int32_t o,
                               int32_t token, int32_t owner, uint64_t contributors, int32_t set) {
    const LlBufferArgs& buffer = args.base.buffer;
    const int64_t row_bytes = LlSetLayout::combine_row_bytes(kHidden);
    const uint32_t rows = __ballot_sync(0xffffffffu, owner >= 0 && ((contributors >> owner) & 1u));
    if (ptx::lane_id() == 0 && rows != 0) {
        // The rows were written by this node's ranks, which this thread observed through their
        // arrivals: a system fence passes that on to whoever reads the sources (NIC, copy engine).
        ptx::fence_acq_rel_sys();
        uint8_t* local = buffer.local_base;
        const int32_t m = args.net.nodes.other_node(o);
        for (uint32_t rest = rows; rest != 0; rest &= rest - 1) {
            const int32_t k = __ffs(rest) - 1;
            uint8_t* home_row =
                buffer.set_layout.combine_row(buffer.set_base(local, set), k, token, row_bytes);
            port.put(m, uint64_t(home_row - local),
                     uint64_t(args.net.forward.row_offset(o, k, token, row_bytes)), uint64_t(row_bytes),
                     NetSignal{}, net_counter_inc(kLlNetForwardCounter));
        }
    }
    return __popc(rows);
}

// Every block, after its own sends: waits for this node's ranks (their rows here, and their
// forward flags), records them for the receive half, and, as the forwarder of each other node's
// rail peer it has not masked, forwards that home's rows from the contributing ranks: those
// present whose flag names that node. A warp per received token; the last block puts each home's
// network header (its contributors) with the op's signal. False when the op failed.
template <int kNumWarps, int kHidden, int kTopk, bool kHierarchical, class Backend>
SY_DEVICE bool forward_to_nodes(const LlNetCombineArgs<Backend>& args, const LlNetCombineShared& shared,
                                uint64_t sequence) {
    const LlCombineArgs& base = args.base;
    const LlBufferArgs& buffer = base.buffer;
    const LlNodes& nodes = args.net.nodes;
    const int32_t set = ll_set_of(sequence);
    const int32_t context = ll_net_context(args.net.net.num_contexts);
    uint8_t* signals = buffer.signal_area();
    if (!ll_net_wait_sources(buffer, nodes, context, kLlCombine, sequence, shared.base.mask,
                             shared.base.present, base.wait_time_stats,
                             buffer.signals.decided(signals, kLlCombine, set),
                             [&](int32_t s) { return nodes.on_my_node(s); }))
        return false;
    uint8_t* set_base = buffer.set_base(buffer.local_base, set);
    for (int o = threadIdx.x; o < nodes.others(); o += blockDim.x) {
        const int32_t home = nodes.rank_of(nodes.other_node(o), nodes.local_index);
        uint64_t contributors = 0;
        for (int32_t g = 0; g < nodes.ranks_per_node; ++g) {
            const int32_t peer = nodes.rank_of(nodes.node, g);
            if (shared.base.present[peer] && ((*buffer.set_layout.forward_flag(set_base, g) >> o) & 1u))
                contributors |= uint64_t(1) << g;
        }
        shared.contributors[o] = shared.base.mask[home] ? 0 : contributors;
    }
    if (blockIdx.x == 0) {
        uint32_t* present = buffer.signals.net_present(signals, set);
        for (int g = threadIdx.x; g < nodes.ranks_per_node; g += blockDim.x) {
            const int32_t peer = nodes.rank_of(nodes.node, g);
            present[peer] = shared.base.present[peer];
        }
    }
    __syncthreads();

    const NetPort<Backend> port(args.net.net, context, buffer.diagnostics);
    const uint32_t lane = ptx::lane_id();
    const int num_warps = int(gridDim.x) * kNumWarps;
    const int first = int(blockIdx.x) * kNumWarps + int(threadIdx.x / 32);
    const int32_t T = buffer.set_layout.max_tokens;
    int32_t puts = 0;
    for (int32_t o = 0; o < nodes.others(); ++o) {
        const int32_t home = nodes.rank_of(nodes.other_node(o), nodes.local_index);
        if (shared.base.mask[home]) continue;
        const uint64_t contributors = shared.contributors[o];
        const int32_t records = args.forward_counts[o];
        for (int32_t i = first; i < records; i += num_warps) {
            const int32_t* routing = args.forward_rows + (int64_t(o) * T + i) * (kTopk + 1);
            const int32_t token = routing[0];
            const int32_t owner = int(lane) < kTopk ? routing[1 + lane] : -1;
            if constexpr (kHierarchical)
                puts += forward_partial<kHidden, kTopk>(args, port, o, token, owner, contributors, set);
            else
                puts += forward_rows<kHidden>(args, port, o, token, owner, contributors, set);
        }
    }
    if (lane == 0 && puts > 0)
        atomicAdd(reinterpret_cast<unsigned long long*>(buffer.workspace.counters(buffer.local_base) +
                                                        kCounterLlNetForwardTally),
                  (unsigned long long)puts);
    if (ll_net_last_block(buffer, kCounterLlNetCombineElect, int32_t(gridDim.x))) {
        for (int o = threadIdx.x; o < nodes.others(); o += blockDim.x)
            *buffer.set_layout.combine_header(set_base, nodes.others() + o) = shared.contributors[o];
        __syncthreads();
        const int32_t o = int32_t(threadIdx.x);
        if (o < nodes.others()) {
            const int32_t m = nodes.other_node(o);
            if (!shared.base.mask[nodes.rank_of(m, nodes.local_index)]) {
                uint8_t* local = buffer.local_base;
                auto offset = [local](const uint64_t* word) {
                    return uint64_t(reinterpret_cast<const uint8_t*>(word) - local);
                };
                port.put(m, offset(buffer.set_layout.combine_header(set_base, nodes.index_at(m))),
                         offset(buffer.set_layout.combine_header(set_base, nodes.others() + o)),
                         uint64_t(LlSetLayout::kCombineHeaderBytes),
                         net_signal_add(ll_net_signal(kLlCombine, set, nodes.node), kLlNetOpAmount));
            }
        }
    }
    return __syncthreads_and(!is_poisoned(buffer.diagnostics)) != 0;
}

}  // namespace ll_net_combine_detail

#endif

}  // namespace switchyard::device
